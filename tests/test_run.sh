#!/usr/bin/env bash
# a2amm run: the fused operator across R processes, end to end against the
# golden; bit-identical results across every pipeline setting; perf mode;
# and what happens when a rank dies, stalls or has a bad input.
. "$(dirname "$0")/lib.sh"

# the ranks share memfd mappings, never /dev/shm; any a2amm entry there is a leak
shm_ours() { ls /dev/shm | grep '^a2amm' | sort; }
shm_before=$(shm_ours)

# run_verify "what" dir M K N R [run options]: run then verify must pass.
run_verify() {
    local what=$1 d=$2 M=$3 K=$4 N=$5 R=$6; shift 6
    expect_ok "$what: run" "$A2AMM" run "$M" "$K" "$N" "$R" --dir "$d" "$@"
    expect_output "$what: SUCCESS" "Status: SUCCESS"
    expect_ok "$what: verify" "$A2AMM" verify "$M" "$N" "$R" --dir "$d"
}

# --- R = 1, 2, 3, 4, 8 with both element types on both sides, odd shapes
i=0
for spec in "1 37 64 5 e4m3 e5m2" "2 700 256 96 e5m2 e4m3" "3 70 96 33 e5m2 e5m2" "4 45 128 1 e4m3 e4m3" "8 19 256 24 e5m2 e4m3"; do
    set -- $spec
    R=$1 M=$2 K=$3 N=$4 at=$5 bt=$6
    d="$SCRATCH/r$R"
    "$A2AMM" gen "$M" "$K" "$N" "$R" --a-type $at --b-type $bt --seed $((40 + i)) --dir "$d" >/dev/null
    run_verify "R=$R M=$M K=$K N=$N $at x $bt (tile 16)" "$d" "$M" "$K" "$N" "$R" --tile-m 16
    run_verify "R=$R put path" "$d" "$M" "$K" "$N" "$R" --tile-m 16 --path put --depth 2
    i=$((i + 1))
done
# the seed's own command form, types read from what gen recorded
expect_ok "seed form: a2amm M K N R precision" "$A2AMM" 70 96 33 3 precision --dir "$SCRATCH/r3"
expect_output "seed form reads the recorded types" "A e5m2, B e5m2"
expect_ok "verify after seed form" "$A2AMM" verify 70 33 3 --dir "$SCRATCH/r3"
check "seed form with a meta file: no note on stderr" bash -c "! '$A2AMM' 70 96 33 3 --dir '$SCRATCH/r3' 2>&1 >/dev/null | grep -q note"
expect_fail "seed form with a meta file: a type that contradicts it is still refused" "--a-type e4m3 contradicts" \
    "$A2AMM" 70 96 33 3 --dir "$SCRATCH/r3" --a-type e4m3
expect_fail "seed form with a meta file: a shape that contradicts it is still refused" "says the data was made for" \
    "$A2AMM" 35 96 33 3 --dir "$SCRATCH/r3"
# data in the seed's layout from another generator (no meta file, as the seed's
# scripts write it): the seed's form runs it as E4M3 x E4M3, as the seed's
# launcher does, and says so on stderr; run itself still asks for the types
sd="$SCRATCH/seedgen"
"$A2AMM" gen 45 128 24 2 --a-type e4m3 --b-type e4m3 --dir "$sd" >/dev/null
rm "$sd/input/a2amm-meta.txt"
rc=0; "$A2AMM" 45 128 24 2 --dir "$sd" >"$SCRATCH/seed.out" 2>"$SCRATCH/seed.err" || rc=$?
check "seed form without a meta file: runs (exit $rc)" test "$rc" -eq 0
check "seed form without a meta file: E4M3 x E4M3, SUCCESS" \
    bash -c "grep -q 'A e4m3, B e4m3' '$SCRATCH/seed.out' && grep -q 'Status: SUCCESS' '$SCRATCH/seed.out'"
check "seed form without a meta file: stderr says it assumed the seed's types and how to name others" \
    grep -q "a2amm-meta.txt is missing.*assuming the seed's E4M3 for A and B.*name others with --a-type and --b-type" \
    "$SCRATCH/seed.err"
check "seed form without a meta file: stdout has no note" bash -c "! grep -q note '$SCRATCH/seed.out'"
expect_ok "seed form without a meta file: verify passes" "$A2AMM" verify 45 24 2 --dir "$sd"
"$A2AMM" 45 128 24 2 --dir "$sd" --a-type e5m2 >/dev/null 2>"$SCRATCH/seed.err"
check "seed form without a meta file, A named: the note names only B" grep -q "assuming the seed's E4M3 for B " "$SCRATCH/seed.err"
"$A2AMM" 45 128 24 2 --dir "$sd" --a-type e4m3 --b-type e4m3 >/dev/null 2>"$SCRATCH/seed.err"
check "seed form without a meta file, both named: no note" test ! -s "$SCRATCH/seed.err"
expect_fail "run without a meta file still asks for the types" "name both with --a-type and --b-type" \
    "$A2AMM" run 45 128 24 2 --dir "$sd"
expect_output "run's refusal points at the seed's form" "the seed's form, a2amm M K N R, takes the seed's E4M3"

# --- M smaller than one tile, N = 1, NaN scales, extreme scales
d="$SCRATCH/small"; "$A2AMM" gen 3 64 1 2 --dir "$d" >/dev/null
run_verify "M < tile, N = 1" "$d" 3 64 1 2
d="$SCRATCH/nan"; "$A2AMM" gen 40 128 20 2 --dist special --dir "$d" >/dev/null
run_verify "NaN scales and codes" "$d" 40 128 20 2 --tile-m 8
check "the special inputs do make NaN outputs" python3 -c "
import struct,sys
b=open('$d/output/0/npu_out.bin','rb').read()
v=struct.unpack('<%dH'%(len(b)//2), b)
sys.exit(0 if any((x & 0x7f80)==0x7f80 and (x & 0x7f) for x in v) else 1)"
d="$SCRATCH/extreme"; "$A2AMM" gen 40 128 20 2 --dist extreme --dir "$d" >/dev/null
run_verify "extreme scales" "$d" 40 128 20 2 --tile-m 8

# --- bit-identical across tile sizes, depths, threads, paths, fused/unfused
d="$SCRATCH/bits"; "$A2AMM" gen 150 192 70 3 --dir "$d" >/dev/null
"$A2AMM" run 150 192 70 3 --dir "$d" >/dev/null
for r in 0 1 2; do cp "$d/output/$r/npu_out.bin" "$SCRATCH/base.$r"; done
for opts in "--tile-m 1" "--tile-m 7 --path put --depth 1" "--tile-m 64 --path put --depth 3" "--tile-m 1000" \
            "--threads 2" "--threads 3 --path put" "--unfused" "--unfused --path put" "--tile-m 33 --threads 2 --path put --depth 5"; do
    "$A2AMM" run 150 192 70 3 --dir "$d" $opts >"$SCRATCH/out" 2>&1 || fail "run $opts failed"
    same=1
    for r in 0 1 2; do cmp -s "$d/output/$r/npu_out.bin" "$SCRATCH/base.$r" || same=0; done
    check "same bits with $opts" test $same -eq 1
done
"$A2AMM" run 150 192 70 3 --dir "$d" >/dev/null
same=1; for r in 0 1 2; do cmp -s "$d/output/$r/npu_out.bin" "$SCRATCH/base.$r" || same=0; done
check "same bits run to run" test $same -eq 1

# --- tall tiles split between threads by rows (>= 192 rows a thread), short
#     ones by columns: the same bits either way
tall="$SCRATCH/tall"; "$A2AMM" gen 800 128 70 2 --dir "$tall" >/dev/null
"$A2AMM" run 800 128 70 2 --dir "$tall" --threads 1 >/dev/null
for r in 0 1; do cp "$tall/output/$r/npu_out.bin" "$SCRATCH/tall.$r"; done
for opts in "--threads 2" "--threads 3 --tile-m 800" "--threads 2 --tile-m 390 --path put"; do
    "$A2AMM" run 800 128 70 2 --dir "$tall" $opts >"$SCRATCH/out" 2>&1 || fail "tall run $opts failed"
    same=1
    for r in 0 1; do cmp -s "$tall/output/$r/npu_out.bin" "$SCRATCH/tall.$r" || same=0; done
    check "tall tiles: same bits with $opts as with one thread" test $same -eq 1
done
expect_ok "tall tiles verify" "$A2AMM" verify 800 70 2 --dir "$tall"

# --- every kernel level this CPU runs: correct end to end, and for each
#     level the same bits whatever the pipeline settings
#     (a level the library says this CPU lacks is refused, saying why)
for isa in ref avx2 avx512 amx; do
    if ! cpu_runs $isa; then
        why=$("$A2AMM" cpu --runs $isa | sed "s/^$isa: //")
        expect_fail "A2AMM_ISA=$isa is refused here" "cannot run the $isa kernels ($why)" \
            env A2AMM_ISA=$isa "$A2AMM" run 150 192 70 3 --dir "$d"
        continue
    fi
    if ! A2AMM_ISA=$isa "$A2AMM" run 150 192 70 3 --dir "$d" >"$SCRATCH/out" 2>&1; then
        fail "A2AMM_ISA=$isa run failed where the library says it runs"; continue
    fi
    expect_output "A2AMM_ISA=$isa is the kernel used" "kernel $isa"
    expect_ok "A2AMM_ISA=$isa verifies" "$A2AMM" verify 150 70 3 --dir "$d"
    for r in 0 1 2; do cp "$d/output/$r/npu_out.bin" "$SCRATCH/isa.$r"; done
    A2AMM_ISA=$isa "$A2AMM" run 150 192 70 3 --dir "$d" --tile-m 9 --threads 2 --path put --depth 2 >/dev/null 2>&1
    same=1; for r in 0 1 2; do cmp -s "$d/output/$r/npu_out.bin" "$SCRATCH/isa.$r" || same=0; done
    check "A2AMM_ISA=$isa: same bits across tile, threads and path" test $same -eq 1
done
expect_fail "an unknown A2AMM_ISA is refused" "A2AMM_ISA=sse9" env A2AMM_ISA=sse9 "$A2AMM" run 150 192 70 3 --dir "$d"

# --- perf mode: the table and the JSON object
expect_ok "perf mode" "$A2AMM" run 150 192 70 3 perf --dir "$d" --iters 3
expect_output "perf reports exposed communication" "exposed communication"
check "perf: a row per variant, min <= median <= max, time = fused median" python3 - "$SCRATCH/out" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
assert "3 repetitions" in text, "not 3 repetitions"
assert re.search(r"^ +min ms +median ms +max ms", text, re.M), "no header"
med = {}
for name in ("fused", "unfused", "matmul alone"):
    m = re.search(r"^  %s +([0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9.]+)x$" % name, text, re.M)
    assert m, "no row " + name
    lo, mid, hi = (float(m.group(i)) for i in (1, 2, 3))
    assert 0 < lo <= mid <= hi, (name, lo, mid, hi)
    med[name] = mid
t = re.search(r"^  time ([0-9.]+) ms, ([0-9.]+) GFLOP/s \(median fused\)$", text, re.M)
assert t and abs(float(t.group(1)) - med["fused"]) <= 0.0015, "time line is not the fused median"
EOF
expect_output "perf reports the time with B prepared on every call" "with B prepared on every call"
expect_ok "perf --json" "$A2AMM" run 150 192 70 3 perf --dir "$d" --iters 2 --path put --json
check "perf --json is one JSON object with the figures" python3 -c "
import json,sys
o=json.loads(open('$SCRATCH/out').read())
assert o['iters']==2 and o['path']=='put'
for k in ('run','unfused','matmul'): assert o[k]['median_s']>0 and o[k]['min_s']<=o[k]['median_s']<=o[k]['max_s']
assert 'exposed_comm_s' in o and o['run_with_prepare_s'] >= o['run']['median_s']
for k in ('run','unfused','matmul','alltoall'): assert isinstance(o[k]['spread_wide'], bool), k
assert isinstance(o['busy'], bool) and isinstance(o['exposed_comm_measurable'], bool)"
# the spreads beside the medians, every variant's, and the fused run against the unfused one
expect_ok "perf: spreads" "$A2AMM" run 150 192 70 3 perf --dir "$d" --iters 3
check "perf: a spread for each variant" grep -Eq "^  spread, \(max - min\) / max: fused [0-9]+%( \(wide\))?, unfused [0-9]+%.*, matmul alone [0-9]+%.*, alltoall alone [0-9]+%" "$SCRATCH/out"
check "perf: fused against unfused, in words" grep -Eq "^  fused vs unfused: (no measurable difference|fused faster by [0-9.]+ ms|fused slower by [0-9.]+ ms)" "$SCRATCH/out"
# a variant that something else slowed (here the matmul alone, by 50 ms on rank 0, as a busy machine
# may): no negative time, the exposed communication none measurable, the ratio below 1 explained
A2AMM_FAULT_RANK=0 A2AMM_FAULT=slow-matmul "$A2AMM" run 150 192 70 3 perf --dir "$d" --iters 3 >"$SCRATCH/out" 2>&1
check "perf, matmul alone slowed: no negative time printed" bash -c "! grep -E -- '-[0-9.]+ ?(ms|s|%)' '$SCRATCH/out'"
check "perf, matmul alone slowed: exposed communication none measurable" grep -q "^  exposed communication, median fused - median matmul alone: none measurable" "$SCRATCH/out"
expect_output "perf, matmul alone slowed: the ratio below 1 said" "/ max(matmul alone, alltoall alone) = 0."
check "perf, matmul alone slowed: the ratio below 1 explained" grep -q "below 1.0" "$SCRATCH/out"
A2AMM_FAULT_RANK=0 A2AMM_FAULT=slow-matmul "$A2AMM" run 150 192 70 3 perf --dir "$d" --iters 3 --json >"$SCRATCH/out" 2>&1
check "perf --json, matmul alone slowed: exposed_comm_s kept, not measurable" python3 -c "
import json; o=json.loads(open('$SCRATCH/out').read())
assert o['exposed_comm_s'] < 0 and o['exposed_comm_measurable'] is False, o"

# --- bad arguments
expect_fail "bad mode" "after M K N R comes precision or perf" "$A2AMM" run 150 192 70 3 fast --dir "$d"
expect_fail "both modes" "precision and perf both given" "$A2AMM" run 150 192 70 3 perf precision --dir "$d"
for opt in "--iters 3" "--warmup=2" "--baseline"; do
    expect_fail "$opt in precision mode is refused, not ignored" "${opt%%[ =]*} is for perf mode" \
        "$A2AMM" run 150 192 70 3 $opt --dir "$d"
done
expect_fail "bad path" "--path must be direct or put" "$A2AMM" run 150 192 70 3 --path udma --dir "$d"
expect_fail "zero tile" "--tile-m must be a whole number from 1" "$A2AMM" run 150 192 70 3 --tile-m 0 --dir "$d"
expect_fail "seed example refused" "K / R must be a multiple of 32" "$A2AMM" 100 200 64 4
# --threads: 1 to 1024 in every command that takes it (0 is refused, naming the argument and the range)
for cmd in "run 150 192 70 3 --dir $d" "150 192 70 3 --dir $d" "bench op 64 256 32 2 --iters 1" \
           "bench api 64 256 32 2 --iters 1" "bench gemm 8 64 32 --iters 1" "bench grouped 2 3 64 32 --iters 1" \
           "bench moe 2 4 64 32 4 2 --iters 1" "run 12 96 64 3 --op moe --dir $SCRATCH/moe-none"; do
    expect_fail "a2amm $cmd --threads 0: refused" "--threads must be a whole number from 1 to 1024 in decimal digits, got '0'" \
        "$A2AMM" $cmd --threads 0
done

# --- an option given twice: the last one wins, --op included (moe too), each value checked
rv="$SCRATCH/op-twice"
"$A2AMM" gen 64 256 32 2 --op moe --op matmul-alltoall --dir "$rv" >/dev/null
check "gen --op moe --op matmul-alltoall: the reverse op's data" grep -q "^op matmul-alltoall" "$rv/input/a2amm-meta.txt"
expect_ok "run --op moe --op matmul-alltoall: the last --op" "$A2AMM" run 64 256 32 2 --op moe --op matmul-alltoall --dir "$rv"
expect_output "run --op moe --op matmul-alltoall: runs matmul-alltoall" "op matmul-alltoall"
expect_ok "verify --op moe --op matmul-alltoall" "$A2AMM" verify 64 32 2 --op moe --op matmul-alltoall --dir "$rv"
expect_ok "bench op --op moe --op matmul-alltoall" "$A2AMM" bench op 64 256 32 2 --iters 1 --op moe --op matmul-alltoall
expect_output "bench op: the last --op" "op matmul-alltoall"
expect_fail "bench op --op moe (last): pointed at bench moe" "a2amm bench moe --help" \
    "$A2AMM" bench op 64 256 32 2 --iters 1 --op matmul-alltoall --op moe
mv="$SCRATCH/op-twice-moe"
expect_ok "gen --op matmul-alltoall --op moe: MoE data" "$A2AMM" gen 12 96 64 2 --op matmul-alltoall --op moe --dir "$mv"
expect_ok "run --op alltoall-matmul --op moe: the MoE op" "$A2AMM" run 12 96 64 2 --op alltoall-matmul --op moe --dir "$mv"
for cmd in "gen 12 96 64 2" "run 12 96 64 2" "verify 12 96 64 2"; do
    expect_fail "$cmd --op bogus --op moe: the bad value named" "--op must be alltoall-matmul (the seed's op, the default), matmul-alltoall or moe, got 'bogus'" \
        "$A2AMM" $cmd --op bogus --op moe --dir "$mv"
done
for cmd in "gen 12 96 64 2" "run 12 96 64 2" "verify 12 64 2"; do
    expect_fail "$cmd --op moe --op bogus: the bad value named" "got 'bogus'" "$A2AMM" $cmd --op moe --op bogus --dir "$mv"
done

# --- a bad input on one rank only is reported before any rank starts
d="$SCRATCH/bad"; "$A2AMM" gen 64 256 32 4 --dir "$d" >/dev/null
truncate -s 100 "$d/input/2/input_a.bin"
expect_fail "short file on rank 2 of 4" "rank 2: $d/input/2/input_a.bin: expected 16384 bytes, found 100 bytes (file is short)" \
    "$A2AMM" run 64 256 32 4 --dir "$d"
check "no rank wrote output" test ! -e "$d/output/0/npu_out.bin"
rm "$d/input/3/input_scaleB.bin"
truncate -s 16384 "$d/input/2/input_a.bin"
expect_fail "missing file on rank 3" "rank 3: $d/input/3/input_scaleB.bin is missing" "$A2AMM" run 64 256 32 4 --dir "$d"

# --- a rank that dies: everyone stops, named, non-zero, nothing left behind
d="$SCRATCH/fail"; "$A2AMM" gen 256 256 64 4 --dir "$d" >/dev/null
# (bounds in seconds are generous for a loaded 2-core machine, and far below
# the --timeout 60 deadline: a run that ends within them was stopped by the
# failure reaching every rank, not by a wait running out)
for fault in kill exit error; do
    start=$SECONDS
    A2AMM_FAULT_RANK=2 A2AMM_FAULT=$fault "$A2AMM" run 256 256 64 4 --dir "$d" --tile-m 32 --path put --timeout 60 >"$SCRATCH/out" 2>&1
    rc=$?
    check "$fault: non-zero exit" test $rc -ne 0
    check "$fault: all stop well before the deadline" test $((SECONDS - start)) -le 20
    check "$fault: no wait ran out" bash -c "! grep -q 'timed out' '$SCRATCH/out'"
    expect_output "$fault: names rank 2" "rank 2"
    expect_output "$fault: FAILURE" "Status: FAILURE"
done
A2AMM_FAULT_RANK=2 A2AMM_FAULT=kill "$A2AMM" run 256 256 64 4 --dir "$d" --tile-m 32 >"$SCRATCH/out" 2>&1
expect_output "kill -9 is named as signal 9" "killed by signal 9"

# an outside kill -9 of one rank process in the middle of a long perf run
"$A2AMM" run 256 256 64 4 perf --iters 100000 --dir "$d" --tile-m 32 --timeout 60 >"$SCRATCH/long" 2>&1 &
launcher=$!
victim=""
for _ in $(seq 100); do
    kids=$(pgrep -P $launcher | sort -n)
    [ "$(echo "$kids" | grep -c .)" -eq 4 ] && { victim=$(echo "$kids" | sed -n 2p); break; }
    sleep 0.05
done
check "found the 4 rank processes" test -n "$victim"
sleep 0.5
start=$SECONDS
kill -9 $victim
wait $launcher; rc=$?
check "outside kill: launcher exits non-zero" test $rc -ne 0
check "outside kill: well before the deadline" test $((SECONDS - start)) -le 20
check "outside kill: no wait ran out" bash -c "! grep -q 'timed out' '$SCRATCH/long'"
check "outside kill: message names the rank and signal 9" grep -q "was killed by signal 9" "$SCRATCH/long"
check "outside kill: no rank process left" test -z "$(pgrep -P $launcher)"
for k in $kids; do check "rank pid $k is gone" bash -c "! kill -0 $k 2>/dev/null"; done

# the launcher itself killed (SIGTERM): its rank processes die with it
"$A2AMM" run 256 256 64 4 perf --iters 100000 --dir "$d" --tile-m 32 >/dev/null 2>&1 &
launcher=$!
kids=""
for _ in $(seq 100); do
    kids=$(pgrep -P $launcher)
    [ "$(echo "$kids" | grep -c .)" -eq 4 ] && break
    sleep 0.05
done
check "launcher started 4 ranks" test "$(echo "$kids" | grep -c .)" -eq 4
kill -TERM $launcher; wait $launcher 2>/dev/null
sleep 0.5
# gone, or a zombie waiting for init to reap it (its new parent): not running
for k in $kids; do
    check "rank pid $k died with its launcher" bash -c "st=\$(ps -o stat= -p $k 2>/dev/null); [ -z \"\$st\" ] || [ \"\${st#Z}\" != \"\$st\" ]"
done

# --- a stalled rank: the waits end at --timeout, naming who waited for what
start=$SECONDS
A2AMM_FAULT_RANK=1 A2AMM_FAULT=stall "$A2AMM" run 256 256 64 4 --dir "$d" --tile-m 32 --path put --timeout 1 >"$SCRATCH/out" 2>&1
rc=$?
check "stall: non-zero exit" test $rc -ne 0
check "stall: ends (not a hang)" test $((SECONDS - start)) -le 30
expect_output "stall: a timeout message naming tile, slot and signal" "timed out after 1 s waiting for"
check "stall: names the slot and the signal value" grep -Eq "slot [0-9]+.*signal >= [0-9]+, last seen [0-9]+" "$SCRATCH/out"

# --- run --help's examples work as printed (gen, run, verify in order; then the reverse op's)
"$A2AMM" run --help | sed -n 's/^  a2amm //p' | sed "s|/tmp/a2amm-demo|$SCRATCH/demo|g" > "$SCRATCH/examples"
check "run --help has seven example lines" test "$(wc -l < "$SCRATCH/examples")" -eq 7
while read -r line; do
    expect_ok "run help example: a2amm $line" "$A2AMM" $line
done < "$SCRATCH/examples"

check "no a2amm entry left in /dev/shm" test "$(shm_ours)" = "$shm_before"
finish
