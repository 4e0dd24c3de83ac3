#!/usr/bin/env python3
"""a2amm from Python: R ranks, each quantizing its own data to MXFP8, then one fused AllToAll + matmul,
checked against the single-rank matmul on the rows it received. The Python twin of examples/fused_op.c.

    python3 examples/fused_op.py                   # 2 ranks forked by a2amm.launch
    mpirun --allow-run-as-root --oversubscribe -np 2 python3 examples/fused_op.py
                                                   # the same ranks as an MPI job (mpi4py), on one machine
                                                   # or several (--transport mpi to force MPI messages)

Each rank prints how many values of its result are off the check: a value is off when it differs from
the single-rank matmul's by over |value|/64 + 0.001 (the two sum K in different orders, so their bf16
results may round apart). Exit 0 and "fused_op: OK" when no value is off.
--save DIR writes each rank's result (bf16 bits) to DIR/rank<r>.npy.
"""
import argparse
import os
import sys

import numpy as np

import a2amm

R, M, K, N = 2, 96, 256, 64  # K/R = 128 values of K per rank


def value(r, rows, cols):
    """Rank r's activations, deterministic: sin(0.1 (r 7919 + row 131 + col)), as fused_op.c has them."""
    return np.sin(0.1 * (r * 7919 + rows[:, None] * 131 + cols[None, :])).astype(np.float32)


def rank_main(comm, save=None):
    me, ka = comm.rank, K // R
    # my A_r [R*M, K/R] (block j for rank j) and my weights B_r^T [N, K], quantized to MXFP8
    x = value(me, np.arange(R * M), np.arange(ka))
    w = value(100 + me, np.arange(N), np.arange(K)) / 16
    a, sa = a2amm.quantize(x, "e4m3", "rceil")
    b, sb = a2amm.quantize(w, "e4m3", "rceil")

    # the op, made once; weights set once; one collective call per step
    with a2amm.Op(comm, max_m=M, k=K, n=N, path="put", tile_m=32) as op:
        op.set_weights(b, sb)
        out = op(a, sa)  # bf16 bits [M, N] (numpy uint16)

    # the check: the rows I received (block `me` of every rank's A, side by side along K) times my B
    got = np.concatenate([value(j, me * M + np.arange(M), np.arange(ka)) for j in range(R)], axis=1)
    ga, gsa = a2amm.quantize(got, "e4m3", "rceil")
    with a2amm.Weights(b, sb) as wb:
        want = a2amm.matmul(ga, gsa, wb, threads=1)
    g, v = a2amm.bf16_to_float32(out), a2amm.bf16_to_float32(want)
    far = int((np.abs(g - v) > np.abs(v) / 64 + 1e-3).sum())  # the sums differ only in their order
    print("rank %d: %d x %d result, %d values off the check" % (me, M, N, far), flush=True)
    if save:
        np.save(os.path.join(save, "rank%d.npy" % me), out)
    return far


def started_by_mpirun():
    return any(v in os.environ for v in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mpi", action="store_true", help="an MPI job's rank (the default under mpirun)")
    p.add_argument("--transport", default="auto", choices=["auto", "shm", "mpi"], help="Comm.from_mpi's transport")
    p.add_argument("--save", metavar="DIR", help="write each rank's result to DIR/rank<r>.npy")
    args = p.parse_args()
    if args.save:
        os.makedirs(args.save, exist_ok=True)
    if args.mpi or started_by_mpirun():
        from mpi4py import MPI
        world = MPI.COMM_WORLD
        if world.size != R:
            if world.rank == 0:
                print("fused_op: run it with mpirun -np %d (got %d ranks)" % (R, world.size), file=sys.stderr)
            return 1
        with a2amm.Comm.from_mpi(world, transport=args.transport) as comm:
            far = rank_main(comm, args.save)
            how = "mpirun, transport %s" % comm.transport
        far = world.allreduce(far)
        if world.rank != 0:
            return 1 if far else 0
    else:
        far = sum(a2amm.launch(R, rank_main, args.save))
        how = "a2amm.launch"
    if far:
        print("fused_op: %d values off the check" % far, file=sys.stderr)
        return 1
    print("fused_op: OK (a2amm %s, %s)" % (a2amm.__version__, how))
    return 0


if __name__ == "__main__":
    sys.exit(main())
