#!/usr/bin/env python3
"""An MoE layer with expert parallelism on CPUs: a router (nn.Linear to E logits, softmax in fp32, top-k,
weights renormalized to sum 1), then a2amm.MoE: each rank keeps E/R experts (SwiGLU, MXFP8 weights), its
tokens go to the ranks of their experts and come back weighted and summed.

    python3 examples/moe_layer.py                  # 2 ranks forked by a2amm.launch
    python3 examples/moe_layer.py --ranks 4 --skew --empty-rank
    mpirun --allow-run-as-root --oversubscribe -np 2 python3 examples/moe_layer.py   # the same ranks as an MPI job

Every rank checks its tokens against the same layer computed in this one process by plain torch (the
experts as nn.Linear modules holding the dequantized MX weights, the same routing), in fp64, within the
bound docs/op-contract.md derives for each value ("The MoE op": the bf16 roundings of the activation and
the result and the fp32 sums, with their absolute part below the smallest normal). Each rank prints how
many values are off their bound and its worst |difference| as a fraction of that value's bound: any
figure up to 1 is within the contract (the bound is a worst case, where every rounding errs the same
way; real roundings partly cancel, so a fraction well under 1 is the usual). Then tokens/s of the layer,
and of the way without expert parallelism beside it (every rank gathers every token, runs its experts on
those routed to it in torch, and the results are reduce-scattered). Exit 0 and "moe_layer: OK" when
every value is within its bound; a bad option exits 2 saying why.
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

import a2amm

H, I, E, K = 256, 128, 8, 2  # hidden, expert inner size, experts, top-k


def layer_weights():
    """The layer everyone builds alike: the router and every expert's float weights."""
    g = torch.Generator().manual_seed(7)
    router = torch.nn.Linear(H, E, bias=False)
    with torch.no_grad():
        router.weight.copy_(torch.randn(E, H, generator=g) / 16)
    w13 = torch.randn(E, 2 * I, H, generator=g) / 16  # gate rows, then up rows (nn.Linear's [out, in])
    w2 = torch.randn(E, H, I, generator=g) / 16
    return router, w13, w2


def tokens_of(rank, T, skew):
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(T, H, generator=g)
    if skew:  # a popular expert: every token leans towards expert 0's router row
        x += (32 * layer_weights()[0].weight[0]).detach()
    return x


def route(router, x):
    """softmax in fp32, top-k, weights renormalized to sum 1: (ids int64 [T, K], weights float32 [T, K])."""
    with torch.no_grad():
        p = torch.softmax(router(x).float(), dim=-1)
        w, ids = torch.topk(p, K, dim=-1)
        return ids, (w / w.sum(dim=-1, keepdim=True)).float()


def mx_dequantized(v):
    """v's MX values (blocks of 32 along the last axis, the op's rceil quantization) as float64."""
    codes, scales = a2amm.quantize(v.reshape(-1, v.shape[-1]).contiguous(), "e4m3", "rceil")
    return a2amm.dequantize(codes, scales).double().reshape(v.shape)


class TorchExperts(torch.nn.Module):
    """The same experts as plain torch modules (SwiGLU), holding the dequantized MX weights, in fp64."""

    def __init__(self, w13, w2):
        super().__init__()
        self.w1 = torch.nn.ModuleList(torch.nn.Linear(H, I, bias=False).double() for _ in range(E))
        self.w3 = torch.nn.ModuleList(torch.nn.Linear(H, I, bias=False).double() for _ in range(E))
        self.w2 = torch.nn.ModuleList(torch.nn.Linear(I, H, bias=False).double() for _ in range(E))
        d13, d2 = mx_dequantized(w13), mx_dequantized(w2)
        with torch.no_grad():
            for e in range(E):
                self.w1[e].weight.copy_(d13[e, :I]), self.w3[e].weight.copy_(d13[e, I:]), self.w2[e].weight.copy_(d2[e])

    def forward(self, x, ids, w, R):
        """out [T, H] in fp64, and the contract's bound for each value (R ranks)."""
        x = mx_dequantized(x)
        out, bound1, bound2 = (torch.zeros(x.shape[0], H, dtype=torch.float64) for _ in range(3))
        eta8, eta24 = 2.0 ** -133, 2.0 ** -149  # a bf16 and an fp32 rounding below the smallest normal
        absolute = torch.full((x.shape[0], H), eta8, dtype=torch.float64)  # the contract's A: out's rounding
        for t in range(x.shape[0]):
            for j in range(K):
                e = int(ids[t, j])
                g, u = self.w1[e](x[t]), self.w3[e](x[t])
                silu = torch.nn.functional.silu(g)
                a = silu * u
                out[t] += float(w[t, j]) * self.w2[e](a)
                sg, su = self.w1[e].weight.abs() @ x[t].abs(), self.w3[e].weight.abs() @ x[t].abs()
                bound1[t] += abs(float(w[t, j])) * (self.w2[e].weight.abs() @ a.abs())
                bound2[t] += abs(float(w[t, j])) * (self.w2[e].weight.abs() @ (1.1 * u.abs() * sg + silu.abs() * su))
                z = self.w2[e].weight.abs() @ (eta8 + (H + 1) * eta24 * (1 + 1.1 * u.abs() + silu.abs()))
                absolute[t] += eta8 + eta24 + abs(float(w[t, j])) * (I * eta24 + z)
        u8, u24 = 2.0 ** -8, 2.0 ** -24
        return out, u8 * out.abs() + (2 * u8 + (I + K + R + 8) * u24) * bound1 + H * u24 * bound2 + absolute


def gathered_way(comm, router, w13, w2, x, T):
    """Without expert parallelism: every token to every rank (an AllToAll of the same block to all, padded to
    T), each rank's experts in torch on the tokens routed to them, the weighted results reduce-scattered
    (an AllToAll, then each rank sums what it got for its own tokens)."""
    R, r, L = comm.size, comm.rank, E // comm.size
    pad = torch.zeros(T, H)
    pad[:x.shape[0]] = x
    everyone = comm.alltoall(np.stack([pad.numpy()] * R)).reshape(R * T, H)
    xs = torch.from_numpy(everyone)
    ids, w = route(router, xs)
    partial = torch.zeros(R * T, H)
    for le in range(L):
        e = r * L + le
        rows, slots = (ids == e).nonzero(as_tuple=True)
        if len(rows):
            h = xs[rows]
            a = torch.nn.functional.silu(h @ w13[e, :I].T) * (h @ w13[e, I:].T)
            partial.index_add_(0, rows, (a @ w2[e].T) * w[rows, slots, None])
    back = comm.alltoall(partial.numpy().reshape(R, T, H))
    return torch.from_numpy(back.sum(axis=0))[:x.shape[0]]


def rank_main(comm, T, skew, empty_rank, iters=3):
    torch.set_num_threads(1)
    R, r = comm.size, comm.rank
    router, w13, w2 = layer_weights()
    mine = 0 if empty_rank and r == R - 1 else T
    x = tokens_of(r, mine, skew)
    ids, w = route(router, x)
    L = E // R
    with a2amm.MoE(comm, experts=E, topk=K, hidden=H, inter=I, max_tokens=T) as moe:
        moe.set_weights(w13[r * L:(r + 1) * L], w2[r * L:(r + 1) * L])
        out = moe(x, ids, w)  # torch.bfloat16 [mine, H]
        comm.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            moe(x, ids, w)
        comm.barrier()
        ours = (time.perf_counter() - t0) / iters
    gathered_way(comm, router, w13, w2, x, T)  # warm-up, as the op's first call was
    comm.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        gathered_way(comm, router, w13, w2, x, T)
    comm.barrier()
    theirs = (time.perf_counter() - t0) / iters
    want, bound = TorchExperts(w13, w2)(x, ids, w, R)
    diff = (out.double() - want).abs()
    worst = float((diff / bound).max()) if mine else 0.0
    off = int((diff > bound).sum())
    print("rank %d: %d tokens, %d values off the bound, worst |difference| %.3g of its bound (within it up to 1; "
          "max |difference| %.3g)" % (r, mine, off, worst, float(diff.max()) if mine else 0.0), flush=True)
    return off, ours, theirs, mine


def started_by_mpirun():
    return any(v in os.environ for v in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"))


MAX_TOKENS = 4096  # the fp64 torch check runs token by token: more would take minutes


def whole_number(low, high, what):
    """An argparse type: a whole number from low to high, else an error saying what it is for."""
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            v = None
        if v is None or not low <= v <= high:
            raise argparse.ArgumentTypeError("must be a whole number from %d to %d (%s); got %r"
                                             % (low, high, what, text))
        return v
    return parse


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=whole_number(1, E, "ranks of a2amm.launch; E = %d must divide by it" % E),
                   default=2, help="ranks of a2amm.launch: 1, 2, 4 or 8 (E = 8 experts divide among them; "
                   "default 2; under mpirun the job's size)")
    p.add_argument("--tokens", type=whole_number(1, MAX_TOKENS, "each rank's tokens, the op's max_tokens; "
                                                 "--empty-rank gives the last rank none"),
                   default=32, help="tokens each rank routes (1 to %d, default 32; the op's max_tokens)" % MAX_TOKENS)
    p.add_argument("--skew", action="store_true", help="route most tokens to expert 0")
    p.add_argument("--empty-rank", action="store_true", help="the last rank has no tokens (a call with 0 tokens)")
    p.add_argument("--transport", default="auto", choices=["auto", "shm", "mpi"],
                   help="Comm.from_mpi's transport under mpirun (default auto)")
    args = p.parse_args()
    if E % args.ranks:
        p.error("argument --ranks: must divide E = %d (1, 2, 4 or 8); got %d" % (E, args.ranks))
    if started_by_mpirun():
        from mpi4py import MPI
        world = MPI.COMM_WORLD
        with a2amm.Comm.from_mpi(world, transport=args.transport) as comm:
            res = rank_main(comm, args.tokens, args.skew, args.empty_rank)
            how = "mpirun, %d ranks, transport %s" % (world.size, comm.transport)
        results = world.allgather(res)
        if world.rank != 0:
            return 1 if any(r[0] for r in results) else 0
    else:
        results = a2amm.launch(args.ranks, rank_main, args.tokens, args.skew, args.empty_rank)
        how = "a2amm.launch, %d ranks" % args.ranks
    off = sum(r[0] for r in results)
    ours, theirs = max(r[1] for r in results), max(r[2] for r in results)
    tokens = sum(r[3] for r in results)
    print("moe_layer (%s): a2amm.MoE %.0f tokens/s of the layer; gather every token + reduce-scatter %.0f tokens/s"
          % (how, tokens / ours, tokens / theirs))
    print("moe_layer: %s" % ("OK" if off == 0 else "%d values off the bound" % off))
    return 0 if off == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
