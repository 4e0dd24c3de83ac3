"""a2amm from Python: the fused AllToAll + MXFP8 quantized matmul across ranks.

    import a2amm
    codes, scales = a2amm.quantize(x)                  # x [rows, cols] float32 or bfloat16
    w = a2amm.Weights(b_codes, b_scales)               # B transposed [n, k], prepared once
    out = a2amm.matmul(a_codes, a_scales, w)           # one rank: bf16 [m, n]

    def rank(comm, ...):                               # one process per rank
        with a2amm.Op(comm, max_m=M, k=K, n=N) as op:  # collective, once
            op.set_weights(b_codes, b_scales)          # local
            return op(a_codes, a_scales)               # collective: bf16 [m, N]
    results = a2amm.launch(R, rank, ...)               # or comm = a2amm.Comm.from_mpi(MPI.COMM_WORLD)

Two kinds of op (a2amm.OP_KINDS): "alltoall-matmul" (the AllToAll of every rank's A, then the matmul) and
"matmul-alltoall" (the matmul, then the AllToAll of the result's column blocks): see help(a2amm.Op).

Arrays are numpy arrays or torch CPU tensors (or any buffer-protocol object), read in place: fp8 codes and
E8M0 scales as uint8; values as float32 or bfloat16. bf16 results are torch.bfloat16 tensors for torch
inputs, and numpy uint16 arrays of bf16 bits otherwise (numpy has no bfloat16; bf16_to_float32 widens them).
Errors are a2amm.Error (.code, the library's message), PeerError when another rank failed, TimeoutError
when a wait outlived its deadline; bad arguments raise TypeError or ValueError naming the argument.
The GIL is released during collective calls, matmuls and quantization; Ctrl-C stops a call cleanly.
See the repository's README.md ("Python") for the whole story.
"""
import atexit as _atexit
import builtins as _builtins
import os as _os
import sys as _sys

import numpy as _np
from numpy import ndarray as _ndarray

try:
    from . import _a2amm
except ImportError as _e:  # the source folder (python/a2amm) has no built extension: say so, not "circular import"
    if "cannot import name '_a2amm'" not in str(_e):  # an extension that is there and failed to load says why
        raise
    raise ImportError("a2amm's C extension (a2amm._a2amm) is not built in %s: this looks like the package's "
                      "source folder. Install the package (make, then pip install ./python; see README's "
                      "Python section) and import it from another folder" % __path__[0]) from None
from ._a2amm import Comm, Event, kernel, strerror  # noqa: F401  (the public names)
from ._a2amm import (E_FORMAT, E_INTERRUPTED, E_INVAL, E_IO, E_MISMATCH, E_NOMEM, E_OVERFLOW,  # noqa: F401
                     E_PEER, E_SIZE, E_SYS, E_TIMEOUT)

#: The library's version (a2amm_version() of the liba2amm this package runs).
__version__ = _a2amm.version
#: The version of the header the extension was built with.
header_version = _a2amm.header_version
#: The liba2amm shared library the extension loaded.
library_path = _a2amm.library_path
#: Whether Comm.from_mpi can run (the extension was built with liba2amm_mpi).
has_mpi = bool(_a2amm.has_mpi)
#: The fp8 formats of codes, and the op kinds this library runs.
FORMATS = ("e4m3", "e5m2")
OP_KINDS = _a2amm._op_kinds()


class Error(Exception):
    """A failed a2amm call: .code is the library's status (a2amm.E_*), the message the library's."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message

    def __reduce__(self):
        return (type(self), (self.code, self.message))


class PeerError(Error):
    """Another rank failed (raised, returned an error, died, or was interrupted): this call stopped."""


class TimeoutError(Error, _builtins.TimeoutError):  # noqa: A001
    """A wait between ranks outlived its deadline (the op's timeout)."""


class ArgumentError(Error, ValueError):
    """The library refused an argument (A2AMM_E_INVAL): also a ValueError."""


_a2amm._set_errors(Error, PeerError, TimeoutError, ArgumentError)


# ---- arrays: numpy, torch CPU tensors, ml_dtypes' bfloat16 ---------------------------------

def _torch_tensor(x):
    t = _sys.modules.get("torch")
    return t is not None and isinstance(x, t.Tensor)


def _fail_collective(obj, e):
    """A bad argument to a collective call of obj (an Op or a MoE) fails its communicator, as the library's
    own checks do: the other ranks are in the call, and get PeerError at once instead of a timeout."""
    if not obj.closed and not obj.comm.closed:
        obj.comm.fail("%s: %s" % (type(e).__name__, e))


def _whole_numbers(comm, what, **values):
    """Each of values a whole number (an int, a numpy integer; not a bool, str or float), else a TypeError
    naming it; a create is collective, so the communicator fails too, as for the library's own checks."""
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, (int, _np.integer)):
            why = "%s: %s must be a whole number; got %r" % (what, name, v)
            if not getattr(comm, "closed", True):
                comm.fail(why)
            raise TypeError(why)


def _array(x, name):
    """x as what the extension reads (a numpy view of a torch tensor: no copy)."""
    if _torch_tensor(x):
        import torch
        if x.device.type != "cpu":
            raise ValueError("%s is on %s: a2amm takes CPU tensors (x.cpu() copies it)" % (name, x.device))
        x = x.detach()
        if x.dtype == torch.bfloat16:
            return x.view(torch.int16).numpy().view(_np.uint16)
        try:
            return x.numpy()
        except (TypeError, RuntimeError) as e:
            raise TypeError("%s: a torch.%s tensor has no numpy view (%s)" % (name, str(x.dtype)[6:], e)) from None
    if isinstance(x, _np.ndarray) and x.dtype.name == "bfloat16":  # ml_dtypes
        return x.view(_np.uint16)
    return x


def _bf16_out(rows, cols):
    import torch
    return torch.empty((rows, cols), dtype=torch.bfloat16)


def bf16_to_float32(bits):
    """bf16 results as float32 (exact): a numpy uint16 array of bf16 bits, or a torch.bfloat16 tensor."""
    if _torch_tensor(bits):
        return bits.float()
    b = _np.asarray(bits)
    if b.dtype != _np.uint16 and b.dtype.name != "bfloat16":
        raise TypeError("bits must be uint16 (bf16 bits, as a2amm returns them for numpy); got %s" % b.dtype)
    return (b.view(_np.uint16).astype(_np.uint32) << 16).view(_np.float32)


def float32_to_bf16(x):
    """float32 values as bf16 bits (numpy uint16), rounded to nearest even; NaN stays NaN."""
    u = _np.ascontiguousarray(x, dtype=_np.float32).view(_np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(_np.uint16)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return _np.where(nan, ((u >> 16) | 0x40).astype(_np.uint16), rounded)


# ---- MX data -----------------------------------------------------------------------------------

def quantize(x, fmt="e4m3", mode="floor"):
    """(codes, scales) of x [rows, cols] in MXFP8 (OCP MX v1.0), the library's bits.

    x: float32, or bfloat16 (a torch.bfloat16 tensor, or a numpy uint16 array of bf16 bits), 2-D with
    contiguous rows (any row stride), read in place. fmt: "e4m3" or "e5m2". mode: "floor" (the OCP
    scale, 2^(floor(log2 amax)) - emax) or "rceil" (amax rounded up to the format's range). Blocks of
    32 along each row (a last partial block allowed); codes rounded to nearest even and saturated; a
    block with a NaN or Inf gets scale 0xFF, an all-zero block 0x00. Returns codes uint8 [rows, cols]
    and scales uint8 [rows, ceil(cols/32)]: torch tensors for a torch x, numpy arrays otherwise.
    """
    torch_in = _torch_tensor(x)
    codes, scales = _a2amm.quantize(_array(x, "x"), fmt, mode)
    if torch_in:
        import torch
        return torch.from_numpy(codes), torch.from_numpy(scales)
    return codes, scales


def dequantize(codes, scales, fmt="e4m3"):
    """float32 [rows, cols] of MXFP8 codes [rows, cols] and scales [rows, ceil(cols/32)] (exact; NaN where
    a scale is 0xFF): a torch tensor for torch codes, numpy otherwise."""
    torch_in = _torch_tensor(codes)
    y = _a2amm.dequantize(_array(codes, "codes"), _array(scales, "scales"), fmt)
    if torch_in:
        import torch
        return torch.from_numpy(y)
    return y


class Weights(_a2amm.Weights):
    """B prepared once for the kernels: b_codes [n, k] (B transposed: one row per output column, k a
    multiple of 32) and b_scales [n, k/32], uint8, in fmt. The arrays may change or go afterwards.
    Serves a2amm.matmul and ops (op.use_weights). threads: for the preparation (0: every core)."""

    def __init__(self, b_codes, b_scales, fmt="e4m3", threads=0):
        super().__init__(_array(b_codes, "b_codes"), _array(b_scales, "b_scales"), fmt, threads)

    def __repr__(self):
        state = "closed" if self.closed else "n=%d, k=%d, fmt=%r" % (self.n, self.k, self.fmt)
        return "a2amm.Weights(%s)" % state


def matmul(a_codes, a_scales, weights, fmt="e4m3", out=None, threads=0, out_dtype="bfloat16"):
    """out [m, n] bf16 = A [m, k] x B on one rank: a_codes [m, k] and a_scales [m, k/32] uint8 in fmt (any
    row stride), B the prepared weights. Sums in fp32 in a fixed order, one bf16 rounding: the same bits
    as the op. out: written in place when given (bf16: torch.bfloat16, or numpy uint16 bits, rows
    contiguous); else a torch.bfloat16 tensor for torch a_codes, numpy uint16 bits otherwise. threads:
    0 for every core. The GIL is released while it runs.
    out_dtype="float32": the fp32 sums themselves, unrounded (float32 [m, n]; torch.float32 for torch
    a_codes): an MoE expert's gate and up sums as the MoE op has them (see swiglu, matmul_bf16a)."""
    if out_dtype not in ("bfloat16", "float32"):
        raise ValueError("out_dtype must be 'bfloat16' or 'float32'; got %r" % (out_dtype,))
    f32 = out_dtype == "float32"
    a = _array(a_codes, "a_codes")
    n = weights.n if isinstance(weights, Weights) else 0
    if out is None and _torch_tensor(a_codes):
        import torch
        rows = getattr(a, "shape", (0,))[0]
        out = torch.empty((rows, n), dtype=torch.float32) if f32 else _bf16_out(rows, n)
    if _torch_tensor(out):
        _a2amm.matmul(a, _array(a_scales, "a_scales"), weights, fmt, _array(out, "out"), threads, f32)
        return out
    return _a2amm.matmul(a, _array(a_scales, "a_scales"), weights, fmt, out, threads, f32)


def swiglu(g, u):
    """bf16(silu(g) * u), element by element, as the MoE op computes an expert's activation: silu(g) = g /
    (1 + e^-g) in fp32 with the library's exp (the same bits on every CPU), one fp32 product, one rounding
    to bf16. g, u: float32 [m, n] (numpy or torch). Returns torch.bfloat16 for torch g, else numpy uint16
    bf16 bits."""
    res = _a2amm.swiglu(_array(g, "g"), _array(u, "u"))
    if _torch_tensor(g):
        import torch
        return torch.from_numpy(res.view(_np.int16)).view(torch.bfloat16)
    return res


class BF16AWeights(_a2amm.BF16AWeights):
    """MX weights prepared for a bf16 A (the MoE op's down projection as a matmul of its own): b_codes [n, k]
    (B transposed: one row per output column; n and k multiples of 32) and b_scales [n, k/32], uint8, in
    fmt. Serves matmul_bf16a; the arrays may change or go afterwards."""

    def __init__(self, b_codes, b_scales, fmt="e4m3"):
        super().__init__(_array(b_codes, "b_codes"), _array(b_scales, "b_scales"), fmt)

    def __repr__(self):
        state = "closed" if self.closed else "n=%d, k=%d, fmt=%r" % (self.n, self.k, self.fmt)
        return "a2amm.BF16AWeights(%s)" % state


def matmul_bf16a(a, weights, out=None, threads=0):
    """y [m, n] float32 = a [m, k] (bf16: torch.bfloat16, or numpy uint16 bits) x B, by the MoE op's rule
    for an expert's down projection (each output summed over k in fp32): with an expert's W2 as
    BF16AWeights and a from swiglu, the op's y bits. out: float32 [m, n] written in place, else a new
    array (torch.float32 for torch a). threads: the rows shared out (0 for every core; the same bits on
    any count). The GIL is released while it runs."""
    if out is None and _torch_tensor(a):
        import torch
        out = torch.empty((a.shape[0], weights.n if isinstance(weights, BF16AWeights) else 0), dtype=torch.float32)
    if _torch_tensor(out):
        _a2amm.matmul_bf16a(_array(a, "a"), weights, _array(out, "out"), threads)
        return out
    return _a2amm.matmul_bf16a(_array(a, "a"), weights, out, threads)


# ---- the operator -------------------------------------------------------------------------------

class Op(_a2amm.Op):
    """The fused AllToAll + MXFP8 matmul on a communicator (a2amm.h's a2amm_op).

    Op(comm, kind="alltoall-matmul", *, max_m, k, n, a_fmt="e4m3", b_fmt="e4m3", tile_m=0, depth=0,
       threads=0, path=None, timeout=0, schedule="fused")

    Collective: every rank of comm makes it, with the same arguments. kind: one of a2amm.OP_KINDS.
    Every rank r has its own B_r, stored transposed [n, k] (op.set_weights).
    - "alltoall-matmul" (the default; Ulysses' exchange after attention, with the output projection):
      rank r holds A_r [R*m, K/R]: R blocks of m rows, block j for rank j; the call sends each block to
      its rank and multiplies what rank r received ([m, K]: rank j's block as K range j*K/R..) by B_r,
      giving bf16 [m, n]. K/R a multiple of 32.
    - "matmul-alltoall" (the exchange after the QKV projection; expert parallelism's combine): rank r
      holds X_r [m, K]; the call computes Y_r = X_r x B_r [m, n] and sends column block j of it
      (columns j*n/R ..) to rank j, giving bf16 [R*m, n/R] stacked by source: rank j's rows i*m ..
      (i+1)*m are rank i's block, the bits of a2amm.matmul(X_i, B_i)'s columns j*n/R .. exactly. K a
      multiple of 32, n divisible by R.
    max_m: the largest m of any call (each call may use any m from 1 to it).
    tile_m: rows per pipeline tile (0: 512); depth: ring slots per source on the put path (0: 4;
    matmul-alltoall has no ring); threads: compute threads of this rank (0: cores / R); path: "direct"
    (read peers' memory) or "put" (None: direct on shared memory, put over MPI, its only path);
    timeout: seconds every wait between ranks may take (0: 60); schedule: "fused" (tile by tile, the
    exchange behind the matmul) or "unfused" (the whole AllToAll, then the matmul; or the reverse).
    A bad argument raises TypeError/ValueError and fails the communicator, as the library's own
    checks do, so that the other ranks stop at once (PeerError) instead of waiting for the timeout.
    """

    def __init__(self, comm, kind="alltoall-matmul", *, max_m, k, n, a_fmt="e4m3", b_fmt="e4m3", tile_m=0,
                 depth=0, threads=0, path=None, timeout=0, schedule="fused"):
        _whole_numbers(comm, "Op", max_m=max_m, k=k, n=n, tile_m=tile_m, depth=depth, threads=threads)
        super().__init__(comm, kind, max_m=max_m, k=k, n=n, a_fmt=a_fmt, b_fmt=b_fmt, tile_m=tile_m, depth=depth,
                         threads=threads, path=path, timeout=float(timeout), schedule=schedule)
        self._size = comm.size
        self._tracer = None

    def __repr__(self):
        if self.closed:
            return "a2amm.Op(closed)"
        return "a2amm.Op(%s, rank %d of %d, max_m=%d, k=%d, n=%d, %s x %s, path=%s, %s)" % (
            self.kind, self.comm.rank, self.comm.size, self.max_m, self.k, self.n, self.a_fmt, self.b_fmt,
            self.path, self.schedule)

    def _out_shape(self, m):
        """The shape of a call's result: [m, n], or [R*m, n/R] for matmul-alltoall."""
        if self.kind == "matmul-alltoall":
            return self._size * m, self.n // self._size
        return m, self.n

    def _rows_per_rank(self, a):
        """The m of a call's input array a (its rows; / R for alltoall-matmul)."""
        rows = getattr(a, "shape", (0,))[0]
        return rows if self.kind == "matmul-alltoall" else rows // self._size

    def set_weights(self, b_codes, b_scales):
        """Local: this rank's B, b_codes [n, k] (B transposed) and b_scales [n, k/32], uint8 in b_fmt;
        prepared (packed for the kernel) into a copy of the op's own, so the arrays may change or go
        afterwards. Call again to replace them (between calls)."""
        self._set_weights(_array(b_codes, "b_codes"), _array(b_scales, "b_scales"))

    def __call__(self, a_codes=None, a_scales=None, *, m=None, out=None):
        """Collective: one call of the op. Returns out: bf16 [m, n] (alltoall-matmul) or [R*m, n/R]
        (matmul-alltoall: rows i*m .. from rank i).

        alltoall-matmul: a_codes [R*m, K/R] and a_scales [R*m, ceil(K/R/32)] (or the seed layout's
        2*ceil(K/R/64) columns), this rank's A, m = rows / R. matmul-alltoall: a_codes [m, K] and
        a_scales [m, ceil(K/32)] (or 2*ceil(K/64)), this rank's X_r, m = rows. uint8 in a_fmt, rows
        contiguous (any row stride); 1 <= m <= max_m, the same on every rank. The library copies them
        into the op's memory (alltoall-matmul: the other ranks read it there; a layout it does not take,
        a row stride or the narrower scales, is copied in here instead). Zero-copy: write the input into
        the arrays op.input() gives (the op's own memory) and pass those, or nothing with m=: no copy.
        out: bf16 of the result's shape, C-contiguous, written in place (torch.bfloat16, or numpy uint16
        bits); None makes one: a torch.bfloat16 tensor for torch a_codes, numpy uint16 bits otherwise.
        The GIL is released during the call; Ctrl-C stops it at the next tile (KeyboardInterrupt; the
        other ranks get PeerError). Raises PeerError when another rank failed, TimeoutError after
        timeout seconds without the others.
        """
        if type(a_codes) is _ndarray and type(a_scales) is _ndarray and (out is None or type(out) is _ndarray):
            return self._run(a_codes, a_scales, out, m)  # numpy: straight to the extension
        try:
            a = _array(a_codes, "a_codes") if a_codes is not None else None
            sa = _array(a_scales, "a_scales") if a_scales is not None else None
            if out is None and _torch_tensor(a_codes):
                out = _bf16_out(*self._out_shape(self._m_of_call(m, a)))
            view = _array(out, "out") if _torch_tensor(out) else out
        except BaseException as e:
            _fail_collective(self, e)
            raise
        result = self._run(a, sa, view, m)
        return out if _torch_tensor(out) else result

    def _m_of_call(self, m, a):
        """The m a call's result is made for: m, or the input array's; a bad m (the extension refuses it,
        failing the communicator, before it looks at out) or none at all gets a 1-row result."""
        if m is None:
            return self._rows_per_rank(a) if a is not None else 1
        return m if isinstance(m, int) and 1 <= m <= self.max_m else 1

    def input(self, m=None):
        """(a_codes, a_scales): numpy views of the op's own input memory, uint8: alltoall-matmul's
        [R, m, K/R] and [R, m, K/R/32] (block j for rank j), matmul-alltoall's [m, K] and [m, K/32]
        (m defaults to max_m). Write the input into them and call op(a_codes, a_scales) with them (or
        op(m=m)): the op reads them where they are, no copy. Write only between calls (a call reads them
        until it returns on every rank); after op.close() they still hold their memory, which no other
        op gets until they go. torch.from_numpy(view) gives tensors over the same memory."""
        m = self.max_m if m is None else m
        if not 1 <= m <= self.max_m:
            raise ValueError("m must be 1 to max_m = %d; got %r" % (self.max_m, m))
        abuf, sbuf, block_rows, ldsa = self._input_buffers()
        ka = self.ka
        a = _np.frombuffer(abuf, dtype=_np.uint8)
        sa = _np.frombuffer(sbuf, dtype=_np.uint8)
        if self.kind == "matmul-alltoall":  # one block
            return a.reshape(block_rows, ka)[:m, :], sa.reshape(block_rows, ldsa)[:m, :ka // 32]
        R = self._size
        return a.reshape(R, block_rows, ka)[:, :m, :], sa.reshape(R, block_rows, ldsa)[:, :m, :ka // 32]

    def trace(self, path):
        """Records this rank's pipeline from now on; returns a Tracer. Its stop() (or the end of
        `with op.trace(path):`) is collective: every rank's spans go to rank 0, which writes `path` as a
        Chrome trace (ui.perfetto.dev, chrome://tracing) that `a2amm timeline` draws."""
        from ._trace import Tracer
        if self._tracer is not None and self._tracer.active:
            raise ValueError("trace: this op is already being traced (stop that first)")
        self._tracer = Tracer(self, path)
        return self._tracer

    def close(self):
        """Local: frees the op; refused (ValueError) while another thread is in one of its calls. Its
        input() views keep their memory until the last of them goes (the next op never gets it while a
        view could write it), and no new view is given. A trace still open is dropped."""
        if self._tracer is not None and self._tracer.active:
            self._tracer.active = False
        super().close()

    @staticmethod
    def heap_bytes(R, max_m, k, n, a_fmt="e4m3", b_fmt="e4m3", tile_m=0, depth=0, path="direct",
                   schedule="fused", kind="alltoall-matmul"):
        """The symmetric memory one rank needs for such an op on R ranks (launch's heap_bytes). A shape
        that breaks the kind's rules raises ArgumentError saying which."""
        return _a2amm.op_heap_bytes(R, max_m, k, n, a_fmt, b_fmt, tile_m, depth, path, schedule, kind)


def _shape_text(shape):
    return "[%s]" % ", ".join("tokens" if d is None else str(d) for d in shape)


def _mx_pair(v, name, fmt, mode, shape, dims):
    """(codes, scales) as 2-D numpy arrays [rows, cols] and [rows, ceil(cols/32)] of v: an MX pair (codes,
    scales) of exactly `shape` and shape[:-1] + [ceil(cols/32)] (as a2amm.quantize makes them, reshaped to
    shape), or float32/bfloat16 values of exactly `shape`, quantized here with mode. A None dimension (x's
    tokens) takes any count; dims names the dimensions for messages ("[E/R, hidden, inter]"). A pair of
    another shape is a ValueError naming name, what it must be and what it is, even where the sizes agree."""
    if isinstance(v, tuple):
        if len(v) != 2:
            raise ValueError("%s: an MX pair is (codes, scales); got a tuple of %d" % (name, len(v)))
        codes = _np.asarray(_array(v[0], name + " codes"))
        scales = _np.asarray(_array(v[1], name + " scales"))
        if None in shape and codes.ndim == len(shape):  # the tokens: the codes' count
            shape = tuple(codes.shape[i] if d is None else d for i, d in enumerate(shape))
        want_scales = shape[:-1] + ((shape[-1] + 31) // 32,)
        for part, arr, want in (("codes", codes, shape), ("scales", scales, want_scales)):
            if tuple(arr.shape) != tuple(want):
                raise ValueError("%s %s must have shape %s = %s; got %s" % (
                    name, part, dims if part == "codes" else dims[:-1] + "/32]", _shape_text(want),
                    list(arr.shape)))
    else:
        values = _array(v, name)
        if tuple(getattr(values, "shape", ())) != shape:
            raise ValueError("%s must have shape %s = %s; got %s" % (name, dims, _shape_text(shape),
                                                                   list(getattr(values, "shape", ()))))
        values = _np.asarray(values)
        if values.dtype not in (_np.float32, _np.uint16):  # say so here: quantize would name its own "x"
            raise TypeError("%s must be float32 or bfloat16 (numpy.float32, torch.float32, torch.bfloat16, or "
                            "numpy.uint16 holding bf16 bits), or an MX pair (codes, scales) of uint8; got %s "
                            "elements" % (name, values.dtype))
        codes, scales = _a2amm.quantize(_np.ascontiguousarray(values).reshape(-1, shape[-1]), fmt, mode)
    rows = int(_np.prod(codes.shape[:-1]))
    return codes.reshape(rows, codes.shape[-1]), scales.reshape(rows, scales.shape[-1])


class MoEWeights(_a2amm.MoEWeights):
    """A rank's experts prepared once, for several a2amm.MoE ops (a2amm.h's a2amm_moe_weights).

    MoEWeights(w13, w2, *, max_rows, w_fmt="e4m3", mode="rceil")

    Local. w13 [E/R, 2*inter, hidden] and w2 [E/R, hidden, inter] as MoE.set_weights takes them (float32
    or bfloat16, quantized here with mode, or MX pairs (codes, scales)); max_rows: the most rows an
    expert gets in a call of the ops that will use them (R * max_tokens of the largest). An op takes them
    with moe.use_weights(weights) (or moe.set_weights(weights, None)); close() (or with) frees them once
    no op uses them.
    """

    def __init__(self, w13, w2, *, max_rows, w_fmt="e4m3", mode="rceil"):
        if mode not in ("rceil", "floor"):
            raise ValueError("mode must be \"rceil\" or \"floor\"; got %r" % (mode,))
        shape13 = tuple(_np.shape(w13[0] if isinstance(w13, tuple) else w13))
        if len(shape13) != 3 or shape13[1] % 2:
            raise ValueError("w13 must be [experts, 2*inter, hidden]; got shape %s" % (list(shape13),))
        L, I, H = shape13[0], shape13[1] // 2, shape13[2]
        c13, s13 = _mx_pair(w13, "w13", w_fmt, mode, (L, 2 * I, H), "[E/R, 2*inter, hidden]")
        c2, s2 = _mx_pair(w2, "w2", w_fmt, mode, (L, H, I), "[E/R, hidden, inter]")
        super().__init__(c13, s13, c2, s2, local_experts=L, hidden=H, inter=I, fmt=w_fmt, max_rows=int(max_rows))
        self.mode = mode

    def __repr__(self):
        if self.closed:
            return "a2amm.MoEWeights(closed)"
        return "a2amm.MoEWeights(%d experts, hidden=%d, inter=%d, %s, max_rows=%d)" % (
            self.local_experts, self.hidden, self.inter, self.w_fmt, self.max_rows)


def _topk_weights(topk_w, rank):
    """topk_w as a C-contiguous float32 numpy array: float32 as it is, float16, float64, longdouble and
    bfloat16 (torch, ml_dtypes) converted; integer, bool or complex weights are a TypeError naming topk_w,
    and a finite weight beyond float32's range an ArgumentError naming rank, token and slot."""
    if _torch_tensor(topk_w):
        if not topk_w.is_floating_point():
            raise TypeError("topk_w must be floating point (float32; float16, float64 and bfloat16 are converted); "
                            "got torch.%s" % str(topk_w.dtype)[6:])
        topk_w = topk_w.float()
    elif isinstance(topk_w, _np.ndarray) and topk_w.dtype.name == "bfloat16":  # ml_dtypes
        topk_w = topk_w.astype(_np.float32)
    w = _np.asarray(_array(topk_w, "topk_w"))
    if w.dtype.kind != "f":
        raise TypeError("topk_w must be floating point (float32; float16, float64 and bfloat16 are converted); "
                        "got %s" % w.dtype)
    if w.dtype == _np.float32:
        return _np.ascontiguousarray(w)
    with _np.errstate(over="ignore"):
        w32 = _np.ascontiguousarray(w, dtype=_np.float32)
    wide = _np.isfinite(w) & ~_np.isfinite(w32)
    if w.ndim == 2 and wide.any():  # (another shape: the extension says which it must be)
        t, j = (int(i) for i in _np.argwhere(wide)[0])
        raise ArgumentError(E_INVAL, "rank %d: token %d, slot %d: the weight %r is beyond float32's range (topk_w "
                            "is converted to float32)" % (rank, t, j, float(w[t, j])))
    return w32


class MoE(_a2amm.MoE):
    """Expert parallelism: the MoE layer's dispatch, experts and combine across ranks (a2amm.h's a2amm_moe).

    MoE(comm, *, experts, topk, hidden, inter, max_tokens, max_recv=0, a_fmt="e4m3", w_fmt="e4m3",
        mode="rceil", schedule="fused", threads=0, timeout=0)

    Collective: every rank of comm makes it with the same arguments (threads is each rank's own). Rank r
    owns experts r*E/R .. (r+1)*E/R - 1 (experts divisible by R). Each call, a rank passes its own
    tokens (any count up to max_tokens, 0 included); each token goes once to each rank that owns one
    of its top-k experts, which runs them (SwiGLU: silu(x W1^T) * (x W3^T), then W2) and sends back
    the weighted sum; the token's rank adds what comes back (docs/op-contract.md, "The MoE op").
    max_recv: the most rows a rank may receive in a call (0: R * max_tokens). mode: how float inputs
    are quantized ("rceil" or "floor", as a2amm.quantize). schedule: "overlap" (where max_tokens is
    over 64, each rank's tokens in two chunks, one chunk's exchanges while the other's experts run,
    each chunk reading every hit expert's weights again), "unfused" (the whole dispatch, the experts,
    the whole combine) or "fused" (the default: overlap where each local expert gets 256 rows a chunk
    on average, R * max_tokens * topk / experts / 2; else unfused): the same bits on every one.
    timeout: seconds every wait may take (0: 60).
    """

    def __init__(self, comm, *, experts, topk, hidden, inter, max_tokens, max_recv=0, a_fmt="e4m3",
                 w_fmt="e4m3", mode="rceil", schedule="fused", threads=0, timeout=0):
        _whole_numbers(comm, "MoE", experts=experts, topk=topk, hidden=hidden, inter=inter, max_tokens=max_tokens,
                       max_recv=max_recv, threads=threads)
        for name, value, choices in (("mode", mode, ("rceil", "floor")),
                                     ("schedule", schedule, ("fused", "unfused", "overlap"))):
            if value not in choices:
                why = "%s must be %s; got %r" % (name, " or ".join('"%s"' % c for c in choices), value)
                comm.fail("MoE: " + why)
                raise ValueError(why)
        super().__init__(comm, experts=experts, topk=topk, hidden=hidden, inter=inter, max_tokens=max_tokens,
                         max_recv=max_recv, a_fmt=a_fmt, w_fmt=w_fmt, threads=threads, timeout=float(timeout),
                         schedule=("fused", "unfused", "overlap").index(schedule))
        self.mode = mode
        self.schedule = schedule

    def __repr__(self):
        if self.closed:
            return "a2amm.MoE(closed)"
        return "a2amm.MoE(rank %d of %d, experts=%d (%d here), topk=%d, hidden=%d, inter=%d, %s x %s)" % (
            self.comm.rank, self.comm.size, self.experts, self.local_experts, self.topk, self.hidden, self.inter,
            self.a_fmt, self.w_fmt)

    def _mx(self, v, name, fmt, shape, dims):
        return _mx_pair(v, name, fmt, self.mode, shape, dims)

    def set_weights(self, w13, w2):
        """Local: this rank's experts. w13 [E/R, 2*inter, hidden] (per expert the gate rows, then the up
        rows; each row one output, as torch's nn.Linear stores its weight) and w2 [E/R, hidden, inter],
        as float32 or bfloat16 (quantized here with the op's mode, blocks of 32 along the last axis) or
        as MX pairs (codes, scales) of exactly those shapes: codes [E/R, rows, cols] and scales [E/R, rows,
        cols/32] (a2amm.quantize's output for w.reshape(-1, cols), reshaped back to three dimensions); a
        pair of another shape, flattened or transposed, is a ValueError even where its size fits. Prepared
        once: the arrays may change or go afterwards. Or an a2amm.MoEWeights as w13 (w2 None): the op
        then borrows that preparation (use_weights)."""
        if isinstance(w13, MoEWeights) and w2 is None:
            return self.use_weights(w13)
        L, H, I = self.local_experts, self.hidden, self.inter
        c13, s13 = self._mx(w13, "w13", self.w_fmt, (L, 2 * I, H), "[E/R, 2*inter, hidden]")
        c2, s2 = self._mx(w2, "w2", self.w_fmt, (L, H, I), "[E/R, hidden, inter]")
        self._set_weights(c13, s13, c2, s2)

    @staticmethod
    def heap_bytes(R, *, experts, topk, hidden, inter, max_tokens, max_recv=0, a_fmt="e4m3", w_fmt="e4m3",
                   schedule="fused"):
        """The symmetric memory one rank needs for MoE(comm, ...) of these arguments on R ranks (launch's or
        Comm.from_mpi's heap_bytes; a2amm_moe_heap_bytes): the communicator's stage its exchanges go through,
        taken when the MoE is made, which a heap too small refuses (over MPI messages it takes none). Shared
        with the communicator's other MoE ops and AllToAlls (the largest counts, once); add Op.heap_bytes of
        each Op. Arguments that break a rule raise ArgumentError saying which, as MoE(...) would."""
        choices = ("fused", "unfused", "overlap")
        if schedule not in choices:
            raise ValueError("schedule must be %s; got %r" % (" or ".join('"%s"' % c for c in choices), schedule))
        return _a2amm.moe_heap_bytes(R, experts=experts, topk=topk, hidden=hidden, inter=inter,
                                     max_tokens=max_tokens, max_recv=max_recv, a_fmt=a_fmt, w_fmt=w_fmt,
                                     schedule=choices.index(schedule))

    def use_weights(self, weights):
        """Local: borrow prepared a2amm.MoEWeights (this rank's experts, prepared once; their experts,
        hidden, inter and w_fmt as the op's, their max_rows at least R * max_tokens) instead of a copy of
        the op's own: a decode op and a prefill op of one layer can share them. The op keeps them alive;
        they cannot be closed while it uses them."""
        self._use_weights(weights)


    def __call__(self, x, topk_idx, topk_w, *, out=None):
        """Collective: one call. x [T, hidden] (float32 or bfloat16, quantized with the op's mode inside the
        call's C code, the GIL released; or an MX pair (codes, scales): codes [T, hidden] and scales [T,
        hidden/32], uint8, exactly); topk_idx [T, topk] int32 or int64 (an expert in [0, experts), or -1 for an
        unused slot; an expert at most once a token); topk_w [T, topk] floating point, finite: float32, or
        float16, float64 or bfloat16 converted to float32 (a weight beyond float32's range is an ArgumentError
        naming token and slot), on every path; integer or bool weights are a TypeError. T is this rank's own (0
        to max_tokens). Returns bf16 [T, hidden]: a torch.bfloat16 tensor for torch x, numpy uint16 bits
        otherwise; or writes out. A bad argument raises here (ArgumentError naming the token and slot for the
        routing) and the other ranks get PeerError."""
        if (type(x) is tuple and len(x) == 2 and type(x[0]) is _ndarray and type(x[1]) is _ndarray
                and type(topk_idx) is _ndarray and topk_idx.dtype == _np.int32 and type(topk_w) is _ndarray
                and topk_w.dtype == _np.float32 and (out is None or type(out) is _ndarray)):
            return self._run(x[0], x[1], topk_idx, topk_w, out)  # numpy MX pairs: straight to the extension
        if (type(x) is _ndarray and x.dtype == _np.float32 and type(topk_idx) is _ndarray
                and topk_idx.dtype == _np.int32 and type(topk_w) is _ndarray and topk_w.dtype == _np.float32
                and (out is None or type(out) is _ndarray)):
            return self._run(x, self.mode, topk_idx, topk_w, out)  # numpy float32 x: quantized in the C call
        codes, scales, ids, w, torch_in = self._tokens(x, topk_idx, topk_w)
        try:
            if out is None and torch_in:
                out = _bf16_out(codes.shape[0], self.hidden)
            view = _array(out, "out") if _torch_tensor(out) else out
        except BaseException as e:
            _fail_collective(self, e)
            raise
        result = self._run(codes, scales, ids, w, view)
        return out if _torch_tensor(out) else result

    def _tokens(self, x, topk_idx, topk_w):
        """The call's arrays as the extension takes them: x's codes and scales (an MX pair), or x's values
        and the op's mode (the extension quantizes them in the call); ids int32, weights float32 (any
        floating point converted; integer or bool refused). A bad one fails the communicator (the others
        are in this collective call) and raises."""
        first = x[0] if isinstance(x, tuple) and x else x
        try:
            if isinstance(x, tuple):
                codes, scales = self._mx(x, "x", self.a_fmt, (None, self.hidden), "[tokens, hidden]")
            else:
                codes, scales = _array(x, "x"), self.mode
            ids = _np.asarray(_array(topk_idx, "topk_idx"))
            if ids.dtype != _np.int32:
                if ids.dtype.kind not in "iu":
                    raise TypeError("topk_idx must be int32 or int64; got %s" % ids.dtype)
                wide = (ids < -1) | (ids >= self.experts)
                if wide.any():
                    t, j = (int(v) for v in _np.argwhere(wide)[0])
                    raise ArgumentError(E_INVAL, "rank %d: token %d, slot %d: expert %d is out of range: expected 0 "
                                        ".. %d, or -1 for an unused slot" % (self.comm.rank, t, j, int(ids[t, j]),
                                                                            self.experts - 1))
                ids = _np.ascontiguousarray(ids, dtype=_np.int32)
            w = _topk_weights(topk_w, self.comm.rank)
        except BaseException as e:
            _fail_collective(self, e)
            raise
        return codes, scales, ids, w, _torch_tensor(first)

    def dispatch(self, x, topk_idx, topk_w, *, dequantize=False):
        """Collective: the exchange alone, for experts of the caller's own. Takes what a call takes;
        returns (rows, handle): rows[le] is what this rank's local expert le (expert rank*E/R + le)
        received, as an MX pair (codes [n, hidden], scales [n, hidden/32]); with dequantize=True as bf16
        [n, hidden] values (torch.bfloat16 for torch x, numpy uint16 bf16 bits otherwise: exact wherever
        the value is a normal bf16), or with dequantize="float32" as float32 (exact); torch tensors for
        torch x. Compute each expert's output for its rows, in that order, and give them to
        combine(handle, ys)."""
        if dequantize not in (False, True, "bfloat16", "float32"):
            raise ValueError("dequantize must be False, True (bf16), \"bfloat16\" or \"float32\"; got %r"
                             % (dequantize,))
        codes, scales, ids, w, torch_in = self._tokens(x, topk_idx, topk_w)
        handle, rows = self._dispatch(codes, scales, ids, w)
        handle.torch = torch_in
        if dequantize:
            rows = [_a2amm.dequantize(c, s, self.a_fmt) for c, s in rows]
            if dequantize != "float32":
                rows = [float32_to_bf16(r) for r in rows]
        if torch_in:
            import torch
            if dequantize and dequantize != "float32":
                rows = [torch.from_numpy(r.view(_np.int16)).view(torch.bfloat16) for r in rows]
            else:
                rows = [torch.from_numpy(r) if dequantize else (torch.from_numpy(r[0]), torch.from_numpy(r[1]))
                        for r in rows]
        return rows, handle

    def expert(self, local_expert, rows):
        """Local: the op's own computation of this rank's local expert (expert rank*E/R + local_expert) on
        rows, an MX pair (codes [n, hidden], scales [n, hidden/32]) as dispatch gives them: float32 [n,
        hidden] (a torch tensor for torch codes), the bits a call computes for those rows, so that
        dispatch, expert for each local expert, then combine give the call's bits."""
        if not isinstance(rows, tuple) or len(rows) != 2:
            raise TypeError("rows must be an MX pair (codes, scales) as dispatch gives them")
        y = self._expert(int(local_expert), _array(rows[0], "codes"), _array(rows[1], "scales"))
        if _torch_tensor(rows[0]):
            import torch
            return torch.from_numpy(y)
        return y

    def combine(self, handle, ys, *, out=None):
        """Collective: the return of dispatch's rows. ys[le]: the output of local expert le for the rows
        dispatch gave it, float32 (or bfloat16) [n, hidden] (None for none). Returns bf16 [T, hidden] on
        each token's rank as a call does (w * y summed over a token's slots per owner rank, rounded once,
        then over owners in rank order, rounded once): a torch.bfloat16 tensor when dispatch took torch."""
        try:
            arrays = [None if y is None else _np.ascontiguousarray(_np.asarray(
                _array(y.float(), "ys") if _torch_tensor(y) else _array(y, "ys")), dtype=_np.float32) for y in ys]
            if out is None and getattr(handle, "torch", False):
                out = _bf16_out(handle.tokens, self.hidden)
            view = _array(out, "out") if _torch_tensor(out) else out
        except BaseException as e:
            _fail_collective(self, e)
            raise
        result = self._combine(handle, arrays, view)
        return out if _torch_tensor(out) else result


from ._launch import launch  # noqa: E402


# ---- at exit: communicators still open ----------------------------------------------------------

def _at_exit():
    """An MPI program that ends with an unhandled exception fails its open communicators (the other
    ranks get PeerError at once instead of waiting in a call); every open one is closed before MPI
    finalizes (mpi4py does that after Python's atexit functions)."""
    exc = getattr(_sys, "last_value", None)
    why = None
    if exc is not None:
        why = "%s: %s" % (type(exc).__name__, exc)
    _a2amm._close_all(why)


_atexit.register(_at_exit)
