#!/usr/bin/env bash
# Every kernel level this CPU runs computes the MoE op's values: every case
# of tests/moe_cases.h, each rank's output digest, with A2AMM_ISA forcing
# ref (the portable down projection and the exact matmul), avx2, avx512 and
# amx in turn; a level this CPU cannot run is named and left out (ref and
# the best always run). The levels sum in orders of their own (the matmul's
# K order, the amx down projection's tiles), but the cases' values (codes
# below 2 in magnitude, scales in a narrow band) make every fp32 sum exact,
# so any order gives the same bits and a digest that differs is a wrong
# value (a layout, a scale, a route), not an order.
. "$(dirname "$0")/lib.sh"
unset A2AMM_CPU_HIDE A2AMM_ISA
TEST_MOE="$(dirname "$A2AMM")/tests/test_moe"

ran=()
for isa in ref avx2 avx512 amx; do
    if ! cpu_runs $isa; then
        echo "test_moe_levels.sh: this CPU cannot run the $isa level: not compared"
        continue
    fi
    A2AMM_ISA=$isa "$TEST_MOE" digests >"$SCRATCH/moe-$isa" 2>&1
    check "test_moe digests on the $isa level: every case" test "$(grep -c ': digest ' "$SCRATCH/moe-$isa")" -ge 10
    ran+=("$isa")
done
check "at least two levels compared (${ran[*]})" test ${#ran[@]} -ge 2
for isa in "${ran[@]:1}"; do
    check "the $isa level gives the ref level's bits" \
        diff <(grep ': digest ' "$SCRATCH/moe-ref") <(grep ': digest ' "$SCRATCH/moe-$isa")
done
echo "test_moe_levels.sh: compared ${ran[*]}"
finish test_moe_levels.sh
