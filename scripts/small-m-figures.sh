#!/usr/bin/env bash
# Issue 31's figures on whatever CPU this is, in one go (a benchmark, not a
# test: it asserts nothing and takes about 5-10 minutes on 2 cores):
#
#   scripts/small-m-figures.sh [BUILD]      (BUILD: build, the default)
#
# For each kernel level this CPU runs (a2amm cpu --runs): the level's
# digests (they must read as in docs/performance.md: same bits on every
# CPU), one thread in L2 (gemm_small_m, GB/s of B in fp8 at 1, 4 and 6
# rows), and 2 threads at the seed's N and K (bench gemm 1 and 16, against
# oneDNN and the read); then, on the best level, the M sweep, the grouped
# experts and a MoE decode step; and the MoE down projection on every
# level. Every command is echoed before its output, so the lines can be
# copied into docs/performance.md with the CPU they ran on (printed first). Features hidden with A2AMM_CPU_HIDE do not make
# another CPU: run it on the CPU itself.
#
# With LLAMA_PEERS="PATH..." (llama.cpp's test-backend-ops, built as docs/performance.md says: natively,
# and for AVX2 only where the CPU has more), it also takes issue 31's comparison with ggml's q8_0
# MUL_MAT_ID at the Qwen3-30B-A3B experts' shape, 1, 8 and 32 tokens, beside mul_mat_id_probe on every
# level, on the thread count test-backend-ops uses (half the CPUs).
set -uo pipefail
build=${1:-build}
A2AMM=$build/a2amm
BENCH=$build/a2amm-bench
for f in "$A2AMM" "$BENCH" "$build/tools/gemm_small_m" "$build/tools/gemm_digest" "$build/tools/moe_down_probe" \
         "$build/tools/mul_mat_id_probe"; do
    if [ ! -x "$f" ]; then
        echo "small-m-figures: $f is missing: build first (make all, or make BUILD=$build all)" >&2
        exit 2
    fi
done

show() { # echo a command, then run it (its failure is reported, the rest goes on)
    echo "\$ $*"
    "$@" || echo "(exit $?)"
}

echo "== the CPU"
grep -m1 "model name" /proc/cpuinfo
grep -m1 -E "^cpu family" /proc/cpuinfo
grep -m1 -E "^model\s" /proc/cpuinfo
echo "cores: $(nproc)"
show "$A2AMM" cpu
date -u

levels=""
for level in avx2 avx512 amx; do
    if "$A2AMM" cpu --runs "$level" >/dev/null 2>&1; then levels="$levels $level"; fi
done
echo "levels that run here:$levels"

for level in $levels; do
    echo
    echo "== level $level"
    show "$build/tools/gemm_digest" "$level"
    show "$build/tools/gemm_digest" "$level" --fp8-b
    for m in 1 4 6; do show "$build/tools/gemm_small_m" "$level" "$m" 256 2048; done
    # the levels above this one hidden, so that the bench's peers are the ones this level meets on a
    # CPU that has no more (oneDNN fp32 beside avx2); hidden is not that CPU: say which CPU it was
    case $level in avx2) hide=avx512 ;; avx512) hide=amx ;; *) hide= ;; esac
    echo "(A2AMM_CPU_HIDE=$hide)"
    for m in 1 16; do A2AMM_CPU_HIDE=$hide show "$A2AMM" bench gemm "$m" 3584 8192 --iters 20; done
done

echo
echo "== the best level: the sweep, the grouped experts, a MoE decode step"
show "$A2AMM" bench gemm --sweep
show "$A2AMM" bench grouped 64 4 2048 1408
show "$A2AMM" bench moe 2 16 2048 1408 64 6
echo
echo "== the MoE down projection alone, every level, one thread (W2 MX-quantized, in cache, then from memory; then codes drawn uniformly)"
for n in 1 4; do show "$build/tools/moe_down_probe" 2048 1408 "$n"; show "$build/tools/moe_down_probe" 2048 1408 "$n" 10 --cold; done
show "$build/tools/moe_down_probe" 2048 1408 1 10 --uniform-codes

if [ -n "${LLAMA_PEERS:-}" ]; then
    threads=$(($(nproc) / 2))
    [ "$threads" -ge 1 ] || threads=1
    echo
    echo "== against llama.cpp's q8_0 MUL_MAT_ID, $threads thread(s): ggml's perf, then a2amm on every level"
    for n in 1 8 32; do
        for peer in $LLAMA_PEERS; do
            show "$peer" perf -o MUL_MAT_ID -b CPU -p "type_a=q8_0,.*n_mats=128,n_used=8,b=0,m=768,n=$n,k=2048"
        done
        for level in $levels; do
            show env A2AMM_ISA="$level" "$build/tools/mul_mat_id_probe" 128 8 768 2048 "$n" 200 "$threads"
        done
    done
fi
