#!/usr/bin/env bash
# The MoE op from the command line (--op moe): gen, run and verify in the
# seed's folder layout with the MoE op's files; every route, both element
# types, K from 1 to 8, E/R from 1 to 16, R from 1 to 8, ranks without
# tokens; verify's bound catches a wrong output; the same bits whatever the
# threads or the schedule, and with the shape from the arguments (no meta file); gen's bytes
# fixed by the seed and expert e's weights by e (not by R); the refusals (a
# contradiction, a missing or short file, bad routing in the files: no output
# changed); perf mode's figures. (Over MPI across hosts: test_mpi.sh.)
. "$(dirname "$0")/lib.sh"

# same_outputs DIR R SAVED: every rank's npu_out.bin is the same bytes as SAVED.<r>
same_outputs() {
    local d=$1 R=$2 saved=$3 r
    for r in $(seq 0 $((R - 1))); do cmp -s "$d/output/$r/npu_out.bin" "$saved.$r" || return 1; done
}
save_outputs() { local r; for r in $(seq 0 $(($2 - 1))); do cp "$1/output/$r/npu_out.bin" "$3.$r"; done; }

# --- the layout: each rank's files sized by its own tokens
d="$SCRATCH/layout"
expect_ok "gen --op moe" "$A2AMM" gen 6 64 96 2 --op moe --experts 4 --topk 2 --tokens 6,3 --dir "$d"
expect_output "gen names the op and the shape" "op moe, T=6 H=64 I=96 R=2, 4 experts (2 a rank), top-2"
check "the meta file records the op" grep -qx "op moe" "$d/input/a2amm-meta.txt"
check "the meta file records every rank's tokens" grep -qx "tokens 6,3" "$d/input/a2amm-meta.txt"
for r in 0 1; do
    Tr=$((r == 0 ? 6 : 3))
    check "rank $r: x [T_r, H]" test "$(stat -c %s "$d/input/$r/input_x.bin")" -eq $((Tr * 64))
    check "rank $r: x's scales [T_r, 2*ceil(H/64)]" test "$(stat -c %s "$d/input/$r/input_scaleX.bin")" -eq $((Tr * 2))
    check "rank $r: topk_idx [T_r, K] int32" test "$(stat -c %s "$d/input/$r/input_topk_idx.bin")" -eq $((Tr * 2 * 4))
    check "rank $r: topk_w [T_r, K] fp32" test "$(stat -c %s "$d/input/$r/input_topk_w.bin")" -eq $((Tr * 2 * 4))
    check "rank $r: w13 [E/R, 2I, H]" test "$(stat -c %s "$d/input/$r/input_w13.bin")" -eq $((2 * 192 * 64))
    check "rank $r: its scales [E/R, 2I, 2*ceil(H/64)]" test "$(stat -c %s "$d/input/$r/input_scaleW13.bin")" -eq $((2 * 192 * 2))
    check "rank $r: w2 [E/R, H, I]" test "$(stat -c %s "$d/input/$r/input_w2.bin")" -eq $((2 * 64 * 96))
    check "rank $r: its scales [E/R, H, 2*ceil(I/64)]" test "$(stat -c %s "$d/input/$r/input_scaleW2.bin")" -eq $((2 * 64 * 4))
    check "rank $r: the golden [T_r, H] bf16" test "$(stat -c %s "$d/output/$r/cpu_output.bin")" -eq $((Tr * 64 * 2))
done
# the routing as the contract says: ids in [-1, E), none twice in a token, weights of a token summing to 1
check "the routing: ids in range, distinct, weights summing to 1" /usr/bin/python3 - "$d" <<'EOF'
import struct, sys
d = sys.argv[1]
for r, T in ((0, 6), (1, 3)):
    ids = struct.unpack("<%di" % (T * 2), open(f"{d}/input/{r}/input_topk_idx.bin", "rb").read())
    ws = struct.unpack("<%df" % (T * 2), open(f"{d}/input/{r}/input_topk_w.bin", "rb").read())
    for t in range(T):
        i, w = ids[2 * t:2 * t + 2], ws[2 * t:2 * t + 2]
        assert all(-1 <= e < 4 for e in i) and len(set(i)) == 2, (r, t, i)
        assert abs(sum(w) - 1) < 1e-6 and all(x > 0 for x in w), (r, t, w)
EOF

# --- every route and type pair, K = 1..8, E/R = 1..16, R = 1..4: run, then verify within the bound
i=0
for spec in "1 uniform 1 1 e4m3 e4m3" "2 skewed 3 4 e5m2 e4m3" "3 hot 8 16 e4m3 e5m2" "4 empty 5 2 e5m2 e5m2" \
            "2 empty 2 1 e4m3 e4m3" "3 uniform 6 3 e4m3 e4m3" "4 skewed 4 8 e4m3 e4m3" "2 hot 7 5 e5m2 e5m2" \
            "8 skewed 8 2 e4m3 e5m2" "6 empty 3 1 e5m2 e4m3"; do
    set -- $spec
    R=$1 route=$2 K=$3 L=$4 at=$5 bt=$6
    E=$((R * L)); [ "$K" -le "$E" ] || K=$E
    d="$SCRATCH/c$i"
    what="R=$R route $route K=$K E/R=$L $at x $bt"
    expect_ok "$what: gen" "$A2AMM" gen 12 96 64 "$R" --op moe --experts $E --topk $K --route $route --a-type $at \
        --b-type $bt --seed $((40 + i)) --dir "$d" --quiet
    expect_ok "$what: run" "$A2AMM" run 12 96 64 "$R" --op moe --dir "$d"
    expect_output "$what: run succeeds" "Status: SUCCESS"
    expect_ok "$what: verify" "$A2AMM" verify 12 96 64 "$R" --op moe --dir "$d"
    expect_output "$what: every rank within the bound" "[ALL PASS] All $R ranks passed verification!"
    i=$((i + 1))
done
# (the last verify's output:) what its figures are: the worst error as a fraction of the value's own bound,
# and the gap to gen's golden in bf16 ulps with why it may be large beside PASS
expect_output "verify: the worst error is a fraction of the bound, 1 or less passing" \
    "the contract's bound for that value, so 1 or less passes)"
expect_output "verify: the golden's figures are for information" "(gen's golden: ref rounded to bf16; for information, not the check)"
expect_output "verify: the gap in ulps is named, and why it can be large" \
    "An ulp is a step of the value's own size: where a value is small because its terms cancel"
expect_output "verify: ... and that gap measured against the value's bound" "of its bound). An ulp is"
check "verify: no bare 'worst N bf16 ulp' beside PASS" bash -c "! grep -Eq 'worst [0-9]+ bf16 ulp' '$SCRATCH/out'"
check "the empty route: the odd ranks have no tokens" grep -qx "tokens 12,0,12,0" "$SCRATCH/c3/input/a2amm-meta.txt"
check "... and their outputs are empty files" test -f "$SCRATCH/c3/output/1/npu_out.bin" -a ! -s "$SCRATCH/c3/output/1/npu_out.bin"
check "the empty route: some slots unused (-1)" /usr/bin/python3 -c "
import struct; b = open('$SCRATCH/c3/input/0/input_topk_idx.bin', 'rb').read()
assert -1 in struct.unpack('<%di' % (len(b) // 4), b)"
check "the hot route: every token's first slot on expert 0" /usr/bin/python3 -c "
import struct; b = open('$SCRATCH/c2/input/1/input_topk_idx.bin', 'rb').read()
ids = struct.unpack('<%di' % (len(b) // 4), b); assert ids and all(ids[k] == 0 for k in range(0, len(ids), 8))"

# --- verify's bound catches a wrong output: the largest value made 1/4 larger, one sign flipped
d="$SCRATCH/c1"
save_outputs "$d" 2 "$SCRATCH/c1.want"
/usr/bin/python3 - "$d/output/1/npu_out.bin" >"$SCRATCH/where" <<'EOF'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read())
vals = [int.from_bytes(b[2 * i:2 * i + 2], "little") for i in range(len(b) // 2)]
i = max(range(len(vals)), key=lambda k: vals[k] & 0x7fff)
b[2 * i:2 * i + 2] = (vals[i] + 32).to_bytes(2, "little")  # 32 of its binade's 128 steps: 1/4 larger
open(p, "wb").write(b)
print(f"token {i // 96}, column {i % 96}")
EOF
expect_fail "verify: the largest value 1/4 larger is out of the bound" \
    "[FAIL] Rank 1: 1 values out of the contract's bound; first at $(cat "$SCRATCH/where")" \
    "$A2AMM" verify 12 96 64 2 --op moe --dir "$d"
expect_output "verify: the other rank passes" "[PASS] Rank 0"
cp "$SCRATCH/c1.want.1" "$d/output/1/npu_out.bin"
/usr/bin/python3 -c "
p = '$d/output/0/npu_out.bin'; b = bytearray(open(p, 'rb').read()); b[2 * 7 + 1] ^= 0x80; open(p, 'wb').write(b)"
expect_fail "verify: a flipped sign is out of the bound" "[FAIL] Rank 0" "$A2AMM" verify 12 96 64 2 --op moe --dir "$d"
cp "$SCRATCH/c1.want.0" "$d/output/0/npu_out.bin"
/usr/bin/python3 -c "
p = '$d/output/0/npu_out.bin'; b = bytearray(open(p, 'rb').read()); b[2 * 5:2 * 6] = (0x7fc0).to_bytes(2, 'little'); open(p, 'wb').write(b)"
expect_fail "verify: a NaN where the value is finite is out of the bound" "[FAIL] Rank 0: 1 values out of the contract's bound" \
    "$A2AMM" verify 12 96 64 2 --op moe --dir "$d"
expect_output "... and it is the worst value, not a later one (a NaN ratio compared false)" \
    "worst |out - ref| / bound: inf at token 0, column 5"
expect_fail "verify: a missing output is named" "npu_out.bin is missing" bash -c "rm '$d/output/0/npu_out.bin' && '$A2AMM' verify 12 96 64 2 --op moe --dir '$d'"
expect_output "... and counted as not compared, not as out of the bound" "[ERROR] 1 of 2 ranks could not be compared"

# --- the bound's absolute part (docs/op-contract.md, A): with W2's scales 2^-105 lower the values are near
# 5e-32; the op's values pass, and zeros written over them are out of the bound (a fixed 1e-30 once passed them)
d="$SCRATCH/tiny"
"$A2AMM" gen 8 64 64 2 --op moe --topk 3 --dir "$d" --quiet >/dev/null
/usr/bin/python3 - "$d" <<'EOF'
import sys, numpy as np
for r in (0, 1):
    p = f"{sys.argv[1]}/input/{r}/input_scaleW2.bin"
    s = np.fromfile(p, np.uint8); assert s.min() >= 105, s.min(); (s - 105).astype(np.uint8).tofile(p)
EOF
expect_ok "W2's scales 2^-105 lower: run" "$A2AMM" run 8 64 64 2 --op moe --dir "$d"
expect_ok "... verify: the op's values are within the bound" "$A2AMM" verify 8 64 64 2 --op moe --dir "$d"
check "... and they are tiny: nonzero, all below 1e-30" /usr/bin/python3 -c "
import numpy as np
v = np.concatenate([(np.fromfile('$d/output/%d/npu_out.bin' % r, np.uint16).astype(np.uint32) << 16).view(np.float32)
                    for r in (0, 1)])
assert np.count_nonzero(v) > len(v) // 2 and np.abs(v).max() < 1e-30, (np.count_nonzero(v), np.abs(v).max())"
for r in 0 1; do head -c $((8 * 64 * 2)) /dev/zero >"$d/output/$r/npu_out.bin"; done
expect_fail "... zeros over them are out of the bound" "[ERROR] 2 of 2 ranks are out of the contract's bound" \
    "$A2AMM" verify 8 64 64 2 --op moe --dir "$d"
expect_output "... the first value named, its bound far below it" "first at token 0, column 0: output 0 (0x0000)"

# --- the overflow rule: a weight of 3e38 (finite) makes some of its token's fp32 partials overflow; those
# outputs are the Inf of the value's sign, which verify accepts; the other sign, a finite value there, or an
# Inf where nothing can overflow are out of the contract
d="$SCRATCH/huge"
"$A2AMM" gen 4 64 64 1 --op moe --experts 2 --topk 1 --dir "$d" --quiet >/dev/null
/usr/bin/python3 -c "
import numpy as np
p = '$d/input/0/input_topk_w.bin'; w = np.fromfile(p, np.float32); w[0] = 3e38; w.tofile(p)"
expect_ok "a weight of 3e38: run" "$A2AMM" run 4 64 64 1 --op moe --dir "$d"
check "... some of its token's outputs are Inf, the other tokens' finite" /usr/bin/python3 - "$d" "$SCRATCH/inf_at" <<'EOF'
import sys, numpy as np
o = np.fromfile(f"{sys.argv[1]}/output/0/npu_out.bin", np.uint16)
v = (o.astype(np.uint32) << 16).view(np.float32).reshape(4, 64)
inf = np.flatnonzero(np.isinf(v[0]))
assert 0 < len(inf) < 64 and np.isfinite(v[1:]).all(), v
pos = int(np.flatnonzero(v[1] > 0)[0])
open(sys.argv[2], "w").write(f"{inf[0]} {pos}\n")  # an Inf of token 0, a positive value of token 1
EOF
read -r inf_col pos_col <"$SCRATCH/inf_at"
expect_ok "... verify accepts the Inf of the value's sign" "$A2AMM" verify 4 64 64 1 --op moe --dir "$d"
expect_output "... and says so" "values are Inf of the value's sign where the op's fp32 or bf16 steps may overflow"
cp "$d/output/0/npu_out.bin" "$SCRATCH/huge.want"
# put16 INDEX BITS: one bf16 value of rank 0's output replaced
put16() { /usr/bin/python3 -c "
p = '$d/output/0/npu_out.bin'; b = bytearray(open(p, 'rb').read()); b[2 * $1:2 * $1 + 2] = ($2).to_bytes(2, 'little')
open(p, 'wb').write(b)"; }
flip=$(/usr/bin/python3 -c "
b = open('$SCRATCH/huge.want', 'rb').read(); print(int.from_bytes(b[2 * $inf_col:2 * $inf_col + 2], 'little') ^ 0x8000)")
put16 "$inf_col" "$flip"
expect_fail "... an Inf of the other sign is out of the contract" "first at token 0, column $inf_col" \
    "$A2AMM" verify 4 64 64 1 --op moe --dir "$d"
expect_output "... and verify says what Inf it accepts" "an Inf is accepted only with the value's sign"
cp "$SCRATCH/huge.want" "$d/output/0/npu_out.bin"
put16 "$inf_col" "$(( (flip ^ 0x8000) - 1 ))"   # the largest finite bf16 of that sign
expect_fail "... the largest finite value there instead is out of the bound" "first at token 0, column $inf_col" \
    "$A2AMM" verify 4 64 64 1 --op moe --dir "$d"
cp "$SCRATCH/huge.want" "$d/output/0/npu_out.bin"
put16 $((64 + pos_col)) 0x7f80
expect_fail "... an Inf where nothing overflows (a token of weight below 1) is out of the contract" \
    "first at token 1, column $pos_col" "$A2AMM" verify 4 64 64 1 --op moe --dir "$d"
cp "$SCRATCH/huge.want" "$d/output/0/npu_out.bin"

# --- the same bits whatever the threads; run and verify find the op in the meta file
d="$SCRATCH/c5"
save_outputs "$d" 3 "$SCRATCH/c5.want"
expect_ok "3 threads a rank" "$A2AMM" run 12 96 64 3 --op moe --dir "$d" --threads 3
check "3 threads a rank: the same bits" same_outputs "$d" 3 "$SCRATCH/c5.want"
expect_ok "run without --op: the meta file says moe" "$A2AMM" run 12 96 64 3 --dir "$d" --threads 1
check "... the same bits" same_outputs "$d" 3 "$SCRATCH/c5.want"
expect_ok "verify without --op" "$A2AMM" verify 12 96 64 3 --dir "$d"
expect_ok "the seed's form finds the MoE data too" "$A2AMM" 12 96 64 3 --dir "$d"
check "... the same bits" same_outputs "$d" 3 "$SCRATCH/c5.want"

# --- the fused schedule (the default: by size), the unfused one and overlap (2 chunks where T > 64): the
# same bits
d="$SCRATCH/sched"
"$A2AMM" gen 150 64 32 3 --op moe --experts 6 --topk 3 --tokens 150,70,9 --route skewed --dir "$d" --quiet >/dev/null
expect_ok "T=150: the fused schedule" "$A2AMM" run 150 64 32 3 --op moe --dir "$d"
expect_output "run says the schedule" "fused schedule"
save_outputs "$d" 3 "$SCRATCH/sched.want"
expect_ok "T=150: verify" "$A2AMM" verify 150 64 32 3 --dir "$d"
expect_ok "T=150: --unfused" "$A2AMM" run 150 64 32 3 --op moe --unfused --dir "$d"
expect_output "run says the schedule" "unfused schedule"
check "--unfused: the fused schedule's bits" same_outputs "$d" 3 "$SCRATCH/sched.want"
expect_ok "T=150: --overlap" "$A2AMM" run 150 64 32 3 --op moe --overlap --dir "$d"
expect_output "run says the schedule" "overlap schedule"
check "--overlap: the fused schedule's bits" same_outputs "$d" 3 "$SCRATCH/sched.want"
expect_fail "--unfused and --overlap together are refused" "one schedule, not both" \
    "$A2AMM" run 150 64 32 3 --op moe --overlap --unfused --dir "$d"
expect_ok "perf times both schedules" "$A2AMM" run 150 64 32 3 --op moe perf --iters 2 --dir "$d"
expect_output "perf: the other schedule's row" "the call, unfused schedule"
expect_ok "perf --unfused times the fused one beside" "$A2AMM" run 150 64 32 3 --op moe perf --iters 2 --unfused --dir "$d"
expect_output "perf --unfused: the other schedule's row" "the call, fused schedule"

# --- --trace: every rank's dispatch and combine by chunk (overlap: two; fused at 112 rows an expert a chunk:
# one pass), the experts, each expert on its thread
expect_ok "--trace, fused (by size: one pass)" "$A2AMM" run 150 64 32 3 --op moe --dir "$d" --trace "$SCRATCH/moe1.json"
check "--trace, fused at 112 rows an expert a chunk: one chunk, named fused" /usr/bin/python3 -c "
import json; j = json.load(open('$SCRATCH/moe1.json'))
assert j['otherData']['schedule'] == 'fused', j['otherData']
names = [e['name'] for e in j['traceEvents'] if e.get('ph') == 'X']
assert sum(n.startswith('dispatch chunk 0') for n in names) == 3, names
assert not any(n.startswith('dispatch chunk 1') for n in names), names"
expect_ok "--trace" "$A2AMM" run 150 64 32 3 --op moe --overlap --dir "$d" --trace "$SCRATCH/moe.json"
check "--trace: the op's spans, each chunk's dispatch and combine, every rank" /usr/bin/python3 -c "
import json; j = json.load(open('$SCRATCH/moe.json'))
assert j['otherData']['op'] == 'moe' and j['otherData']['R'] == 3, j['otherData']
assert j['otherData']['schedule'] == 'overlap', j['otherData']
names = [e['name'] for e in j['traceEvents'] if e.get('ph') == 'X']
for want in ('dispatch chunk 0', 'dispatch chunk 1', 'combine chunk 0', 'combine chunk 1', 'experts chunk 0 (',
             'experts chunk 1 ('):
    assert sum(n.startswith(want) for n in names) == 3, (want, names)
assert any(n.startswith('expert ') for n in names), names"
check "--trace, overlap: the spans of each track nest or follow one another (the exchanges on a track of their own)" \
    /usr/bin/python3 -c "
import json; j = json.load(open('$SCRATCH/moe.json'))
tracks = {}
for e in j['traceEvents']:
    if e.get('ph') == 'X': tracks.setdefault((e['pid'], e['tid']), []).append((e['ts'], e['ts'] + e['dur'], e['name']))
for key, spans in tracks.items():
    spans.sort(key=lambda s: (s[0], -s[1]))
    open_ends = []
    for a, b, name in spans:
        while open_ends and open_ends[-1][0] <= a + 1e-3: open_ends.pop()
        assert not open_ends or b <= open_ends[-1][0] + 1e-3, (key, name, a, b, open_ends[-1])
        open_ends.append((b, name))
# (whether the overlap crosses depends on timing: that the exchanges have a track apart does not)
x = {(e['pid'], e['tid']) for e in j['traceEvents'] if e.get('ph') == 'X' and e['name'].startswith(('dispatch chunk', 'combine chunk'))}
ex = {(e['pid'], e['tid']) for e in j['traceEvents'] if e.get('ph') == 'X' and e['name'].startswith('experts chunk')}
assert x and ex and not x & ex, (x, ex)"
check "--trace: each expert's span named by its number among all E (rank r's are r*E/R and on)" /usr/bin/python3 -c "
import json, re; j = json.load(open('$SCRATCH/moe.json'))
meta = dict(l.split() for l in open('$d/input/a2amm-meta.txt').read().splitlines()[1:])
local = int(meta['experts']) // int(meta['R'])
seen = [(e['pid'], int(re.match(r'expert (\d+) ', e['name']).group(1))) for e in j['traceEvents']
        if e.get('ph') == 'X' and e['name'].startswith('expert ')]
assert seen and all(r * local <= x < (r + 1) * local for r, x in seen), seen"
expect_ok "--trace: the timeline draws it" "$A2AMM" timeline "$SCRATCH/moe.json" -o "$SCRATCH/moe.svg"
check "--trace: the picture names the MoE op and its spans in its title and legend" \
    bash -c "grep -q 'a2amm: MoE op T=150 H=64 I=32' '$SCRATCH/moe.svg' && grep -q 'dispatch / combine' '$SCRATCH/moe.svg' \
             && grep -q '>expert (its number among all E' '$SCRATCH/moe.svg' && ! grep -q 'AllToAll (unfused)' '$SCRATCH/moe.svg'"
check "--trace: the same bits as without" same_outputs "$d" 3 "$SCRATCH/sched.want"

# --- the timeline of a MoE trace (R=2, 4 experts a rank, 2 compute threads a rank): each expert that ran
# in each chunk a bar of its own, titled and (where it fits) labelled with its number among all E, in its
# thread's lane; the legend lists the kinds drawn and no other (tests/timeline_svg.py checks the picture
# against the trace)
tl="$SCRATCH/tl"
"$A2AMM" gen 300 64 32 2 --op moe --experts 8 --topk 2 --dir "$tl" --quiet >/dev/null
expect_ok "timeline: a traced run, R=2, 2 threads" \
    "$A2AMM" run 300 64 32 2 --op moe --overlap --threads 2 --dir "$tl" --trace "$SCRATCH/tl.json"
expect_ok "timeline: drawn" "$A2AMM" timeline "$SCRATCH/tl.json" -o "$SCRATCH/tl.svg"
check "timeline: every expert that ran has its bar (or its place in a merged one), named by its number; the legend" \
    /usr/bin/python3 "$(dirname "$0")/timeline_svg.py" "$SCRATCH/tl.json" "$SCRATCH/tl.svg"
expect_ok "timeline: drawn wide (each span over a pixel)" \
    "$A2AMM" timeline "$SCRATCH/tl.json" -o "$SCRATCH/tl-wide.svg" --width 100000
check "timeline, wide: one bar per expert and chunk, each labelled with its number, a lane per thread" \
    /usr/bin/python3 "$(dirname "$0")/timeline_svg.py" "$SCRATCH/tl.json" "$SCRATCH/tl-wide.svg" --every-expert-alone
check "timeline: the legend has no kind of the matmul ops (tiles, waits, sends, perf variants)" \
    bash -c "! grep -Eq '>(tile \(numbered\)|wait for rows|send|signal|perf variant|AllToAll \(unfused\))<' '$SCRATCH/tl.svg'"
expect_ok "timeline: rendered" rsvg-convert "$SCRATCH/tl.svg" -o "$SCRATCH/tl.png"
# a trace is anyone's file: experts, threads and chunks that are no numbers, or far out, still draw a
# well-formed picture
/usr/bin/python3 - "$SCRATCH/tl.json" "$SCRATCH/tl-odd.json" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
for i, e in enumerate(e for e in t["traceEvents"] if e.get("cat") == "work"):
    e["tid"] = [1e300, -5, 3.5, "x", None, 2 ** 63][i % 6]
    e["args"]["expert"] = [-1, 1e20, "z", 7.5, 3, None][i % 6]
    if i % 4 == 0:
        e["name"] = "expert"
    if i % 5 == 1:
        e["name"] = "expert 99999999999999999999999"
for i, e in enumerate(e for e in t["traceEvents"] if e.get("cat") == "exchange"):
    e["args"]["tile"], e["args"]["slot"] = [(1e300, -1e300), (2 ** 70, "q"), (0.5, None)][i % 3]
json.dump(t, open(sys.argv[2], "w"))
EOF
expect_ok "timeline: odd experts and threads drawn" "$A2AMM" timeline "$SCRATCH/tl-odd.json" -o "$SCRATCH/tl-odd.svg"
check "... as well-formed SVG, an expert without a number titled so" /usr/bin/python3 -c "
import sys, xml.etree.ElementTree as ET
titles = [t.text for t in ET.parse(sys.argv[1]).getroot().iter('{http://www.w3.org/2000/svg}title')]
assert any('its number is not in the trace' in t for t in titles), titles" "$SCRATCH/tl-odd.svg"
expect_fail "--trace onto a data file is refused" "one of the data's files" \
    "$A2AMM" run 150 64 32 3 --op moe --dir "$d" --trace "$d/input/1/input_topk_w.bin"
expect_fail "--trace '' is refused before the run" "--trace: an empty file name" \
    "$A2AMM" run 150 64 32 3 --op moe --dir "$d" --trace ""
check "... and the outputs are as they were" same_outputs "$d" 3 "$SCRATCH/sched.want"

# --- without a meta file the arguments give the shape, and the bits are the same
d="$SCRATCH/c5"
mv "$d/input/a2amm-meta.txt" "$SCRATCH/c5.meta"
expect_ok "no meta file: the shape from the arguments" "$A2AMM" run 12 96 64 3 --op moe --experts 9 --topk 6 --dir "$d"
expect_output "... said on stderr" "the shape comes from the arguments"
check "... the same bits" same_outputs "$d" 3 "$SCRATCH/c5.want"
expect_fail "no meta file, another E: the file sizes tell" "expected" "$A2AMM" run 12 96 64 3 --op moe --experts 6 --topk 6 --dir "$d"
mv "$SCRATCH/c5.meta" "$d/input/a2amm-meta.txt"

# --- refusals: contradictions, bad files, bad routing (no output changed)
d="$SCRATCH/c0"
save_outputs "$d" 1 "$SCRATCH/c0.want"
expect_fail "a contradicting --experts" "--experts contradicts" "$A2AMM" run 12 96 64 1 --op moe --experts 2 --dir "$d"
expect_fail "a contradicting T" "T contradicts" "$A2AMM" run 13 96 64 1 --op moe --dir "$d"
expect_fail "a contradicting --tokens" "--tokens contradicts" "$A2AMM" verify 12 96 64 1 --op moe --tokens 5 --dir "$d"
expect_fail "another op on MoE data" "the data is for --op moe" "$A2AMM" run 12 96 64 1 --op alltoall-matmul --dir "$d"
"$A2AMM" gen 64 64 32 2 --dir "$SCRATCH/mm" --quiet >/dev/null
expect_fail "--op moe on a matmul op's data: run names the op it is for" "the data is for a matmul op, not --op moe" \
    "$A2AMM" run 64 64 32 2 --op moe --dir "$SCRATCH/mm"
expect_fail "... verify too" "the data is for a matmul op, not --op moe" "$A2AMM" verify 64 64 32 2 --op moe --dir "$SCRATCH/mm"
expect_fail "H not a multiple of 32" "H and I must be positive multiples of 32" "$A2AMM" gen 4 100 64 2 --op moe --dir "$SCRATCH/bad"
expect_fail "E not a multiple of R" "--experts must be a positive multiple of R" "$A2AMM" gen 4 64 64 3 --op moe --experts 4 --dir "$SCRATCH/bad"
expect_fail "K over E" "--topk must be 1 to min(E, 32)" "$A2AMM" gen 4 64 64 1 --op moe --experts 2 --topk 3 --dir "$SCRATCH/bad"
expect_fail "--tokens over T" "--tokens must be R = 2 counts from 0 to T = 4" "$A2AMM" gen 4 64 64 2 --op moe --tokens 4,5 --dir "$SCRATCH/bad"
expect_fail "a bad route" "--route must be uniform, skewed, hot or empty" "$A2AMM" gen 4 64 64 2 --op moe --route zipf --dir "$SCRATCH/bad"
cp "$d/input/0/input_topk_w.bin" "$SCRATCH/w.bin"
head -c 20 "$SCRATCH/w.bin" >"$d/input/0/input_topk_w.bin"
expect_fail "a short file: run names the rank, the file and the sizes" "rank 0: $d/input/0/input_topk_w.bin (its top-k weights, T_r = 12 tokens): expected 48 bytes, found 20 bytes (file is short)" \
    "$A2AMM" run 12 96 64 1 --op moe --dir "$d"
cp "$SCRATCH/w.bin" "$d/input/0/input_topk_w.bin"
cp "$d/input/0/input_topk_idx.bin" "$SCRATCH/idx.bin"
/usr/bin/python3 -c "
p = '$d/input/0/input_topk_idx.bin'; b = bytearray(open(p, 'rb').read()); b[4 * 2:4 * 3] = (7).to_bytes(4, 'little', signed=True); open(p, 'wb').write(b)"
expect_fail "an expert id out of range: refused naming token and slot" "token 2, slot 0" "$A2AMM" run 12 96 64 1 --op moe --dir "$d"
check "... and the outputs are as they were" same_outputs "$d" 1 "$SCRATCH/c0.want"
check "... and nothing temporary left" test -z "$(find "$d" -name '*.tmp.*')"
expect_fail "verify: an id out of range is refused as run refuses it" "token 2, slot 0: expert 7 is out of range" \
    "$A2AMM" verify 12 96 64 1 --op moe --dir "$d"
cp "$SCRATCH/idx.bin" "$d/input/0/input_topk_idx.bin"
# (verify sized its reference by an expert at most once a token: twice, it wrote past its buffers)
c5="$SCRATCH/c5/input/1/input_topk_idx.bin"
cp "$c5" "$SCRATCH/idx5.bin"
/usr/bin/python3 -c "
p = '$c5'; b = bytearray(open(p, 'rb').read()); b[4:8] = b[0:4]; open(p, 'wb').write(b)"
expect_fail "verify: an expert twice in a token is refused, naming the file" \
    "rank 1: token 0, slot 1: expert $(od -An -tu4 -N4 "$c5" | tr -d ' ') is already in slot 0: an expert at most once a token (in input/1/input_topk_idx.bin" \
    "$A2AMM" verify 12 96 64 3 --op moe --dir "$SCRATCH/c5"
expect_fail "run: the same routing is refused" "is already in slot 0" "$A2AMM" run 12 96 64 3 --op moe --dir "$SCRATCH/c5"
expect_output "... the rank that failed, and why" "[Rank 1] FAILED (invalid argument) while: "
expect_output "... every other rank stopped for it" "[Rank 0] stopped: another rank failed (it was: "
expect_output "... every other rank stopped for it" "[Rank 2] stopped: another rank failed (it was: "
check "... the message said once, with one 'rank 1: '" \
    test "$(grep -c 'already in slot 0' "$SCRATCH/out")" = 1 -a "$(grep -c 'rank 1: rank 1' "$SCRATCH/out")" = 0
check "... and no rank said to be writing (none got there)" bash -c "! grep -q 'writing its output' '$SCRATCH/out'"
cp "$SCRATCH/idx5.bin" "$c5"
expect_ok "verify: without the golden (gen --no-golden) the outputs are still checked" \
    bash -c "mv '$d/output/0/cpu_output.bin' '$SCRATCH/golden0' && '$A2AMM' verify 12 96 64 1 --op moe --dir '$d'"
expect_output "... and says the golden is not compared" "cpu_output.bin not compared"
mv "$SCRATCH/golden0" "$d/output/0/cpu_output.bin"
sed -i 's/^topk .*/topk x/' "$d/input/a2amm-meta.txt"
expect_fail "a broken meta file: the line and the rule" "a2amm-meta.txt:8: the value must be a whole number" "$A2AMM" run 12 96 64 1 --op moe --dir "$d"

# --- gen --no-golden over an earlier gen removes its goldens (of other inputs); verify says there is none
d="$SCRATCH/nogold"
"$A2AMM" gen 6 64 32 2 --op moe --dir "$d" --quiet >/dev/null
expect_ok "gen --op moe --no-golden over an earlier gen" "$A2AMM" gen 6 64 32 2 --op moe --seed 7 --dir "$d" --no-golden
expect_output "... says it removed the earlier goldens" "removed 2 earlier goldens"
check "... no golden left" test -z "$(find "$d/output" -name cpu_output.bin)"
expect_ok "... run" "$A2AMM" run 6 64 32 2 --op moe --dir "$d"
expect_ok "... verify checks the outputs against the contract" "$A2AMM" verify 6 64 32 2 --op moe --dir "$d"
expect_output "... and says there is no golden" "cpu_output.bin not compared: there is no golden (gen --no-golden writes none)"

# --- gen's bytes: fixed by the seed; expert e's weights by e and the seed, not by R
g1="$SCRATCH/g1" g2="$SCRATCH/g2" g4="$SCRATCH/g4"
"$A2AMM" gen 5 64 32 2 --op moe --experts 8 --seed 9 --dir "$g1" --no-golden >/dev/null
"$A2AMM" gen 5 64 32 2 --op moe --experts 8 --seed 9 --dir "$g2" --no-golden >/dev/null
check "the same seed, the same bytes" diff -r "$g1/input" "$g2/input"
"$A2AMM" gen 5 64 32 4 --op moe --experts 8 --seed 9 --dir "$g4" --no-golden >/dev/null
check "expert e's weights do not depend on R" cmp -s "$g1/input/1/input_w13.bin" <(cat "$g4/input/2/input_w13.bin" "$g4/input/3/input_w13.bin")
"$A2AMM" gen 5 64 32 2 --op moe --experts 8 --seed 10 --dir "$g2" --no-golden >/dev/null
check "another seed, other bytes" bash -c "! cmp -s '$g1/input/0/input_x.bin' '$g2/input/0/input_x.bin'"

# --- perf mode: the call, the experts alone, the exchange alone
d="$SCRATCH/c6"
expect_ok "perf mode" "$A2AMM" run 12 96 64 4 --op moe perf --iters 2 --dir "$d"
for v in "a2amm MoE call (dispatch, experts, combine)" "the call, unfused schedule" "experts alone (the same rows)" \
    "exchange alone (dispatch + combine)" "call / experts alone:"; do
    expect_output "perf mode: $v" "$v"
done
# the spreads beside the medians, every variant's, and the other schedule against the call in words
check "perf mode: a spread for each variant" grep -Eq "^  spread, \(max - min\) / max: call [0-9]+%( \(wide\))?, unfused schedule [0-9]+%( \(wide\))?, experts alone [0-9]+%( \(wide\))?, exchange alone [0-9]+%( \(wide\))?$" "$SCRATCH/out"
check "perf mode: the other schedule against the call, in words" grep -Eq "^  the call \(fused\) vs the unfused schedule: (no measurable difference|faster by [0-9.]+ ms|slower by [0-9.]+ ms)" "$SCRATCH/out"
check "perf mode: the exposed time is a time or none measurable" grep -Eq "^  exposed, median call - median experts alone: ([0-9]+\.[0-9]+ ms, [0-9.]+% of the run|none measurable \()" "$SCRATCH/out"
# the experts alone slowed (A2AMM_FAULT=slow-experts: by 50 ms on rank 0, as a busy machine may): no negative
# time, the exposed time none measurable, the ratio below 1 explained; --json keeps the bare difference
A2AMM_FAULT_RANK=0 A2AMM_FAULT=slow-experts "$A2AMM" run 12 96 64 4 --op moe perf --iters 3 --dir "$d" \
    --trace "$SCRATCH/slow.json" >"$SCRATCH/slow" 2>&1
check "perf, experts alone slowed: no negative time printed" bash -c "! grep -E -- '-[0-9.]+ ?(ms|s|%)' '$SCRATCH/slow'" || tail -15 "$SCRATCH/slow" >&2
check "perf, experts alone slowed: exposed none measurable" grep -q "^  exposed, median call - median experts alone: none measurable (the run's median is not above the experts alone's)" "$SCRATCH/slow"
check "perf, experts alone slowed: the ratio below 1 explained" grep -q "^  call / experts alone: 0\.[0-9]* (medians); below 1.0" "$SCRATCH/slow"
check "perf, experts alone slowed: the trace's figures have no negative time" /usr/bin/python3 -c "
import json, re; s = json.load(open('$SCRATCH/slow.json'))['otherData']['summary']
assert 'exposed none measurable' in s and not re.search(r'-[0-9.]+ ?(ms|s|%)', s), s"
A2AMM_FAULT_RANK=0 A2AMM_FAULT=slow-experts "$A2AMM" run 12 96 64 4 --op moe perf --iters 3 --dir "$d" --json \
    >"$SCRATCH/slow" 2>&1
check "perf --json, experts alone slowed: exposed_s kept, not measurable, spreads flagged" /usr/bin/python3 -c "
import json; j = json.load(open('$SCRATCH/slow'))
assert j['exposed_s'] < 0 and j['exposed_measurable'] is False and isinstance(j['busy'], bool), j
assert all(isinstance(j[k]['spread_wide'], bool) for k in ('call_s', 'other_schedule_s', 'experts_alone_s', 'exchange_alone_s')), j"
# progress on stderr where it is a file: plain lines, the last repetition's too; none with --quiet or --json
"$A2AMM" run 12 96 64 4 --op moe perf --iters 4 --dir "$d" >"$SCRATCH/perf-out" 2>"$SCRATCH/perf-err"
check "perf, stderr a file: progress lines there" grep -q "^a2amm: MoE perf repetition [0-9] of 4 ([0-9]* s)$" "$SCRATCH/perf-err" || tail -15 "$SCRATCH/perf-err" >&2
check "perf, stderr a file: the last repetition's line" grep -q "^a2amm: MoE perf repetition 4 of 4 ([0-9]* s)$" "$SCRATCH/perf-err" || tail -15 "$SCRATCH/perf-err" >&2
check "perf, stderr a file: no carriage return" bash -c "! grep -q $'\r' '$SCRATCH/perf-err'"
check "perf, stderr a file: none on stdout" bash -c "! grep -q 'perf repetition' '$SCRATCH/perf-out'"
for opt in --quiet --json; do
    "$A2AMM" run 12 96 64 4 --op moe perf --iters 2 --dir "$d" $opt >/dev/null 2>"$SCRATCH/perf-err"
    check "perf $opt, stderr a file: nothing there" test ! -s "$SCRATCH/perf-err"
done
expect_ok "perf mode --json" "$A2AMM" run 12 96 64 4 --op moe perf --iters 2 --json --dir "$d"
check "perf --json: figures that parse, every time positive" /usr/bin/python3 -c "
import json; j = json.load(open('$SCRATCH/out'))
assert j['op'] == 'moe' and j['R'] == 4 and j['tokens'] == 48, j
assert j['schedule'] == 'fused', j
assert all(j[k]['median'] > 0 for k in ('call_s', 'other_schedule_s', 'experts_alone_s', 'exchange_alone_s')), j"
expect_ok "perf mode --trace" "$A2AMM" run 12 96 64 4 --op moe perf --iters 2 --dir "$d" --trace "$SCRATCH/perf.json"
check "perf mode's trace carries its figures (the picture's title line)" /usr/bin/python3 -c "
import json; s = json.load(open('$SCRATCH/perf.json'))['otherData'].get('summary', '')
assert s.startswith('MoE call ') and 'experts alone' in s and 'call / experts alone = ' in s, s"
expect_ok "precision mode --json" "$A2AMM" run 12 96 64 4 --op moe --json --dir "$d"
check "precision --json: one object with the shape, each rank and the outputs (it printed nothing once)" \
    /usr/bin/python3 -c "
import json; j = json.load(open('$SCRATCH/out'))
assert j['mode'] == 'precision' and j['op'] == 'moe' and j['R'] == 4 and j['status'] == 'SUCCESS', j
assert [r['status'] for r in j['ranks']] == ['ok'] * 4 and len(j['outputs']) == 4, j
assert all(p.endswith('/output/%d/npu_out.bin' % r) for r, p in enumerate(j['outputs'])), j"
expect_fail "--route is gen's" "--route is gen's" "$A2AMM" run 12 96 64 4 --op moe --route hot --dir "$d"
expect_fail "verify too: --route is gen's" "a2amm verify: --route is gen's" "$A2AMM" verify 12 96 64 4 --op moe --route hot --dir "$d"
expect_fail "--iters in precision mode is refused, not ignored" "--iters is for perf mode" \
    "$A2AMM" run 12 96 64 4 --op moe --iters 2 --dir "$d"
expect_fail "both modes" "precision and perf both given" "$A2AMM" run 12 96 64 4 --op moe precision perf --dir "$d"
expect_ok "gen --op moe --help" "$A2AMM" gen --op moe --help
expect_output "gen's help shows the layout" "input_topk_idx.bin"
expect_ok "a2amm --help" "$A2AMM" --help
expect_output "the main help names the MoE op" "--op moe (T H I R)"
finish
