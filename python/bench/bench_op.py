#!/usr/bin/env python3
"""The Python call of the op beside the C call (a2amm_op_run), side by side in the same ranks, on the same
op and arrays: what the Python layer costs per call.

    python3 python/bench/bench_op.py M K N R [--iters 10] [--rounds 3] [--flush] [--json]

In each of R ranks (a2amm.launch), ROUNDS x ITERS turns of three calls: the Python op (op(a, sa, out=out)),
op(a, sa) (its result allocated), and a2amm_op_run made by the extension in C (no Python, no observer: as
a C program calls it), in turn, each turn starting with the next of them, so that a slow phase of a
shared machine hits them all. Every call starts at a barrier; with --flush the caches are flushed before
each (as `a2amm bench api` does: 2 x the last-level cache / R per rank); a call's time is the slowest
rank's. Prints the medians, the Python call's overhead over the C call, and the median of each turn's
Python / C ratio.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

import a2amm


def llc_bytes():
    try:
        for idx in sorted(os.listdir("/sys/devices/system/cpu/cpu0/cache")):
            d = "/sys/devices/system/cpu/cpu0/cache/" + idx
            if open(d + "/level").read().strip() == "3":
                size = open(d + "/size").read().strip()
                return int(size[:-1]) * (1024 if size.endswith("K") else 1 << 20)
    except OSError:
        pass
    return 32 << 20


def rank(comm, M, K, N, iters, rounds, flush, threads, path, tile_m):
    R, me = comm.size, comm.rank
    rng = np.random.default_rng(me)
    # floats uniform in [-1, 1], MX-quantized (as `a2amm bench moe` and `bench grouped` draw them): codes drawn
    # uniformly would put a zero or subnormal code in nearly every block, which real data almost never has
    a, sa = a2amm.quantize(rng.uniform(-1, 1, (R * M, K // R)).astype(np.float32))
    b, sb = a2amm.quantize(rng.uniform(-1, 1, (N, K)).astype(np.float32))
    out = np.empty((M, N), np.uint16)
    junk = np.zeros(max(8 << 20, 2 * llc_bytes() // R), np.uint8) if flush else None
    with a2amm.Op(comm, max_m=M, k=K, n=N, threads=threads, path=path, tile_m=tile_m) as op:
        op.set_weights(b, sb)

        def python():
            comm.barrier()
            t0 = time.perf_counter()
            op(a, sa, out=out)
            return time.perf_counter() - t0

        def python_alloc():
            comm.barrier()
            t0 = time.perf_counter()
            op(a, sa)
            return time.perf_counter() - t0

        def c():
            return op._c_loop(a, sa, out, 1, True)[0]  # its own barrier, then the timed call

        variants = [("python", python), ("python, out allocated", python_alloc), ("C (a2amm_op_run)", c)]
        t = {name: [] for name, _ in variants}
        python(), c()  # warm-up
        # call by call, the three in turn (starting with each in turn): a slow phase hits them all
        for i in range(rounds * iters):
            for j in range(3):
                name, fn = variants[(i + j) % 3]
                if flush:
                    junk += 1
                t[name].append(fn())
    return t


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for dim in ("M", "K", "N", "R"):
        p.add_argument(dim, type=int)
    p.add_argument("--iters", type=int, default=10, help="calls per round and variant (default 10)")
    p.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    p.add_argument("--flush", action="store_true", help="flush the caches before every call")
    p.add_argument("--threads", type=int, default=0, help="compute threads per rank (default: cores / R)")
    p.add_argument("--path", default=None, choices=["direct", "put"], help="default: direct")
    p.add_argument("--tile-m", type=int, default=0, help="rows per tile (default 512)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = p.parse_args()
    M, K, N, R = args.M, args.K, args.N, args.R
    heap = a2amm.Op.heap_bytes(R, M, K, N, path=args.path or "direct", tile_m=args.tile_m) + (16 << 20)
    res = a2amm.launch(R, rank, M, K, N, args.iters, args.rounds, args.flush, args.threads, args.path, args.tile_m,
                       heap_bytes=heap)
    slowest = {k: [max(r[k][i] for r in res) for i in range(len(res[0][k]))] for k in res[0]}
    med = {k: statistics.median(v) for k, v in slowest.items()}
    c = med["C (a2amm_op_run)"]
    cs = slowest["C (a2amm_op_run)"]
    # each call against the C call of the same turn: the median of the ratios
    paired = {k: statistics.median(x / y for x, y in zip(v, cs)) for k, v in slowest.items()}
    flop = 2.0 * M * N * K * R
    if args.json:
        print(json.dumps({"M": M, "K": K, "N": N, "R": R, "iters": args.iters, "rounds": args.rounds,
                          "flush": args.flush, "median_s": med, "min_s": {k: min(v) for k, v in slowest.items()},
                          "python_overhead_s": med["python"] - c, "python_over_c": med["python"] / c,
                          "paired_python_over_c": paired["python"]}))
        return 0
    print("a2amm Python bench: M=%d K=%d N=%d R=%d, %d rounds of %d calls each%s, %.3g GFLOP a call" % (
        M, K, N, R, args.rounds, args.iters, ", caches flushed" if args.flush else "", flop / 1e9))
    print("  %-26s %12s %12s %12s" % ("", "min us", "median us", "max us"))
    for k, v in slowest.items():
        print("  %-26s %12.1f %12.1f %12.1f" % (k, min(v) * 1e6, med[k] * 1e6, max(v) * 1e6))
    for k in ("python", "python, out allocated"):
        print("  %s - C (medians): %+.1f us a call, %+.2f%%; the paired ratio's median %.4f" % (
            k, (med[k] - c) * 1e6, (med[k] / c - 1) * 100, paired[k]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
