#!/usr/bin/env bash
# The reverse op from the command line (--op matmul-alltoall): gen, run and
# verify in the seed's layout (X_r [M, K], out [R*M, N/R]) at every type
# pair, R = 1..8, M from 1, N/R that is no multiple of 16 or 64, both paths,
# fused and unfused; the same bits whatever the tile, threads, path or
# schedule, and equal to a2amm_matmul's per source, sliced (the matmul
# alone); the meta file's op and its refusals; perf mode's rows; the help's
# examples as printed. (--trace and the timeline: test_trace.sh; over MPI:
# test_mpi.sh; the seed's verify_result.py: test_seed_verify.sh; bench op:
# test_bench.sh.)
. "$(dirname "$0")/lib.sh"
OP=(--op matmul-alltoall)

# same_outputs DIR R SAVED: every rank's npu_out.bin is the same bytes as SAVED.<r>
same_outputs() {
    local d=$1 R=$2 saved=$3 r
    for r in $(seq 0 $((R - 1))); do cmp -s "$d/output/$r/npu_out.bin" "$saved.$r" || return 1; done
}
save_outputs() { local r; for r in $(seq 0 $(($2 - 1))); do cp "$1/output/$r/npu_out.bin" "$3.$r"; done; }

# --- gen writes the reverse op's layout and says so in its meta file
d="$SCRATCH/layout"
expect_ok "gen --op matmul-alltoall" "$A2AMM" gen 5 96 21 3 "${OP[@]}" --dir "$d"
expect_output "gen names the op" "op matmul-alltoall"
check "the meta file records the op" grep -qx "op matmul-alltoall" "$d/input/a2amm-meta.txt"
for r in 0 1 2; do
    check "rank $r: X_r [M, K]" test "$(stat -c %s "$d/input/$r/input_a.bin")" -eq $((5 * 96))
    check "rank $r: its scales [M, 2*ceil(K/64)]" test "$(stat -c %s "$d/input/$r/input_scaleA.bin")" -eq $((5 * 4))
    check "rank $r: B_r [N, K]" test "$(stat -c %s "$d/input/$r/input_b.bin")" -eq $((21 * 96))
    check "rank $r: its scales [N, 2*ceil(K/64)]" test "$(stat -c %s "$d/input/$r/input_scaleB.bin")" -eq $((21 * 4))
    check "rank $r: the golden [R*M, N/R] bf16" test "$(stat -c %s "$d/output/$r/cpu_output.bin")" -eq $((15 * 7 * 2))
done
expect_ok "gen --op alltoall-matmul is the seed's op" "$A2AMM" gen 5 96 21 3 --op alltoall-matmul --dir "$SCRATCH/fwd"
check "... and its meta file says so" grep -qx "op alltoall-matmul" "$SCRATCH/fwd/input/a2amm-meta.txt"
check "... in the seed's layout: A_r [R*M, K/R]" test "$(stat -c %s "$SCRATCH/fwd/input/0/input_a.bin")" -eq $((15 * 32))

# --- every type pair, R = 1..8, M from 1, N/R of 1, 5, 7, 17, 25, 49 (no multiple of 16 or 64):
#     run verifies on both paths, fused and unfused, with the same bits each way
i=0
for spec in "1 1 32 5 e4m3 e5m2" "2 700 256 98 e5m2 e4m3" "3 70 96 63 e5m2 e5m2" "4 45 128 4 e4m3 e4m3" \
            "5 3 64 85 e4m3 e5m2" "6 2 160 42 e5m2 e4m3" "7 9 32 49 e5m2 e5m2" "8 19 256 200 e4m3 e4m3"; do
    set -- $spec
    R=$1 M=$2 K=$3 N=$4 at=$5 bt=$6
    d="$SCRATCH/r$R"
    what="R=$R M=$M K=$K N=$N (N/R=$((N / R))) $at x $bt"
    "$A2AMM" gen "$M" "$K" "$N" "$R" "${OP[@]}" --a-type $at --b-type $bt --seed $((60 + i)) --dir "$d" >/dev/null
    expect_ok "$what: run (tile 16)" "$A2AMM" run "$M" "$K" "$N" "$R" "${OP[@]}" --dir "$d" --tile-m 16
    expect_output "$what: the op and the types" "op matmul-alltoall, A $at, B $bt"
    expect_output "$what: each output [R*M, N/R]" "bf16 [$((R * M)), $((N / R))] each"
    expect_ok "$what: verify" "$A2AMM" verify "$M" "$N" "$R" --dir "$d"
    expect_output "$what: verify ALL PASS" "[ALL PASS]"
    expect_output "$what: verify reports the rank's rows and columns" "shape=($((R * M)), $((N / R)))"
    save_outputs "$d" "$R" "$SCRATCH/base$R"
    for opts in "--path put --tile-m 16" "--unfused --tile-m 5" "--unfused --path put" "--path put --tile-m 1 --threads 2"; do
        "$A2AMM" run "$M" "$K" "$N" "$R" "${OP[@]}" --dir "$d" $opts >"$SCRATCH/out" 2>&1 || fail "$what: run $opts failed"
        check "$what: same bits with $opts" same_outputs "$d" "$R" "$SCRATCH/base$R"
    done
    i=$((i + 1))
done
# M = 1 with R = 8 and one row per tile
d="$SCRATCH/m1"; "$A2AMM" gen 1 64 24 8 "${OP[@]}" --dir "$d" >/dev/null
expect_ok "M=1 R=8: run" "$A2AMM" run 1 64 24 8 --dir "$d" --tile-m 1 --path put
expect_ok "M=1 R=8: verify" "$A2AMM" verify 1 24 8 --dir "$d"

# --- bit-identical across tile sizes, threads, paths and schedules (and run to run)
d="$SCRATCH/bits"; "$A2AMM" gen 150 192 69 3 "${OP[@]}" --dir "$d" >/dev/null
"$A2AMM" run 150 192 69 3 --dir "$d" >/dev/null
save_outputs "$d" 3 "$SCRATCH/bits"
for opts in "--tile-m 1" "--tile-m 7 --path put" "--tile-m 64 --path put" "--tile-m 1000" "--threads 2" \
            "--threads 3 --path put" "--unfused" "--unfused --path put --tile-m 9" "--tile-m 33 --threads 2 --path put"; do
    "$A2AMM" run 150 192 69 3 --dir "$d" $opts >"$SCRATCH/out" 2>&1 || fail "run $opts failed"
    check "same bits with $opts" same_outputs "$d" 3 "$SCRATCH/bits"
done
"$A2AMM" run 150 192 69 3 --dir "$d" >/dev/null
check "same bits run to run" same_outputs "$d" 3 "$SCRATCH/bits"
expect_ok "the bits verify" "$A2AMM" verify 150 69 3 --dir "$d"
# tall tiles split between threads by rows, short ones by columns: the same bits either way
tall="$SCRATCH/tall"; "$A2AMM" gen 800 128 70 2 "${OP[@]}" --dir "$tall" >/dev/null
"$A2AMM" run 800 128 70 2 --dir "$tall" --threads 1 >/dev/null
save_outputs "$tall" 2 "$SCRATCH/tall"
for opts in "--threads 2 --tile-m 800" "--threads 2 --tile-m 390 --path put"; do
    "$A2AMM" run 800 128 70 2 --dir "$tall" $opts >"$SCRATCH/out" 2>&1 || fail "tall run $opts failed"
    check "tall tiles: same bits with $opts as with one thread" same_outputs "$tall" 2 "$SCRATCH/tall"
done
# every kernel level this CPU runs verifies, with the same bits across the pipeline's settings
for isa in ref avx2 avx512 amx; do
    cpu_runs $isa || continue
    if ! A2AMM_ISA=$isa "$A2AMM" run 150 192 69 3 --dir "$d" >"$SCRATCH/out" 2>&1; then
        fail "A2AMM_ISA=$isa: run failed where the library says it runs"; continue
    fi
    expect_ok "A2AMM_ISA=$isa verifies" "$A2AMM" verify 150 69 3 --dir "$d"
    save_outputs "$d" 3 "$SCRATCH/isa"
    A2AMM_ISA=$isa "$A2AMM" run 150 192 69 3 --dir "$d" --tile-m 9 --threads 2 --path put --unfused >/dev/null 2>&1
    check "A2AMM_ISA=$isa: same bits across tile, threads, path and schedule" same_outputs "$d" 3 "$SCRATCH/isa"
done

# --- every distribution verifies against its golden (NaN and Inf where the inputs have them)
for dist in seed uniform extreme special; do
    dd="$SCRATCH/d-$dist"
    "$A2AMM" gen 33 64 18 3 "${OP[@]}" --dist $dist --scale-mode rceil --dir "$dd" >/dev/null
    expect_ok "--dist $dist: run" "$A2AMM" run 33 64 18 3 --dir "$dd" --tile-m 8 --path put
    expect_ok "--dist $dist: verify" "$A2AMM" verify 33 18 3 --dir "$dd"
done
check "the special inputs make NaN outputs" python3 -c "
import struct,sys
b=open('$SCRATCH/d-special/output/0/npu_out.bin','rb').read()
v=struct.unpack('<%dH'%(len(b)//2), b)
sys.exit(0 if any((x & 0x7f80)==0x7f80 and (x & 0x7f) for x in v) else 1)"
# verify compares: one changed element fails, named by its row and column in the rank's [R*M, N/R]
d="$SCRATCH/r3"
off=$(( (100 * 21 + 5) * 2 + 1 ))   # high byte of element (100, 5) of rank 1's [210, 21]
printf '\x55' | dd of="$d/output/1/npu_out.bin" bs=1 seek=$off conv=notrunc status=none
expect_fail "a changed output fails verify" "[FAIL] Rank 1" "$A2AMM" verify 70 63 3 --dir "$d"
expect_output "... at its row and column in [R*M, N/R]" "first at row 100, column 5"
expect_output "... the other ranks pass" "[PASS] Rank 2"

# --- the op's rules and the meta file's op
expect_fail "N not divisible by R" "N must be divisible by R for matmul-alltoall: column block r of each result goes to rank r (got N=10, R=3, N % R = 1)" \
    "$A2AMM" gen 8 64 10 3 "${OP[@]}" --dir "$SCRATCH/x"
expect_fail "K not whole MX blocks" "K must be a multiple of 32" "$A2AMM" gen 8 48 8 2 "${OP[@]}" --dir "$SCRATCH/x"
check "the refused gens wrote nothing" test ! -e "$SCRATCH/x"
expect_ok "K/R need not be whole blocks for the reverse op (K=64, R=4)" "$A2AMM" gen 8 64 8 4 "${OP[@]}" --dir "$SCRATCH/k64"
expect_ok "... and runs" "$A2AMM" run 8 64 8 4 --dir "$SCRATCH/k64"
expect_fail "an unknown op" "--op must be alltoall-matmul (the seed's op, the default), matmul-alltoall or moe, got 'reverse'" \
    "$A2AMM" gen 8 64 8 2 --op reverse --dir "$SCRATCH/x"
expect_fail "run: an unknown op" "--op must be alltoall-matmul" "$A2AMM" run 8 64 8 4 --op x --dir "$SCRATCH/k64"
d="$SCRATCH/r3"
expect_fail "run --op alltoall-matmul on the reverse op's data: refused naming both" \
    "--op alltoall-matmul contradicts $d/input/a2amm-meta.txt, which says the data was made for --op matmul-alltoall" \
    "$A2AMM" run 70 96 63 3 --op alltoall-matmul --dir "$d"
expect_fail "verify --op alltoall-matmul on the reverse op's data: refused" "--op alltoall-matmul contradicts" \
    "$A2AMM" verify 70 63 3 --op alltoall-matmul --dir "$d"
expect_fail "the seed's form --op alltoall-matmul on it: refused" "--op alltoall-matmul contradicts" \
    "$A2AMM" 70 96 63 3 --op alltoall-matmul --dir "$d"
f="$SCRATCH/fwd"
expect_fail "run --op matmul-alltoall on the seed's op's data: refused naming both" \
    "--op matmul-alltoall contradicts $f/input/a2amm-meta.txt, which says the data was made for --op alltoall-matmul" \
    "$A2AMM" run 5 96 21 3 "${OP[@]}" --dir "$f"
expect_fail "verify --op matmul-alltoall on it: refused" "--op matmul-alltoall contradicts" \
    "$A2AMM" verify 5 21 3 "${OP[@]}" --dir "$f"
expect_fail "a shape that contradicts the meta file is still refused" "says the data was made for M=70 K=96 N=63 R=3" \
    "$A2AMM" run 71 96 63 3 --dir "$d"
# run and verify without --op take the recorded op; so does the seed's form
expect_ok "the seed's form on the reverse op's data" "$A2AMM" 70 96 63 3 --dir "$d"
expect_output "... runs the recorded op" "op matmul-alltoall"
expect_ok "... and verifies" "$A2AMM" verify 70 63 3 --dir "$d"
# a meta file without an op line (as versions before the reverse op wrote) is the seed's op
sed -i '/^op /d' "$f/input/a2amm-meta.txt"
expect_ok "an older meta file (no op line): run" "$A2AMM" run 5 96 21 3 --dir "$f"
expect_output "... as alltoall-matmul" "op alltoall-matmul"
expect_ok "... verify" "$A2AMM" verify 5 21 3 --dir "$f"
expect_ok "... the seed's form" "$A2AMM" 5 96 21 3 --dir "$f"
expect_fail "... --op matmul-alltoall contradicts it" "which says the data was made for --op alltoall-matmul" \
    "$A2AMM" run 5 96 21 3 "${OP[@]}" --dir "$f"
# without a meta file (data from elsewhere in this layout): --op names it, and verify holds N/R
d="$SCRATCH/nometa"; "$A2AMM" gen 12 64 18 2 "${OP[@]}" --dir "$d" >/dev/null; rm "$d/input/a2amm-meta.txt"
expect_ok "no meta file: run --op matmul-alltoall with the types named" \
    "$A2AMM" run 12 64 18 2 "${OP[@]}" --a-type e4m3 --b-type e4m3 --dir "$d"
expect_ok "no meta file: verify --op matmul-alltoall" "$A2AMM" verify 12 18 2 "${OP[@]}" --dir "$d"
expect_fail "no meta file: verify --op matmul-alltoall with N not divisible by R names the rule" \
    "N must be divisible by R for matmul-alltoall" "$A2AMM" verify 12 17 2 "${OP[@]}" --dir "$d"
expect_fail "no meta file: without --op the files are the seed's op's (A_r's scales [R*M, 2])" \
    "input_scaleA.bin: expected 48 bytes, found 24 bytes" "$A2AMM" run 12 64 18 2 --a-type e4m3 --b-type e4m3 --dir "$d"

# --- perf mode: a row per variant, the reverse op's matmul alone and AllToAll alone, the baseline
d="$SCRATCH/bits"
expect_ok "perf mode" "$A2AMM" run 150 192 69 3 perf --iters 3 --dir "$d" --baseline --path put --tile-m 32
cp "$SCRATCH/out" "$SCRATCH/perf.txt"
check "perf: a row per variant, min <= median <= max" python3 - "$SCRATCH/perf.txt" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
assert "op matmul-alltoall" in text
for name in ("fused", "unfused", "matmul alone", "alltoall alone", "baseline"):
    m = re.search(r"^  %s +([0-9.]+) +([0-9.]+) +([0-9.]+) +(\S+) +([0-9.]+)x$" % name, text, re.M)
    assert m, "no row " + name
    lo, mid, hi = (float(m.group(i)) for i in (1, 2, 3))
    assert 0 < lo <= mid <= hi, (name, lo, mid, hi)
EOF
expect_output "perf: the matmul alone is X_r by B_r, all N columns" "matmul alone: a2amm_matmul of X_r [M, K] by B_r, all N columns"
expect_output "perf: the AllToAll alone moves the bf16 blocks (150 x 23 x 2 bytes a pair)" \
    "alltoall alone: a2amm_comm_alltoall of the result's column blocks (0.007 MB per pair)"
expect_output "perf: the baseline is the matmul, then the AllToAll of its blocks" \
    "OpenBLAS sgemm on fp32 (weights dequantized once), then a2amm_comm_alltoall of its column blocks"
expect_output "perf: exposed communication" "exposed communication"
expect_output "perf: waits by source" "waits by source (ms)"
expect_ok "perf --json" "$A2AMM" run 150 192 69 3 perf --iters 2 --dir "$d" --json --unfused
check "perf --json: the op, the schedule asked for (one key each) and every variant" python3 -c "
import json
def once(pairs):
    keys=[k for k,_ in pairs]; assert len(keys)==len(set(keys)), 'a key twice: %r' % keys; return dict(pairs)
o=json.loads(open('$SCRATCH/out').read(), object_pairs_hook=once)
assert o['op']=='matmul-alltoall' and o['schedule']=='unfused', o
for k in ('run','unfused','matmul','alltoall'): assert 0<o[k]['min_s']<=o[k]['median_s']<=o[k]['max_s'], k
assert len(o['ranks'])==3 and o['exposed_comm_s']==o['exposed_comm_s']"
expect_ok "precision --json names the op" "$A2AMM" run 150 192 69 3 --dir "$d" --json
check "precision --json: op matmul-alltoall" python3 -c "
import json; o=json.loads(open('$SCRATCH/out').read()); assert o['op']=='matmul-alltoall' and o['status']=='SUCCESS', o"

# --- a failing rank stops every rank, named, with nothing written
d="$SCRATCH/fail"; "$A2AMM" gen 128 128 64 4 "${OP[@]}" --dir "$d" >/dev/null
for fault in kill error; do
    A2AMM_FAULT_RANK=2 A2AMM_FAULT=$fault "$A2AMM" run 128 128 64 4 --dir "$d" --tile-m 16 --path put >"$SCRATCH/out" 2>&1
    check "$fault on rank 2: fails (exit $?)" test $? -ne 0
    expect_output "$fault on rank 2: named" "rank 2"
    check "$fault on rank 2: no output written" test ! -e "$d/output/0/npu_out.bin"
done

# --- help teaches --op, with examples that work as printed
for c in gen run verify; do
    expect_ok "$c --help" "$A2AMM" $c --help
    expect_output "$c --help names --op" "--op alltoall-matmul|matmul-alltoall"
    expect_output "$c --help has a reverse-op example" "matmul-alltoall --dir /tmp/a2amm-demo-reverse"
done
"$A2AMM" gen --help | sed -n 's/^  a2amm //p' | grep -- "--op matmul-alltoall" | sed "s|/tmp/a2amm-demo|$SCRATCH/demo|g" >"$SCRATCH/ex"
"$A2AMM" run --help | sed -n 's/^  a2amm //p' | grep -- "-reverse" | sed "s|/tmp/a2amm-demo|$SCRATCH/demo|g" >>"$SCRATCH/ex"
check "gen's and run's help: 5 reverse-op example lines" test "$(wc -l <"$SCRATCH/ex")" -eq 5
while read -r line; do
    expect_ok "help example: a2amm $line" "$A2AMM" $line
done <"$SCRATCH/ex"
expect_output "the help's verify example passes" "[ALL PASS]"
# (verify's lines are shell lines: a2amm ... && a2amm ...)
"$A2AMM" verify --help | grep -- "-reverse" | sed -e "s|/tmp/a2amm-demo|$SCRATCH/vdemo|g" -e "s|a2amm |'$A2AMM' |g" >"$SCRATCH/vex"
check "verify's help: 2 reverse-op example lines" test "$(wc -l <"$SCRATCH/vex")" -eq 2
while read -r line; do
    expect_ok "verify help example: $line" bash -c "$line"
done <"$SCRATCH/vex"
expect_output "verify's help example passes" "[ALL PASS]"
finish
