"""
A numpy stand-in for the few torch calls the seed's verify_result.py makes
(from_numpy, view as bfloat16, reshape, float, abs, clamp_min, pow, sqrt,
sum/max/mean/item, allclose), so that the seed's script itself runs on
a2amm's files where torch is not installed. Semantics follow torch's:
bf16 is the upper 16 bits of an fp32, allclose is
|input - other| <= atol + rtol * |other| with equal_nan.
"""
import numpy as np

bfloat16 = "bfloat16"


class Tensor(np.ndarray):
    def view(self, dtype=None, *args, **kwargs):
        if dtype == bfloat16:
            bits = np.asarray(self, dtype=np.uint16).astype(np.uint32) << 16
            return bits.view(np.float32).view(Tensor)
        return np.ndarray.view(self, dtype, *args, **kwargs)

    def float(self):
        return np.asarray(self, dtype=np.float32).view(Tensor)

    def abs(self):
        return np.abs(self)

    def clamp_min(self, value):
        return np.maximum(self, value)

    def pow(self, e):
        return np.power(self, e)

    def sqrt(self):
        return np.sqrt(self)


def from_numpy(a):
    return np.asarray(a).view(Tensor)


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    a = np.asarray(input, dtype=np.float64)
    b = np.asarray(other, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        close = np.abs(a - b) <= atol + rtol * np.abs(b)
        close |= a == b  # infinities of the same sign
    if equal_nan:
        close |= np.isnan(a) & np.isnan(b)
    return bool(np.all(close))
