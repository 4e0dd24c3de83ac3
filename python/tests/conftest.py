"""Shared helpers of the Python package's tests (run by tests/test_python.sh, or `python3 -m pytest python/tests`
with the package installed)."""
import os
import shutil
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import mx_model  # noqa: E402

# The a2amm command of the build under test (scripts/run-tests.sh sets A2AMM), for `a2amm timeline`.
A2AMM_BIN = os.environ.get("A2AMM", os.path.join(REPO, "build", "a2amm"))


def have_torch():
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


needs_torch = pytest.mark.skipif(not have_torch(), reason="torch is not installed (Debian: python3-torch)")


def mpirun_cmd(np_):
    """mpirun for np_ ranks on this machine (as root it needs --allow-run-as-root). MPI's own messages over
    TCP: its shared-memory transport (vader) leaves its segments in /dev/shm when a job is killed, as the
    failure tests do (a2amm's shared memory, memfds, never appears there)."""
    cmd = ["mpirun", "-np", str(np_), "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,tcp"]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    return cmd


def have_mpi():
    if not shutil.which("mpirun"):
        return False
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    import a2amm
    return a2amm.has_mpi


needs_mpi = pytest.mark.skipif(not have_mpi(), reason="mpirun, mpi4py (python3-mpi4py) or liba2amm_mpi missing")


def rank_inputs(R, M, K, N, seed=1, a_fmt="e4m3", b_fmt="e4m3"):
    """Every rank's float inputs, deterministic: X[r] = A_r [R*M, K/R], W[r] = B_r transposed [N, K]."""
    rng = np.random.default_rng(seed)
    X = [rng.standard_normal((R * M, K // R)).astype(np.float32) for _ in range(R)]
    W = [(rng.standard_normal((N, K)) / 8).astype(np.float32) for _ in range(R)]
    return X, W


def reference(r, R, m, a_codes, a_scales, b_codes, b_scales, a_fmt="e4m3", b_fmt="e4m3"):
    """Rank r's result in fp64 from the model's dequantization (numpy only): block r of every rank's A
    (a_codes[j] [R*m, K/R]) side by side along K, times B_r. Also the bound of fp32 sums and one bf16
    rounding: |got - ref| <= 2^-8 |ref| + 1e-5 * (|A| |B|^T)."""
    A = np.concatenate([mx_model.dequantize(a_codes[j], a_scales[j], a_fmt)[r * m:(r + 1) * m] for j in range(R)],
                       axis=1)
    B = mx_model.dequantize(b_codes, b_scales, b_fmt)
    ref = A @ B.T
    bound = 2.0 ** -8 * np.abs(ref) + 1e-5 * (np.abs(A) @ np.abs(B).T) + 1e-30
    return ref, bound


def reverse_reference(j, R, m, x_codes, x_scales, b_codes, b_scales, a_fmt="e4m3", b_fmt="e4m3"):
    """Rank j's result of the reverse op (matmul-alltoall) in fp64 from the model's dequantization: rows
    i*m .. (i+1)*m are X_i [m, K] (x_codes[i][:m]) times column block j of B_i (b_codes[i] [N, K], rows
    j*N/R ..); the bound as reference()'s."""
    refs, bounds = [], []
    for i in range(R):
        nr = b_codes[i].shape[0] // R
        X = mx_model.dequantize(x_codes[i][:m], x_scales[i][:m], a_fmt)
        B = mx_model.dequantize(b_codes[i], b_scales[i], b_fmt)[j * nr:(j + 1) * nr]
        refs.append(X @ B.T)
        bounds.append(2.0 ** -8 * np.abs(refs[-1]) + 1e-5 * (np.abs(X) @ np.abs(B).T) + 1e-30)
    return np.concatenate(refs), np.concatenate(bounds)


def reverse_by_matmul(j, R, m, x_codes, x_scales, b_codes, b_scales, a_fmt="e4m3", b_fmt="e4m3"):
    """Rank j's result of the reverse op from a2amm.matmul on one process: X_i by B_i, sliced to column
    block j, stacked by source i (the bits the op must give: a2amm.h)."""
    import a2amm
    blocks = []
    for i in range(R):
        nr = b_codes[i].shape[0] // R
        with a2amm.Weights(b_codes[i], b_scales[i], b_fmt) as w:
            blocks.append(a2amm.matmul(x_codes[i][:m], x_scales[i][:m], w, a_fmt)[:, j * nr:(j + 1) * nr])
    return np.concatenate(blocks)


def assert_close(got_bits, ref, bound, what):
    """bf16 bits (numpy uint16) against the fp64 reference within the bound."""
    got = (np.asarray(got_bits).view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    assert got.shape == ref.shape, "%s: shape %s, expected %s" % (what, got.shape, ref.shape)
    bad = np.abs(got - ref) > bound
    assert not bad.any(), "%s: %d of %d values off the fp64 reference, first at %s: %r vs %r" % (
        what, bad.sum(), bad.size, np.argwhere(bad)[0], got[bad][0], ref[bad][0])


class shared_text:
    """A line of text per rank in memory the forked ranks share (what a failed launch cannot return)."""

    def __init__(self, R, size=1024):
        import mmap
        self.size, self.mem = size, mmap.mmap(-1, R * size)

    def put(self, r, text):
        data = text.encode()[:self.size - 1] + b"\0"
        self.mem[r * self.size:r * self.size + len(data)] = data

    def get(self, r):
        return self.mem[r * self.size:(r + 1) * self.size].split(b"\0")[0].decode()


def shared_floats(n):
    """n float64 the forked ranks share (NaN until set)."""
    import mmap
    a = np.frombuffer(mmap.mmap(-1, 8 * n), dtype=np.float64)
    a[:] = np.nan
    return a


@pytest.fixture(scope="session", autouse=True)
def nothing_left_in_dev_shm():
    """Nothing the tests start is left in /dev/shm (a2amm maps memfds; MPI cleans up after itself)."""
    before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    yield
    after = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    left = sorted(after - before)
    assert not left, "left in /dev/shm: %s" % left
