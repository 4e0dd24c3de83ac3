"""One rank of an MPI job for test_mpi.py: mpirun -np R python3 mpi_job.py MODE TRANSPORT OUTDIR.

MODE op: the op on numpy and on torch inputs (rank_inputs of conftest), each rank's result saved to
OUTDIR/<r>.npz for the test to check against fp64; raise / kill: rank 1 raises / is killed after a first
call while the others call again, saying in OUTDIR/<r>.txt what they got and how long it took; direct:
path="direct" on the communicator (refused)."""
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

with a2amm.Comm.from_mpi(world, transport=transport) as comm:
    assert (comm.rank, comm.size) == (world.rank, world.size)
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
