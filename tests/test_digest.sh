#!/usr/bin/env bash
# Every kernel level's bits, pinned. build/tools/gemm_digest runs a fixed set
# of 300 matmuls (every edge of rows, chunks and panels, every call, scales
# and codes of every kind) through a level and prints one digest of all the
# results; a level's bits are its own (docs/op-contract.md), the same on
# every CPU that runs it and from every build, so its digest is a
# constant here. test_gemm checks the values within the contract's
# tolerance, which a changed bit passes: this is what catches one. A
# mismatch means a change moved a level's bits (a kernel change must keep
# them), or this CPU's instructions sum in another order than the CPUs the
# digests came from (then the level needs a run-time check that refuses it
# there, as the avx512 level's VDPBF16PS order has: gemm_bf16_order.c, so
# such a CPU does not run avx512 and it is not checked). NaN results are digested
# as one NaN (--nan-canonical): which NaN an operation on NaNs returns
# follows the compiler's operand order (gcc -O2 and the sanitized -O1
# build differ, as clang does), the contract says NaN. Each level's small-M
# path (--fp8-b: every call on B in fp8) must give the same digest. A level this CPU cannot run is named and left
# out; one not pinned yet (amx: pin it on an AMX CPU with `gemm_digest amx
# --nan-canonical`) is checked against its small-M path only.
. "$(dirname "$0")/lib.sh"
unset A2AMM_CPU_HIDE A2AMM_ISA
DIGEST="$(dirname "$A2AMM")/tools/gemm_digest"
. "$(dirname "$0")/digests.sh"

# The sanitized build (ten times slower here) checks the sample of the list (48 of its 300 cases:
# every chosen shape once, gemm_digest --sample): its bits against the sample's pins, its small-M path
# against those; the optimized pass checks the whole list.
list=() sampled=0
if ldd "$DIGEST" 2>/dev/null | grep -q libasan; then
    list=(--sample) sampled=1
    echo "test_digest.sh: a sanitized build: the sample of the list (the optimized build checks all of it)"
fi
ran=()
for isa in ref avx2 avx512 amx; do
    if ! cpu_runs $isa; then
        echo "test_digest.sh: this CPU cannot run the $isa level: not checked"
        continue
    fi
    got=$("$DIGEST" $isa --nan-canonical "${list[@]}" | tail -n 1)
    if [ $sampled = 1 ]; then
        want=${PINNED_SAMPLE[$isa]:+"$isa: ${PINNED_SAMPLE[$isa]} over 48 cases (--sample)"}
    else
        want=${PINNED[$isa]:+"$isa: ${PINNED[$isa]} over 300 cases"}
    fi
    if [ -n "$want" ]; then
        check "the $isa level's bits: pinned '$want', got '$got'" test "$got" = "$want"
    else
        echo "test_digest.sh: the $isa level's digest is not pinned yet: $got"
    fi
    if [ $sampled = 0 ] && [ -n "${PINNED_SAMPLE[$isa]:-}" ]; then
        got_sample=$("$DIGEST" $isa --nan-canonical --sample | tail -n 1)
        want="$isa: ${PINNED_SAMPLE[$isa]} over 48 cases (--sample)"
        check "the $isa level's sample (the emulated CPUs' list): pinned '$want', got '$got_sample'" \
            test "$got_sample" = "$want"
    fi
    if [ $isa != ref ]; then # ref has no small-M path
        got8=$("$DIGEST" $isa --nan-canonical --fp8-b "${list[@]}" | tail -n 1)
        check "the $isa level's small-M path gives its bits: '$got' plain, '$got8' with every call on B in fp8" \
            test "$got8" = "$got"
    fi
    ran+=("$isa")
done
check "the ref level checked (${ran[*]})" test "${ran[0]:-}" = ref
echo "test_digest.sh: checked ${ran[*]}"
finish test_digest.sh
