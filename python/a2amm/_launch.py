"""a2amm.launch: R rank processes of one machine, forked by the library (a2amm_launch)."""
import os
import pickle
import signal
import sys
import traceback

from . import _a2amm


def launch(nranks, fn, *args, heap_bytes=0, timeout=0.0, stall=0.0):
    """[fn(comm, *args) of each rank]: runs fn in nranks processes forked from this one, over shared memory.

    Each rank's process calls fn(comm, *args) with its communicator (comm.rank, comm.size); what each
    returns comes back, pickled, as a list in rank order. The forks share what this process had
    (arrays, functions, closures: nothing is pickled on the way in); nothing is left in /dev/shm.
    A rank that raises fails the launch: a2amm.Error saying "rank r: <its traceback's last line>"
    (.rank, and .traceback its whole traceback, .reports how each rank ended), and the other ranks'
    collective calls raise a2amm.PeerError within a fraction of a second. A rank that dies does the
    same. Ctrl-C stops every rank (KeyboardInterrupt). A result this process cannot unpickle fails the
    launch naming its rank (.rank), the others' results in .results. A process fn forks (os.fork()) that
    comes back out of fn exits there, with its status: it is not the rank.

    heap_bytes: symmetric memory per rank for the ops made on it (0: 1 GiB, reserved, not touched until
    used; a2amm.Op.heap_bytes says what an op needs, a2amm.MoE.heap_bytes what a MoE needs). timeout:
    the longest the whole launch may take (0: no limit); stall: a rank silent that long (no call of an op, no comm.say) fails it (0: no such
    watch): a2amm.TimeoutError. The launching thread holds the GIL until every rank has ended (a child
    of fork may use Python only so); the ranks' collective calls release theirs. Ops made in a rank
    end with its function. torch in the ranks: call torch.set_num_threads(1) in fn if this process
    ran torch's parallel ops before (torch's OpenMP pool does not survive fork).
    """
    if not isinstance(nranks, int) or isinstance(nranks, bool):
        raise TypeError("nranks must be an int; got %s" % type(nranks).__name__)
    if not 1 <= nranks <= 1024:
        raise ValueError("nranks must be 1 to 1024; got %d" % nranks)
    if not callable(fn):
        raise TypeError("fn must be callable (fn(comm, *args)); got %s" % type(fn).__name__)
    for name, v in (("heap_bytes", heap_bytes), ("timeout", timeout), ("stall", stall)):
        if v < 0:
            raise ValueError("%s must be 0 or positive; got %r" % (name, v))
    fds = []
    try:
        for r in range(nranks):
            fds.append(os.memfd_create("a2amm-launch-rank%d" % r, os.MFD_CLOEXEC))
        status, message, reports = _a2amm._launch(nranks, run_rank, fn, tuple(args), tuple(fds), int(heap_bytes),
                                                  float(timeout), float(stall))
        records, unreadable = [], []
        for r, fd in enumerate(fds):
            try:
                records.append(_read(fd))
            except Exception as e:  # noqa: BLE001  (whatever unpickling raises: said, naming the rank)
                records.append(None)
                unreadable.append((r, e))
    finally:
        for fd in fds:
            os.close(fd)
    if status == 0:
        if unreadable:
            r, e = unreadable[0]
            err = _error(_a2amm.E_INVAL, "a2amm.launch: rank %d's result cannot be unpickled in this process (%s): "
                         "return plain data, or objects of classes this process can import (not ones a rank "
                         "defined in its own __main__); the other ranks' results are in .results" %
                         (r, _last_line(e)), r, None, reports)
            err.results = [rec[1] if rec and rec[0] == "ok" else None for rec in records]
            raise err from e
        missing = [r for r, rec in enumerate(records) if not rec or rec[0] != "ok"]
        if missing:
            raise _error(_a2amm.E_SYS, "a2amm.launch: rank %d returned no result" % missing[0], None, None, reports)
        return [rec[1] for rec in records]
    first = next((r for r, rep in enumerate(reports) if rep["failed_first"]), None)
    rec = records[first] if first is not None else None
    tb = rec[2] if rec and rec[0] == "error" else None
    raise _error(status, message, first, tb, reports)


def _error(status, message, rank, tb, reports):
    from . import Error, TimeoutError
    e = (TimeoutError if status == _a2amm.E_TIMEOUT else Error)(status, message)
    e.rank, e.traceback, e.reports = rank, tb, reports
    return e


def _read(fd):
    size = os.fstat(fd).st_size
    if size == 0:
        return None
    parts, got = [], 0
    while got < size:
        chunk = os.pread(fd, size - got, got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return pickle.loads(b"".join(parts))


def _write(fd, data):
    view, off = memoryview(data), 0
    while off < len(view):
        off += os.pwrite(fd, view[off:], off)


def _last_line(e):
    """The traceback's last line ("ValueError: boom"), on one line."""
    text = "".join(traceback.format_exception_only(type(e), e)).strip()
    return " ".join(line.strip() for line in text.splitlines())


def _end_forked_child(how):
    """A process that fn forked (os.fork() in a rank) came back out of fn: it is not the rank, so it neither
    writes the rank's result nor fails the launch; it ends here as Python would have ended it (how: 0 for a
    return, the SystemExit's code, or an exception, printed, exit 1), skipping the rank's own teardown."""
    code = 0
    if isinstance(how, SystemExit):
        code = how.code if isinstance(how.code, int) else (0 if how.code is None else 1)
        if how.code is not None and not isinstance(how.code, int):
            print(how.code, file=sys.stderr)
    elif isinstance(how, BaseException):
        traceback.print_exception(type(how), how, how.__traceback__)
        code = 1
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:  # noqa: BLE001  (a closed stream: nothing to flush)
            pass
    os._exit(code & 0xFF)


def run_rank(comm, fn, args, fds):
    """In each rank's process (called by the extension right after the fork): -> (status, message)."""
    from . import Error, PeerError
    pid = os.getpid()
    # a2amm_launch leaves SIGINT to its default in a rank (the process dies, the launcher says so): in
    # Python it raises KeyboardInterrupt again, so that a rank interrupted in Python code says so too
    signal.signal(signal.SIGINT, signal.getsignal(signal.SIGINT))
    fd = fds[comm.rank]
    try:
        value = fn(comm, *args)
        if os.getpid() != pid:
            _end_forked_child(0)
        data = pickle.dumps(("ok", value), protocol=pickle.HIGHEST_PROTOCOL)
        status, message = 0, None
    except BaseException as e:  # noqa: B902  (a rank's every failure ends the launch, said)
        if os.getpid() != pid:
            _end_forked_child(e)
        if isinstance(e, PeerError):
            status = _a2amm.E_PEER
        elif isinstance(e, KeyboardInterrupt):
            status = _a2amm.E_INTERRUPTED
        elif isinstance(e, Error) and isinstance(e.code, int) and e.code < 0:
            status = e.code
        else:
            status = _a2amm.E_INVAL
        message = _last_line(e)
        if isinstance(e, KeyboardInterrupt):
            message = "interrupted (%s)" % message
        data = pickle.dumps(("error", message, traceback.format_exc()))
    try:
        _write(fd, data)
    finally:
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:  # noqa: BLE001  (a closed stream: nothing to flush)
                pass
    return status, message
