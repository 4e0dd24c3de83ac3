#!/usr/bin/env bash
# a2amm against hostile input: a bad or contradicting meta file, odd paths,
# FIFOs and directories where files belong, numbers in any form but decimal
# digits. Each case once produced wrong output reported as SUCCESS, a hang
# or a deleted file; each must now be refused, naming what is wrong, with a
# non-zero exit and no output written.
. "$(dirname "$0")/lib.sh"

E="$SCRATCH/e"
"$A2AMM" gen 64 256 32 2 --dir "$E" --a-type e5m2 >/dev/null
meta="$E/input/a2amm-meta.txt"
cp "$meta" "$SCRATCH/meta.good"
"$A2AMM" run 64 256 32 2 --dir "$E" >/dev/null
for r in 0 1; do cp "$E/output/$r/npu_out.bin" "$SCRATCH/good.$r"; done
outputs_untouched() { # the good outputs are still there, unchanged
    local r
    for r in 0 1; do cmp -s "$E/output/$r/npu_out.bin" "$SCRATCH/good.$r" || return 1; done
}
# bad_meta "what" "text the message must have": run refuses the current meta file
bad_meta() {
    expect_fail "meta $1: run refused" "$2" "$A2AMM" run 64 256 32 2 --dir "$E"
    expect_output "meta $1: the message names the file" "$meta"
    check "meta $1: no SUCCESS" bash -c "! grep -q SUCCESS '$SCRATCH/out'"
    check "meta $1: outputs untouched" outputs_untouched
    cp "$SCRATCH/meta.good" "$meta"
}

# --- a meta file present but bad is refused, naming the line and the rule
sed -i '1s/.*/junk/' "$meta"; bad_meta "first line junk" "a2amm-meta.txt:1: expected 'a2amm-meta 1'"
head -c 200 /dev/urandom > "$meta"; printf 'a2amm-meta 1\nM 64\0\n' > "$meta"; bad_meta "binary junk" "NUL byte"
sed -i 's/$/\r/' "$meta"; bad_meta "Windows line endings" "a2amm-meta.txt:1: the line ends in a carriage return (Windows line endings"
sed -i 's/^a_type e5m2$/a_type e9m9/' "$meta"; bad_meta "unknown type" "a2amm-meta.txt:6: the type must be e4m3 or e5m2"
sed -i 's/^op alltoall-matmul$/op reverse/' "$meta"; bad_meta "unknown op" "a2amm-meta.txt:11: op must be alltoall-matmul or matmul-alltoall"
sed -i 's/^M 64$/M 64x/' "$meta"; bad_meta "number with trailing junk" "a2amm-meta.txt:2: the value must be a whole number"
sed -i 's/^M 64$/M +64/' "$meta"; bad_meta "number with a sign" "a2amm-meta.txt:2: the value must be a whole number"
sed -i '/^b_type /d' "$meta"; bad_meta "a missing line" "incomplete: no 'b_type' line"
sed -i 's/^K 256$/K 256\nK 256/' "$meta"; bad_meta "a repeated key" "the key appears twice"
printf 'colour blue\n' >> "$meta"; bad_meta "an unknown key" "unknown key"
printf 'dist %03000d\n' 0 >> "$meta"; bad_meta "a very long line" "a2amm-meta.txt:$(wc -l <"$meta"): "
# a long line is one line: its tail cannot set another key
python3 -c "print('a2amm-meta 1'); print('seed 1' + ' ' * 300 + 'a_type e4m3')" > "$meta"; bad_meta "long line's tail" "a2amm-meta.txt:2:"
: > "$meta"; bad_meta "empty" "empty"
rm "$meta"; mkdir "$meta"; expect_fail "meta is a directory" "is a directory, not a file" "$A2AMM" run 64 256 32 2 --dir "$E"
rmdir "$meta"; ln -s "$meta" "$meta"; expect_fail "meta is a symlink loop" "Too many levels of symbolic links" "$A2AMM" run 64 256 32 2 --dir "$E"
rm "$meta"; mkfifo "$meta"
start=$SECONDS
expect_fail "meta is a FIFO: refused, not a hang" "is a FIFO, not a file" timeout 20 "$A2AMM" run 64 256 32 2 --dir "$E"
rm "$meta"
check "bad metas: outputs untouched" outputs_untouched

# --- without a meta file the types must be named
expect_fail "no meta: types unknown" "a2amm-meta.txt is missing, so the element types of the data are unknown" \
    "$A2AMM" run 64 256 32 2 --dir "$E"
expect_fail "no meta, one type named" "name both with --a-type and --b-type" "$A2AMM" run 64 256 32 2 --dir "$E" --a-type e5m2
expect_ok "no meta, both types named" "$A2AMM" run 64 256 32 2 --dir "$E" --a-type e5m2 --b-type e4m3
check "no meta, both types named: the same bits" outputs_untouched
cp "$SCRATCH/meta.good" "$meta"
# a failed gen leaves no meta file: the folder is not taken for a complete set
rm -rf "$E/output/1"; touch "$E/output/1"   # the golden of rank 1 cannot be written
expect_fail "gen failing midway" "$E/output/1" "$A2AMM" gen 64 256 32 2 --dir "$E" --a-type e5m2
check "a failed gen leaves no meta file" test ! -e "$meta"
expect_fail "after a failed gen, run refuses" "a2amm-meta.txt is missing" "$A2AMM" run 64 256 32 2 --dir "$E"
rm "$E/output/1"
"$A2AMM" gen 64 256 32 2 --dir "$E" --a-type e5m2 >/dev/null
"$A2AMM" run 64 256 32 2 --dir "$E" >/dev/null
check "gen again, run again: the same bits" outputs_untouched

# --- a shape or a type that contradicts the meta file is refused
"$A2AMM" gen 64 256 32 2 --dir "$SCRATCH/r2" >/dev/null   # R=2 data; R=1 with M=128 has the same sizes
expect_fail "R=1 on data made for R=2" "says the data was made for M=64 K=256 N=32 R=2: refused" \
    "$A2AMM" run 128 256 32 1 --dir "$SCRATCH/r2"
check "R=1 on R=2 data wrote nothing" test ! -e "$SCRATCH/r2/output/0/npu_out.bin"
expect_fail "--a-type contradicting the meta file" "--a-type e5m2 contradicts" \
    "$A2AMM" run 64 256 32 2 --dir "$SCRATCH/r2" --a-type e5m2
expect_ok "--a-type agreeing with the meta file" "$A2AMM" run 64 256 32 2 --dir "$SCRATCH/r2" --a-type e4m3
expect_fail "verify with M and N swapped" "says the data was made for M=64 K=256 N=32 R=2" \
    "$A2AMM" verify 32 64 2 --dir "$SCRATCH/r2"
expect_fail "verify with another R" "refused" "$A2AMM" verify 64 32 1 --dir "$SCRATCH/r2"
expect_ok "verify with the right shape" "$A2AMM" verify 64 32 2 --dir "$SCRATCH/r2"
sed -i '1s/.*/junk/' "$SCRATCH/r2/input/a2amm-meta.txt"
expect_fail "verify refuses a bad meta file" "a2amm-meta.txt:1:" "$A2AMM" verify 64 32 2 --dir "$SCRATCH/r2"

# --- paths
cd "$SCRATCH"
mkdir -p cwd && cd cwd
for form in '--dir ""' "--dir="; do
    eval "set -- $form"
    expect_fail "gen $form refused" "--dir is empty" "$A2AMM" gen 64 256 32 2 "$@"
    expect_fail "run $form refused" "--dir is empty" "$A2AMM" run 64 256 32 2 "$@"
    expect_fail "verify $form refused" "--dir is empty" "$A2AMM" verify 64 32 2 "$@"
done
check "nothing written at / or here" bash -c "[ ! -e /input/a2amm-meta.txt ] && [ -z \"\$(ls -A)\" ]"
cd "$SCRATCH"
# a folder whose meta path is 4095+ characters: refused, and the file its
# cut-off path would name is not deleted (gen once unlinked it)
long=$(python3 -c "
import os, sys
d = sys.argv[1] + '/long'
while len(d) < 4080: d += '/' + 'x' * min(200, 4080 - len(d))
print(d)" "$SCRATCH")
mkdir -p "$long/input"
victim=$(python3 -c "import sys; print((sys.argv[1] + '/input/a2amm-meta.txt')[:4095])" "$long")
touch "$victim"
expect_fail "a --dir too long for its paths" "characters, more than the 4095 allowed" "$A2AMM" gen 64 256 32 2 --dir "$long"
check "the refusal is not cut off" grep -q "use a shorter folder" "$SCRATCH/out"
check "nothing deleted by a cut-off path" test -e "$victim"
one=$(printf 'y%.0s' $(seq 300))
expect_fail "a folder name over 255 characters" "File name too long" "$A2AMM" gen 64 256 32 2 --dir "$SCRATCH/$one"
check "that refusal is not cut off either" grep -q "File name too long" "$SCRATCH/out"

# --- FIFOs and directories where files belong: refused at once, never a hang
d="$SCRATCH/fifo"; "$A2AMM" gen 64 256 32 2 --dir "$d" >/dev/null; "$A2AMM" run 64 256 32 2 --dir "$d" >/dev/null
rm "$d/input/1/input_b.bin"; mkfifo "$d/input/1/input_b.bin"
expect_fail "a FIFO for an input" "rank 1: $d/input/1/input_b.bin is a FIFO, not a file" timeout 20 "$A2AMM" run 64 256 32 2 --dir "$d"
rm "$d/input/1/input_b.bin"; mkdir "$d/input/1/input_b.bin"
expect_fail "a directory for an input" "input_b.bin is a directory, not a file" "$A2AMM" run 64 256 32 2 --dir "$d"
rm "$d/output/0/npu_out.bin"; mkfifo "$d/output/0/npu_out.bin"
expect_fail "a FIFO for an output, verify" "npu_out.bin is a FIFO, not a file" timeout 20 "$A2AMM" verify 64 32 2 --dir "$d"
rm "$d/output/0/cpu_output.bin"; mkfifo "$d/output/0/cpu_output.bin"
expect_fail "a FIFO for a golden, verify" "is a FIFO, not a file" timeout 20 "$A2AMM" verify 64 32 2 --dir "$d"
ln -s loop "$d/output/1/loop"; rm "$d/output/1/npu_out.bin"; ln -s loop "$d/output/1/npu_out.bin"; ln -sf npu_out.bin "$d/output/1/loop"
expect_fail "a symlink loop for an output: the reason" "Too many levels of symbolic links" "$A2AMM" verify 64 32 2 --dir "$d"

# --- numbers: decimal digits only, one rule everywhere
for v in " 64" "+64" "64 " "0x40" "1e2" "064x"; do
    expect_fail "M='$v' refused" "in decimal digits, got '$v'" "$A2AMM" gen "$v" 256 32 2 --dir "$SCRATCH/n"
done
expect_fail "--timeout 0x10 refused" "--timeout must be a number" "$A2AMM" run 64 256 32 2 --dir "$E" --timeout 0x10
expect_fail "--timeout inf refused" "--timeout must be a number" "$A2AMM" run 64 256 32 2 --dir "$E" --timeout inf
expect_fail "--seed -1 refused" "--seed must be a whole number from 0" "$A2AMM" gen 64 256 32 2 --dir "$SCRATCH/n" --seed -1
expect_fail "--seed past 2^64 refused" "--seed must be a whole number" "$A2AMM" gen 64 256 32 2 --dir "$SCRATCH/n" --seed 18446744073709551616
expect_ok "--timeout 2.5 is fine" "$A2AMM" run 64 256 32 2 --dir "$E" --timeout 2.5
check "refused numbers made no folder" test ! -e "$SCRATCH/n"
finish
