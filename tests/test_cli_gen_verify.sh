#!/usr/bin/env bash
# a2amm gen and verify from the command line: help, shape rules, the seed's
# flow on the seed layout, single-byte corruption, bad files, determinism.
. "$(dirname "$0")/lib.sh"

# --- help teaches, with examples that work as printed
expect_ok "a2amm --help" "$A2AMM" --help
expect_output "main help lists gen" "gen M K N R"
for c in gen verify; do
    expect_ok "$c --help" "$A2AMM" $c --help
    expect_output "$c --help has an example" "example"
done
expect_fail "no command" "usage" "$A2AMM"
expect_fail "unknown command" "unknown command 'frobnicate'" "$A2AMM" frobnicate

# --- shape rules are refused with the rule named
expect_fail "seed usage example (ka=50)" "K / R must be a multiple of 32" "$A2AMM" gen 100 200 64 4 --dir "$SCRATCH/x"
check "refused gen wrote nothing" test ! -e "$SCRATCH/x"
expect_fail "K not divisible by R" "K must be divisible by R" "$A2AMM" gen 64 96 8 5 --dir "$SCRATCH/x"
expect_fail "zero M" "must all be at least 1" "$A2AMM" gen 0 64 8 1 --dir "$SCRATCH/x"
expect_fail "negative N" "must all be at least 1" "$A2AMM" gen 8 64 -3 1 --dir "$SCRATCH/x"
expect_fail "not a number" "M must be a whole number (at least 1) in decimal digits, got '8x'" "$A2AMM" gen 8x 64 8 1
expect_fail "more ranks than a run takes: refused by gen too" "R must be at most 1024, the most ranks a run takes" \
    "$A2AMM" gen 2 65536 2 2048 --no-golden --dir "$SCRATCH/x"
check "... nothing written" test ! -e "$SCRATCH/x"
# data larger than the free space (a few hundred terabytes) is refused before a byte is written
expect_fail "data larger than the file system's free space" "GB free: refused (nothing written)" \
    "$A2AMM" gen 65536 65536 65536 1024 --no-golden --dir "$SCRATCH/x/y"
check "... nothing written" test ! -e "$SCRATCH/x"
expect_fail "... the MoE op's too" "GB free: refused (nothing written)" \
    "$A2AMM" gen 64 65536 65536 16 --op moe --experts 1024 --dir "$SCRATCH/x"
expect_fail "overflowing sizes" "overflow" "$A2AMM" gen 4611686018427387904 4611686018427387904 1 1 --dir "$SCRATCH/x"
expect_fail "missing arguments" "expected M K N R" "$A2AMM" gen 8 64
expect_fail "run on a folder that does not exist: said so" "--dir $SCRATCH/nowhere: no such folder" \
    "$A2AMM" run 8 64 8 1 --dir "$SCRATCH/nowhere"
expect_fail "verify on a folder that does not exist: said so" "--dir $SCRATCH/nowhere: no such folder" \
    "$A2AMM" verify 8 8 1 --dir "$SCRATCH/nowhere"
expect_fail "verify: M*N too large, said so (not a K that was never given)" "M*N = 1000000000*1000000000 is too large" \
    "$A2AMM" verify 1000000000 1000000000 2
expect_fail "an option without its value: the command named" "a2amm gen: option --dir needs a value" "$A2AMM" gen 8 64 8 1 --dir
expect_fail "standard output on a full disk: an error, not exit 0" "writing the standard output failed: No space left on device" \
    bash -c "'$A2AMM' cpu --json >/dev/full"
expect_fail "unknown option" "unknown option '--bogus'" "$A2AMM" gen 8 64 8 1 --bogus
expect_fail "bad type" "--a-type must be e4m3 or e5m2" "$A2AMM" gen 8 64 8 1 --a-type e3m4
expect_fail "bad dist" "--dist must be one of" "$A2AMM" gen 8 64 8 1 --dist gauss

# --- the seed flow for all four type pairs at a shape that is a multiple of nothing
for at in e4m3 e5m2; do for bt in e4m3 e5m2; do
    d="$SCRATCH/run-$at-$bt"
    expect_ok "gen $at x $bt" "$A2AMM" gen 700 256 96 2 --a-type $at --b-type $bt --dir "$d"
    check "meta records a_type $at" grep -qx "a_type $at" "$d/input/a2amm-meta.txt"
    check "meta records b_type $bt" grep -qx "b_type $bt" "$d/input/a2amm-meta.txt"
    for r in 0 1; do
        check "input_a size rank $r" test "$(stat -c %s "$d/input/$r/input_a.bin")" -eq $((2 * 700 * 128))
        check "scaleA size rank $r" test "$(stat -c %s "$d/input/$r/input_scaleA.bin")" -eq $((2 * 700 * 4))
        check "input_b size rank $r" test "$(stat -c %s "$d/input/$r/input_b.bin")" -eq $((96 * 256))
        check "scaleB size rank $r" test "$(stat -c %s "$d/input/$r/input_scaleB.bin")" -eq $((96 * 8))
        check "golden size rank $r" test "$(stat -c %s "$d/output/$r/cpu_output.bin")" -eq $((700 * 96 * 2))
        cp "$d/output/$r/cpu_output.bin" "$d/output/$r/npu_out.bin"
    done
    expect_ok "verify passes on the golden itself ($at x $bt)" "$A2AMM" verify 700 96 2 --dir "$d"
    expect_output "verify says ALL PASS" "[ALL PASS]"
done; done
check "no temporary files left" test -z "$(find "$SCRATCH" -name '*.tmp.*')"

# --- a staged output left in a rank folder (a run writing now, or one killed with its guard) and no
#     commit marker: verify refuses the folder, naming the file; the next run removes it
d="$SCRATCH/run-e5m2-e4m3"
echo partial >"$d/output/1/npu_out.bin.tmp.4242"
expect_fail "verify refuses a folder with a staged output left" "output/1/npu_out.bin.tmp.4242: a staged output remains" \
    "$A2AMM" verify 700 96 2 --dir "$d"
check "the refusal removed nothing" test -e "$d/output/1/npu_out.bin.tmp.4242"
expect_ok "the next run on the folder" "$A2AMM" run 700 256 96 2 --dir "$d" --quiet
check "the next run removed the staged output" test ! -e "$d/output/1/npu_out.bin.tmp.4242"
expect_ok "then verify passes" "$A2AMM" verify 700 96 2 --dir "$d"

# --- one flipped byte fails, saying where
d="$SCRATCH/run-e4m3-e4m3"
off=$(( (123 * 96 + 45) * 2 + 1 ))   # high byte of element (123, 45)
printf '\x55' | dd of="$d/output/1/npu_out.bin" bs=1 seek=$off conv=notrunc status=none
expect_fail "flipped byte fails verify" "[FAIL] Rank 1" "$A2AMM" verify 700 96 2 --dir "$d"
expect_output "names the first mismatch" "first at row 123, column 45"
expect_output "rank 0 still passes" "[PASS] Rank 0"
expect_output "worst error in ulps" "bf16 ulp"

# --- bad files: named, with expected and actual sizes
head -c 1000 "$d/output/0/cpu_output.bin" > "$d/output/0/npu_out.bin"
expect_fail "short output" "expected 134400 bytes, found 1000 bytes" "$A2AMM" verify 700 96 2 --dir "$d"
expect_output "short output names the file" "output/0/npu_out.bin"
rm "$d/output/0/npu_out.bin"
expect_fail "missing output" "output/0/npu_out.bin is missing" "$A2AMM" verify 700 96 2 --dir "$d"
expect_output "... the summary counts it as not compared, not as differing" \
    "[ERROR] 1 of 2 ranks differ from the golden; 1 of 2 ranks could not be compared"
# an output older than the golden (a run before the last gen) is said to be so where it differs
touch -d '1 hour ago' "$d/output/1/npu_out.bin"
expect_fail "an old output" "[FAIL] Rank 1" "$A2AMM" verify 700 96 2 --dir "$d"
expect_output "... is said to be older than the golden" "npu_out.bin is older than cpu_output.bin"
mv "$d/input/a2amm-meta.txt" "$SCRATCH/meta.saved"
expect_fail "no meta file and a failure" "[FAIL] Rank 1" "$A2AMM" verify 700 96 2 --dir "$d"
expect_output "... the missing meta file is named" "input/a2amm-meta.txt is missing (a gen that did not finish"
mv "$SCRATCH/meta.saved" "$d/input/a2amm-meta.txt"
expect_fail "wrong shape given to verify" "says the data was made for M=700 K=256 N=96 R=2: refused" "$A2AMM" verify 70 96 2 --dir "$d"

# --- gen --no-golden over an earlier gen: the earlier goldens (of other inputs) are removed, in every rank
#     folder (of an earlier R too), and verify says there is no golden rather than comparing with an old one
d="$SCRATCH/nogold"
"$A2AMM" gen 64 96 32 3 --dir "$d" >/dev/null
"$A2AMM" run 64 96 32 3 --dir "$d" >/dev/null
expect_ok "gen --no-golden over an earlier gen" "$A2AMM" gen 64 64 32 2 --seed 5 --dir "$d" --no-golden
expect_output "... says it removed the earlier goldens" "removed 3 earlier goldens"
expect_output "... and that it wrote none" "(no golden)"
check "... no golden left in any rank folder" test -z "$(find "$d/output" -name cpu_output.bin)"
expect_ok "run on the new inputs" "$A2AMM" run 64 64 32 2 --dir "$d"
expect_fail "verify: there is no golden, and it says so" "[FAIL] Rank 0: no golden to compare with: " \
    "$A2AMM" verify 64 32 2 --dir "$d"
expect_output "... why, and what to do" "(gen --no-golden writes none; run a2amm gen without it)"
expect_output "... counted as not compared, not as differing" "[ERROR] 2 of 2 ranks could not be compared"

# --- determinism: same seed, same bytes; another seed, other bytes
"$A2AMM" gen 64 128 40 2 --seed 9 --dir "$SCRATCH/s1" >/dev/null
"$A2AMM" gen 64 128 40 2 --seed 9 --dir "$SCRATCH/s2" >/dev/null
"$A2AMM" gen 64 128 40 2 --seed 10 --dir "$SCRATCH/s3" >/dev/null
check "same seed, same bytes" diff -r "$SCRATCH/s1" "$SCRATCH/s2"
check "another seed, other bytes" bash -c "! cmp -s '$SCRATCH/s1/input/0/input_a.bin' '$SCRATCH/s3/input/0/input_a.bin'"

# --- every distribution: gen writes inputs and a golden that the operator's
#     own result verifies against (run, then verify)
for dist in seed normal uniform extreme special; do
    dd="$SCRATCH/d-$dist"
    expect_ok "gen --dist $dist" "$A2AMM" gen 33 64 17 2 --dist $dist --scale-mode rceil --dir "$dd"
    expect_ok "run on --dist $dist" "$A2AMM" run 33 64 17 2 --dir "$dd"
    expect_ok "--dist $dist: the result verifies against its golden" "$A2AMM" verify 33 17 2 --dir "$dd"
    expect_output "--dist $dist: verify says ALL PASS" "[ALL PASS]"
done
# and a golden changed in its first element no longer verifies: verify really compares
printf '\x00\x44' | dd of="$SCRATCH/d-normal/output/0/cpu_output.bin" bs=1 seek=0 conv=notrunc status=none
expect_fail "a changed golden fails verify" "[FAIL] Rank 0" "$A2AMM" verify 33 17 2 --dir "$SCRATCH/d-normal"
check "special dist has NaN in its golden" python3 -c "
import struct,sys
b=open('$SCRATCH/d-special/output/0/cpu_output.bin','rb').read()
v=struct.unpack('<%dH'%(len(b)//2), b)
sys.exit(0 if any((x & 0x7f80)==0x7f80 and (x & 0x7f) for x in v) else 1)"

# --- the help's own example works as printed
ex=$("$A2AMM" gen --help | sed -n 's/^  a2amm gen /gen /p' | head -1 | sed "s|/tmp/a2amm-demo|$SCRATCH/demo|g")
expect_ok "gen help example: $ex" "$A2AMM" $ex

finish
