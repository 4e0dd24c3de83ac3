"""Comm.alltoallv, the uneven AllToAll (the first piece of expert parallelism, issue 29): sizes by pair and
round, zeros among them, under a2amm.launch (R = 1, 2, 4) and mpirun (shared memory and MPI messages); a bad
block list fails every rank."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import a2amm
from conftest import mpirun_cmd, needs_mpi, needs_torch, shared_text


def uneven_blocks(me, R, round_):
    """What rank `me` sends each rank in a round: sizes by pair and round (zeros among them), float32 rows."""
    rng = np.random.default_rng(1000 * round_ + 17 * me)
    rows = [0 if (me + j + round_) % 3 == 0 else int(rng.integers(1, 40)) for j in range(R)]
    return [np.full((rows[j], 5), me * 100 + j + round_ / 8, np.float32) for j in range(R)]


@pytest.mark.parametrize("R", [1, 2, 4])
def test_comm_alltoallv_under_launch(R):
    def rank(comm):
        got = []
        for round_ in range(3):
            recv = comm.alltoallv(uneven_blocks(comm.rank, R, round_))
            got.append([r.view(np.float32).reshape(-1, 5) for r in recv])
        return got

    results = a2amm.launch(R, rank)
    for j in range(R):
        for round_ in range(3):
            for i in range(R):
                np.testing.assert_array_equal(results[j][round_][i], uneven_blocks(i, R, round_)[j],
                                              "rank %d, round %d, from rank %d" % (j, round_, i))


@needs_torch
def test_comm_alltoallv_takes_torch_tensors():
    """torch CPU tensors as blocks, as every other call takes them (float32, and bf16 by its bits); the
    rows arrive as uint8 bytes. A tensor on another device is refused, naming the block."""
    import torch

    def rank(comm):
        blocks = [torch.full((comm.rank + 1, 3), 10.0 * comm.rank + j) for j in range(2)]
        blocks[1] = blocks[1].to(torch.bfloat16)
        recv = comm.alltoallv(blocks)
        return [r.tobytes() for r in recv]

    got = a2amm.launch(2, rank)
    for j in range(2):
        for i in range(2):
            sent = torch.full((i + 1, 3), 10.0 * i + j)
            want = (sent.to(torch.bfloat16).view(torch.int16) if j == 1 else sent).numpy().tobytes()
            assert got[j][i] == want, (j, i)

    def meta(comm):
        comm.alltoallv([torch.zeros(2), torch.zeros(2, device="meta")])

    with pytest.raises(a2amm.Error, match=r"blocks\[1\] is on meta: a2amm takes CPU tensors"):
        a2amm.launch(2, meta)


def test_comm_alltoallv_refuses_bad_blocks_and_fails_the_others():
    said = shared_text(2)

    def rank(comm):
        try:
            if comm.rank == 0:
                comm.alltoallv([b"x"])  # one block for two ranks
            else:
                comm.alltoallv([b"a", b"bc"])
        except BaseException as e:
            said.put(comm.rank, "%s|%s" % (type(e).__name__, e))
            raise

    with pytest.raises(a2amm.Error):
        a2amm.launch(2, rank)
    assert said.get(0) == "ValueError|alltoallv: blocks must hold one buffer per rank, 2; got 1", said.get(0)
    assert said.get(1).startswith("PeerError|"), said.get(1)


@needs_mpi
@pytest.mark.parametrize("transport", ["shm", "mpi"])
def test_comm_alltoallv_under_mpirun(tmp_path, transport):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import sys
        import numpy as np
        import a2amm
        from mpi4py import MPI
        sys.path.insert(0, %r)
        from test_alltoallv import uneven_blocks
        with a2amm.Comm.from_mpi(MPI.COMM_WORLD, transport=sys.argv[1]) as comm:
            for round_ in range(3):
                recv = comm.alltoallv(uneven_blocks(comm.rank, comm.size, round_))
                for i, r in enumerate(recv):
                    want = uneven_blocks(i, comm.size, round_)[comm.rank]
                    assert np.array_equal(r.view(np.float32).reshape(-1, 5), want), (comm.rank, round_, i)
            print("rank %%d on %%s: ok" %% (comm.rank, comm.transport), flush=True)
    """ % os.path.dirname(os.path.abspath(__file__))))
    p = subprocess.run(mpirun_cmd(3) + [sys.executable, str(script), transport], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    for r in range(3):  # (the ranks' lines may interleave)
        assert "rank %d on %s: ok" % (r, transport) in p.stdout, p.stdout
