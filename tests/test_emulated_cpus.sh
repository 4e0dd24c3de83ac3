#!/usr/bin/env bash
# a2amm on CPUs this machine is not, under qemu-user's emulation: the kernel
# level a real CPUID picks (A2AMM_CPU_HIDE only masks what a2amm reads, and
# the CPU under it still runs everything), and, since the emulation raises
# SIGILL for an instruction its model lacks, that nothing past the model's
# instruction set runs:
# - EPYC-v1 (Zen 1: AVX2, FMA and F16C, no AVX-512): the avx2 level picked,
#   its pinned bits (gemm_digest --sample, plain and every call on B in fp8), its
#   vector twins' tests (quantizer, SwiGLU, MoE down projection), and every
#   op's gen, run and verify;
# - SandyBridge (AVX without AVX2 or FMA): the ref level picked, the vector
#   tests skipping as documented (exit 77, not a crash), every op's gen, run
#   and verify.
# Correctness only: emulation says nothing of speed. test_cpu_api is not
# run here: it starts itself again through system(), which runs natively.
# Skipped where qemu-x86_64 is missing (scripts/install-deps.sh installs
# Debian's qemu-user on x86-64) and in a sanitized build (AddressSanitizer's
# shadow memory under qemu-user takes a minute a process).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/digests.sh"
unset A2AMM_CPU_HIDE A2AMM_ISA
if ! command -v qemu-x86_64 >/dev/null 2>&1; then
    echo "SKIP: qemu-x86_64 is not installed (Debian's qemu-user; scripts/install-deps.sh installs it on x86-64)"
    exit 77
fi
if ldd "$A2AMM" 2>/dev/null | grep -q libasan; then
    echo "SKIP: an AddressSanitizer build under qemu-user maps its shadow memory for a minute a process"
    exit 77
fi
tools="$(dirname "$A2AMM")/tools"
tests="$(dirname "$A2AMM")/tests"

# The OpenBLAS core type of each model: where OPENBLAS_CORETYPE names the host's (set for an OpenBLAS
# that misreads the host CPU), the emulated CPU gets its own, as OpenBLAS would pick on that CPU (the
# host's Haswell kernels raise SIGILL on a Sandy Bridge); where it is unset, OpenBLAS reads the model.
declare -A CORETYPE=([EPYC-v1]=Zen [SandyBridge]=Sandybridge)

# on CPU ARGS...: ARGS run under qemu's model of CPU, its warnings about features it does not emulate dropped
on() {
    local cpu=$1 err rc
    shift
    err=$(mktemp "$SCRATCH/qemu-err.XXXXXX")
    if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
        OPENBLAS_CORETYPE=${CORETYPE[$cpu]} qemu-x86_64 -cpu "$cpu" "$@" 2>"$err"
    else
        qemu-x86_64 -cpu "$cpu" "$@" 2>"$err"
    fi
    rc=$?
    grep -v "warning: TCG doesn't support" "$err" >&2
    return $rc
}

# ops CPU: every op's gen, run and verify on small shapes under CPU
ops() {
    local cpu=$1 d
    d="$SCRATCH/$cpu-forward"
    expect_ok "$cpu: gen (alltoall-matmul)" on "$cpu" "$A2AMM" gen 64 128 96 2 --dir "$d"
    expect_ok "$cpu: run (alltoall-matmul)" on "$cpu" "$A2AMM" run 64 128 96 2 --dir "$d"
    expect_ok "$cpu: verify (alltoall-matmul)" on "$cpu" "$A2AMM" verify 64 96 2 --dir "$d"
    expect_output "$cpu: every rank passes (alltoall-matmul)" "ALL PASS"
    d="$SCRATCH/$cpu-reverse"
    expect_ok "$cpu: gen (matmul-alltoall)" on "$cpu" "$A2AMM" gen 64 128 96 2 --op matmul-alltoall --dir "$d"
    expect_ok "$cpu: run (matmul-alltoall)" on "$cpu" "$A2AMM" run 64 128 96 2 --dir "$d"
    expect_ok "$cpu: verify (matmul-alltoall)" on "$cpu" "$A2AMM" verify 64 96 2 --dir "$d"
    expect_output "$cpu: every rank passes (matmul-alltoall)" "ALL PASS"
    d="$SCRATCH/$cpu-moe"
    expect_ok "$cpu: gen (moe)" on "$cpu" "$A2AMM" gen 24 256 128 2 --op moe --dir "$d"
    expect_ok "$cpu: run (moe)" on "$cpu" "$A2AMM" run 24 256 128 2 --op moe --dir "$d"
    expect_ok "$cpu: verify (moe)" on "$cpu" "$A2AMM" verify 24 256 128 2 --op moe --dir "$d"
    expect_output "$cpu: every rank passes (moe)" "ALL PASS"
}

# --- Zen 1: the avx2 level
expect_ok "EPYC-v1: a2amm cpu" on EPYC-v1 "$A2AMM" cpu
expect_output "EPYC-v1: no AVX-512" "avx512f      absent"
expect_output "EPYC-v1: the avx2 level picked" "run and bench use: avx2"
# the two digests at once, over the sample of the list (the whole list takes a minute and a half each
# under the emulation; test_digest.sh pins both natively)
on EPYC-v1 "$tools/gemm_digest" avx2 --nan-canonical --sample >"$SCRATCH/digest" 2>&1 &
on EPYC-v1 "$tools/gemm_digest" avx2 --nan-canonical --sample --fp8-b >"$SCRATCH/digest8" 2>&1 &
wait
want="avx2: ${PINNED_SAMPLE[avx2]} over 48 cases (--sample)"
check "EPYC-v1: the avx2 level's pinned bits ($(tail -n 1 "$SCRATCH/digest"))" test "$(tail -n 1 "$SCRATCH/digest")" = "$want"
check "EPYC-v1: the same on B in fp8 ($(tail -n 1 "$SCRATCH/digest8"))" test "$(tail -n 1 "$SCRATCH/digest8")" = "$want"
for t in test_mx_quantize test_swiglu test_moe_down; do
    expect_ok "EPYC-v1: $t avx2 (the vector level against its portable twin)" on EPYC-v1 "$tests/$t" avx2
done
ops EPYC-v1

# --- no AVX2: the ref level, the vector tests skipped
expect_ok "SandyBridge: a2amm cpu" on SandyBridge "$A2AMM" cpu
expect_output "SandyBridge: no AVX2" "avx2         absent"
expect_output "SandyBridge: the ref level picked" "run and bench use: ref"
for t in test_mx_quantize test_swiglu test_moe_down; do
    on SandyBridge "$tests/$t" avx2 >"$SCRATCH/out" 2>&1
    rc=$?
    check "SandyBridge: $t avx2 skips, as on a CPU without AVX2 (exit $rc, 77 expected)" test $rc -eq 77
    expect_output "SandyBridge: $t says why it skips" "SKIP: "
done
ops SandyBridge
finish
