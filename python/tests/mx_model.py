"""An independent numpy model of OCP MX v1.0 MXFP8 (the rules a2amm.h states), for the tests: the
extension calls the library's C quantizer, so its bits are checked against this, written from the
formats' definitions rather than from the library's code."""
import numpy as np

FORMATS = {
    # name: exponent bits, mantissa bits, bias, emax (the exponent of the largest power of two), largest value
    "e4m3": dict(ebits=4, mbits=3, bias=7, emax=8, max=448.0),
    "e5m2": dict(ebits=5, mbits=2, bias=15, emax=15, max=57344.0),
}
NAN_CODE = 0x7F   # what a block with a NaN or Inf gets as codes (a NaN in both formats)
NAN_SCALE = 0xFF  # E8M0 NaN


def decode(code, fmt):
    """The value of one fp8 code, from the format's formula: (-1)^s 2^(e-bias) (1 + m/2^mbits), subnormals
    2^(1-bias) m/2^mbits; E4M3: S.1111.111 is NaN, no Inf; E5M2: exponent 31 is Inf (m = 0) or NaN."""
    f = FORMATS[fmt]
    s = -1.0 if code & 0x80 else 1.0
    e = (code >> f["mbits"]) & ((1 << f["ebits"]) - 1)
    m = code & ((1 << f["mbits"]) - 1)
    top = (1 << f["ebits"]) - 1
    if fmt == "e4m3" and e == top and m == (1 << f["mbits"]) - 1:
        return float("nan")
    if fmt == "e5m2" and e == top:
        return s * float("inf") if m == 0 else float("nan")
    if e == 0:
        return s * 2.0 ** (1 - f["bias"]) * m / (1 << f["mbits"])
    return s * 2.0 ** (e - f["bias"]) * (1 + m / (1 << f["mbits"]))


def decode_table(fmt):
    return np.array([decode(c, fmt) for c in range(256)], dtype=np.float64)


def encode(v, fmt):
    """float64 values (already divided by their block's scale: exact) to codes: round to nearest even,
    saturate at the largest finite value, the sign kept (also on a zero)."""
    f = FORMATS[fmt]
    v = np.asarray(v, dtype=np.float64)
    a = np.abs(v)
    min_normal = 2.0 ** (1 - f["bias"])
    _, e2 = np.frexp(np.where(a > 0, a, 1.0))          # a = frac 2^e2, frac in [0.5, 1)
    exp = np.maximum(e2 - 1, 1 - f["bias"])            # the binade's exponent, subnormals at the bottom
    quantum = np.ldexp(1.0, exp - f["mbits"])
    q = np.minimum(np.rint(a / quantum) * quantum, f["max"])  # np.rint: ties to even
    _, qe2 = np.frexp(np.where(q > 0, q, 1.0))
    qexp = qe2 - 1
    normal = q >= min_normal
    e_field = np.where(normal, qexp + f["bias"], 0)
    m_field = np.where(normal, q / np.ldexp(1.0, qexp) * (1 << f["mbits"]) - (1 << f["mbits"]),
                       q / np.ldexp(1.0, 1 - f["bias"] - f["mbits"]))
    code = (e_field.astype(np.int64) << f["mbits"]) | m_field.astype(np.int64)
    code = np.where(q == 0, 0, code)
    return (code | np.where(np.signbit(v), 0x80, 0)).astype(np.uint8)


def block_scale(x32, fmt, mode):
    """The E8M0 scale byte of one block of float32 values."""
    f = FORMATS[fmt]
    if not np.all(np.isfinite(x32)):
        return NAN_SCALE
    amax = np.float32(np.max(np.abs(x32))) if x32.size else np.float32(0)
    if amax == 0:
        return 0
    if mode == "floor":  # OCP: floor(log2 amax) - emax, read from amax's exponent bits
        biased = int(np.array(amax, dtype=np.float32).view(np.uint32)) >> 23 & 0xFF
        e = biased - 127 - f["emax"]
    else:  # rceil: the exponent of d = fl32(amax * fl32(1/max)), rounded up unless d is a power of two
        d = np.float32(amax) * np.float32(1.0 / f["max"])
        if d == 0:
            return 0
        frac, e2 = np.frexp(np.float64(d))
        e = e2 - 1 if frac == 0.5 else e2
    return int(min(max(e, -127), 127)) + 127


def quantize(x, fmt="e4m3", mode="floor"):
    """(codes, scales) of float32 x [rows, cols], blocks of 32 along each row (a last partial one)."""
    x = np.asarray(x, dtype=np.float32)
    rows, cols = x.shape
    nb = (cols + 31) // 32
    codes = np.zeros((rows, cols), np.uint8)
    scales = np.zeros((rows, nb), np.uint8)
    for i in range(rows):
        for b in range(nb):
            blk = x[i, 32 * b:32 * b + 32]
            s = block_scale(blk, fmt, mode)
            scales[i, b] = s
            if s == NAN_SCALE:
                codes[i, 32 * b:32 * b + 32] = NAN_CODE
            else:
                codes[i, 32 * b:32 * b + 32] = encode(blk.astype(np.float64) * 2.0 ** (127 - s), fmt)
    return codes, scales


def dequantize(codes, scales, fmt="e4m3"):
    """float64 values of codes [rows, cols] with scales [rows, >= ceil(cols/32)]: value x 2^(scale - 127),
    NaN where the scale is 0xFF."""
    codes = np.asarray(codes)
    table = decode_table(fmt)
    rows, cols = codes.shape
    s = np.repeat(np.asarray(scales)[:, :(cols + 31) // 32], 32, axis=1)[:, :cols].astype(np.int64)
    v = table[codes] * np.ldexp(1.0, s - 127)
    return np.where(s == NAN_SCALE, np.nan, v)


def bf16_widen(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)
