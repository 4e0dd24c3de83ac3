"""examples/fused_op.py, the Python twin of examples/fused_op.c, under a2amm.launch and under mpirun: it
passes its own check, and both launchers give the same bits."""
import os
import subprocess
import sys

import numpy as np

from conftest import REPO, mpirun_cmd, needs_mpi

EXAMPLE = os.path.join(REPO, "examples", "fused_op.py")


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_fused_op_under_launch(tmp_path):
    out = run([sys.executable, EXAMPLE, "--save", str(tmp_path)])
    assert "fused_op: OK" in out and "a2amm.launch" in out
    assert out.count("0 values off the check") == 2


@needs_mpi
def test_fused_op_under_mpirun_gives_the_same_bits(tmp_path):
    run([sys.executable, EXAMPLE, "--save", str(tmp_path / "launch")])
    for transport in ("auto", "mpi"):
        out = run(mpirun_cmd(2) + [sys.executable, EXAMPLE, "--transport", transport, "--save",
                                   str(tmp_path / transport)])
        assert "fused_op: OK" in out and "mpirun, transport %s" % ("shm" if transport == "auto" else "mpi") in out
        for r in range(2):
            np.testing.assert_array_equal(np.load(tmp_path / transport / ("rank%d.npy" % r)),
                                          np.load(tmp_path / "launch" / ("rank%d.npy" % r)))


@needs_mpi
def test_fused_op_across_two_hosts(tmp_path):
    import shlex
    hosts = os.environ.get("A2AMM_TEST_HOSTS_MPIRUN")
    if not hosts:
        import pytest
        pytest.skip("no namespace hosts (tests/test_python.sh makes them as root)")
    run([sys.executable, EXAMPLE, "--save", str(tmp_path / "launch")])
    out = run(shlex.split(hosts) + [sys.executable, EXAMPLE, "--save", str(tmp_path / "hosts")])
    assert "fused_op: OK" in out and "mpirun, transport mpi" in out
    for r in range(2):
        np.testing.assert_array_equal(np.load(tmp_path / "hosts" / ("rank%d.npy" % r)),
                                      np.load(tmp_path / "launch" / ("rank%d.npy" % r)))
