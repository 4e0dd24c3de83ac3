"""op.trace(path): every rank's spans, gathered on rank 0, written as the Chrome trace `a2amm timeline` draws
(the format of src/cli/trace.c: one process per rank, "X" spans with their details in args, "i" instants for
signals, a "bytes received" counter, what ran in otherData)."""
import json
import os
import stat

import numpy as np

# The extension's span records (op.c, span_rec).
SPAN = np.dtype([("t0", "<i8"), ("t1", "<i8"), ("kind", "<i4"), ("peer", "<i4"), ("slot", "<i4"),
                 ("thread", "<i4"), ("call", "<i8"), ("tile", "<i8"), ("rows", "<i8"), ("k", "<i8"),
                 ("bytes", "<i8"), ("signal", "<u8")])
KINDS = ("call", "barrier", "tile", "wait", "matmul", "send", "signal", "exchange", "work")
CHUNK = 1 << 20  # bytes per rank per exchange step while gathering (the AllToAll stages R x that)


class Tracer:
    """Records an op's calls on this rank; stop() (collective) writes the file on rank 0."""

    def __init__(self, op, path):
        path = os.fspath(path)
        try:
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                raise ValueError("trace: %s is not a regular file (the trace replaces it)" % path)
        except FileNotFoundError:
            pass
        self.op, self.path, self.active = op, path, True
        op._record(True)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.stop()
        else:  # a failed block writes nothing: the other ranks may not be here to gather
            self._end()
        return False

    def _end(self):
        self.active = False
        if not self.op.closed:
            self.op._record(False)

    def stop(self):
        """Collective: stops recording; rank 0 writes the trace. Returns the path on rank 0, else None."""
        if not self.active:
            raise ValueError("trace: already stopped (or the op was closed)")
        self._end()
        blob, dropped = self.op._spans()
        parts, drops = _gather(self.op.comm, blob, dropped)
        if self.op.comm.rank != 0:
            return None
        _write(self.path, [np.frombuffer(p, dtype=SPAN) for p in parts], drops, self.op)
        return self.path


def _gather(comm, blob, dropped):
    """Every rank's blob on rank 0 (in rank order), through the communicator's AllToAll."""
    R = comm.size
    head = comm.alltoall(np.full((R, 2), (len(blob), dropped), dtype=np.int64))
    sizes, drops = [int(x) for x in head[:, 0]], [int(x) for x in head[:, 1]]
    longest = max(sizes)
    parts = [bytearray() for _ in range(R)]
    step = max(1, min(longest, CHUNK))
    for off in range(0, longest, step):
        send = np.zeros((R, step), dtype=np.uint8)
        piece = blob[off:off + step]
        send[0, :len(piece)] = np.frombuffer(piece, dtype=np.uint8)
        recv = comm.alltoall(send)
        if comm.rank == 0:
            for r in range(R):
                n = max(0, min(step, sizes[r] - off))
                parts[r] += recv[r, :n].tobytes()
    return [bytes(p) for p in parts], drops


def _name(kind, s):
    tile, peer = int(s["tile"]), int(s["peer"])
    return {
        "call": "call %d (m %d)" % (s["call"], s["rows"]),
        "tile": "tile %d" % tile,
        "wait": "wait tile %d <- rank %d" % (tile, peer),
        "matmul": "matmul tile %d <- rank %d" % (tile, peer),
        "send": "send tile %d -> rank %d" % (tile, peer),
        "signal": "signal -> rank %d" % peer,
        "exchange": "alltoall (unfused)",
        "work": "compute tile %d <- rank %d" % (tile, peer),
    }.get(kind, kind)


def _args(kind, s):
    a = {}
    if s["call"] >= 0:
        a["call"] = int(s["call"])
    if s["tile"] >= 0:
        a["tile"] = int(s["tile"])
    if s["peer"] >= 0:
        a["to" if kind in ("send", "signal") else "source"] = int(s["peer"])
    if s["slot"] >= 0:
        a["slot"] = int(s["slot"])
    if kind in ("tile", "matmul", "call"):
        a["rows"] = int(s["rows"])
    for key in ("k", "bytes", "signal"):
        if s[key]:
            a[key] = int(s[key])
    return a


def _events(spans, origin):
    out = []
    for r, recs in enumerate(spans):
        out.append({"ph": "M", "name": "process_name", "pid": r, "args": {"name": "rank %d" % r}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": r, "args": {"sort_index": r}})
        out.append({"ph": "M", "name": "thread_name", "pid": r, "tid": 0,
                    "args": {"name": "rank %d's thread: waits, matmul calls (and its share of them), sends" % r}})
        work = recs[recs["kind"] == KINDS.index("work")]
        for th in range(1, int(work["thread"].max()) + 1 if len(work) else 1):
            out.append({"ph": "M", "name": "thread_name", "pid": r, "tid": th,
                        "args": {"name": "rank %d's compute thread %d" % (r, th)}})
        received = 0
        for s in recs:
            kind = KINDS[s["kind"]] if 0 <= s["kind"] < len(KINDS) else "?"
            ts, dur = (s["t0"] - origin) / 1e3, (s["t1"] - s["t0"]) / 1e3
            if kind == "signal":
                e = {"ph": "i", "s": "t", "name": _name(kind, s), "cat": kind, "pid": r, "tid": 0, "ts": ts}
            else:
                e = {"ph": "X", "name": _name(kind, s), "cat": kind, "pid": r,
                     "tid": int(s["thread"]) if kind == "work" else 0, "ts": ts, "dur": dur}
            e["args"] = _args(kind, s)
            out.append(e)
            if kind in ("wait", "exchange") and s["bytes"]:
                received += int(s["bytes"])
                out.append({"ph": "C", "name": "bytes received", "pid": r, "ts": ts + dur,
                            "args": {"bytes": received}})
    return out


def _write(path, spans, drops, op):
    starts = [int(recs["t0"].min()) for recs in spans if len(recs)]
    origin = min(starts) if starts else 0
    calls = [recs[recs["kind"] == 0] for recs in spans]
    m = max((int(c["rows"].max()) for c in calls if len(c)), default=op.max_m)
    comm = op.comm
    meta = {"tool": "a2amm (Python, op.trace)", "op": op.kind, "M": m, "K": op.k, "N": op.n, "R": comm.size,
            "mode": "python", "transport": comm.transport, "path": op.path, "schedule": op.schedule,
            "tile_m": op.tile_m, "depth": op.depth, "threads": op.threads,
            "clock": "CLOCK_MONOTONIC of each rank, minus the origin", "origin_ns": origin,
            "clock_offsets_ns": [0] * comm.size,
            "clock_offsets_how": "none: every rank reads this machine's clock" if comm.transport == "shm"
            else "none measured: ranks on several machines read their own clocks",
            "spans_dropped": drops,
            "summary": "op.trace from Python: %d calls on rank 0" % len(calls[0]) if calls else ""}
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        with open(tmp, "w") as f:
            f.write('{"displayTimeUnit":"ms","traceEvents":[\n')
            events = _events(spans, origin)
            f.write(",\n".join(json.dumps(e, separators=(",", ":")) for e in events))
            f.write('\n],\n"otherData":')
            json.dump(meta, f, separators=(",", ":"))
            f.write("}\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
