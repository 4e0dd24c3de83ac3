"""The package's promises held against a hostile user (issue 28): m's range with and without arrays, closing
while another thread is in a call (explicit close, the end of an mpirun script, the end of a launch rank's
function), bf16 is uint16 or torch.bfloat16 only, a refused second call leaves the running one alone, a
closed op's input views never reach another op's memory, a result that cannot be unpickled, a process forked
inside a rank."""
import gc
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import a2amm
from conftest import mpirun_cmd, needs_mpi, needs_torch, shared_floats, shared_text

K, N = 64, 16
ONE, TWO = 0x38, 0x40  # e4m3 codes of 1.0 and 2.0; scale 127 is 2^0
BF16_64, BF16_128 = 0x4280, 0x4300  # 1.0 * 1.0 summed over K = 64; 2.0 * 1.0 over 64


def ones_op(comm, kind="alltoall-matmul", max_m=4, k=K, n=N, **kw):
    """An op whose B is all ones (every result is the sum of A's row)."""
    op = a2amm.Op(comm, kind, max_m=max_m, k=k, n=n, **kw)
    op.set_weights(np.full((n, k), ONE, np.uint8), np.full((n, k // 32), 127, np.uint8))
    return op


def filled_input(comm, kind, m, code=ONE):
    """This rank's input of the kind, every value `code`."""
    rows, ka = (comm.size * m, K // comm.size) if kind == "alltoall-matmul" else (m, K)
    return np.full((rows, ka), code, np.uint8), np.full((rows, (ka + 31) // 32), 127, np.uint8)


# ---- 1. m: 1 <= m <= max_m, with or without arrays, and the other ranks hear of it --------------------

def refusal(kind, call):
    """What a2amm.launch(1, ...) raises when the rank's one call(op, a, sa) is refused: a refused collective
    call fails the communicator (the other ranks stop), so the launch fails naming the rank's error."""
    def rank(comm):
        op = ones_op(comm, kind)
        call(op, *filled_input(comm, kind, 4))
        return "returned"

    with pytest.raises(a2amm.Error) as info:
        a2amm.launch(1, rank)
    return str(info.value)


@pytest.mark.parametrize("kind", a2amm.OP_KINDS)
@pytest.mark.parametrize("m", [-1, -7, 0, 5])
@pytest.mark.parametrize("arrays", [False, True], ids=["no arrays", "arrays"])
def test_an_m_out_of_range_is_refused(kind, m, arrays):
    got = refusal(kind, (lambda op, a, sa: op(a, sa, m=m)) if arrays else (lambda op, a, sa: op(m=m)))
    assert "rank 0: ValueError: m must be 1 to max_m = 4; got %d" % m in got, got


@pytest.mark.parametrize("call,text", [
    (lambda op, a, sa: op(a, sa, m=2), "m = 2, but a_codes has m = 4 rows per rank"),
    (lambda op, a, sa: op(a, sa, m=2.5), "m must be an int from 1 to max_m = 4, or None; got a float"),
    (lambda op, a, sa: op(a, sa, m=True), "m must be an int from 1 to max_m = 4, or None; got a bool"),
    (lambda op, a, sa: op(), "m must be given when a_codes and a_scales are not"),
], ids=["mismatch", "float", "bool", "none"])
def test_m_and_the_arrays_agree(call, text):
    got = refusal("alltoall-matmul", call)
    assert text in got, got


def test_a_good_m_with_and_without_arrays():
    def rank(comm):
        op = ones_op(comm)
        a, sa = filled_input(comm, "alltoall-matmul", 4)
        with_arrays = op(a, sa, m=4)
        va, vs = op.input(3)
        va[...], vs[...] = ONE, 127
        return with_arrays, op(m=3)

    with_arrays, placed = a2amm.launch(1, rank)[0]
    assert with_arrays.shape == (4, N) and (with_arrays == BF16_64).all()
    assert placed.shape == (3, N) and (placed == BF16_64).all()


@pytest.mark.parametrize("bad_m", [-1, 0])
def test_a_negative_m_on_one_rank_fails_the_others(bad_m):
    """Rank 0 passes arrays, rank 1 m < 1 and none: rank 1 raises ValueError, rank 0 PeerError, nobody
    returns values."""
    said = shared_text(2)

    def rank(comm):
        op = ones_op(comm)
        try:
            if comm.rank == 0:
                op(*filled_input(comm, "alltoall-matmul", 4))
            else:
                op(m=bad_m)
            said.put(comm.rank, "returned")
        except BaseException as e:
            said.put(comm.rank, "%s|%s" % (type(e).__name__, e))
            raise

    with pytest.raises(a2amm.Error) as info:
        a2amm.launch(2, rank)
    assert info.value.rank == 1, str(info.value)
    assert said.get(1).startswith("ValueError|m must be 1 to max_m = 4; got %d" % bad_m), said.get(1)
    assert said.get(0).startswith("PeerError|"), said.get(0)


# ---- 2. closing while another thread is in a call -----------------------------------------------------

def blocking_observer(entered, release):
    """An observer that holds the calling thread inside its call (at call_begin) until `release` is set."""
    def observer(ev):
        if ev.kind == "call_begin":
            entered.set()
            release.wait(30)
    return observer


@pytest.mark.parametrize("closing", ["op.close", "comm.close", "with op", "with comm"])
def test_close_is_refused_while_another_thread_is_in_an_op_call(closing):
    def rank(comm):
        op = ones_op(comm)
        entered, release = threading.Event(), threading.Event()
        op.set_observer(blocking_observer(entered, release))
        result = {}
        t = threading.Thread(target=lambda: result.setdefault("out", op(*filled_input(comm, "alltoall-matmul", 4))))
        t.start()
        assert entered.wait(30)
        try:
            with pytest.raises(ValueError, match="in a call from another thread"):
                if closing == "op.close":
                    op.close()
                elif closing == "comm.close":
                    comm.close()
                elif closing == "with op":
                    with op:
                        pass
                else:
                    with comm:
                        pass
            assert not op.closed and not comm.closed
        finally:
            release.set()
            t.join(30)
        op.set_observer(None)
        op.close()
        comm.close()
        return result["out"]

    out = a2amm.launch(1, rank)[0]
    assert (out == BF16_64).all()


def test_comm_close_is_refused_while_another_thread_is_in_set_weights():
    """set_weights is local (no observer): a thread sets large weights over and over while the main thread
    tries comm.close(); every refused close leaves the op whole, the one that lands finds no call in flight."""
    n, k = 2048, 4096

    def rank(comm):
        op = a2amm.Op(comm, max_m=1, k=k, n=n)
        b, sb = np.full((n, k), ONE, np.uint8), np.full((n, k // 32), 127, np.uint8)
        stop, counts = threading.Event(), {"calls": 0, "refused": 0, "after_close": ""}
        started = threading.Event()

        def setter():
            while not stop.is_set():
                started.set()
                try:
                    op.set_weights(b, sb)
                except ValueError as e:
                    counts["after_close"] = str(e)
                    return
                counts["calls"] += 1

        t = threading.Thread(target=setter)
        t.start()
        started.wait(30)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                comm.close()
                break
            except ValueError as e:
                assert "in a call from another thread" in str(e), str(e)
                counts["refused"] += 1
                if counts["refused"] >= 3:  # seen refused: let the thread stop, then close
                    stop.set()
                time.sleep(0.001)
        stop.set()
        t.join(30)
        assert comm.closed and op.closed
        return counts

    counts = a2amm.launch(1, rank)[0]
    assert counts["refused"] >= 1, counts


def exit_script(what):
    """A program whose main thread ends while a daemon thread is in a call: set_weights (local) or an op
    call (collective); `comm` from a2amm.launch or from mpirun."""
    return textwrap.dedent("""
        import sys, threading, time
        import numpy as np
        import a2amm

        def body(comm, what):
            n, k = (2048, 4096) if what == "set_weights" else (16, 64 * comm.size)
            op = a2amm.Op(comm, max_m=4, k=k, n=n)
            b, sb = np.full((n, k), 0x38, np.uint8), np.full((n, k // 32), 127, np.uint8)
            op.set_weights(b, sb)
            a = np.full((comm.size * 4, k // comm.size), 0x38, np.uint8)
            sa = np.full((comm.size * 4, k // comm.size // 32), 127, np.uint8)
            in_call = threading.Event()
            if what == "op call":  # held in its call: rank 0's peers never make theirs
                op.set_observer(lambda ev: in_call.set() if ev.kind == "call_begin" else None)

            def loop():
                while True:
                    in_call.set() if what == "set_weights" else None
                    op.set_weights(b, sb) if what == "set_weights" else op(a, sa)

            if what == "set_weights" or comm.rank == 0:
                threading.Thread(target=loop, daemon=True).start()
                in_call.wait(30)
                time.sleep(0.05)
            else:  # rank 0's function ends first, its thread in the call
                time.sleep(1)
            return "ended"
    """)


@needs_mpi
@pytest.mark.parametrize("transport", ["shm", "mpi"])
@pytest.mark.parametrize("what", ["set_weights", "op call"])
def test_an_mpirun_script_that_ends_with_a_daemon_thread_in_a_call(tmp_path, what, transport):
    script = tmp_path / "job.py"
    script.write_text(exit_script(what) + textwrap.dedent("""
        from mpi4py import MPI
        comm = a2amm.Comm.from_mpi(MPI.COMM_WORLD, transport=sys.argv[2])
        print("rank %d %s" % (comm.rank, body(comm, sys.argv[1])), flush=True)
    """))
    t0 = time.monotonic()
    p = subprocess.run(mpirun_cmd(2) + [sys.executable, str(script), what, transport], capture_output=True, text=True,
                       timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "rank 0 ended" in p.stdout and "rank 1 ended" in p.stdout, out
    assert "Segmentation" not in out and "signal 11" not in out, out
    assert time.monotonic() - t0 < 60


@pytest.mark.parametrize("what", ["set_weights", "op call"])
def test_a_launch_rank_that_returns_with_a_thread_in_a_call(what):
    namespace = {}
    exec(compile(exit_script(what), "exit_script", "exec"), namespace)
    t0 = time.monotonic()
    if what == "set_weights":  # local: the call is waited for, the launch ends well
        assert a2amm.launch(2, namespace["body"], what) == ["ended", "ended"]
    else:  # collective: the call is stopped, and the launch says why
        with pytest.raises(a2amm.Error) as info:
            a2amm.launch(2, namespace["body"], what)
        e = info.value
        assert e.rank == 0 and "returned while another thread was in a call (op call)" in str(e), str(e)
        assert all(rep["signal"] == 0 for rep in e.reports), e.reports
    assert time.monotonic() - t0 < 30


# ---- 3. bf16 is torch.bfloat16 or numpy uint16, never int16 -------------------------------------------

def test_int16_is_not_bf16():
    x = np.zeros((4, 64), np.int16)
    with pytest.raises(TypeError, match="x must be float32 or bfloat16 .*got int16"):
        a2amm.quantize(x)
    codes, scales = a2amm.quantize(np.ones((4, 64), np.float32))
    with a2amm.Weights(codes, scales) as w:
        with pytest.raises(TypeError, match="out must be bfloat16 .*got int16"):
            a2amm.matmul(codes, scales, w, out=np.zeros((4, 4), np.int16))
        assert (a2amm.matmul(codes, scales, w, out=np.zeros((4, 4), np.uint16)) == BF16_64).all()

    def rank(comm):
        op = ones_op(comm)
        with pytest.raises(TypeError, match="out must be bfloat16 .*got int16"):
            op(*filled_input(comm, "alltoall-matmul", 4), out=np.zeros((4, N), np.int16))
        return "refused"

    with pytest.raises(a2amm.Error, match="out must be bfloat16"):  # a refused collective call fails the launch
        a2amm.launch(1, rank)


@needs_torch
def test_int16_tensors_are_not_bf16():
    import torch
    with pytest.raises(TypeError, match="x must be float32 or bfloat16 .*got int16"):
        a2amm.quantize(torch.zeros(4, 64, dtype=torch.int16))
    codes, scales = a2amm.quantize(torch.ones(4, 64, dtype=torch.bfloat16))
    with a2amm.Weights(codes, scales) as w:
        with pytest.raises(TypeError, match="out must be bfloat16 .*got int16"):
            a2amm.matmul(codes, scales, w, out=torch.zeros(4, 4, dtype=torch.int16))
        out = a2amm.matmul(codes, scales, w, out=torch.zeros(4, 4, dtype=torch.bfloat16))
        assert out.dtype == torch.bfloat16 and (out == 64).all()


# ---- 4. a second thread's call on a busy op is refused, and the running call goes on ------------------

@pytest.mark.parametrize("second", ["op call", "set_weights", "barrier"])
def test_a_refused_call_leaves_the_running_one_alone(second):
    go = shared_floats(1)

    def rank(comm):
        op = ones_op(comm)
        a, sa = filled_input(comm, "alltoall-matmul", 4)
        if comm.rank == 1:  # joins the call once rank 0's second thread was refused
            while np.isnan(go[0]):
                time.sleep(0.005)
            return op(a, sa), ""
        entered = threading.Event()
        op.set_observer(lambda ev: entered.set() if ev.kind == "call_begin" else None)
        result = {}
        t = threading.Thread(target=lambda: result.setdefault("out", op(a, sa)))
        t.start()
        assert entered.wait(30)  # the call has begun: it waits for rank 1
        try:
            if second == "op call":
                op(a, sa)
            elif second == "set_weights":
                op.set_weights(np.zeros((N, K), np.uint8), np.full((N, K // 32), 127, np.uint8))
            else:
                comm.barrier()
            refused = "not refused"
        except ValueError as e:
            refused = str(e)
        go[0] = 1
        t.join(60)
        return result.get("out"), refused

    (out0, refused), (out1, _) = a2amm.launch(2, rank)
    assert "in a call from another thread" in refused, refused
    assert out0 is not None and (out0 == BF16_64).all() and (out1 == BF16_64).all()


# ---- 5. a closed op's input views never reach another op's memory -------------------------------------

def test_the_views_of_a_closed_op_do_not_reach_the_next_op():
    hb = a2amm.Op.heap_bytes(1, 4, K, N)

    def rank(comm):
        old = ones_op(comm)
        a_old, s_old = old.input()
        old.close()
        new = ones_op(comm)
        a_new, s_new = new.input()
        a_new[...], s_new[...] = TWO, 127
        a_old[...], s_old[...] = 0x7E, 0xFE  # written through a closed op's views: its own memory, kept
        out = new(a_new, s_new)
        lo_old, lo_new = a_old.__array_interface__["data"][0], a_new.__array_interface__["data"][0]
        apart = lo_old + a_old.nbytes <= lo_new or lo_new + a_new.nbytes <= lo_old
        # once the views go, so does the closed op's memory: two more ops fit in a heap of two
        del a_old, s_old
        gc.collect()
        new.close()
        del a_new, s_new
        gc.collect()
        third, fourth = ones_op(comm), ones_op(comm)
        third.close(), fourth.close()
        return out, apart

    out, apart = a2amm.launch(1, rank, heap_bytes=2 * hb + 65536)[0]
    assert apart, "a closed op's view overlaps the next op's input"
    assert (out == BF16_128).all(), np.unique(out)


def test_a_closed_ops_views_refuse_new_buffers():
    def rank(comm):
        op = ones_op(comm)
        a, _ = op.input()
        bufs = op._input_buffers()
        op.close()
        with pytest.raises(ValueError, match="the op is closed"):
            op.input()
        with pytest.raises(ValueError, match="the op is closed"):
            memoryview(bufs[0])
        a[0, 0, 0] = 1  # the old view still has its memory
        return int(a[0, 0, 0])

    assert a2amm.launch(1, rank) == [1]


# ---- 6. a result that cannot be unpickled here --------------------------------------------------------

def test_a_result_that_cannot_be_unpickled_names_its_rank():
    def rank(comm):
        if comm.rank == 1:
            import __main__
            cls = type("OnlyInRankOne", (), {})
            cls.__module__, cls.__qualname__ = "__main__", "OnlyInRankOne"
            __main__.OnlyInRankOne = cls
            return cls()
        return "rank %d" % comm.rank

    with pytest.raises(a2amm.Error) as info:
        a2amm.launch(3, rank)
    e = info.value
    assert e.rank == 1 and "rank 1" in str(e) and "cannot be unpickled" in str(e), str(e)
    assert "OnlyInRankOne" in str(e), str(e)
    assert e.results == ["rank 0", None, "rank 2"], e.results


# ---- 7. a process forked inside a rank ----------------------------------------------------------------

def test_a_process_forked_inside_a_rank_is_not_the_rank():
    def rank(comm):
        codes = []
        for how in ("exit 3", "return", "raise", "exit 0"):
            pid = os.fork()
            if pid == 0:  # the child of the rank: none of these may touch the rank's result or status
                if how == "exit 3":
                    sys.exit(3)
                if how == "return":
                    return "the child's result"
                if how == "raise":
                    raise RuntimeError("the child of rank %d fails" % comm.rank)
                sys.exit(0)
            codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        comm.barrier()
        return codes

    assert a2amm.launch(2, rank) == [[3, 0, 1, 0]] * 2


