#!/usr/bin/env bash
# --trace FILE and `a2amm timeline`: the trace is valid Chrome trace JSON
# with a span for every (rank, tile, source), waits on the put path, nested
# spans in order, the bytes received as a counter and what ran in its
# metadata; tracing changes no output; perf mode breaks a call down per rank;
# the timeline is well-formed SVG that a real renderer (rsvg-convert) turns
# into a PNG, also at R = 16 and at thousands of tiles, its legend the kinds
# it draws and no other (tests/timeline_svg.py); bad input is refused
# with a message that names it.
. "$(dirname "$0")/lib.sh"
d="$SCRATCH/d"
"$A2AMM" gen 100 192 40 3 --dir "$d" --quiet >/dev/null

# check_trace FILE R TILES PATH SCHED: the trace's structure, in python
check_trace() {
    python3 - "$@" <<'EOF'
import json, sys
path, R, tiles, route, sched = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
o = json.load(open(path))
ev, meta = o["traceEvents"], o["otherData"]
bad = []
def need(cond, what):
    if not cond: bad.append(what)
need(meta["R"] == R and meta["path"] == route and meta["schedule"] == sched, "metadata: %r" % meta)
need(len(meta["clock_offsets_ns"]) == R, "a clock offset per rank")
names = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "process_name"}
need(names == {r: "rank %d" % r for r in range(R)}, "one process per rank: %r" % names)
X = [e for e in ev if e.get("ph") == "X"]
for r in range(R):
    mine = sorted((e for e in X if e["pid"] == r), key=lambda e: (e["ts"], -e["dur"]))
    calls = [e for e in mine if e["cat"] == "call"]
    need(len(calls) >= 1, "rank %d: a call span" % r)
    for c in calls:
        inside = [e for e in mine if e["args"].get("call") == c["args"]["call"]]
        got = {(e["args"]["tile"], e["args"]["source"]) for e in inside if e["cat"] == "matmul"}
        need(got == {(t, s) for t in range(tiles) for s in range(R)},
             "rank %d call %d: a matmul span per (tile, source): %d of %d" % (r, c["args"]["call"], len(got), tiles * R))
        waits = {(e["args"]["tile"], e["args"]["source"]) for e in inside if e["cat"] == "wait"}
        want = {(t, s) for t in range(tiles) for s in range(R) if s != r} if route == "put" and sched == "fused" else set()
        need(waits == want, "rank %d: waits per (tile, other source) on the put path only: %d, want %d" % (r, len(waits), len(want)))
        if sched == "unfused":
            need(sum(e["cat"] == "exchange" for e in inside) == 1, "rank %d: one exchange span" % r)
        for e in inside:
            if e["cat"] in ("matmul", "wait"):
                need(c["ts"] <= e["ts"] and e["ts"] + e["dur"] <= c["ts"] + c["dur"] + 0.002, "a %s inside its call" % e["cat"])
    # proper nesting on each of the rank's tracks: each span inside the open one or after it
    for tid in sorted({e["tid"] for e in mine}):
        stack = []
        for e in (e for e in mine if e["tid"] == tid):
            while stack and e["ts"] >= stack[-1] - 0.0015:
                stack.pop()
            if stack and e["ts"] + e["dur"] > stack[-1] + 0.0015:
                bad.append("rank %d track %d: %s at %.3f overlaps its enclosing span" % (r, tid, e["name"], e["ts"])); break
            stack.append(e["ts"] + e["dur"])
    # the compute threads' pieces: each inside a matmul of the same tile and source, on a named track
    threads = {e["tid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "thread_name" and e["pid"] == r}
    mm = {}
    for e in mine:
        if e["cat"] == "matmul": mm.setdefault((e["args"]["call"], e["args"]["tile"], e["args"]["source"]), []).append(e)
    work = [e for e in mine if e["cat"] == "work"]
    need(work, "rank %d: compute threads' work spans" % r)
    for w in work:
        key = (w["args"]["call"], w["args"]["tile"], w["args"]["source"])
        need(w["tid"] in threads and any(m["ts"] - 0.002 <= w["ts"] and w["ts"] + w["dur"] <= m["ts"] + m["dur"] + 0.002
                                         for m in mm.get(key, [])), "rank %d: work %r inside its matmul, on a named track" % (r, key))
    if route == "put" and sched == "fused" and R > 1:
        cnt = [e["args"]["bytes"] for e in sorted((e for e in ev if e.get("ph") == "C" and e["pid"] == r), key=lambda e: e["ts"])]
        need(cnt and cnt == sorted(cnt) and cnt[-1] > 0, "rank %d: a growing bytes-received counter" % r)
        need(any(e.get("ph") == "i" and e["pid"] == r and e["cat"] == "signal" for e in ev), "rank %d: signal instants" % r)
    need(any(e["cat"] == "prepare" for e in mine), "rank %d: B preparation span" % r)
for b in bad[:10]: print("  " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
}

# --- precision mode, each path: the spans, and the same outputs as without tracing
"$A2AMM" run 100 192 40 3 --dir "$d" --path put --tile-m 16 >/dev/null
cp "$d/output/1/npu_out.bin" "$SCRATCH/untraced.bin"
expect_ok "run --trace, put path" "$A2AMM" run 100 192 40 3 --dir "$d" --path put --tile-m 16 --trace "$SCRATCH/put.json"
expect_output "run says where the trace went" "trace: $SCRATCH/put.json"
check "the trace is complete JSON with a span per (rank, tile, source) and waits (put)" check_trace "$SCRATCH/put.json" 3 7 put fused
check "tracing changes no output" cmp -s "$d/output/1/npu_out.bin" "$SCRATCH/untraced.bin"
check "the trace has an output-write span per rank" python3 -c "
import json; e=json.load(open('$SCRATCH/put.json'))['traceEvents']
assert sorted(x['pid'] for x in e if x.get('cat')=='write')==[0,1,2]"
check "no part files left beside the trace" test -z "$(ls "$SCRATCH" | grep 'put.json.rank')"
expect_ok "run --trace, direct path" "$A2AMM" run 100 192 40 3 --dir "$d" --tile-m 32 --trace "$SCRATCH/direct.json"
# two compute threads on matmuls big enough to split (64 x 256 x 256 a piece)
"$A2AMM" gen 128 768 256 3 --dir "$SCRATCH/w" --quiet --no-golden >/dev/null
expect_ok "run --trace, 2 compute threads" "$A2AMM" run 128 768 256 3 --dir "$SCRATCH/w" --tile-m 64 --threads 2 \
    --path put --trace "$SCRATCH/threads.json"
check "2 compute threads: complete" check_trace "$SCRATCH/threads.json" 3 2 put fused
# (which thread runs which piece is first come, first served: on a busy host one thread may take them
# all, so the pieces' tracks are those two, and both tracks are there, named, whoever ran what)
check "two compute threads: a track for each, named" python3 -c "
import json; e=json.load(open('$SCRATCH/threads.json'))['traceEvents']
for r in range(3):
    tids={x['tid'] for x in e if x.get('cat')=='work' and x['pid']==r}
    assert tids and tids<={0,1}, (r, tids)
    assert any(x.get('name')=='thread_name' and x['pid']==r and x['tid']==1 and 'compute thread 1' in x['args']['name'] for x in e)"
check "direct path: a span per (rank, tile, source), no waits" check_trace "$SCRATCH/direct.json" 3 4 direct fused
expect_ok "run --trace, unfused" "$A2AMM" run 100 192 40 3 --dir "$d" --unfused --path put --tile-m 50 --trace "$SCRATCH/unf.json"
check "unfused: one exchange per rank, then the matmuls" check_trace "$SCRATCH/unf.json" 3 2 put unfused

# --- perf mode: every repetition traced, the summary in the metadata, the per-rank breakdown
expect_ok "run perf --trace" "$A2AMM" run 100 192 40 3 perf --iters 3 --dir "$d" --path put --tile-m 16 --trace "$SCRATCH/perf.json"
expect_output "perf: the per-rank breakdown" "waits by source (ms)"
check "perf trace: the calls of every repetition, the summary" python3 -c "
import json; o=json.load(open('$SCRATCH/perf.json'))
calls={x['args']['call'] for x in o['traceEvents'] if x.get('cat')=='call' and x['pid']==0}
assert len(calls)>=4, calls
assert 'exposed communication' in o['otherData']['summary'] and o['otherData']['perf']['fused_median_s']>0"
check "perf trace: complete" check_trace "$SCRATCH/perf.json" 3 7 put fused
expect_ok "run perf --json" "$A2AMM" run 100 192 40 3 perf --iters 3 --dir "$d" --path put --tile-m 16 --json
check "perf --json: per rank, call = matmul + waits + the rest, waits by source" python3 -c "
import json; o=json.loads(open('$SCRATCH/out').read())
rs=o['ranks']; assert len(rs)==3
for r in rs:
    assert r['call_s']>0 and 0<r['matmul_s']<=r['call_s'] and r['wait_s']<=r['call_s'], r
    assert abs(r['exposed_s']-(r['call_s']-r['matmul_s']))<1e-8 and len(r['wait_from_s'])==3
    assert r['wait_from_s'][r['rank']]==0 and abs(sum(r['wait_from_s'])-r['wait_s'])<1e-6, r"

# --- bench op --trace
expect_ok "bench op --trace" "$A2AMM" bench op 64 192 40 3 --iters 2 --path put --tile-m 16 --trace "$SCRATCH/bench.json"
check "bench op's trace: complete" check_trace "$SCRATCH/bench.json" 3 4 put fused

# --- the reverse op (matmul-alltoall): each tile's matmuls make the block for each destination ("to"),
#     its own last, and send the others' blocks; the waits for every other rank's blocks come after the tiles
"$A2AMM" gen 100 192 42 3 --op matmul-alltoall --dir "$SCRATCH/rev" --quiet >/dev/null
# check_trace_reverse FILE R TILES PATH SCHED
check_trace_reverse() {
    python3 - "$@" <<'EOF'
import json, sys
path, R, tiles, route, sched = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
o = json.load(open(path))
ev, meta = o["traceEvents"], o["otherData"]
bad = []
def need(cond, what):
    if not cond: bad.append(what)
need(meta["op"] == "matmul-alltoall" and meta["R"] == R and meta["path"] == route and meta["schedule"] == sched,
     "metadata: %r" % meta)
X = [e for e in ev if e.get("ph") == "X"]
for r in range(R):
    mine = sorted((e for e in X if e["pid"] == r), key=lambda e: (e["ts"], -e["dur"]))
    calls = [e for e in mine if e["cat"] == "call"]
    need(calls, "rank %d: a call span" % r)
    for c in calls:
        inside = [e for e in mine if e["args"].get("call") == c["args"]["call"]]
        mm = [e for e in inside if e["cat"] == "matmul"]
        need({(e["args"]["tile"], e["args"]["to"]) for e in mm} == {(t, d) for t in range(tiles) for d in range(R)},
             "rank %d: a matmul per (tile, destination), named by 'to'" % r)
        need(all("->" in e["name"] for e in mm), "rank %d: matmul spans named 'tile t -> rank d'" % r)
        for t in range(tiles):
            order = [e["args"]["to"] for e in mm if e["args"]["tile"] == t]
            need(order == [(r + k) % R for k in range(1, R + 1)],
                 "rank %d tile %d: destinations r+1, ..., its own last: %r" % (r, t, order))
        tile_end = max(e["ts"] + e["dur"] for e in inside if e["cat"] == "tile")
        sends = {(e["args"]["tile"], e["args"]["to"]) for e in inside if e["cat"] == "send"}
        waits = [e for e in inside if e["cat"] == "wait"]
        others = {(t, p) for t in range(tiles) for p in range(R) if p != r}
        if sched == "fused":
            need(sends == others, "rank %d: a send per (tile, other rank): %d of %d" % (r, len(sends), len(others)))
            need({(e["args"]["tile"], e["args"]["source"]) for e in waits} == others,
                 "rank %d: a wait per (tile, other source): %d of %d" % (r, len(waits), len(others)))
            need(all(e["ts"] >= tile_end - 0.002 for e in waits), "rank %d: the waits come after the tiles" % r)
            need(all(e["args"].get("bytes", 0) > 0 for e in waits), "rank %d: waits carry their bytes" % r)
        else:
            need(not sends and not waits, "rank %d: unfused: no sends or waits" % r)
            ex = [e for e in inside if e["cat"] == "exchange"]
            need(len(ex) == 1 and ex[0]["ts"] >= tile_end - 0.002, "rank %d: one exchange, after the tiles" % r)
        for e in inside:
            need(c["ts"] <= e["ts"] and e["ts"] + e["dur"] <= c["ts"] + c["dur"] + 0.002, "a %s inside its call" % e["cat"])
        for w in (e for e in inside if e["cat"] == "work"):
            key = (w["args"]["tile"], w["args"]["to"])
            need(any(m["ts"] - 0.002 <= w["ts"] and w["ts"] + w["dur"] <= m["ts"] + m["dur"] + 0.002
                     for m in mm if (m["args"]["tile"], m["args"]["to"]) == key), "rank %d: work %r inside its matmul" % (r, key))
for b in bad[:10]: print("  " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
}
"$A2AMM" run 100 192 42 3 --dir "$SCRATCH/rev" --tile-m 16 >/dev/null
cp "$SCRATCH/rev/output/2/npu_out.bin" "$SCRATCH/rev-untraced.bin"
for route in put direct; do
    expect_ok "reverse op --trace, $route path" "$A2AMM" run 100 192 42 3 --dir "$SCRATCH/rev" --path $route --tile-m 16 \
        --trace "$SCRATCH/rev-$route.json"
    check "reverse op, $route path: matmuls per (tile, destination), sends, then the waits" \
        check_trace_reverse "$SCRATCH/rev-$route.json" 3 7 $route fused
    check "reverse op, $route path: tracing changes no output" cmp -s "$SCRATCH/rev/output/2/npu_out.bin" "$SCRATCH/rev-untraced.bin"
done
expect_ok "reverse op --trace, unfused" "$A2AMM" run 100 192 42 3 --dir "$SCRATCH/rev" --unfused --tile-m 50 --trace "$SCRATCH/rev-unf.json"
check "reverse op, unfused: the tiles' matmuls, then one exchange" check_trace_reverse "$SCRATCH/rev-unf.json" 3 2 direct unfused
expect_ok "reverse op perf --trace" "$A2AMM" run 100 192 42 3 perf --iters 2 --dir "$SCRATCH/rev" --path put --tile-m 32 \
    --trace "$SCRATCH/rev-perf.json"
check "reverse op perf trace: every call complete" check_trace_reverse "$SCRATCH/rev-perf.json" 3 4 put fused
expect_ok "the timeline draws the reverse op's trace" "$A2AMM" timeline "$SCRATCH/rev-perf.json" -o "$SCRATCH/rev-perf.svg"
check "its title names the op" grep -q "a2amm: M=100 K=192 N=42 R=3, op matmul-alltoall, perf mode" "$SCRATCH/rev-perf.svg"
check "... and carries perf's figures" grep -q "exposed communication" "$SCRATCH/rev-perf.svg"
expect_ok "bench op --op matmul-alltoall --trace" "$A2AMM" bench op 64 192 42 3 --iters 2 --path put --tile-m 16 \
    --op matmul-alltoall --trace "$SCRATCH/rev-bench.json"
check "bench op's reverse trace: complete" check_trace_reverse "$SCRATCH/rev-bench.json" 3 4 put fused
check "a trace of the seed's op says so" python3 -c "
import json; assert json.load(open('$SCRATCH/put.json'))['otherData']['op']=='alltoall-matmul'"

# --- the timeline
check "rsvg-convert is installed (make check installs librsvg2-bin)" bash -c "command -v rsvg-convert >/dev/null"
expect_ok "timeline draws the perf trace" "$A2AMM" timeline "$SCRATCH/perf.json" -o "$SCRATCH/perf.svg"
expect_output "timeline says what it drew" "3 ranks"
# svg_ok SVG: well-formed XML, a row per rank, a legend, the summary in the title
svg_ok() {
    python3 - "$@" <<'EOF'
import sys, xml.etree.ElementTree as ET
svg, R = sys.argv[1], int(sys.argv[2])
root = ET.parse(svg).getroot()
texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
assert root.tag.endswith("svg"), root.tag
assert all("rank %d" % r in texts for r in range(R)), "a row label per rank"
assert any(t == "matmul" for t in texts), "a legend"
assert any(t.startswith("a2amm: M=") for t in texts), "a title"
assert any("time (" in t for t in texts), "a time axis"
EOF
}
check "timeline: well-formed SVG with rows, legend, title and axis" svg_ok "$SCRATCH/perf.svg" 3
check "timeline: perf's figures in the title" grep -q "exposed communication" "$SCRATCH/perf.svg"
# legend_ok TRACE SVG [--call N]: the legend lists the kinds the picture draws, and only those
legend_ok() { /usr/bin/python3 "$(dirname "$0")/timeline_svg.py" "$@"; }
check "timeline: the legend lists the kinds drawn and no other (no unfused AllToAll in a fused run)" \
    legend_ok "$SCRATCH/perf.json" "$SCRATCH/perf.svg"
# png_width PNG: its width from the header
png_width() { python3 -c "import struct,sys; d=open(sys.argv[1],'rb').read(24); assert d[:8]==b'\x89PNG\r\n\x1a\n'; print(struct.unpack('>I',d[16:20])[0])" "$1"; }
{
    expect_ok "rsvg-convert renders the timeline" rsvg-convert "$SCRATCH/perf.svg" -o "$SCRATCH/perf.png"
    check "the PNG is the picture's width" test "$(png_width "$SCRATCH/perf.png")" = 1400
}
expect_ok "timeline --call 2 --width 900" "$A2AMM" timeline "$SCRATCH/perf.json" -o "$SCRATCH/call2.svg" --call 2 --width 900
check "timeline --call: well-formed" svg_ok "$SCRATCH/call2.svg" 3
check "timeline --call: the legend lists that call's kinds (no B preparation, no output write)" \
    legend_ok "$SCRATCH/perf.json" "$SCRATCH/call2.svg" --call 2
expect_ok "timeline's default output name" "$A2AMM" timeline "$SCRATCH/put.json"
check "TRACE.json -> TRACE.svg" test -s "$SCRATCH/put.svg"
check "precision mode's picture: no perf variant, no unfused AllToAll in its legend" legend_ok "$SCRATCH/put.json" "$SCRATCH/put.svg"
expect_ok "timeline of the unfused run" "$A2AMM" timeline "$SCRATCH/unf.json" -o "$SCRATCH/unf.svg"
check "unfused: the legend has its AllToAll and no wait, send or signal" legend_ok "$SCRATCH/unf.json" "$SCRATCH/unf.svg"
check "... the AllToAll's entry is there" grep -q ">AllToAll (unfused)<" "$SCRATCH/unf.svg"
check "the reverse op's picture: the legend lists the kinds drawn and no other" \
    legend_ok "$SCRATCH/rev-perf.json" "$SCRATCH/rev-perf.svg"
expect_ok "timeline replaces its own earlier picture" "$A2AMM" timeline "$SCRATCH/put.json" -o "$SCRATCH/put.svg"
head -c 4096 /dev/urandom >"$SCRATCH/data.bin"
cp "$SCRATCH/data.bin" "$SCRATCH/data.keep"
expect_fail "timeline -o onto a file that is not a picture (a data file): refused" "is there and is not an SVG picture" \
    "$A2AMM" timeline "$SCRATCH/put.json" -o "$SCRATCH/data.bin"
check "... and the file is as it was" cmp -s "$SCRATCH/data.bin" "$SCRATCH/data.keep"
expect_fail "timeline -o '': refused before drawing" "-o: an empty file name" "$A2AMM" timeline "$SCRATCH/put.json" -o ""

# a trace's strings are anyone's bytes: raw bytes that are not UTF-8, and lone surrogate escapes
# (Python's json writes one for each byte it could not decode), in otherData still give well-formed XML
python3 - "$SCRATCH/perf.json" "$SCRATCH/hostile.json" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
t["otherData"]["summary"] = "lone \udcff surrogate, \ud800 high, \udc00 low, <&> \u0001 kept apart"
t["otherData"]["transport"] = "RAWBYTES"
data = json.dumps(t).encode()  # ensure_ascii: the surrogates stay \u escapes
raw = b"\xff\xfe \xc0\x80 \xed\xa0\x80 \xef\xbf\xbf \xf4\x90\x80\x80 \xe2\x82"  # none of them UTF-8 that XML takes
open(sys.argv[2], "wb").write(data.replace(b"RAWBYTES", raw))
EOF
expect_ok "timeline of a trace with invalid UTF-8 in its strings" "$A2AMM" timeline "$SCRATCH/hostile.json" -o "$SCRATCH/hostile.svg"
check "invalid UTF-8 in the trace: the SVG is well-formed XML" svg_ok "$SCRATCH/hostile.svg" 3
check "invalid UTF-8 in the trace: the SVG is UTF-8, each bad escape one U+FFFD, markup escaped" python3 -c "
import sys; t = open(sys.argv[1], 'rb').read().decode('utf-8')
assert 'lone \ufffd surrogate, \ufffd high, \ufffd low, &lt;&amp;&gt;  kept apart' in t, t[-3000:]
assert 'transport \ufffd\ufffd \ufffd\ufffd' in t or '\ufffd\ufffd \ufffd\ufffd \ufffd\ufffd\ufffd' in t, t[-3000:]" "$SCRATCH/hostile.svg"

# thousands of tiles: spans narrower than a pixel merge
"$A2AMM" gen 3000 64 8 2 --dir "$SCRATCH/big" --quiet --no-golden >/dev/null
expect_ok "a run of 3000 tiles, traced" "$A2AMM" run 3000 64 8 2 --dir "$SCRATCH/big" --path put --tile-m 1 --trace "$SCRATCH/big.json"
expect_ok "timeline of 3000 tiles" "$A2AMM" timeline "$SCRATCH/big.json" -o "$SCRATCH/big.svg" --width 1000
check "3000 tiles x 2 ranks: over 20000 spans" python3 -c "
import re,sys; t=open('$SCRATCH/out').read(); m=re.search(r'(\d+) spans over [0-9.]+ ms drawn as (\d+) shapes', t)
assert m and int(m.group(1))>20000, t"
check "3000 tiles: well-formed" svg_ok "$SCRATCH/big.svg" 2
expect_ok "3000 tiles: rendered" rsvg-convert "$SCRATCH/big.svg" -o "$SCRATCH/big.png"
# How many shapes a real run's spans make depends on its timing (313 to 4305 seen for this run): the
# merge is checked on the same events evenly spread instead, 0.5 us apart and 0.3 us long, where a
# pixel is about 20 us: each rank's spans of one kind lie under a pixel apart and merge to a few shapes.
python3 - "$SCRATCH/big.json" "$SCRATCH/even.json" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
timed = sorted((e for e in t["traceEvents"] if "ts" in e), key=lambda e: e["ts"])
for i, e in enumerate(timed):
    e["ts"] = i * 0.5
    if "dur" in e:
        e["dur"] = 0.3
json.dump(t, open(sys.argv[2], "w"))
EOF
expect_ok "timeline of 3000 tiles' events evenly spread" "$A2AMM" timeline "$SCRATCH/even.json" -o "$SCRATCH/even.svg" --width 1000
check "3000 tiles' events evenly spread: over 20000 spans drawn in under 200 shapes" python3 -c "
import re,sys; t=open('$SCRATCH/out').read(); m=re.search(r'(\d+) spans over [0-9.]+ ms drawn as (\d+) shapes', t)
assert m and int(m.group(1))>20000 and int(m.group(2))<200, t"
check "evenly spread: well-formed" svg_ok "$SCRATCH/even.svg" 2

# R = 16: a row per rank, still readable
"$A2AMM" gen 32 512 8 16 --dir "$SCRATCH/r16" --quiet --no-golden >/dev/null
expect_ok "R=16 traced" "$A2AMM" run 32 512 8 16 --dir "$SCRATCH/r16" --path put --tile-m 8 --trace "$SCRATCH/r16.json"
check "R=16: complete" check_trace "$SCRATCH/r16.json" 16 4 put fused
expect_ok "R=16 timeline" "$A2AMM" timeline "$SCRATCH/r16.json" -o "$SCRATCH/r16.svg"
check "R=16: a labelled row per rank" svg_ok "$SCRATCH/r16.svg" 16
expect_ok "R=16: rendered" rsvg-convert "$SCRATCH/r16.svg" -o "$SCRATCH/r16.png"

# --- refusals: each names what is wrong
expect_fail "--trace to a folder" "is a folder" "$A2AMM" run 100 192 40 3 --dir "$d" --trace "$SCRATCH"
expect_fail "--trace into a missing folder" "does not exist" "$A2AMM" run 100 192 40 3 --dir "$d" --trace "$SCRATCH/none/t.json"
expect_fail "--trace with no name" "--trace" "$A2AMM" run 100 192 40 3 --dir "$d" --trace ""
expect_fail "timeline of a missing file" "$SCRATCH/missing.json is missing" "$A2AMM" timeline "$SCRATCH/missing.json"
printf '{"traceEvents": [{"ph": "X",}]}' >"$SCRATCH/broken.json"
expect_fail "timeline of broken JSON: the file and the place" "broken.json: not JSON: line 1, column" "$A2AMM" timeline "$SCRATCH/broken.json"
echo '{"other": 1}' >"$SCRATCH/other.json"
expect_fail "timeline of JSON that is not a trace" "no \"traceEvents\" array" "$A2AMM" timeline "$SCRATCH/other.json"
expect_fail "timeline --call beyond the trace" "no call 999" "$A2AMM" timeline "$SCRATCH/perf.json" --call 999
expect_fail "timeline without a file" "expected a trace file" "$A2AMM" timeline
check "the refused timelines wrote nothing" test ! -e "$SCRATCH/broken.svg" -a ! -e "$SCRATCH/other.svg" -a ! -e "$SCRATCH/missing.svg"

# the help's example works as printed (its folders moved into this test's scratch)
"$A2AMM" timeline --help | sed -n 's/^  a2amm //p' | sed "s|/tmp/|$SCRATCH/help-|g" >"$SCRATCH/help-steps"
check "timeline --help has a three-step example" test "$(wc -l <"$SCRATCH/help-steps")" -eq 3
while read -r step; do
    expect_ok "timeline help example: $step" bash -c "'$A2AMM' $step"
done <"$SCRATCH/help-steps"
check "the help example drew its picture" test -s "$SCRATCH/help-t.svg"

# a failed run writes no trace and leaves no parts
A2AMM_FAULT_RANK=1 A2AMM_FAULT=error "$A2AMM" run 100 192 40 3 --dir "$d" --path put --tile-m 16 --trace "$SCRATCH/failed.json" >/dev/null 2>&1
check "a failed run: no trace" test ! -e "$SCRATCH/failed.json"
check "a failed run: no part files" test -z "$(ls "$SCRATCH" | grep 'failed.json')"
finish
