"""One rank of an MPI job for test_mpi.py: mpirun -np R python3 mpi_job.py MODE TRANSPORT OUTDIR.

MODE op: the op on numpy and on torch inputs (rank_inputs of conftest), each rank's result saved to
OUTDIR/<r>.npz for the test to check against fp64; reverse: the reverse op (matmul-alltoall) on numpy
inputs, fused and unfused, on each path the transport runs, and on torch inputs, saved to OUTDIR/<r>.npz
with X_r and B_r for the test to check against fp64 and a2amm.matmul's bits; raise / kill: rank 1 raises /
is killed after a first call while the others call again, saying in OUTDIR/<r>.txt what they got and how
long it took; direct: path="direct" on the communicator (refused)."""
import os
import signal
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mpi4py import MPI  # noqa: E402

import a2amm  # noqa: E402
from conftest import rank_inputs  # noqa: E402

mode, transport, outdir = sys.argv[1], sys.argv[2], sys.argv[3]
world = MPI.COMM_WORLD
R, M, K, N = world.size, 24, 64 * world.size, 40
X, W = rank_inputs(R, M, K, N, seed=11)


def reverse_op(comm, outdir):
    """The reverse op: X_r [M, K] x B_r [N, K]^T, column block j to rank j; every variant's result saved."""
    import torch
    torch.set_num_threads(1)
    rng = np.random.default_rng(21 + comm.rank)
    x, sx = a2amm.quantize(rng.standard_normal((M, K)).astype(np.float32))
    b, sb = a2amm.quantize((rng.standard_normal((N, K)) / 8).astype(np.float32))
    paths = ["put"] if comm.transport == "mpi" else ["direct", "put"]  # MPI messages: the put path only
    saved = dict(x=x, sx=sx, b=b, sb=sb, transport=comm.transport)
    for path in paths:
        for schedule in ("fused", "unfused"):
            with a2amm.Op(comm, "matmul-alltoall", max_m=M, k=K, n=N, tile_m=8, path=path, schedule=schedule) as op:
                op.set_weights(b, sb)
                saved["%s_%s" % (path, schedule)] = op(x, sx)
                if schedule == "fused":
                    tout = op(torch.from_numpy(x), torch.from_numpy(sx))
                    assert tout.dtype == torch.bfloat16 and tout.shape == (R * M, N // R)
                    saved["%s_torch" % path] = tout.view(torch.int16).numpy()
    comm.barrier()
    np.savez(os.path.join(outdir, "%d.npz" % comm.rank), **saved)


def the_op(comm, outdir):
    """The op (alltoall-matmul), or a rank failing (raise, kill) or refused (direct) in it."""
    me = comm.rank
    a, sa = a2amm.quantize(X[me])
    b, sb = a2amm.quantize(W[me])
    if mode == "direct":  # refused: over MPI messages the job ends (MPI_Abort), saying why
        a2amm.Op(comm, max_m=M, k=K, n=N, path="direct")
    with a2amm.Op(comm, max_m=M, k=K, n=N, tile_m=8) as op:
        op.set_weights(b, sb)
        out = op(a, sa)
        if mode == "op":
            import torch
            torch.set_num_threads(1)
            tout = op(torch.from_numpy(a), torch.from_numpy(sa))
            assert tout.dtype == torch.bfloat16
            comm.barrier()
            np.savez(os.path.join(outdir, "%d.npz" % me), out=out, torch_out=tout.view(torch.int16).numpy(), a=a,
                     sa=sa, b=b, sb=sb, transport=comm.transport, path=op.path)
        else:
            comm.barrier()
            if me == 1:
                time.sleep(0.2)
                if mode == "raise":
                    raise ValueError("rank 1 gives up")
                os.kill(os.getpid(), signal.SIGKILL)
            t0 = time.monotonic()
            try:
                while time.monotonic() - t0 < 30:
                    op(a, sa)
            except a2amm.PeerError as e:
                with open(os.path.join(outdir, "%d.txt" % me), "w") as f:
                    f.write("%.3f PeerError: %s" % (time.monotonic() - t0, e))
                raise


with a2amm.Comm.from_mpi(world, transport=transport) as comm:
    assert (comm.rank, comm.size) == (world.rank, world.size)
    (reverse_op if mode == "reverse" else the_op)(comm, outdir)
