#!/usr/bin/env bash
# The seed's own verify_result.py, taken unchanged from the seed in
# ../shared/seed, run on a2amm's output folder: it must pass on a correct
# run and fail on a corrupted one. Uses a numpy stand-in for torch
# (tests/seed_compat/torch.py) where torch is not installed.
. "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
seed=$(ls "$here"/../../shared/seed/*.txt 2>/dev/null | head -1)
if [ -z "$seed" ] || ! python3 -c "import numpy" 2>/dev/null; then
    echo "test_seed_verify.sh: skipped (needs ../shared/seed and python3 with numpy)"
    check "skipped on purpose" true
    finish
    exit $?
fi
# The script is the seed diff's added lines between its header and the next file.
awk '/scripts\/verify_result.py$/ {on=1; next} on && /^package\// {exit} on && /^\+/ {sub(/^\+/, ""); print}' \
    "$seed" > "$SCRATCH/verify_result.py"
check "extracted the seed's verify_result.py" grep -q "def verify_result" "$SCRATCH/verify_result.py"
export PYTHONPATH="$here/seed_compat${PYTHONPATH:+:$PYTHONPATH}"
python3 -c "import torch" 2>/dev/null || fail "no torch, not even the stand-in"

d="$SCRATCH/run"
"$A2AMM" gen 96 256 40 2 --dir "$d" >/dev/null
"$A2AMM" run 96 256 40 2 --dir "$d" >/dev/null
expect_ok "seed's verify_result.py passes on a2amm's output" python3 "$SCRATCH/verify_result.py" 96 40 2 "$d/output"
expect_output "seed's script says ALL PASS" "[ALL PASS] All 2 ranks passed verification!"
printf '\x7f\x7f' | dd of="$d/output/1/npu_out.bin" bs=1 seek=200 conv=notrunc status=none
expect_fail "seed's script fails on a corrupted output" "[FAIL] Rank 1" python3 "$SCRATCH/verify_result.py" 96 40 2 "$d/output"
finish
