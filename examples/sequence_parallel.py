#!/usr/bin/env python3
"""Sequence-parallel (Ulysses) attention from a2amm's two ops, in torch: one attention block over R ranks.
The Python twin of examples/sequence_parallel.c. The sequence has S = R*M tokens of hidden size
H = heads * d; rank r starts with tokens r*M .. r*M+M-1 and ends with the same tokens after the block:

  1. QKV projection + AllToAll (a2amm.Op kind="matmul-alltoall"): my tokens [M, H] x W_qkv [H, 3H];
     column block j of the result goes to rank j, so rank j gets Q, K and V of its heads (j*heads/R ..)
     for all S tokens: [S, 3H/R] bf16, rows i*M .. from rank i (so row t is token t).
  2. Attention on those heads with torch's own ops (torch 1.13: matmul, a causal mask, softmax), in fp32,
     CAUSAL (token i attends to tokens 0..i of the whole sequence, as in a decoder).
  3. Its output quantized to MXFP8 (a2amm.quantize, blocks of 32 along each row: H/R a multiple of 32).
  4. AllToAll + output projection (a2amm.Op kind="alltoall-matmul"): every rank's rows for my tokens,
     side by side by heads, x W_o [H, H] -> my [M, H] bf16.

Every rank then computes the same block in one process, with no op and no AllToAll (a2amm.matmul for
both projections, on the weights in their plain order, and the same attention function head group by
head group), from the same MX data, and compares its own M rows. Steps 1-3 give the same bits there (the
reverse op's values are a2amm.matmul's bits, checked exactly here; the attention is the same torch code
on the same numbers and shapes); step 4 does not quite: the op sums K starting at the rank's own block of
K, a2amm.matmul from 0, so the fp32 sums differ in their last bits and a bf16 result may round the other
way. The check allows 2 bf16 ulps, or an absolute 2^-12 of the largest |value| of the rank's result (a sum
that cancels to near zero has tiny ulps but the fp32 error of its large terms), as the C example does,
and prints the worst difference.

    python3 examples/sequence_parallel.py [R [M [heads [d]]]]         # a2amm.launch (defaults: 4 64 8 64)
    mpirun --allow-run-as-root --oversubscribe -np 4 python3 examples/sequence_parallel.py [R [M [heads [d]]]]
                                                                     # an MPI job (mpi4py); R is
                                                                     # the job's size: give the same or none

Rank 0 prints each step's time on every rank (an op's includes waiting for the slowest rank to arrive),
the max over ranks and each rank's check, then "sequence_parallel: OK"; exit 0. A bad argument exits 2,
a failed check or run 1. --save DIR writes each rank's result (bf16 bits) to DIR/rank<r>.npy.
"""
import argparse
import math
import os
import sys
import time

import numpy as np
import torch

import a2amm

FMT, MODE = "e4m3", "rceil"  # every MX array here: activations and weights
STEPS = ("QKV+AllToAll", "attention", "quantize", "AllToAll+proj")


class Shape:
    def __init__(self, R, M, heads, d):
        self.R, self.M, self.heads, self.d = R, M, heads, d
        self.S, self.H = R * M, heads * d
        self.Hr, self.heads_r = self.H // R, heads // R  # one rank's heads: their hidden columns, their count

    def problem(self):
        """Why these numbers cannot make the block, or None."""
        if self.heads % self.R:
            return "heads (%d) must be divisible by R (%d): each rank takes heads/R whole heads" % (
                self.heads, self.R)
        if self.Hr % 32:
            return ("H/R = heads*d/R = %d must be a multiple of 32: each rank's attention output is quantized in "
                    "MX blocks of 32 along its rows (try d = 32 or 64)" % (self.heads * self.d // self.R))
        return None


# ---- data: the same on every rank (each takes its part) --------------------------------------------------

def hidden_states(s):
    """The whole sequence's input [S, H] fp32, deterministic."""
    return np.random.default_rng(1).uniform(-1, 1, (s.S, s.H)).astype(np.float32)


def weights(s):
    """W_qkv [3H, H] and W_o [H, H], MXFP8, B transposed as a2amm takes it (one row per output feature, MX
    blocks along the H input features), scaled by 1/sqrt(H), in their plain order:
      W_qkv row part*H + h*d + e is feature e of head h's Q (part 0), K (1) or V (2);
      W_o row n is output feature n; its column h*d + e reads feature e of head h."""
    rng = np.random.default_rng(2)
    wqkv = rng.uniform(-1, 1, (3 * s.H, s.H)).astype(np.float32) / math.sqrt(s.H)
    wo = rng.uniform(-1, 1, (s.H, s.H)).astype(np.float32) / math.sqrt(s.H)
    return a2amm.quantize(wqkv, FMT, MODE), a2amm.quantize(wo, FMT, MODE)


def qkv_rows_by_rank(s, rows):
    """W_qkv's rows (codes or scales) in the order the matmul-alltoall op wants: column block j of its result
    (rows j*3Hr .. of its B) goes to rank j, so block j holds the Q, K and V rows of rank j's heads: row
    (3j + part)*Hr + c of the op's B is row part*H + j*Hr + c of W_qkv."""
    return np.ascontiguousarray(rows.reshape(3, s.R, s.Hr, -1).transpose(1, 0, 2, 3).reshape(3 * s.H, -1))


# ---- attention (torch) -----------------------------------------------------------------------------------

def attention(qkv, heads, d):
    """Causal attention of `heads` heads over S tokens, fp32: qkv [S, 3*heads*d] (Q of every head, head h at
    columns h*d, then K, then V) -> [S, heads*d], head h at columns h*d."""
    S, hd = qkv.shape[0], heads * d
    q, k, v = (qkv[:, i * hd:(i + 1) * hd].reshape(S, heads, d).transpose(0, 1).contiguous() for i in range(3))
    scores = torch.matmul(q, k.transpose(1, 2)) / math.sqrt(d)            # [heads, S, S]
    future = torch.ones(S, S, dtype=torch.bool).triu(1)                   # token i sees tokens 0..i only
    p = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    return torch.matmul(p, v).transpose(0, 1).reshape(S, hd).contiguous()


# ---- one rank's block --------------------------------------------------------------------------------------

def make_ops(comm, s, wqkv, wo):
    """Collective: both ops made, their weights set (the put path: the one every transport has)."""
    qkv = a2amm.Op(comm, "matmul-alltoall", max_m=s.M, k=s.H, n=3 * s.H, path="put")
    proj = a2amm.Op(comm, "alltoall-matmul", max_m=s.M, k=s.H, n=s.H, path="put")
    qkv.set_weights(qkv_rows_by_rank(s, wqkv[0]), qkv_rows_by_rank(s, wqkv[1]))
    proj.set_weights(*wo)
    return qkv, proj


def run_block(s, ops, x, sx):
    """Collective: the block on this rank from my tokens' MX data (torch uint8 [M, H], [M, H/32]). Returns
    (my [M, H] bf16, the QKV op's [S, 3Hr] bf16, each step's seconds)."""
    op_qkv, op_proj = ops
    t = [time.perf_counter()]
    qkv = op_qkv(x, sx)                                  # [S, 3Hr] bf16: Q, K, V of my heads, every token
    t.append(time.perf_counter())
    attn = attention(qkv.float(), s.heads_r, s.d)        # [S, Hr] fp32
    t.append(time.perf_counter())
    a, sa = a2amm.quantize(attn, FMT, MODE)              # block j (rows j*M ..) for rank j
    t.append(time.perf_counter())
    out = op_proj(a, sa)                                 # [M, H] bf16: my tokens, every head, projected
    t.append(time.perf_counter())
    return out, qkv, [t1 - t0 for t0, t1 in zip(t, t[1:])]


def reference_block(s, X, wqkv, wo):
    """The whole block in one process, no op, no AllToAll: [S, H] bf16, row t token t; and the QKV
    projection [S, 3H] bf16 (Q | K | V of every head)."""
    with a2amm.Weights(*wqkv, FMT, threads=1) as w:
        y = a2amm.matmul(*X, w, FMT, threads=1)
    yf = y.float()
    # the attention of each rank's heads as that rank runs it (the same function on the same shapes)
    parts = []
    for j in range(s.R):
        cols = [part * s.H + j * s.Hr + c for part in range(3) for c in range(s.Hr)]
        parts.append(attention(yf[:, cols], s.heads_r, s.d))
    a, sa = a2amm.quantize(torch.cat(parts, dim=1), FMT, MODE)
    with a2amm.Weights(*wo, FMT, threads=1) as w:
        return a2amm.matmul(a, sa, w, FMT, threads=1), y


def bf16_ulps(a, b):
    """The distance of two bf16 arrays in ulps (their bits as ordered integers)."""
    def ordered(x):
        x = x.view(torch.int16).numpy().astype(np.int64)
        return np.where(x < 0, -(x & 0x7FFF), x)
    return np.abs(ordered(a) - ordered(b))


def rank_block(comm, s, save=None):
    """One rank's whole run: the block (twice: the first pass warms up, the second is timed), then the
    check. Returns this rank's report."""
    torch.set_num_threads(1)  # one compute thread a rank (the ranks share the machine's cores)
    me = comm.rank
    X = a2amm.quantize(torch.from_numpy(hidden_states(s)), FMT, MODE)  # every token: for the check
    x, sx = X[0][me * s.M:(me + 1) * s.M], X[1][me * s.M:(me + 1) * s.M]  # my tokens (MX blocks run along rows)
    wqkv, wo = weights(s)
    ops = make_ops(comm, s, wqkv, wo)
    try:
        for _ in range(2):
            out, qkv, seconds = run_block(s, ops, x, sx)
    finally:
        for op in ops:
            op.close()
    want, y = reference_block(s, X, wqkv, wo)
    # step 1 exactly: column block `me` of every token's QKV projection, as the op's contract says
    mine = [part * s.H + me * s.Hr + c for part in range(3) for c in range(s.Hr)]
    qkv_exact = bool(torch.equal(qkv.view(torch.int16), y[:, mine].contiguous().view(torch.int16)))
    want = want[me * s.M:(me + 1) * s.M]
    ulps = bf16_ulps(out, want)
    diff = (out.float() - want.float()).abs()
    top = float(want.float().abs().max())
    off = int(((ulps > 2) & (diff > math.ldexp(top, -12)).numpy() | torch.isnan(diff).numpy()).sum())
    if save:
        np.save(os.path.join(save, "rank%d.npy" % me), out.view(torch.int16).numpy().view(np.uint16))
    return dict(seconds=seconds, checked=out.numel(), off=off, worst_ulps=int(ulps.max()),
                worst_abs=float(diff.max()), qkv_exact=qkv_exact)


def print_reports(s, reports, how):
    print("sequence_parallel: R = %d rank%s x M = %d tokens (S = %d), %d heads x d = %d (H = %d), causal attention "
          "(torch %s), MXFP8 %s, kernel %s, %s" % (s.R, "s" if s.R > 1 else "", s.M, s.S, s.heads, s.d, s.H,
                                                   torch.__version__, FMT, a2amm.kernel(), how))
    print("  rank  QKV+AllToAll   attention    quantize  AllToAll+proj  (ms)   result vs one process")
    for r, p in enumerate(reports):
        ms = [1e3 * t for t in p["seconds"]]
        print("  %4d  %12.3f  %10.3f  %10.3f  %13.3f         %d of %d values off, worst %d ulp (%.3g); QKV %s" % (
            r, *ms, p["off"], p["checked"], p["worst_ulps"], p["worst_abs"],
            "bit-identical" if p["qkv_exact"] else "NOT bit-identical to a2amm.matmul"))
    worst = [1e3 * max(p["seconds"][k] for p in reports) for k in range(len(STEPS))]
    print("   max  %12.3f  %10.3f  %10.3f  %13.3f" % tuple(worst))
    print("  (a value is off when it differs from the one-process block by over 2 bf16 ulps and by over 2^-12 of\n"
          "  the rank's largest |value|; worst: the largest difference in bf16 ulps, and (in brackets) absolute.\n"
          "  A few ulps off with 0 values off is fine: the op sums K from the rank's own block, the one-process\n"
          "  block from 0, so fp32 sums near zero may round to bf16 the other way)", flush=True)


def failures(reports):
    """Why the check failed, naming the first rank that failed it, or None."""
    for r, p in enumerate(reports):
        if p["off"]:
            return "rank %d: %d of %d values of its result are off the check (worst %d ulp)" % (
                r, p["off"], p["checked"], p["worst_ulps"])
        if not p["qkv_exact"]:
            return "rank %d: the QKV op's result is not a2amm.matmul's bits" % r
    return None


def heap_bytes(s):
    """The symmetric memory a rank needs: both ops (launch's and from_mpi's heap_bytes)."""
    return (a2amm.Op.heap_bytes(s.R, s.M, s.H, 3 * s.H, path="put", kind="matmul-alltoall") +
            a2amm.Op.heap_bytes(s.R, s.M, s.H, s.H, path="put", kind="alltoall-matmul"))


def started_by_mpirun():
    return any(v in os.environ for v in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("numbers", nargs="*", type=int, metavar="R M heads d",
                   help="ranks, tokens per rank, heads, head size (defaults: 4 64 8 64; under MPI R is the job's)")
    p.add_argument("--mpi", action="store_true", help="an MPI job's rank (the default under mpirun)")
    p.add_argument("--transport", default="auto", choices=["auto", "shm", "mpi"], help="Comm.from_mpi's transport")
    p.add_argument("--save", metavar="DIR", help="write each rank's result to DIR/rank<r>.npy")
    args = p.parse_args()
    mpi = args.mpi or started_by_mpirun()
    world = None
    if mpi:
        from mpi4py import MPI
        world = MPI.COMM_WORLD
    numbers = list(args.numbers) + [world.size if mpi else 4, 64, 8, 64][len(args.numbers):]
    problem = None
    if len(args.numbers) > 4:
        problem = "usage: sequence_parallel.py [R [M [heads [d]]]] (defaults: 4 64 8 64)"
    elif any(not 1 <= v <= top for v, top in zip(numbers, (64, 1 << 16, 1024, 1024))):
        problem = "R, M, heads and d must be whole numbers from 1 to 64, 65536, 1024 and 1024 (got %s)" % numbers
    elif mpi and numbers[0] != world.size:
        problem = "R = %d, but the job has %d ranks: run it with mpirun -np %d, or leave R out" % (
            numbers[0], world.size, numbers[0])
    s = Shape(*numbers)
    problem = problem or s.problem()
    if problem:  # the same on every rank: they all stop
        if not mpi or world.rank == 0:
            print("sequence_parallel: %s" % problem, file=sys.stderr)
        return 2
    if args.save:
        os.makedirs(args.save, exist_ok=True)
    if mpi:
        with a2amm.Comm.from_mpi(world, transport=args.transport, heap_bytes=heap_bytes(s)) as comm:
            report = rank_block(comm, s, args.save)
            how = "mpirun, transport %s" % comm.transport
        reports = world.gather(report, root=0)
        if world.rank != 0:
            return 0
    else:
        reports = a2amm.launch(s.R, rank_block, s, args.save, heap_bytes=heap_bytes(s))
        how = "a2amm.launch"
    print_reports(s, reports, how)
    why = failures(reports)
    if why:
        print("sequence_parallel: %s" % why, file=sys.stderr)
        return 1
    print("sequence_parallel: OK (a2amm %s)" % a2amm.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
