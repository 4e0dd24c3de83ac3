"""a2amm.Op(kind="matmul-alltoall"), the reverse op, under a2amm.launch: rank r holds X_r [m, K] and gets
[R*m, N/R], rows i*m .. from rank i. On numpy and torch inputs, against the fp64 reference and bit-equal to
a2amm.matmul of X_i by B_i sliced to column block r (R = 1, 2, 4; both paths, fused and unfused); any m up
to max_m and both formats; zero-copy input and output; the seed layout's scales and strided rows; its heap;
its observer and trace. (Bad arguments: test_errors.py; under mpirun: test_mpi.py.)"""
import json

import numpy as np
import pytest

import a2amm
from conftest import assert_close, needs_torch, reverse_by_matmul, reverse_reference

KIND = "matmul-alltoall"
# both paths, fused and unfused (depth 1: the put path's smallest ring, though the reverse op needs none)
VARIANTS = [dict(path="direct"), dict(path="put", depth=1), dict(schedule="unfused"),
            dict(path="put", schedule="unfused")]


def reverse_inputs(R, M, K, N, a_fmt="e4m3", b_fmt="e4m3", seed=1):
    """Every rank's X_r [M, K] and B_r [N, K] (transposed), quantized: [(codes, scales)] each."""
    rng = np.random.default_rng(seed)
    X = [a2amm.quantize(rng.standard_normal((M, K)).astype(np.float32), a_fmt) for _ in range(R)]
    B = [a2amm.quantize((rng.standard_normal((N, K)) / 8).astype(np.float32), b_fmt) for _ in range(R)]
    return X, B


def check_ranks(outs, R, m, X, B, a_fmt="e4m3", b_fmt="e4m3", what=""):
    """Every rank's result (bf16 bits) against fp64, and the same bits as a2amm.matmul sliced and gathered."""
    xs, sxs, bs, sbs = [x for x, _ in X], [s for _, s in X], [b for b, _ in B], [s for _, s in B]
    N = bs[0].shape[0]
    for j in range(R):
        got = np.asarray(outs[j]).view(np.uint16)
        assert got.shape == (R * m, N // R), "%s rank %d: shape %s" % (what, j, got.shape)
        ref, bound = reverse_reference(j, R, m, xs, sxs, bs, sbs, a_fmt, b_fmt)
        assert_close(got, ref, bound, "%s rank %d" % (what, j))
        np.testing.assert_array_equal(got, reverse_by_matmul(j, R, m, xs, sxs, bs, sbs, a_fmt, b_fmt),
                                      err_msg="%s rank %d: not a2amm.matmul's bits" % (what, j))


def test_the_kinds():
    assert a2amm.OP_KINDS == ("alltoall-matmul", "matmul-alltoall")


@pytest.mark.parametrize("R", [1, 2, 4])
def test_numpy_against_fp64_and_the_matmuls_bits_on_both_paths_fused_and_unfused(R):
    M, K, N = 40, 96, 24 * R  # K: 3 MX blocks; 40 rows in tiles of 16: the last one partial
    X, B = reverse_inputs(R, M, K, N)

    def rank(comm):
        outs = []
        for v in VARIANTS:
            with a2amm.Op(comm, KIND, max_m=M, k=K, n=N, tile_m=16, **v) as op:
                assert (op.kind, op.ka, op.path, op.schedule) == (KIND, K, v.get("path", "direct"),
                                                                  v.get("schedule", "fused"))
                op.set_weights(*B[comm.rank])
                out = op(*X[comm.rank])
                assert out.dtype == np.uint16 and out.flags.c_contiguous
                outs.append(out)
        return outs

    res = a2amm.launch(R, rank)
    for i, v in enumerate(VARIANTS):
        check_ranks([res[r][i] for r in range(R)], R, M, X, B, what="R=%d %r" % (R, v))


@pytest.mark.parametrize("R", [1, 2, 4])
@needs_torch
def test_torch_against_fp64_and_the_matmuls_bits(R):
    import torch
    M, K, N = 24, 64, 16 * R
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((M, K)).astype(np.float32) for _ in range(R)]
    B = [a2amm.quantize((rng.standard_normal((N, K)) / 8).astype(np.float32)) for _ in range(R)]

    def rank(comm):
        torch.set_num_threads(1)
        x, sx = a2amm.quantize(torch.from_numpy(xs[comm.rank]).bfloat16())  # bf16 in: torch uint8 out
        b, sb = (torch.from_numpy(t) for t in B[comm.rank])
        outs = []
        for v in (dict(path="put", tile_m=8), dict(schedule="unfused")):
            with a2amm.Op(comm, kind=KIND, max_m=M, k=K, n=N, **v) as op:
                op.set_weights(b, sb)
                out = op(x, sx)
                assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16 and out.shape == (R * M, N // R)
                outs.append(out.view(torch.int16).numpy().copy())
        return outs, x.numpy(), sx.numpy()

    res = a2amm.launch(R, rank)
    X = [(x, sx) for _, x, sx in res]
    for i in range(2):
        check_ranks([outs[i] for outs, _, _ in res], R, M, X, B, what="torch R=%d variant %d" % (R, i))


@pytest.mark.parametrize("a_fmt,b_fmt", [("e5m2", "e4m3"), ("e4m3", "e5m2")])
def test_any_m_up_to_max_m_and_the_formats(a_fmt, b_fmt):
    R, M, K, N = 2, 21, 128, 18  # N/R = 9 columns a rank
    X, B = reverse_inputs(R, M, K, N, a_fmt, b_fmt, seed=3)

    def rank(comm):
        x, sx = X[comm.rank]
        with a2amm.Op(comm, KIND, max_m=M, k=K, n=N, a_fmt=a_fmt, b_fmt=b_fmt, tile_m=8) as op:
            op.set_weights(*B[comm.rank])
            return [op(x[:m], sx[:m]) for m in (1, 8, 13, M)]

    res = a2amm.launch(R, rank)
    for i, m in enumerate((1, 8, 13, M)):
        check_ranks([res[r][i] for r in range(R)], R, m, X, B, a_fmt, b_fmt, "m=%d" % m)


def test_zero_copy_input_and_output_the_op_reads_the_callers_buffer():
    R, M, K, N = 2, 16, 64, 12
    X, B = reverse_inputs(R, M, K, N, seed=6)

    def rank(comm):
        x, sx = X[comm.rank]
        with a2amm.Op(comm, KIND, max_m=M, k=K, n=N, tile_m=8) as op:
            op.set_weights(*B[comm.rank])
            xi, si = op.input()  # the op's own memory: X_r [max_m, K] and its scales [max_m, K/32]
            assert xi.shape == (M, K) and si.shape == (M, K // 32) and xi.dtype == np.uint8
            assert xi.ctypes.data == op.input()[0].ctypes.data  # always the same memory
            xi[:] = x
            si[:] = sx
            out = np.full((R * M, N // R), 0xFFFF, np.uint16)
            first = op(xi, si, out=out)  # no copy in; the result written into the caller's out
            assert first is out
            first = first.copy()
            xi[:] = 0                    # the op reads the caller's buffer: zeros in, zeros out
            zeros = op(m=M)              # the input written at op.input(), no arrays passed
            xi[:] = x
            half = op(*op.input(M // 2))  # the first M/2 rows
            return first, zeros, half

    res = a2amm.launch(R, rank)
    check_ranks([f for f, _, _ in res], R, M, X, B, what="zero-copy")
    for j in range(R):
        assert not res[j][1].any(), "rank %d: the op did not read the changed input" % j
        # rows i*M/2 .. of the half call are the first M/2 rows of source i's block
        want = np.concatenate([res[j][0][i * M:i * M + M // 2] for i in range(R)])
        np.testing.assert_array_equal(res[j][2], want)


@needs_torch
def test_zero_copy_with_torch_views_and_bf16_out():
    import torch
    R, M, K, N = 2, 8, 64, 16
    X, B = reverse_inputs(R, M, K, N, seed=7)

    def rank(comm):
        torch.set_num_threads(1)
        with a2amm.Op(comm, KIND, max_m=M, k=K, n=N, path="put") as op:
            op.set_weights(*B[comm.rank])
            xi, si = (torch.from_numpy(v) for v in op.input())  # tensors over the op's memory
            xi.copy_(torch.from_numpy(X[comm.rank][0]))
            si.copy_(torch.from_numpy(X[comm.rank][1]))
            out = torch.empty(R * M, N // R, dtype=torch.bfloat16)
            ptr = out.data_ptr()
            got = op(xi, si, out=out)  # placed input, the result in out's own storage
            assert got is out and out.data_ptr() == ptr
            return out.view(torch.int16).numpy().copy()

    check_ranks(a2amm.launch(R, rank), R, M, X, B, what="torch zero-copy")


def test_seed_layout_scales_and_strided_rows_are_taken():
    R, M, K, N = 2, 12, 96, 8  # ceil(96/32) = 3 scales, the seed layout's 2*ceil(96/64) = 4
    X, B = reverse_inputs(R, M, K, N, seed=8)

    def rank(comm):
        x, sx = X[comm.rank]
        padded = np.zeros((M, 4), np.uint8)
        padded[:, :3] = sx
        wide = np.zeros((M, 200), np.uint8)
        wide[:, :K] = x
        with a2amm.Op(comm, KIND, max_m=M, k=K, n=N) as op:
            op.set_weights(*B[comm.rank])
            return op(x, sx), op(x, padded), op(wide[:, :K], sx), op(wide[:, :K], padded)

    res = a2amm.launch(R, rank)
    for j, outs in enumerate(res):
        for o in outs[1:]:
            np.testing.assert_array_equal(o, outs[0], err_msg="rank %d" % j)
    check_ranks([outs[0] for outs in res], R, M, X, B, what="seed layout")


def test_heap_bytes_of_the_reverse_op_is_enough_and_its_own():
    R, M, K, N = 2, 32, 128, 64
    heap = a2amm.Op.heap_bytes(R, M, K, N, kind=KIND)
    # the reverse op's memory: X_r [M, K] and the results [R, M, N/R] bf16 in and out, not A_r [R*M, K/R]
    assert heap != a2amm.Op.heap_bytes(R, M, K, N)
    assert heap >= M * K + 2 * R * M * (N // R) * 2
    X, B = reverse_inputs(R, M, K, N, seed=9)

    def rank(comm):
        with a2amm.Op(comm, KIND, max_m=M, k=K, n=N) as op:
            op.set_weights(*B[comm.rank])
            return op(*X[comm.rank])

    check_ranks(a2amm.launch(R, rank, heap_bytes=heap), R, M, X, B, what="heap_bytes")


def test_observer_and_trace_see_the_reverse_pipeline(tmp_path):
    R, M, K, N = 2, 16, 64, 16
    X, B = reverse_inputs(R, M, K, N)
    path = str(tmp_path / "t.json")

    def rank(comm):
        seen = []
        with a2amm.Op(comm, KIND, max_m=M, k=K, n=N, tile_m=8, path="put") as op:
            op.set_weights(*B[comm.rank])
            op.set_observer(seen.append)
            with op.trace(path):
                op(*X[comm.rank])
            op.set_observer(None)
        return [(e.kind, e.tile, e.peer) for e in seen]

    for me, events in enumerate(a2amm.launch(R, rank)):
        kinds = [k for k, _, _ in events]
        assert kinds[0] == "call_begin" and kinds[-1] == "call_end" and kinds.count("tile") == 2
        for t in range(2):  # a tile computes the block of every destination, its own last
            peers = [p for k, tile, p in events if k == "matmul_begin" and tile == t]
            assert sorted(peers) == list(range(R)) and peers[-1] == me, (me, t, peers)
        assert {p for k, _, p in events if k == "send_begin"} == set(range(R)) - {me}
        assert {p for k, _, p in events if k == "wait_begin"} == set(range(R)) - {me}
    meta = json.load(open(path))["otherData"]
    assert (meta["op"], meta["M"], meta["K"], meta["N"], meta["R"]) == (KIND, M, K, N, R)
