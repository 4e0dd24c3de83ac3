"""a2amm.Comm.from_mpi under `mpirun -np 2` (on this machine: shared memory, or Open MPI messages when asked):
the op and the reverse op on numpy and torch inputs against fp64; a rank that raises or dies stops the others
within seconds."""
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import (HERE, assert_close, mpirun_cmd, needs_mpi, needs_torch, reference, reverse_by_matmul,
                      reverse_reference)

JOB = os.path.join(HERE, "mpi_job.py")


def mpirun(R, mode, transport, outdir, timeout=90):
    cmd = mpirun_cmd(R) + [sys.executable, JOB, mode, transport, str(outdir)]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p, time.monotonic() - t0


@needs_mpi
@needs_torch
@pytest.mark.parametrize("transport,want_transport,want_path", [("auto", "shm", "direct"), ("mpi", "mpi", "put")])
def test_the_op_under_mpirun(tmp_path, transport, want_transport, want_path):
    R = 2
    p, _ = mpirun(R, "op", transport, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    got = [np.load(tmp_path / ("%d.npz" % r)) for r in range(R)]
    for r in range(R):
        assert str(got[r]["transport"]) == want_transport and str(got[r]["path"]) == want_path
        ref, bound = reference(r, R, 24, [g["a"] for g in got], [g["sa"] for g in got], got[r]["b"], got[r]["sb"])
        assert_close(got[r]["out"], ref, bound, "mpirun %s rank %d (numpy)" % (transport, r))
        np.testing.assert_array_equal(got[r]["torch_out"].view(np.uint16), got[r]["out"])


@needs_mpi
@needs_torch
@pytest.mark.parametrize("transport,want_transport,want_paths", [("auto", "shm", ["direct", "put"]),
                                                                 ("mpi", "mpi", ["put"])])
def test_the_reverse_op_under_mpirun(tmp_path, transport, want_transport, want_paths):
    """matmul-alltoall on every path the transport runs, fused and unfused, on numpy and torch inputs: against
    fp64 and with the bits of a2amm.matmul of X_i by B_i sliced, gathered from both ranks."""
    p, _ = mpirun(2, "reverse", transport, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    check_reverse_job(tmp_path, transport, want_transport, want_paths)


def check_reverse_job(outdir, what, want_transport, want_paths):
    """What `mpi_job.py reverse` saved (OUTDIR/<r>.npz): the transport, a result per path it runs (fused,
    unfused, torch), each against fp64 and with the bits of a2amm.matmul sliced, gathered from both ranks."""
    R, M = 2, 24
    got = [np.load(outdir / ("%d.npz" % r)) for r in range(R)]
    xs, sxs, bs, sbs = ([g[key] for g in got] for key in ("x", "sx", "b", "sb"))
    for j in range(R):
        assert str(got[j]["transport"]) == want_transport
        ref, bound = reverse_reference(j, R, M, xs, sxs, bs, sbs)
        bits = reverse_by_matmul(j, R, M, xs, sxs, bs, sbs)
        variants = ["%s_%s" % (path, v) for path in want_paths for v in ("fused", "unfused", "torch")]
        assert sorted(variants) == sorted(f for f in got[j].files if f.startswith(("direct", "put")))
        for v in variants:
            assert_close(got[j][v], ref, bound, "mpirun %s rank %d %s" % (what, j, v))
            np.testing.assert_array_equal(got[j][v].view(np.uint16), bits, err_msg="rank %d %s" % (j, v))


@needs_mpi
@pytest.mark.parametrize("how", ["raise", "kill"])
def test_a_rank_that_raises_or_dies_under_mpirun(tmp_path, how):
    p, took = mpirun(2, how, "auto", tmp_path)
    assert p.returncode != 0, p.stdout + p.stderr
    assert took < 30, "the job took %.1f s to end" % took
    if how == "raise":
        assert "ValueError: rank 1 gives up" in p.stderr
    said = (tmp_path / "0.txt").read_text() if (tmp_path / "0.txt").exists() else ""
    if how == "raise" or said:  # killed: mpirun may end rank 0 before it reports
        seconds, text = said.split(" ", 1)
        assert text.startswith("PeerError: rank 0:") and "rank 1" in text, said
        assert float(seconds) < 5, said


@needs_mpi
def test_the_direct_path_is_refused_over_mpi_messages(tmp_path):
    # a bad argument to a collective call fails the communicator (the others' calls raise PeerError): the
    # rank raises ValueError naming the argument, and the job ends with it; liba2amm_mpi prints nothing and
    # aborts nothing (that is the caller's: here the uncaught exception)
    p, took = mpirun(2, "direct", "mpi", tmp_path)
    assert p.returncode != 0 and took < 30
    assert 'ValueError: path="direct" needs shared memory' in p.stderr, p.stderr
    assert "MPI_ABORT" not in p.stderr, p.stderr


# tests/test_python.sh sets it (as root): mpirun in the first of 2 network-namespace hosts, one rank on each
HOSTS_MPIRUN = os.environ.get("A2AMM_TEST_HOSTS_MPIRUN")
needs_hosts = pytest.mark.skipif(not HOSTS_MPIRUN, reason="no namespace hosts (tests/test_python.sh makes them as root)")


@needs_hosts
@needs_torch
def test_the_op_across_two_hosts(tmp_path):
    import shlex
    R = 2
    p = subprocess.run(shlex.split(HOSTS_MPIRUN) + [sys.executable, JOB, "op", "auto", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    got = [np.load(tmp_path / ("%d.npz" % r)) for r in range(R)]
    for r in range(R):
        # "auto" on two machines: Open MPI messages, on the put path
        assert (str(got[r]["transport"]), str(got[r]["path"])) == ("mpi", "put")
        ref, bound = reference(r, R, 24, [g["a"] for g in got], [g["sa"] for g in got], got[r]["b"], got[r]["sb"])
        assert_close(got[r]["out"], ref, bound, "across hosts, rank %d" % r)
        np.testing.assert_array_equal(got[r]["torch_out"].view(np.uint16), got[r]["out"])


@needs_hosts
@needs_torch
def test_the_reverse_op_across_two_hosts(tmp_path):
    import shlex
    p = subprocess.run(shlex.split(HOSTS_MPIRUN) + [sys.executable, JOB, "reverse", "auto", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    check_reverse_job(tmp_path, "across hosts", "mpi", ["put"])  # "auto" on two machines: MPI messages
