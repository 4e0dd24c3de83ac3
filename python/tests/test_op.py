"""a2amm.Op under a2amm.launch: numpy and torch inputs against the fp64 reference (R = 1, 2, 4), zero-copy
input and output, the options giving the same bits, weights shared, the observer, op.trace and the timeline."""
import json
import os
import subprocess

import numpy as np
import pytest

import a2amm
from conftest import A2AMM_BIN, assert_close, needs_torch, rank_inputs, reference, shared_text


def quantized(R, M, K, N, a_fmt="e4m3", b_fmt="e4m3", seed=1):
    X, W = rank_inputs(R, M, K, N, seed)
    A = [a2amm.quantize(x, a_fmt) for x in X]
    B = [a2amm.quantize(w, b_fmt) for w in W]
    return A, B


def check_ranks(outs, R, m, A, B, a_fmt="e4m3", b_fmt="e4m3", what=""):
    for r in range(R):
        # rank j's A_j restricted to m rows per destination: block d is rows d*M .. d*M+m of the full input
        ref, bound = reference(r, R, m, [a for a, _ in A], [s for _, s in A], B[r][0], B[r][1], a_fmt, b_fmt)
        assert_close(outs[r], ref, bound, "%s rank %d" % (what, r))


@pytest.mark.parametrize("R", [1, 2, 4])
def test_numpy_against_fp64(R):
    M, K, N = 48, 128 * R, 40
    A, B = quantized(R, M, K, N)

    def rank(comm):
        assert (comm.size, comm.transport) == (R, "shm")
        a, sa = A[comm.rank]
        with a2amm.Op(comm, max_m=M, k=K, n=N, tile_m=16) as op:
            op.set_weights(*B[comm.rank])
            assert op.ka == K // R and op.max_m == M and op.kind == "alltoall-matmul"
            return op(a, sa)

    check_ranks(a2amm.launch(R, rank), R, M, A, B, what="R=%d" % R)


@pytest.mark.parametrize("R", [1, 2, 4])
@needs_torch
def test_torch_against_fp64(R):
    import torch
    M, K, N = 24, 64 * R, 32
    X, W = rank_inputs(R, M, K, N, seed=7)

    def rank(comm):
        torch.set_num_threads(1)
        x, w = torch.from_numpy(X[comm.rank]).bfloat16(), torch.from_numpy(W[comm.rank])
        a, sa = a2amm.quantize(x)  # bf16 in: torch uint8 out
        b, sb = a2amm.quantize(w)
        with a2amm.Op(comm, max_m=M, k=K, n=N, path="put", depth=2, tile_m=8) as op:
            op.set_weights(b, sb)
            out = op(a, sa)
            assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16 and out.shape == (M, N)
            return out.view(torch.int16).numpy().copy(), a.numpy(), sa.numpy()

    res = a2amm.launch(R, rank)
    A = [(a, sa) for _, a, sa in res]
    B = [a2amm.quantize(w) for w in W]
    check_ranks([o for o, _, _ in res], R, M, A, B, what="torch R=%d" % R)


def test_any_m_up_to_max_m_and_the_formats():
    R, M, K, N = 2, 40, 256, 24
    A, B = quantized(R, M, K, N, "e5m2", "e4m3", seed=3)

    def rank(comm):
        with a2amm.Op(comm, max_m=M, k=K, n=N, a_fmt="e5m2", b_fmt="e4m3", tile_m=16) as op:
            op.set_weights(*B[comm.rank])
            outs = []
            for m in (1, 17, M):  # rows per destination: block d is rows d*m .. of the caller's array
                a, sa = A[comm.rank]
                blocks = [a[d * M:d * M + m] for d in range(R)], [sa[d * M:d * M + m] for d in range(R)]
                outs.append(op(np.concatenate(blocks[0]), np.concatenate(blocks[1])))
            return outs

    res = a2amm.launch(R, rank)
    for i, m in enumerate((1, 17, M)):
        Am = [(np.concatenate([a[d * M:d * M + m] for d in range(R)]),
               np.concatenate([s[d * M:d * M + m] for d in range(R)])) for a, s in A]
        check_ranks([res[r][i] for r in range(R)], R, m, Am, B, "e5m2", "e4m3", "m=%d" % m)


def test_paths_schedules_tiles_and_threads_give_the_same_bits():
    R, M, K, N = 2, 64, 256, 48
    A, B = quantized(R, M, K, N, seed=4)
    variants = [dict(), dict(path="put", depth=1, tile_m=8), dict(path="put", tile_m=24, threads=2),
                dict(schedule="unfused"), dict(path="put", schedule="unfused", tile_m=16)]

    def rank(comm):
        outs = []
        for v in variants:
            with a2amm.Op(comm, max_m=M, k=K, n=N, **v) as op:
                assert op.path == v.get("path", "direct") and op.schedule == v.get("schedule", "fused")
                op.set_weights(*B[comm.rank])
                outs.append(op(*A[comm.rank]))
        return outs

    for r, outs in enumerate(a2amm.launch(R, rank)):
        for v, o in zip(variants[1:], outs[1:]):
            np.testing.assert_array_equal(o, outs[0], err_msg="rank %d, %r" % (r, v))


def test_zero_copy_input_the_op_reads_the_callers_buffer():
    R, M, K, N = 2, 32, 128, 16
    A, B = quantized(R, M, K, N, seed=5)

    def rank(comm):
        a, sa = A[comm.rank]
        with a2amm.Op(comm, max_m=M, k=K, n=N, tile_m=16) as op:
            op.set_weights(*B[comm.rank])
            ai, si = op.input()  # the op's own memory: [R, max_m, K/R] and [R, max_m, K/R/32]
            assert ai.shape == (R, M, K // R) and si.shape == (R, M, K // R // 32)
            assert ai.ctypes.data == op.input()[0].ctypes.data  # always the same memory
            ai[:] = a.reshape(R, M, -1)
            si[:] = sa.reshape(R, M, -1)
            first = op(ai, si)           # no copy: the op reads them where they are
            ai[:, :, :] = 0              # the op reads the caller's buffer: zeros in, zeros out
            zeros = op(m=M)              # the input written at op.input(), no arrays passed
            ai[:] = a.reshape(R, M, -1)
            again = op(*op.input(M // 2))  # the first M/2 rows of each block
            return first, zeros, again

    res = a2amm.launch(R, rank)
    check_ranks([f for f, _, _ in res], R, M, A, B, what="zero-copy")
    for r in range(R):
        assert not res[r][1].any(), "rank %d: the op did not read the changed input" % r
        np.testing.assert_array_equal(res[r][2], res[r][0][:M // 2])  # row i of a block needs only row i


@needs_torch
def test_zero_copy_with_torch_views_and_bf16_out():
    import torch
    R, M, K, N = 2, 16, 128, 24
    A, B = quantized(R, M, K, N, seed=6)

    def rank(comm):
        torch.set_num_threads(1)
        with a2amm.Op(comm, max_m=M, k=K, n=N) as op:
            op.set_weights(torch.from_numpy(B[comm.rank][0]), torch.from_numpy(B[comm.rank][1]))
            ai, si = (torch.from_numpy(v) for v in op.input())  # tensors over the op's memory
            ai.copy_(torch.from_numpy(A[comm.rank][0]).view(R, M, -1))
            si.copy_(torch.from_numpy(A[comm.rank][1]).view(R, M, -1))
            out = torch.empty(M, N, dtype=torch.bfloat16)
            ptr = out.data_ptr()
            got = op(m=M, out=out)  # the result written into out's own storage
            assert got is out and out.data_ptr() == ptr
            return out.view(torch.int16).numpy().copy()

    check_ranks(a2amm.launch(R, rank), R, M, A, B, what="torch zero-copy")


def test_seed_layout_scales_and_strided_rows_are_taken():
    R, M, K, N = 2, 16, 192, 8  # K/R = 96: ceil(96/32) = 3 scales, the seed layout's 2*ceil(96/64) = 4
    A, B = quantized(R, M, K, N, seed=8)

    def rank(comm):
        a, sa = A[comm.rank]
        padded = np.zeros((R * M, 4), np.uint8)
        padded[:, :3] = sa
        wide = np.zeros((R * M, 200), np.uint8)
        wide[:, :96] = a
        with a2amm.Op(comm, max_m=M, k=K, n=N) as op:
            op.set_weights(*B[comm.rank])
            return op(a, sa), op(a, padded), op(wide[:, :96], sa)

    for r, (x, y, z) in enumerate(a2amm.launch(R, rank)):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x, z)
    check_ranks([x for x, _, _ in a2amm.launch(R, rank)], R, M, A, B, what="seed layout")


def test_shared_weights():
    R, M, K, N = 2, 8, 64, 16
    A, B = quantized(R, M, K, N, seed=9)

    def rank(comm):
        w = a2amm.Weights(*B[comm.rank])
        with a2amm.Op(comm, max_m=M, k=K, n=N) as op1, a2amm.Op(comm, max_m=M, k=K, n=N, path="put") as op2:
            op1.use_weights(w)
            op2.use_weights(w)
            assert op1.weights is w
            with pytest.raises(ValueError, match="in use"):
                w.close()
            x, y = op1(*A[comm.rank]), op2(*A[comm.rank])
        w.close()  # both ops closed: free to go
        return x, y

    for x, y in a2amm.launch(R, rank):
        np.testing.assert_array_equal(x, y)


def test_observer_sees_the_pipeline():
    R, M, K, N = 2, 32, 128, 16
    A, B = quantized(R, M, K, N)

    def rank(comm):
        seen = []
        with a2amm.Op(comm, max_m=M, k=K, n=N, tile_m=8, path="put") as op:
            op.set_weights(*B[comm.rank])
            op.set_observer(seen.append)
            op(*A[comm.rank])
            op.set_observer(None)
            op(*A[comm.rank])
        return [(e.kind, e.tile, e.peer, e.call) for e in seen], seen[0].time_ns <= seen[-1].time_ns

    for r, (events, ordered) in enumerate(a2amm.launch(R, rank)):
        kinds = [k for k, _, _, _ in events]
        assert ordered and kinds[0] == "call_begin" and kinds[-1] == "call_end"
        assert kinds.count("tile") == 4 and kinds.count("tile_end") == 4  # 32 rows in tiles of 8
        assert kinds.count("matmul_begin") == 4 * R and "wait_begin" in kinds and "send_begin" in kinds
        assert {c for _, _, _, c in events} == {1}, "only the observed call"


def test_observer_stops_the_call_and_its_exception_is_raised():
    R, M, K, N = 2, 32, 128, 16
    A, B = quantized(R, M, K, N)
    said = shared_text(R)

    def rank(comm):
        with a2amm.Op(comm, max_m=M, k=K, n=N, tile_m=8) as op:
            op.set_weights(*B[comm.rank])
            if comm.rank == 0:
                def stop(e):
                    if e.kind == "tile" and e.tile == 2:
                        raise RuntimeError("observer says stop")
                op.set_observer(stop)
            try:
                op(*A[comm.rank])
            except BaseException as e:
                said.put(comm.rank, "%s: %s" % (type(e).__name__, e))
                raise

    with pytest.raises(a2amm.Error, match="rank 0: the observer stopped the call at tile 2") as info:
        a2amm.launch(R, rank)
    assert info.value.rank == 0 and "RuntimeError: observer says stop" in info.value.traceback
    assert said.get(0) == "RuntimeError: observer says stop"
    assert said.get(1).startswith("PeerError") and "observer stopped the call at tile 2" in said.get(1)


def test_trace_is_a_timeline_a2amm_draws(tmp_path):
    R, M, K, N = 2, 64, 256, 32
    A, B = quantized(R, M, K, N)
    path = str(tmp_path / "t.json")

    def rank(comm):
        with a2amm.Op(comm, max_m=M, k=K, n=N, tile_m=16, path="put", threads=2) as op:
            op.set_weights(*B[comm.rank])
            op(*A[comm.rank])  # not traced
            with op.trace(path):
                op(*A[comm.rank])
                op(*A[comm.rank])
            op(*A[comm.rank])  # not traced
        return comm.rank

    assert a2amm.launch(R, rank) == [0, 1]
    trace = json.load(open(path))
    meta, events = trace["otherData"], trace["traceEvents"]
    assert (meta["M"], meta["K"], meta["N"], meta["R"], meta["path"], meta["tile_m"]) == (M, K, N, R, "put", 16)
    spans = [e for e in events if e.get("ph") == "X"]
    assert {e["pid"] for e in spans} == {0, 1}
    assert {e["args"]["call"] for e in spans if e["cat"] == "call"} == {2, 3}, "the calls inside the block only"
    mm = {(e["pid"], e["args"]["call"], e["args"]["tile"], e["args"]["source"]) for e in spans if e["cat"] == "matmul"}
    assert mm == {(p, c, t, s) for p in range(R) for c in (2, 3) for t in range(4) for s in range(R)}
    assert any(e["cat"] == "wait" for e in spans) and any(e.get("ph") == "i" and e["cat"] == "signal" for e in events)
    assert not [f for f in os.listdir(tmp_path) if f != "t.json"], "nothing else left beside it"
    svg = str(tmp_path / "t.svg")
    run = subprocess.run([A2AMM_BIN, "timeline", path, "-o", svg, "--call", "3"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "2 ranks" in run.stdout and open(svg).read().startswith("<?xml")
