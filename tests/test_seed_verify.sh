#!/usr/bin/env bash
# The seed's own verify_result.py, taken unchanged from the seed in
# ../shared/seed, run on a2amm's output folder: it must pass on a correct
# run and fail on a corrupted one. It runs with the real torch (Debian's
# python3-torch, which scripts/install-deps.sh installs) wherever a python3
# has it; else with a numpy stand-in for torch (tests/seed_compat/torch.py),
# and says which; with neither numpy nor the seed it is skipped (exit 77).
. "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
seed=$(ls "$here"/../../shared/seed/*.txt 2>/dev/null | head -1)
if [ -z "$seed" ]; then
    echo "SKIP: the seed is not at ../shared/seed (its verify_result.py is what this test runs)"
    exit 77
fi
# a python3 with the real torch (Debian's packages serve /usr/bin/python3,
# which need not be the python3 first on PATH), else one with numpy
py=""; torch=""
for p in /usr/bin/python3 "$(command -v python3)"; do
    [ -x "$p" ] || continue
    if v=$("$p" -c "import torch, numpy; print(torch.__version__)" 2>/dev/null); then py=$p; torch="the real torch $v"; break; fi
done
# the real torch runs the script through a launcher that fills one gap of torch < 2.3 (from_numpy of uint16)
run=("$py" "$here/run_seed_script.py")
if [ -z "$py" ]; then
    for p in /usr/bin/python3 "$(command -v python3)"; do
        [ -x "$p" ] && "$p" -c "import numpy" 2>/dev/null && { py=$p; torch="the numpy stand-in for torch (tests/seed_compat)"; break; }
    done
    [ -n "$py" ] || { echo "SKIP: no python3 with torch or numpy (scripts/install-deps.sh installs python3-torch)"; exit 77; }
    export PYTHONPATH="$here/seed_compat${PYTHONPATH:+:$PYTHONPATH}"
    run=("$py")
fi
echo "test_seed_verify.sh: the seed's script runs on $py with $torch"
check "the torch it runs with is the one named" "$py" -c "
import torch, sys
stand_in = torch.__file__.startswith('$here/seed_compat')
sys.exit(0 if stand_in == ('stand-in' in '$torch') else 1)"
# The script is the seed diff's added lines between its header and the next file.
awk '/scripts\/verify_result.py$/ {on=1; next} on && /^package\// {exit} on && /^\+/ {sub(/^\+/, ""); print}' \
    "$seed" > "$SCRATCH/verify_result.py"
check "extracted the seed's verify_result.py" grep -q "def verify_result" "$SCRATCH/verify_result.py"

d="$SCRATCH/run"
"$A2AMM" gen 96 256 40 2 --dir "$d" >/dev/null
"$A2AMM" run 96 256 40 2 --dir "$d" >/dev/null
expect_ok "seed's verify_result.py passes on a2amm's output" "${run[@]}" "$SCRATCH/verify_result.py" 96 40 2 "$d/output"
expect_output "seed's script says ALL PASS" "[ALL PASS] All 2 ranks passed verification!"
if [ "${run[1]:-}" = "$here/run_seed_script.py" ]; then
    # README's line: the script named, not given: run_seed_script.py takes it from the seed's diff, from the
    # repository's root (../shared/seed beside it) and from elsewhere with A2AMM_SEED
    expect_ok "run_seed_script.py verify_result.py (the script by name) passes" \
        bash -c "cd '$here/..' && '$py' tests/run_seed_script.py verify_result.py 96 40 2 '$d/output'"
    expect_output "the script by name says ALL PASS" "[ALL PASS] All 2 ranks passed verification!"
    expect_output "and says it took the script from the seed's diff" "verify_result.py as the seed's diff"
    expect_output "naming the diff" "$(basename "$seed") has it"
    expect_ok "A2AMM_SEED names the seed's diff" \
        bash -c "cd '$TMPDIR' && A2AMM_SEED='$seed' '$py' '$here/run_seed_script.py' verify_result.py 96 40 2 '$d/output'"
    expect_output "A2AMM_SEED's diff runs" "[ALL PASS] All 2 ranks passed verification!"
    expect_fail "a script the seed lacks is refused, naming where it looked" \
        "no seed diff in $SCRATCH/none (no *.txt there) has scripts/nothing.py" \
        env A2AMM_SEED="$SCRATCH/none" "$py" "$here/run_seed_script.py" nothing.py 96 40 2 "$d/output"
fi
printf '\x7f\x7f' | dd of="$d/output/1/npu_out.bin" bs=1 seek=200 conv=notrunc status=none
expect_fail "seed's script fails on a corrupted output" "[FAIL] Rank 1" "${run[@]}" "$SCRATCH/verify_result.py" 96 40 2 "$d/output"
# the reverse op's files: each rank's [R*M, N/R] bf16, flat, which the script reads given R*M and N/R
d="$SCRATCH/reverse"
"$A2AMM" gen 96 256 40 2 --op matmul-alltoall --dir "$d" >/dev/null
"$A2AMM" run 96 256 40 2 --dir "$d" >/dev/null
expect_ok "seed's verify_result.py passes on the reverse op's output (R*M N/R R)" "${run[@]}" "$SCRATCH/verify_result.py" \
    192 20 2 "$d/output"
expect_output "seed's script says ALL PASS on the reverse op" "[ALL PASS] All 2 ranks passed verification!"
expect_output "seed's script saw [R*M, N/R]" "shape=(192, 20)"
printf '\x7f\x7f' | dd of="$d/output/0/npu_out.bin" bs=1 seek=1000 conv=notrunc status=none
expect_fail "seed's script fails on a corrupted reverse output" "[FAIL] Rank 0" "${run[@]}" "$SCRATCH/verify_result.py" \
    192 20 2 "$d/output"
finish
