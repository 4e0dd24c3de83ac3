#!/usr/bin/env python3
"""The Python call of the MoE op beside the C call (a2amm_moe_run), side by side in the same ranks, on the
same op and arrays: what the Python layer costs a decode call (issue 30: within 20 us of C).

    python3 python/bench/bench_moe.py [--ranks 2] [--tokens 1] [--hidden 256] [--inter 128] [--experts 8]
                                      [--topk 2] [--iters 20] [--rounds 5]

In each rank (a2amm.launch), ROUNDS turns of: ITERS Python calls on MX pairs (moe((codes, scales), ids, w):
the layer's argument checks and conversions, no quantization), ITERS Python calls on float32 x (quantized
in the call, as a model passes it), and ITERS calls of a2amm_moe_run made by the extension in C (no
Python). Every call starts at a barrier; a call's time is the slowest rank's. Prints the medians and the
Python calls' overhead over the C call in microseconds.
"""
import argparse
import statistics
import sys
import time

import numpy as np

import a2amm


def rank(comm, args):
    R, me = comm.size, comm.rank
    E, K, H, I, T = args.experts, args.topk, args.hidden, args.inter, args.tokens
    rng = np.random.default_rng(me)
    L = E // R
    w13 = (rng.standard_normal((L, 2 * I, H)) / 8).astype(np.float32)
    w2 = (rng.standard_normal((L, H, I)) / 8).astype(np.float32)
    x = rng.standard_normal((T, H)).astype(np.float32)
    ids = np.stack([rng.permutation(E)[:K] for _ in range(T)]).astype(np.int32)
    w = np.full((T, K), 1.0 / K, np.float32)
    codes, scales = a2amm.quantize(x, "e4m3", "rceil")
    out = np.empty((T, H), np.uint16)
    times = {"python, MX pairs": [], "python, float32 x": [], "C": []}
    with a2amm.MoE(comm, experts=E, topk=K, hidden=H, inter=I, max_tokens=T) as moe:
        moe.set_weights(w13, w2)
        moe((codes, scales), ids, w, out=out)  # warm-up
        for _ in range(args.rounds):
            for _ in range(args.iters):
                comm.barrier()
                t0 = time.perf_counter()
                moe((codes, scales), ids, w, out=out)
                times["python, MX pairs"].append(time.perf_counter() - t0)
            for _ in range(args.iters):
                comm.barrier()
                t0 = time.perf_counter()
                moe(x, ids, w, out=out)
                times["python, float32 x"].append(time.perf_counter() - t0)
            times["C"] += moe._c_loop(codes, scales, ids, w, out, args.iters)
    return times


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, default in (("ranks", 2), ("tokens", 1), ("hidden", 256), ("inter", 128), ("experts", 8), ("topk", 2),
                          ("iters", 20), ("rounds", 5)):
        p.add_argument("--" + name, type=int, default=default)
    args = p.parse_args()
    if args.experts % args.ranks or not 1 <= args.topk <= args.experts:
        p.error("experts must divide by ranks, and 1 <= topk <= experts")
    results = a2amm.launch(args.ranks, rank, args)
    slowest = {k: [max(r[k][i] for r in results) for i in range(len(results[0][k]))] for k in results[0]}
    med = {k: statistics.median(v) for k, v in slowest.items()}
    print("bench_moe: %d ranks, %d token(s) a rank, hidden %d, inter %d, %d experts, top-%d (a2amm %s, kernel %s)" % (
        args.ranks, args.tokens, args.hidden, args.inter, args.experts, args.topk, a2amm.__version__,
        a2amm.kernel()))
    for k, v in med.items():
        extra = "" if k == "C" else ", %+.1f us over the C call" % ((v - med["C"]) * 1e6)
        print("  %-18s median %.1f us%s" % (k, v * 1e6, extra))
    return 0


if __name__ == "__main__":
    sys.exit(main())
