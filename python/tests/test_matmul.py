"""a2amm.Weights and a2amm.matmul: the single-rank matmul against the fp64 reference of the model."""
import numpy as np
import pytest

import a2amm
import mx_model
from conftest import assert_close, needs_torch


def operands(m, k, n, a_fmt="e4m3", b_fmt="e4m3", seed=0):
    rng = np.random.default_rng(seed)
    a, sa = a2amm.quantize(rng.standard_normal((m, k)).astype(np.float32), a_fmt)
    b, sb = a2amm.quantize((rng.standard_normal((n, k)) / 8).astype(np.float32), b_fmt)
    return a, sa, b, sb


def ref_of(a, sa, b, sb, a_fmt="e4m3", b_fmt="e4m3"):
    A, B = mx_model.dequantize(a, sa, a_fmt), mx_model.dequantize(b, sb, b_fmt)
    return A @ B.T, 2.0 ** -8 * np.abs(A @ B.T) + 1e-5 * (np.abs(A) @ np.abs(B).T) + 1e-30


@pytest.mark.parametrize("a_fmt,b_fmt", [("e4m3", "e4m3"), ("e5m2", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e5m2")])
def test_matmul_against_fp64(a_fmt, b_fmt):
    a, sa, b, sb = operands(37, 320, 72, a_fmt, b_fmt)
    w = a2amm.Weights(b, sb, b_fmt)
    assert (w.n, w.k, w.fmt) == (72, 320, b_fmt)
    out = a2amm.matmul(a, sa, w, a_fmt)
    assert out.dtype == np.uint16 and out.shape == (37, 72)
    assert_close(out, *ref_of(a, sa, b, sb, a_fmt, b_fmt), "matmul %s x %s" % (a_fmt, b_fmt))
    # the same bits for any thread count, and from strided rows
    for threads in (1, 2):
        np.testing.assert_array_equal(a2amm.matmul(a, sa, w, a_fmt, threads=threads), out)
    wide = np.zeros((37, 400), np.uint8)
    wide[:, :320] = a
    np.testing.assert_array_equal(a2amm.matmul(wide[:, :320], sa, w, a_fmt), out)


def test_the_rounding_of_the_design_vector():
    # A = B = [16, 1, 0, ...] in E4M3 FLOOR: scale 7B, codes [78, 58]; the dot is 257 -> bf16 0x4380 (256)
    x = np.zeros((1, 32), np.float32)
    x[0, :2] = [16, 1]
    c, s = a2amm.quantize(x)
    assert s[0, 0] == 0x7B and list(c[0, :2]) == [0x78, 0x58]
    out = a2amm.matmul(c, s, a2amm.Weights(c, s))
    assert out[0, 0] == 0x4380


def test_out_is_written_in_place():
    a, sa, b, sb = operands(16, 64, 40)
    w = a2amm.Weights(b, sb)
    buf = np.full((16, 40), 0xFFFF, np.uint16)
    got = a2amm.matmul(a, sa, w, out=buf)
    assert got is buf
    np.testing.assert_array_equal(buf, a2amm.matmul(a, sa, w))
    # rows of a wider buffer
    big = np.zeros((16, 64), np.uint16)
    a2amm.matmul(a, sa, w, out=big[:, 8:48])
    np.testing.assert_array_equal(big[:, 8:48], buf)
    assert not big[:, :8].any() and not big[:, 48:].any()


def test_weights_outlive_their_arrays_and_close():
    a, sa, b, sb = operands(8, 64, 16)
    want = a2amm.matmul(a, sa, a2amm.Weights(b, sb))
    w = a2amm.Weights(b.copy(), sb.copy())
    b[:] = 0  # prepared once: the arrays may change or go afterwards
    np.testing.assert_array_equal(a2amm.matmul(a, sa, w), want)
    with w:
        pass
    assert w.closed
    with pytest.raises(ValueError, match="closed"):
        a2amm.matmul(a, sa, w)


@needs_torch
def test_torch_in_bf16_out():
    import torch
    a, sa, b, sb = operands(24, 128, 48, seed=3)
    w = a2amm.Weights(torch.from_numpy(b), torch.from_numpy(sb))
    out = a2amm.matmul(torch.from_numpy(a), torch.from_numpy(sa), w)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16 and out.shape == (24, 48)
    np.testing.assert_array_equal(out.view(torch.int16).numpy().view(np.uint16), a2amm.matmul(a, sa, w))
    assert_close(out.view(torch.int16).numpy(), *ref_of(a, sa, b, sb), "torch matmul")
    # into a given bf16 tensor, in place (its storage, no copy)
    buf = torch.zeros(24, 48, dtype=torch.bfloat16)
    ptr = buf.data_ptr()
    assert a2amm.matmul(torch.from_numpy(a), torch.from_numpy(sa), w, out=buf) is buf and buf.data_ptr() == ptr
    assert torch.equal(buf, out)
