#!/usr/bin/python3
"""What `a2amm timeline` drew, checked against the trace it drew.

usage: timeline_svg.py TRACE.json PICTURE.svg [--call N] [--every-expert-alone]

- The legend lists the kinds drawn in the picture and only those: each entry's
  kind has spans in the trace (in --call N's window), and each kind drawn has
  its entry. The legend's words are checked too, so that a legend with every
  kind in it fails whatever its markup.
- The MoE op's trace: each expert that ran (a "work" span: its number among
  all E, its rank, its chunk) is a bar of its own, its title naming that
  number, rank and chunk; a bar that merges experts under a pixel names each
  of them and its rank; no bar names an expert that did not run there. A
  bar wide enough carries its number as text. Each compute thread of a rank
  has its own lane (a y of its own). --every-expert-alone: no expert was
  merged (a picture wide enough for every span to take a pixel).
Prints what is wrong and exits 1; exits 0 when all holds.
"""
import json
import re
import sys
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"
# the legend's words for the matmul ops' kinds (the MoE op's have their own below) -> the trace's category
LEGEND_WORDS = {"perf variant": "variant", "op call": "call", "tile (numbered)": "tile", "barrier": "barrier",
                "AllToAll (unfused)": "exchange", "B preparation": "prepare", "output write": "write",
                "matmul": "matmul", "wait for rows": "wait", "send": "send", "signal": "signal",
                "MoE call": "call", "dispatch / combine (a chunk)": "exchange", "a chunk's experts": "matmul"}
# the picture's class k-NAME -> the trace's category
CLASS_CAT = {"stall": "wait", "expert": "work"}


def main(argv):
    args = argv[1:]
    call = None
    alone = "--every-expert-alone" in args
    if alone:
        args.remove("--every-expert-alone")
    if "--call" in args:
        i = args.index("--call")
        call = int(args[i + 1])
        del args[i:i + 2]
    trace_path, svg_path = args
    trace = json.load(open(trace_path))
    events = trace["traceEvents"]
    moe = trace.get("otherData", {}).get("op") == "moe"
    spans = [e for e in events if e.get("ph") in ("X", "i")]
    lo, hi = float("-inf"), float("inf")
    if call is not None:
        mine = [e for e in spans if e.get("cat") == "call" and e["args"].get("call") == call]
        lo, hi = min(e["ts"] for e in mine), max(e["ts"] + e.get("dur", 0) for e in mine)
    shown = [e for e in spans if not (e["ts"] + e.get("dur", 0) < lo or e["ts"] > hi)]
    cats = {e["cat"] for e in shown}
    bad = []

    root = ET.parse(svg_path).getroot()
    rects = list(root.iter(SVG + "rect"))
    texts = list(root.iter(SVG + "text"))

    def kinds(legend):
        out = set()
        for r in rects:
            cls = (r.get("class") or "").split()
            if ("legend" in cls) == legend:
                out |= {c[2:] for c in cls if c.startswith("k-")}
        return out

    legend, drawn = kinds(True), kinds(False)
    if not legend:
        bad.append("no legend entry is marked (class \"legend k-KIND\")")
    if legend != drawn:
        bad.append("the legend's kinds %s are not the kinds drawn %s" % (sorted(legend), sorted(drawn)))
    for k in sorted(legend):
        if CLASS_CAT.get(k, k) not in cats:
            bad.append("the legend lists %r, which the trace has no span of" % k)
    for t in texts:
        words = t.text or ""
        cat = LEGEND_WORDS.get(words, "wait" if words.startswith("stalled wait (") else None)
        if cat and cat not in cats:
            bad.append("the legend says %r, of which the trace has no span" % words)

    if moe:
        check_experts(shown, rects, texts, alone, bad)
    elif drawn & {"expert"}:
        bad.append("expert bars in a matmul op's picture")
    for b in bad[:12]:
        print("  " + b, file=sys.stderr)
    return 1 if bad else 0


def check_experts(shown, rects, texts, alone, bad):
    ran = {}  # (rank, chunk, expert) -> the work span's thread
    for e in shown:
        if e.get("cat") != "work":
            continue
        n = e["args"].get("expert")
        if n is None:
            n = int(re.match(r"expert (\d+) ", e["name"]).group(1))
        key = (e["pid"], e["args"]["tile"], n)
        if key in ran:
            bad.append("the trace has expert %d twice on rank %d in chunk %d" % (n, key[0], key[1]))
        ran[key] = e["tid"]
    if not ran:
        bad.append("the trace has no expert's span")
    alone_bars, merged = {}, set()  # (rank, chunk, expert) -> its rectangle; (rank, expert) merged
    for r in rects:
        if "k-expert" not in (r.get("class") or "").split() or "legend" in r.get("class"):
            continue
        title = r.find(SVG + "title")
        title = title.text if title is not None else ""
        m = re.fullmatch(r"expert (\d+) \(rank (\d+), chunk (\d+)\)", title)
        if m:
            key = (int(m.group(2)), int(m.group(3)), int(m.group(1)))
            if key in alone_bars:
                bad.append("two bars for expert %d of rank %d, chunk %d" % (key[2], key[0], key[1]))
            alone_bars[key] = r
            continue
        m = re.fullmatch(r"experts? ([\d, .]+) \(rank (\d+); each under a pixel here: merged\)", title)
        if not m:
            bad.append("an expert's bar without its number: title %r" % title)
            continue
        rank = int(m.group(2))
        for n in re.findall(r"\d+", m.group(1)):
            merged.add((rank, int(n)))
    for key in alone_bars:
        if key not in ran:
            bad.append("a bar for expert %d of rank %d, chunk %d, which did not run there" % (key[2], key[0], key[1]))
    for rank, n in merged:
        if not any(k[0] == rank and k[2] == n for k in ran):
            bad.append("a merged bar names expert %d on rank %d, which did not run there" % (n, rank))
    for key in ran:
        if key not in alone_bars and (key[0], key[2]) not in merged:
            bad.append("expert %d of rank %d, chunk %d has no bar" % (key[2], key[0], key[1]))
        elif alone and key not in alone_bars:
            bad.append("expert %d of rank %d, chunk %d is merged into another's bar" % (key[2], key[0], key[1]))
    # a lane per thread: the same y for a thread's experts, another for each other thread of the rank
    lane_y = {}
    for key, r in alone_bars.items():
        if key in ran:
            lane_y.setdefault((key[0], ran[key]), set()).add(float(r.get("y")))
    for (rank, tid), ys in lane_y.items():
        if len(ys) != 1:
            bad.append("rank %d thread %d: its experts at several heights %s" % (rank, tid, sorted(ys)))
    for rank in {k[0] for k in lane_y}:
        ys = [min(v) for k, v in lane_y.items() if k[0] == rank]
        if len(set(ys)) != len(ys):
            bad.append("rank %d: two threads' experts in one lane" % rank)
    # the number as text on each bar wide enough for it
    labelled = 0
    for key, r in alone_bars.items():
        x, y, w, h = (float(r.get(a)) for a in ("x", "y", "width", "height"))
        if w < 70:
            continue
        ok = any((t.text or "") in ("expert %d" % key[2], "%d" % key[2]) and x <= float(t.get("x")) <= x + w
                 and y <= float(t.get("y")) <= y + h for t in texts)
        labelled += ok
        if not ok:
            bad.append("the bar of expert %d (rank %d, chunk %d), %.0f px wide, has no label" % (key[2], key[0], key[1], w))
    if alone and not labelled:
        bad.append("no expert's bar is labelled with its number")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
