"""Every bad argument raises a clear TypeError/ValueError naming it; library failures raise a2amm.Error and its
subclasses; a rank that raises, is killed or is interrupted stops the others within seconds (PeerError)."""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import a2amm
from conftest import needs_torch, shared_floats, shared_text

u8 = np.zeros((4, 64), np.uint8)
s8 = np.full((4, 2), 127, np.uint8)
f32 = np.ones((4, 64), np.float32)


@pytest.mark.parametrize("call,exc,text", [
    (lambda: a2amm.quantize([[1.0, 2.0]]), TypeError, "x must be a 2-D array"),
    (lambda: a2amm.quantize(f32.astype(np.float64)), TypeError, "x must be float32 or bfloat16 (numpy.float32, "
                                                                "torch.float32, torch.bfloat16, or numpy.uint16 "
                                                                "holding bf16 bits); got float64"),
    (lambda: a2amm.quantize(f32.astype(np.float16)), TypeError, "x must be float32 or bfloat16 (numpy.float32, "
                                                                "torch.float32, torch.bfloat16, or numpy.uint16 "
                                                                "holding bf16 bits); got float16"),
    (lambda: a2amm.quantize(f32.astype(np.int16)), TypeError, "x must be float32 or bfloat16"),
    (lambda: a2amm.quantize(np.ones(64, np.float32)), ValueError, "x must be a 2-D array; got 1-D, shape (64,)"),
    (lambda: a2amm.quantize(np.ones((2, 2, 64), np.float32)), ValueError, "x must be a 2-D array; got 3-D"),
    (lambda: a2amm.quantize(f32[:, ::2]), ValueError, "x must have contiguous rows"),
    (lambda: a2amm.quantize(f32.T), ValueError, "x must have contiguous rows"),
    (lambda: a2amm.quantize(f32, fmt="e3m4"), ValueError, 'fmt must be "e4m3" or "e5m2"; got \'e3m4\''),
    (lambda: a2amm.quantize(f32, fmt=4), ValueError, 'fmt must be "e4m3" or "e5m2"; got 4'),
    (lambda: a2amm.quantize(f32, mode="nearest"), ValueError, 'mode must be "floor" (the OCP scale) or "rceil"'),
    (lambda: a2amm.dequantize(f32, s8), TypeError, "codes must be uint8"),
    (lambda: a2amm.dequantize(u8, np.zeros((4, 3), np.uint8)), ValueError,
     "scales must have shape [rows, ceil(64/32)] = [4, 2] (one E8M0 scale per 32 values); got (4, 3)"),
    (lambda: a2amm.dequantize(u8, np.zeros((5, 2), np.uint8)), ValueError, "scales must have shape"),
    (lambda: a2amm.dequantize(u8, s8.astype(np.int32)), TypeError, "scales must be uint8"),
    (lambda: a2amm.dequantize(u8, s8, fmt="fp8"), ValueError, 'fmt must be "e4m3" or "e5m2"'),
    (lambda: a2amm.Weights(np.zeros((4, 40), np.uint8), np.zeros((4, 2), np.uint8)), ValueError,
     "b_codes must have shape [n, k] with n >= 1 and k a positive multiple of 32"),
    (lambda: a2amm.Weights(u8, np.zeros((4, 1), np.uint8)), ValueError, "b_scales must have shape"),
    (lambda: a2amm.Weights(u8, s8, fmt="int8"), ValueError, 'fmt must be "e4m3" or "e5m2"'),
    (lambda: a2amm.matmul(u8, s8, "weights"), TypeError, "weights must be an a2amm.Weights"),
    (lambda: a2amm.matmul(np.zeros((4, 32), np.uint8), s8, a2amm.Weights(u8, s8)), ValueError,
     "a_codes must have shape [m, k] with k = 64"),
    (lambda: a2amm.matmul(u8, s8, a2amm.Weights(u8, s8), out=np.zeros((4, 5), np.uint16)), ValueError,
     "out must have shape [m, n] = [4, 4] (bf16); got (4, 5)"),
    (lambda: a2amm.matmul(u8, s8, a2amm.Weights(u8, s8), out=np.zeros((4, 4), np.float32)), TypeError,
     "out must be bfloat16"),
    (lambda: a2amm.matmul(u8, s8, a2amm.Weights(u8, s8), out=np.zeros((4, 4), np.uint16)[::-1]), ValueError,
     "out must have contiguous rows"),
    (lambda: a2amm.matmul(u8, s8, a2amm.Weights(u8, s8), out=read_only((4, 4))), ValueError, "out is read-only"),
    (lambda: a2amm.launch(0, print), ValueError, "nranks must be 1 to 1024; got 0"),
    (lambda: a2amm.launch(2, "fn"), TypeError, "fn must be callable"),
    (lambda: a2amm.launch(2.0, print), TypeError, "nranks must be an int"),
    (lambda: a2amm.bf16_to_float32(np.zeros(3, np.int32)), TypeError, "bits must be uint16"),
    (lambda: a2amm.Op.heap_bytes(3, 4, 64, 16, kind="matmul-alltoall"), a2amm.ArgumentError,
     "N must be divisible by R for matmul-alltoall"),
    (lambda: a2amm.Op.heap_bytes(2, 4, 48, 16, kind="matmul-alltoall"), a2amm.ArgumentError,
     "K must be a multiple of 32 (whole MX blocks); got K = 48"),
    (lambda: a2amm.Op.heap_bytes(2, 4, 64, 16, kind="reverse"), ValueError,
     'kind (the op kinds this library runs) must be "alltoall-matmul" or "matmul-alltoall"; got \'reverse\''),
    (lambda: a2amm.Op.heap_bytes(2, 4, 64, 16, path="Put"), ValueError, 'path must be "direct" or "put"; got \'Put\''),
    (lambda: a2amm.Op.heap_bytes(2, 4, 64, 16, schedule="unfuse"), ValueError,
     'schedule must be "fused" or "unfused"; got \'unfuse\''),
])
def test_bad_arguments_of_local_calls(call, exc, text):
    with pytest.raises(exc) as info:
        call()
    assert text in str(info.value), str(info.value)


def read_only(shape):
    a = np.zeros(shape, np.uint16)
    a.flags.writeable = False
    return a


def test_empty_arrays_and_argument_names():
    """No columns is an empty result, not a stride complaint; a create's argument of the wrong kind is named;
    a full symmetric heap says which setting to raise."""
    codes, scales = a2amm.quantize(f32[:, :0])
    assert codes.shape == (4, 0) and scales.shape == (4, 0)

    def rank(comm):
        with pytest.raises(TypeError, match="Op: k must be a whole number; got '128'"):
            a2amm.Op(comm, max_m=8, k="128", n=64)
        return "named"

    with pytest.raises(a2amm.Error, match="Op: k must be a whole number"):  # and the communicator failed
        a2amm.launch(1, rank)

    def small(comm):
        a2amm.Op(comm, max_m=64, k=4096, n=64)

    with pytest.raises(a2amm.Error, match="symmetric heap full.*heap_bytes: make it larger"):
        a2amm.launch(1, small, heap_bytes=65536)


@needs_torch
def test_bad_tensors():
    import torch
    with pytest.raises(TypeError, match="x must be float32 or bfloat16.*got float64"):
        a2amm.quantize(torch.zeros(4, 64, dtype=torch.float64))
    with pytest.raises(TypeError, match="codes must be uint8"):
        a2amm.dequantize(torch.zeros(4, 64, dtype=torch.int8), torch.zeros(4, 2, dtype=torch.uint8))
    with pytest.raises(ValueError, match="x must be a 2-D array; got 3-D"):
        a2amm.quantize(torch.zeros(2, 4, 64))
    grad = torch.zeros(4, 64, requires_grad=True)  # read through .detach(): no copy
    assert a2amm.quantize(grad)[0].shape == (4, 64)


# ---- collective calls: the error, and the communicator failed so that no rank waits -------------------

K, N = 64, 16


def bad_op_cases():
    R = 2
    a = np.zeros((R * 4, K // R), np.uint8)
    sa = np.full((R * 4, 1), 127, np.uint8)
    b, sb = np.zeros((N, K), np.uint8), np.full((N, K // 32), 127, np.uint8)

    def op(comm, **kw):
        o = a2amm.Op(comm, max_m=4, k=K, n=N, **kw)
        o.set_weights(b, sb)
        return o

    def closed(comm):
        o = op(comm)
        o.close()
        o(a, sa)

    return [
        ("kind", lambda c: op(c, kind="matmul-then-alltoall"), ValueError,
         'kind (the op kinds this library runs) must be "alltoall-matmul" or "matmul-alltoall"; got '
         '\'matmul-then-alltoall\''),
        ("a_fmt", lambda c: op(c, a_fmt="e8m0"), ValueError, 'a_fmt must be "e4m3" or "e5m2"'),
        ("path", lambda c: op(c, path="sideways"), ValueError, 'path must be "direct" or "put"'),
        ("schedule", lambda c: op(c, schedule="later"), ValueError, 'schedule must be "fused" or "unfused"'),
        ("depth", lambda c: op(c, depth=-1), ValueError, "depth 0 (4) to 1024 (got -1)"),
        ("max_m", lambda c: a2amm.Op(c, max_m=0, k=K, n=N), ValueError, "max_m, k and n must be given"),
        ("K/R", lambda c: a2amm.Op(c, max_m=4, k=48, n=N), a2amm.ArgumentError, "K / R must be a multiple of 32"),
        ("dtype", lambda c: op(c)(a.astype(np.int16), sa), TypeError, "a_codes must be uint8"),
        ("2-D", lambda c: op(c)(a.reshape(R, 4, -1), sa), ValueError, "a_codes must be a 2-D array; got 3-D"),
        ("rows", lambda c: op(c)(a[:7], sa[:7]), ValueError, "a_codes must have shape [R*m, K/R] = [2*m, 32]"),
        ("max_m", lambda c: op(c)(np.zeros((R * 5, K // R), np.uint8), np.zeros((R * 5, 1), np.uint8)), ValueError,
         "a_codes has m = 5 rows per rank (10 rows / R = 2), over the op's max_m = 4"),
        ("scale width", lambda c: op(c)(a, np.zeros((R * 4, 3), np.uint8)), ValueError,
         "a_scales must have shape [R*m, ceil(32/32)] = [8, 1] (one E8M0 scale per 32 values), or the seed "
         "layout's [8, 2]; got (8, 3)"),
        ("contiguity", lambda c: op(c)(np.zeros((R * 4, K), np.uint8)[:, ::2], sa), ValueError,
         "a_codes must have contiguous rows"),
        ("out", lambda c: op(c)(a, sa, out=np.zeros((4, N), np.uint16)[:, ::2]), ValueError, "out must be"),
        ("one of two", lambda c: op(c)(a, None), ValueError, "a_codes and a_scales must both be given"),
        ("m", lambda c: op(c)(m=9), ValueError, "m must be 1 to max_m = 4; got 9"),
        ("m < 0", lambda c: op(c)(m=-1), ValueError, "m must be 1 to max_m = 4; got -1"),
        ("m < 0, arrays", lambda c: op(c)(a, sa, m=-7), ValueError, "m must be 1 to max_m = 4; got -7"),
        ("int16 out", lambda c: op(c)(a, sa, out=np.zeros((4, N), np.int16)), TypeError,
         "out must be bfloat16 (torch.bfloat16, or numpy.uint16 holding bf16 bits); got int16"),
        ("no weights", lambda c: a2amm.Op(c, max_m=4, k=K, n=N)(a, sa), ValueError, "the op has no weights"),
        ("closed", closed, ValueError, "op call: the op is closed"),
        ("direct over mpi", None, None, None),  # (tested under mpirun: test_mpi.py)
    ]


def bad_reverse_op_cases():
    """The reverse op's (matmul-alltoall: X_r [m, K] in, [R*m, N/R] out) on 2 ranks."""
    R, rev = 2, "matmul-alltoall"
    x, sx = np.zeros((4, K), np.uint8), np.full((4, K // 32), 127, np.uint8)
    b, sb = np.zeros((N, K), np.uint8), np.full((N, K // 32), 127, np.uint8)

    def op(comm, **kw):
        o = a2amm.Op(comm, rev, max_m=4, k=K, n=N, **kw)
        o.set_weights(b, sb)
        return o

    return [
        ("N % R", lambda c: a2amm.Op(c, rev, max_m=4, k=K, n=15), a2amm.ArgumentError,
         "N must be divisible by R for matmul-alltoall: column block r of each result goes to rank r (got N=15, "
         "R=2, N % R = 1)"),
        ("K % 32", lambda c: a2amm.Op(c, rev, max_m=4, k=48, n=N), a2amm.ArgumentError,
         "K must be a multiple of 32 (whole MX blocks); got K = 48"),
        ("A_r's shape", lambda c: op(c)(np.zeros((R * 4, K // R), np.uint8), np.full((R * 4, 1), 127, np.uint8)),
         ValueError, "a_codes must have shape [m, K] = [m, 64] with 1 <= m <= max_m = 4 (X_r: this rank's rows); "
         "got (8, 32)"),
        ("max_m", lambda c: op(c)(np.zeros((5, K), np.uint8), np.zeros((5, 2), np.uint8)), ValueError,
         "a_codes has m = 5 rows, over the op's max_m = 4"),
        ("scale width", lambda c: op(c)(x, np.zeros((4, 3), np.uint8)), ValueError,
         "a_scales must have shape [m, ceil(64/32)] = [4, 2] (one E8M0 scale per 32 values); got (4, 3)"),
        ("scale rows", lambda c: op(c)(x, sx[:3]), ValueError, "a_scales must have shape [m, ceil(64/32)] = [4, 2]"),
        ("out", lambda c: op(c)(x, sx, out=np.zeros((4, N), np.uint16)), ValueError,
         "out must have shape [R*m, n/R] = [8, 8] (bf16; rows i*m .. from rank i); got (4, 16)"),
        ("m", lambda c: op(c)(x, sx, m=2), ValueError, "m = 2, but a_codes has m = 4 rows"),
        ("m, no arrays", lambda c: op(c)(m=5), ValueError, "m must be 1 to max_m = 4; got 5"),
        ("m < 0", lambda c: op(c)(x, sx, m=-3), ValueError, "m must be 1 to max_m = 4; got -3"),
        ("no weights", lambda c: a2amm.Op(c, rev, max_m=4, k=K, n=N)(x, sx), ValueError, "the op has no weights"),
    ]


def bad_argument_fails_every_rank(name, bad, exc, text, kind):
    """Rank 0 passes the bad argument; rank 1 is in the same call (an op of `kind`) with good ones and stops
    at once."""
    R = 2
    said, when = shared_text(R), shared_floats(R)

    def rank(comm):
        t0 = time.monotonic()
        try:
            if comm.rank == 0:
                bad(comm)
            else:
                o = a2amm.Op(comm, kind, max_m=4, k=K, n=N)
                o.set_weights(np.zeros((N, K), np.uint8), np.full((N, K // 32), 127, np.uint8))
                if kind == "alltoall-matmul":
                    o(np.zeros((R * 4, K // R), np.uint8), np.full((R * 4, 1), 127, np.uint8))
                else:
                    o(np.zeros((4, K), np.uint8), np.full((4, K // 32), 127, np.uint8))
                o(m=1)
        except BaseException as e:
            when[comm.rank] = time.monotonic() - t0
            said.put(comm.rank, "%s|%s" % (type(e).__name__, e))
            raise

    with pytest.raises(a2amm.Error) as info:
        a2amm.launch(R, rank)
    kind0, text0 = said.get(0).split("|", 1)
    assert kind0 == exc.__name__ and text in text0, said.get(0)
    assert info.value.rank == 0 and text in str(info.value), str(info.value)
    kind1, text1 = said.get(1).split("|", 1)
    assert kind1 == "PeerError" and "rank 0" in text1, said.get(1)
    assert when[1] < 10, "rank 1 waited %.1f s" % when[1]


def case_id(x):
    return x if isinstance(x, str) and len(x) < 20 else ""


@pytest.mark.parametrize("name,bad,exc,text", [c for c in bad_op_cases() if c[1]], ids=case_id)
def test_bad_arguments_of_collective_calls_fail_every_rank(name, bad, exc, text):
    bad_argument_fails_every_rank(name, bad, exc, text, "alltoall-matmul")


@pytest.mark.parametrize("name,bad,exc,text", bad_reverse_op_cases(), ids=case_id)
def test_bad_arguments_of_the_reverse_op_fail_every_rank(name, bad, exc, text):
    bad_argument_fails_every_rank(name, bad, exc, text, "matmul-alltoall")


@needs_torch
@pytest.mark.parametrize("call", ["op", "moe", "combine"])
def test_a_tensor_without_a_numpy_view_fails_the_communicator_too(call):
    """A tensor the package cannot read (on the meta device) is a bad argument like a wrong dtype: the
    communicator fails, so a rank that catches the error cannot go on as if nothing happened, and the
    other rank hears why at once (before, only the library's own checks failed it: a retry then ran)."""
    import torch
    R = 2
    said, when = shared_text(R), shared_floats(R)

    def rank(comm):
        t0 = time.monotonic()
        if call == "op":
            op = a2amm.Op(comm, max_m=4, k=K, n=N)
            op.set_weights(np.zeros((N, K), np.uint8), np.full((N, K // 32), 127, np.uint8))
            a, sa = torch.zeros((R * 4, K // R), dtype=torch.uint8), torch.full((R * 4, 1), 127, dtype=torch.uint8)
            bad = lambda: op(a.to("meta"), sa)  # noqa: E731
            good = lambda: op(a, sa)  # noqa: E731
        else:
            moe = a2amm.MoE(comm, experts=2, topk=1, hidden=32, inter=32, max_tokens=4)
            w13 = a2amm.quantize(np.ones((2 * 32, 32), np.float32))  # one expert a rank: [1, 2I, H], [1, H, I]
            w2 = a2amm.quantize(np.ones((32, 32), np.float32))
            moe.set_weights(tuple(v[None] for v in w13), tuple(v[None] for v in w2))
            x, idx, w = torch.ones((4, 32)), torch.zeros((4, 1), dtype=torch.int32), torch.ones((4, 1))
            if call == "moe":
                bad = lambda: moe(x, idx, w, out=torch.empty((4, 32), dtype=torch.bfloat16, device="meta"))  # noqa: E731
                good = lambda: moe(x, idx, w)  # noqa: E731
            else:
                rows, handle = moe.dispatch(x, idx, w, dequantize="float32")
                bad = lambda: moe.combine(handle, [r.to("meta") for r in rows])  # noqa: E731
                good = lambda: moe.combine(handle, rows)  # noqa: E731
        if comm.rank == 0:
            with pytest.raises(ValueError, match="is on meta: a2amm takes CPU tensors"):
                bad()
            return "caught"
        try:
            good()
        except BaseException as e:
            when[1] = time.monotonic() - t0
            said.put(1, "%s|%s" % (type(e).__name__, e))
            raise

    with pytest.raises(a2amm.Error):
        a2amm.launch(R, rank)
    kind, text = said.get(1).split("|", 1)
    assert kind == "PeerError" and "a2amm takes CPU tensors" in text, said.get(1)
    assert when[1] < 10, "rank 1 waited %.1f s" % when[1]


def test_op_input_and_closed_comm():
    def rank(comm):
        op = a2amm.Op(comm, max_m=4, k=K, n=N)
        with pytest.raises(ValueError, match="m must be 1 to max_m = 4; got 0"):
            op.input(0)
        op.close()
        with pytest.raises(ValueError, match="the op is closed"):
            op.input()
        with pytest.raises(ValueError, match="the op is closed"):
            op.set_weights(np.zeros((N, K), np.uint8), np.zeros((N, 2), np.uint8))
        with pytest.raises(ValueError, match=r"b_codes must have shape \[n, k\] = \[16, 64\]"):
            a2amm.Op(comm, max_m=4, k=K, n=N).set_weights(u8, s8)
        with pytest.raises(TypeError, match="comm must be an a2amm.Comm"):
            a2amm.Op("comm", max_m=4, k=K, n=N)
        with pytest.raises(TypeError, match="the observer must be callable"):
            a2amm.Op(comm, max_m=4, k=K, n=N).set_observer(3)
        comm.close()
        with pytest.raises(ValueError, match="barrier: the communicator is closed"):
            comm.barrier()
        with pytest.raises(ValueError, match="Op: the communicator is closed"):
            a2amm.Op(comm, max_m=4, k=K, n=N)
        return "ok"

    assert a2amm.launch(1, rank) == ["ok"]


# ---- failures between ranks ----------------------------------------------------------------------------

def looping_rank(comm, how, when, said, R, seconds=30):
    """Every rank calls an op in a loop; rank 1 fails `how` after its first call."""
    a = np.zeros((R * 16, 64), np.uint8)
    sa = np.full((R * 16, 2), 127, np.uint8)
    with a2amm.Op(comm, max_m=16, k=64 * R, n=16) as op:
        op.set_weights(np.zeros((16, 64 * R), np.uint8), np.full((16, 2 * R), 127, np.uint8))
        op(a, sa)
        t0 = time.monotonic()
        if comm.rank == 1:
            if how == "raise":
                raise ValueError("rank 1 gives up")
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if how == "sigint":  # Ctrl-C while rank 1 waits for rank 2 (in Python below)
                threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        if how == "sigint" and comm.rank == 2:
            time.sleep(3)
        try:
            while time.monotonic() - t0 < seconds:
                op(a, sa)
        except BaseException as e:
            when[comm.rank] = time.monotonic() - t0
            said.put(comm.rank, "%s|%s" % (type(e).__name__, e))
            raise


@pytest.mark.parametrize("how", ["raise", "kill"])
def test_a_rank_that_raises_or_dies_stops_the_others_within_seconds(how):
    R = 3
    said, when = shared_text(R), shared_floats(R)
    t0 = time.monotonic()
    with pytest.raises(a2amm.Error) as info:
        a2amm.launch(R, looping_rank, how, when, said, R)
    assert time.monotonic() - t0 < 20
    e = info.value
    assert e.rank == 1
    if how == "raise":
        assert str(e) == "rank 1: ValueError: rank 1 gives up" and e.code == a2amm.E_INVAL
        assert 'raise ValueError("rank 1 gives up")' in e.traceback
    else:
        assert "rank 1 (pid" in str(e) and "killed by signal 9" in str(e) and e.code == a2amm.E_PEER
        assert e.reports[1]["signal"] == signal.SIGKILL
    for r in (0, 2):
        kind, text = said.get(r).split("|", 1)
        assert kind == "PeerError" and "rank 1" in text, said.get(r)
        assert when[r] < 5, "rank %d stopped %.1f s later" % (r, when[r])


def test_ctrl_c_during_a_call_stops_it_at_the_next_tile():
    """SIGINT to a rank computing: its call raises KeyboardInterrupt (the op's stop path), the others PeerError."""
    R, M, K_, N_ = 2, 2048, 1024, 1024
    said, when = shared_text(R), shared_floats(R)

    def rank(comm):
        os.environ["A2AMM_ISA"] = "ref"  # the portable kernel: one call takes seconds, a 32-row tile a fraction
        rng = np.random.default_rng(comm.rank)
        a = rng.integers(0, 0x70, (R * M, K_ // R), dtype=np.uint8)
        sa = np.full((R * M, K_ // R // 32), 127, np.uint8)
        with a2amm.Op(comm, max_m=M, k=K_, n=N_, tile_m=32) as op:
            op.set_weights(rng.integers(0, 0x70, (N_, K_), dtype=np.uint8), np.full((N_, K_ // 32), 120, np.uint8))
            comm.barrier()
            t0 = time.monotonic()
            if comm.rank == 0:
                threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
            try:
                op(a, sa)
                said.put(comm.rank, "returned after %.2f s" % (time.monotonic() - t0))
            except BaseException as e:
                when[comm.rank] = time.monotonic() - t0
                said.put(comm.rank, "%s|%s" % (type(e).__name__, e))
                raise

    with pytest.raises(a2amm.Error, match="rank 0: interrupted"):
        a2amm.launch(R, rank)
    assert said.get(0).startswith("KeyboardInterrupt"), said.get(0)
    assert said.get(1).startswith("PeerError|"), said.get(1)
    assert when[0] < 1.5 and when[1] < 1.5, "the call stopped %.2f and %.2f s after it began" % (when[0], when[1])


def test_ctrl_c_while_waiting_for_the_others():
    """SIGINT to a rank waiting in a call for a rank that is elsewhere: it stops at once, not at the timeout."""
    R = 3
    said, when = shared_text(R), shared_floats(R)
    with pytest.raises(a2amm.Error, match="rank 1: interrupted"):
        a2amm.launch(R, looping_rank, "sigint", when, said, R)
    assert said.get(1).startswith("KeyboardInterrupt"), said.get(1)
    assert when[1] < 2, "rank 1 took %.1f s to stop" % when[1]
    assert said.get(0).startswith("PeerError|") and when[0] < 2, (said.get(0), when[0])


def test_a_wait_past_the_timeout_raises_timeout_error():
    said = shared_text(2)

    def rank(comm):
        with a2amm.Op(comm, max_m=4, k=64, n=8, timeout=1) as op:
            op.set_weights(np.zeros((8, 64), np.uint8), np.full((8, 2), 127, np.uint8))
            if comm.rank == 1:
                time.sleep(4)
            try:
                op(np.zeros((8, 32), np.uint8), np.full((8, 1), 127, np.uint8))
            except BaseException as e:
                said.put(comm.rank, "%s|%s" % (type(e).__name__, isinstance(e, TimeoutError)))
                raise

    with pytest.raises(a2amm.TimeoutError):
        a2amm.launch(2, rank)
    assert said.get(0) == "TimeoutError|True"


def test_ctrl_c_to_the_launching_process(tmp_path):
    """SIGINT to the process that called a2amm.launch: every rank stops, KeyboardInterrupt, nothing left running."""
    pids = tmp_path / "pids"
    script = textwrap.dedent("""
        import os, sys, time, numpy as np, a2amm
        def rank(comm):
            with open(sys.argv[1], "a") as f:
                f.write("%d\\n" % os.getpid())
            with a2amm.Op(comm, max_m=8, k=64, n=8) as op:
                op.set_weights(np.zeros((8, 64), np.uint8), np.full((8, 2), 127, np.uint8))
                while True:
                    op(np.zeros((16, 32), np.uint8), np.full((16, 1), 127, np.uint8))
        try:
            a2amm.launch(2, rank)
        except KeyboardInterrupt:
            print("KeyboardInterrupt in the launcher")
            sys.exit(130)
    """)
    p = subprocess.Popen([sys.executable, "-c", script, str(pids)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not pids.exists() or len(pids.read_text().split()) < 2):
        time.sleep(0.05)
    time.sleep(0.3)
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=20)
    assert time.monotonic() - t0 < 5
    assert p.returncode == 130 and "KeyboardInterrupt in the launcher" in out, (p.returncode, out, err)
    time.sleep(0.2)
    for pid in map(int, pids.read_text().split()):
        assert not os.path.exists("/proc/%d" % pid) or open("/proc/%d/stat" % pid).read().split(")")[1].split()[0] \
            in "ZX", "rank process %d still running" % pid


def test_op_weights_are_held_to_their_whole_shape():
    """The op's and a2amm.Weights' MX pairs of the right size in another shape are refused naming the
    argument, the shape it must have and the one it has: b_codes transposed or 3-D, b_scales transposed."""
    b, sb = np.zeros((N, K), np.uint8), np.full((N, K // 32), 127, np.uint8)
    bad = [((b.T.copy(), sb), "b_codes must have shape [n, k] = [16, 64] (B transposed); got (64, 16)"),
           ((b.reshape(N, 2, 32), sb), "b_codes must be a 2-D array; got 3-D, shape (16, 2, 32)"),
           ((b, sb.T.copy()), "b_scales must have shape [n, ceil(64/32)] = [16, 2]"),
           ((b, sb.reshape(-1)), "b_scales must be a 2-D array; got 1-D")]

    def rank(comm):
        said = []
        with a2amm.Op(comm, max_m=4, k=K, n=N) as op:
            for args, _ in bad:
                with pytest.raises(ValueError) as e:
                    op.set_weights(*args)
                said.append(str(e.value))
        return said

    said = a2amm.launch(1, rank)[0]
    for (_, text), got in zip(bad, said):
        assert text in got, (text, got)
    with pytest.raises(ValueError, match=r"b_scales must have shape \[n, ceil\(64/32\)\] = \[16, 2\]"):
        a2amm.Weights(b, sb.T.copy())
    with pytest.raises(ValueError, match=r"b_scales must have shape \[n, ceil\(64/32\)\] = \[32, 2\]"):
        a2amm.BF16AWeights(np.zeros((32, K), np.uint8), np.full((K // 32, 32), 127, np.uint8))
