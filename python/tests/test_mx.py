"""a2amm.quantize / dequantize: the library's bits against the numpy model of the OCP MX rules (mx_model.py),
the design's test vectors, every code of both formats, and the array forms (strided rows, torch, bf16)."""
import struct

import numpy as np
import pytest

import a2amm
import mx_model
from conftest import needs_torch

FMTS = ("e4m3", "e5m2")
MODES = ("floor", "rceil")


@pytest.mark.parametrize("fmt", FMTS)
def test_every_code_decodes_by_the_formula(fmt):
    codes = np.arange(256, dtype=np.uint8).reshape(8, 32)
    want = mx_model.decode_table(fmt).reshape(8, 32)
    for scale in (127, 0, 1, 100, 127 + 9, 254):  # 2^0, 2^-127 (a float subnormal), ... 2^127
        got = a2amm.dequantize(codes, np.full((8, 1), scale, np.uint8), fmt)
        assert got.dtype == np.float32 and got.shape == (8, 32)
        with np.errstate(over="ignore"):
            exact = (want * 2.0 ** (scale - 127)).astype(np.float32)  # one rounding: exact, or +-Inf past float's range
        np.testing.assert_array_equal(got, exact, err_msg="%s, scale byte %d" % (fmt, scale))
    assert np.isnan(a2amm.dequantize(codes, np.full((8, 1), 0xFF, np.uint8), fmt)).all(), "scale 0xFF is NaN"


def test_the_formats_special_codes():
    t4, t5 = mx_model.decode_table("e4m3"), mx_model.decode_table("e5m2")
    assert t4[0x7E] == 448 and np.isnan(t4[0x7F]) and np.isnan(t4[0xFF]) and t4[0x01] == 2.0 ** -9
    assert t5[0x7B] == 57344 and t5[0x7C] == np.inf and t5[0xFC] == -np.inf and np.isnan(t5[0x7D])
    assert t5[0x01] == 2.0 ** -16 and t4[0x80] == 0 and np.signbit(t4[0x80])


def hard_values(rows, cols, seed):
    """Values over float's whole range, with blocks of specials: zeros, -0, NaN, Inf, subnormals, ties."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)) * np.exp2(rng.uniform(-140, 125, (rows, 1)))
    x = x.astype(np.float32)
    last = cols - 1
    x[0, :] = 0
    x[1, min(3, last)] = -0.0
    x[2, min(1, last)] = np.nan
    x[3, min(40, last)] = np.inf
    x[4, :7] = np.float32(1e-42)  # float subnormals
    x[5, :4] = [448, 464, 1.0625, -1.1875][:cols]  # ties
    x[6, :3] = [np.finfo(np.float32).max, -1e30, 1][:cols]
    return x


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cols", [1, 31, 32, 70, 256])
def test_quantize_matches_the_model(fmt, mode, cols):
    x = hard_values(48, cols, seed=cols)
    codes, scales = a2amm.quantize(x, fmt, mode)
    want_codes, want_scales = mx_model.quantize(x, fmt, mode)
    assert codes.dtype == np.uint8 and codes.shape == x.shape
    assert scales.dtype == np.uint8 and scales.shape == (48, (cols + 31) // 32)
    np.testing.assert_array_equal(scales, want_scales, err_msg="scales")
    np.testing.assert_array_equal(codes, want_codes, err_msg="codes")


def f32(bits):
    return struct.unpack("<f", struct.pack("<I", bits))[0]


# ../shared/design/mx-test-vectors.md: one block each: the listed values, then fill; the scale byte, then
# the codes of the listed values, for FLOOR and RCEIL (None: the same as FLOOR; codes None: not given).
VECTORS = [
    ("e4m3", [0.0, -0.0], 0, (0x00, [0x00, 0x80]), None),
    ("e4m3", [448, 1, -1], 1, (0x7F, [0x7E, 0x38, 0xB8]), None),
    ("e4m3", [480, 1, 3], 1, (0x7F, [0x7E, 0x38, 0x44]), (0x80, [0x77, 0x30, 0x3C])),
    ("e4m3", [464, 1], 1, (0x7F, [0x7E, 0x38]), (0x80, [0x76, 0x30])),
    ("e4m3", [465, 1], 1, (0x7F, [0x7E, 0x38]), (0x80, [0x77, 0x30])),
    ("e4m3", [f32(0x447FFFFF), 1], 1, (0x80, [0x7E, 0x30]), (0x81, [0x78, 0x28])),
    ("e4m3", [448, 1.0625, 1.1875, -1.0625], 1, (0x7F, [0x7E, 0x38, 0x3A, 0xB8]), None),
    ("e4m3", [448, 2.0 ** -10, 5 * 2.0 ** -10, 2.0 ** -9, 3 * 2.0 ** -11], 1, (0x7F, [0x7E, 0x00, 0x02, 0x01, 0x01]),
     None),
    ("e4m3", [np.nan, 1, 2], 1, (0xFF, None), None),
    ("e4m3", [np.inf, 1, 2], 1, (0xFF, None), None),
    ("e4m3", [1e4, 1e-3, 0.5, 3], 1e-3, (0x84, [0x7A, 0x00, 0x08, 0x1C]), None),
    ("e4m3", [2.0 ** -133, 2.0 ** -134], 0, (0x00, [0x08, 0x04]), None),
    ("e4m3", [2.0 ** -120, 2.0 ** -121], 0, (0x00, [0x70, 0x68]), None),
    ("e4m3", [float(np.finfo(np.float32).max), 1e30], 0, (0xF6, [0x7E, 0x00]), (0xF7, [0x78, 0x00])),
    ("e5m2", [57344, 1, -1], 1, (0x7F, [0x7B, 0x3C, 0xBC]), None),
    ("e5m2", [60000, 1], 1, (0x7F, [0x7B, 0x3C]), (0x80, [0x77, 0x38])),
    ("e5m2", [61440, 1], 1, (0x7F, [0x7B, 0x3C]), (0x80, [0x78, 0x38])),
    ("e5m2", [57344, 1.125, 1.375, 2.0 ** -16, 3 * 2.0 ** -17], 1, (0x7F, [0x7B, 0x3C, 0x3E, 0x01, 0x02]), None),
]


@pytest.mark.parametrize("fmt,listed,fill,floor,rceil", VECTORS)
def test_the_design_vectors(fmt, listed, fill, floor, rceil):
    block = np.full((1, 32), fill, np.float32)
    block[0, :len(listed)] = listed
    for mode, (scale, codes) in (("floor", floor), ("rceil", rceil or floor)):
        c, s = a2amm.quantize(block, fmt, mode)
        assert s[0, 0] == scale, "%s %s %r: scale %#x, expected %#x" % (fmt, mode, listed, s[0, 0], scale)
        if codes is not None:
            assert list(c[0, :len(codes)]) == codes, "%s %s %r: codes %s" % (fmt, mode, listed,
                                                                              [hex(v) for v in c[0, :len(codes)]])
        else:
            assert (c[0] == mx_model.NAN_CODE).all()
        mc, ms = mx_model.quantize(block, fmt, mode)  # the model agrees with the vectors too
        assert ms[0, 0] == scale and (codes is None or list(mc[0, :len(codes)]) == codes)


@pytest.mark.parametrize("fmt", FMTS)
def test_bf16_input_is_widened_exactly(fmt):
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 1 << 16, (40, 96), dtype=np.uint16)  # every kind of bf16: NaN, Inf, subnormal
    wide = mx_model.bf16_widen(bits)
    for mode in MODES:
        c, s = a2amm.quantize(bits, fmt, mode)
        wc, ws = mx_model.quantize(wide, fmt, mode)
        np.testing.assert_array_equal(s, ws)
        np.testing.assert_array_equal(c, wc)
    np.testing.assert_array_equal(a2amm.bf16_to_float32(bits).view(np.uint32), wide.view(np.uint32))


def test_strided_rows_are_read_in_place():
    big = hard_values(30, 200, seed=9)
    view = big[::2, 10:110]  # a row stride of 400 floats, every other row
    assert not view.flags.c_contiguous
    c, s = a2amm.quantize(view)
    wc, ws = a2amm.quantize(np.ascontiguousarray(view))
    np.testing.assert_array_equal(c, wc)
    np.testing.assert_array_equal(s, ws)
    # dequantize reads strided codes and scales as well
    cc = np.zeros((15, 300), np.uint8)
    cc[:, :100] = c
    ss = np.zeros((15, 10), np.uint8)
    ss[:, :4] = s
    np.testing.assert_array_equal(a2amm.dequantize(cc[:, :100], ss[:, :4]), a2amm.dequantize(c, s))


def test_dequantize_takes_the_seed_layouts_padded_scales():
    x = hard_values(8, 96, seed=2)
    c, s = a2amm.quantize(x)
    padded = np.zeros((8, 4), np.uint8)  # 2*ceil(96/64) = 4 columns, the seed's input_scaleA.bin
    padded[:, :3] = s
    np.testing.assert_array_equal(a2amm.dequantize(c, padded), a2amm.dequantize(c, s))


def test_round_trip_error_is_within_the_format():
    # rceil never saturates (floor may clip a block's largest values: the OCP scale's known loss)
    x = np.random.default_rng(4).standard_normal((64, 256)).astype(np.float32)
    for fmt, rel in (("e4m3", 2.0 ** -4), ("e5m2", 2.0 ** -3)):
        y = a2amm.dequantize(*a2amm.quantize(x, fmt, "rceil"), fmt=fmt)
        # within half a unit in the last place (of the block's subnormal step near zero)
        amax = np.abs(x).reshape(64, 8, 32).max(axis=2).repeat(32, axis=1)
        far = np.abs(y - x) > rel * np.maximum(np.abs(x), amax * 2.0 ** -6)
        assert not far.any(), "%s: %d values off, e.g. %r -> %r" % (fmt, far.sum(), x[far][0], y[far][0])


def test_float32_to_bf16_rounds_to_nearest_even():
    x = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -2.5, np.inf, -np.inf, 3.4e38, 1e-40, 0.0, -0.0], np.float32)
    bits = a2amm.float32_to_bf16(x)
    assert list(bits) == [0x3F80, 0x3F80, 0x3F82, 0xC020, 0x7F80, 0xFF80, 0x7F80, 0x0001, 0x0000, 0x8000]
    assert np.isnan(a2amm.bf16_to_float32(a2amm.float32_to_bf16(np.array([np.nan], np.float32))))[0]


@needs_torch
def test_torch_tensors_in_and_out():
    import torch
    x = torch.from_numpy(hard_values(16, 64, seed=5))
    c, s = a2amm.quantize(x, "e5m2", "rceil")
    assert isinstance(c, torch.Tensor) and c.dtype == torch.uint8 and s.dtype == torch.uint8
    wc, ws = mx_model.quantize(x.numpy(), "e5m2", "rceil")
    np.testing.assert_array_equal(c.numpy(), wc)
    np.testing.assert_array_equal(s.numpy(), ws)
    y = a2amm.dequantize(c, s, "e5m2")
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    # bfloat16 tensors are read as their bits
    xb = torch.randn(8, 64).bfloat16()
    cb, sb = a2amm.quantize(xb)
    wc, ws = mx_model.quantize(xb.float().numpy())
    np.testing.assert_array_equal(cb.numpy(), wc)
    np.testing.assert_array_equal(sb.numpy(), ws)
    # float32_to_bf16 rounds as torch does
    f = torch.randn(1000) * 1e3
    np.testing.assert_array_equal(a2amm.float32_to_bf16(f.numpy()), f.bfloat16().view(torch.int16).numpy().view(np.uint16))
    # a non-contiguous tensor with contiguous rows is read in place; a transposed one is refused
    wide = torch.randn(8, 128)
    np.testing.assert_array_equal(a2amm.quantize(wide[:, :64])[0].numpy(), a2amm.quantize(wide[:, :64].contiguous())[0].numpy())
    with pytest.raises(ValueError, match="contiguous rows"):
        a2amm.quantize(wide.t())
