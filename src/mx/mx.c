/* MX number formats: fp8 E4M3/E5M2, E8M0, bf16, and block quantization. */
#include "mx/mx.h"

#include <float.h>
#include <math.h>
#include <string.h>
#include <strings.h>

/* A small binary float format, described by what rounding needs. */
typedef struct small_format {
    int mbits;      /* stored mantissa bits */
    int bias;
    int emin;       /* exponent of the smallest normal: 1 - bias */
    int emax;       /* exponent of the largest finite value */
    uint64_t qmax;  /* largest finite value in units of 2^(emax - mbits) */
} small_format;

static const small_format FMT_E4M3 = {3, 7, -6, 8, 14};     /* 448 = 14 * 2^5 */
static const small_format FMT_E5M2 = {2, 15, -14, 15, 7};   /* 57344 = 7 * 2^13 */
static const small_format FMT_BF16 = {7, 127, -126, 127, 255};

/*
 * Rounds a (finite, > 0) to the format's precision, ties to even, in integer
 * arithmetic on the bits of the double. Returns the exponent and mantissa
 * fields through efield and mfield, or 0 when the rounded value exceeds the
 * format's largest finite value.
 */
static int round_to_format(double a, const small_format *f, int *efield, int *mfield)
{
    uint64_t u;
    memcpy(&u, &a, sizeof u);
    int biased = (int)(u >> 52);
    if (biased == 0) { /* a double subnormal, far below every format's half ulp */
        *efield = *mfield = 0;
        return 1;
    }
    uint64_t m = (u & ((UINT64_C(1) << 52) - 1)) | (UINT64_C(1) << 52); /* a = m * 2^(biased - 1075) */
    int e = biased - 1023;                 /* a in [2^e, 2^(e+1)) */
    int eq = e < f->emin ? f->emin : e;    /* the result's exponent; quantum 2^(eq - mbits) */
    int shift = 1075 - biased + eq - f->mbits; /* a / quantum = m >> shift, >= 52 - mbits > 0 */
    uint64_t q = 0;
    if (shift < 64) {
        uint64_t rem = m & ((UINT64_C(1) << shift) - 1), half = UINT64_C(1) << (shift - 1);
        q = m >> shift;
        if (rem > half || (rem == half && (q & 1))) q++;
    }
    uint64_t implicit = UINT64_C(1) << f->mbits;
    if (q >= 2 * implicit) { q >>= 1; eq++; }  /* rounding carried into the next binade */
    if (eq > f->emax || (eq == f->emax && q > f->qmax)) return 0;
    if (q >= implicit) {
        *efield = eq + f->bias;
        *mfield = (int)(q - implicit);
    } else {                                    /* subnormal (or zero) */
        *efield = 0;
        *mfield = (int)q;
    }
    return 1;
}

/* 2^e as a double, exactly, for |e| <= 1022. */
static double pow2(int e)
{
    uint64_t u = (uint64_t)(e + 1023) << 52;
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

float mx_fp8_to_f32(uint8_t code, a2amm_fp8_type type)
{
    int s = code >> 7;
    int e, m;
    double v;
    if (type == A2AMM_E4M3) {
        e = (code >> 3) & 0xF;
        m = code & 7;
        if (e == 15 && m == 7) return NAN;
        v = e ? ldexp(8 + m, e - 10) : ldexp(m, -9);
    } else {
        e = (code >> 2) & 0x1F;
        m = code & 3;
        if (e == 31) return m ? NAN : (s ? -INFINITY : INFINITY);
        v = e ? ldexp(4 + m, e - 17) : ldexp(m, -16);
    }
    return (float)(s ? -v : v);
}

float mx_fp8_max(a2amm_fp8_type type)
{
    return type == A2AMM_E4M3 ? 448.0f : 57344.0f;
}

int mx_fp8_emax(a2amm_fp8_type type)
{
    return type == A2AMM_E4M3 ? 8 : 15;
}

uint8_t mx_f64_to_fp8(double x, a2amm_fp8_type type, int saturate)
{
    const small_format *f = type == A2AMM_E4M3 ? &FMT_E4M3 : &FMT_E5M2;
    uint8_t sign = signbit(x) ? 0x80 : 0;
    uint8_t max_code = type == A2AMM_E4M3 ? 0x7E : 0x7B;
    uint8_t overflow_code = saturate ? max_code : (type == A2AMM_E4M3 ? 0x7F : 0x7C);
    if (isnan(x)) return MX_FP8_NAN;
    if (isinf(x)) return sign | overflow_code;
    double a = fabs(x);
    if (a == 0.0) return sign;
    int ef, mf;
    if (!round_to_format(a, f, &ef, &mf)) return sign | overflow_code;
    return (uint8_t)(sign | (ef << f->mbits) | mf);
}

uint8_t mx_f32_to_fp8(float x, a2amm_fp8_type type, int saturate)
{
    return mx_f64_to_fp8((double)x, type, saturate);
}

/* mx_f32_to_fp8_sat without a branch on the value (the quantizer's inner loop: a branch there mispredicts on
 * every mix of small and large values): the normal, the subnormal and the saturated code all made, the
 * right one picked. */
static inline uint8_t encode_sat(float x, int e4m3)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint32_t a = u & 0x7FFFFFFFu;
    const int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15, drop = 23 - mbits;
    /* normal: the mantissa rounded to mbits at its bit (nearest, ties to even; a carry moves the exponent
     * up, as it should), then fp32's exponent bias replaced by the format's */
    const uint32_t r = a + ((1u << (drop - 1)) - 1) + ((a >> drop) & 1);
    const uint8_t normal = (uint8_t)((r >> drop) - ((uint32_t)(127 - bias) << mbits));
    /* below the smallest normal: k x 2^(1 - bias - mbits), k = |x| 2^(bias - 1 + mbits) (exact) rounded to
     * an integer by adding 2^23 (nearest, ties to even, in the default rounding) */
    float ax, t;
    memcpy(&ax, &a, sizeof ax);
    t = ax * (e4m3 ? 0x1p9f : 0x1p16f) + 0x1p23f;
    uint32_t tb;
    memcpy(&tb, &t, sizeof tb);
    const uint8_t sub = (uint8_t)(tb - 0x4B000000u);
    const uint8_t code = a >= (e4m3 ? 0x43E00000u : 0x47600000u) ? (e4m3 ? 0x7E : 0x7B) /* >= 448 / 57344, Inf */
                         : a < (uint32_t)(127 + 1 - bias) << 23 ? sub
                                                                : normal;
    return a > 0x7F800000u ? (uint8_t)MX_FP8_NAN : (uint8_t)((u >> 24 & 0x80) | code);
}

uint8_t mx_f32_to_fp8_sat(float x, a2amm_fp8_type type) { return encode_sat(x, type == A2AMM_E4M3); }

double mx_e8m0_to_f64(uint8_t b)
{
    return b == MX_E8M0_NAN ? NAN : ldexp(1.0, (int)b - 127);
}

float mx_e8m0_to_f32(uint8_t b)
{
    return (float)mx_e8m0_to_f64(b);   /* 2^-127 is a float subnormal: exact */
}

uint8_t mx_f32_to_e8m0(float x)
{
    if (!(x > 0.0f) || isinf(x)) return MX_E8M0_NAN;
    int e2;
    double frac = frexp((double)x, &e2);   /* x = (2*frac) * 2^(e2-1) */
    int e = e2 - 1;
    if (2.0 * frac >= 1.5) e += 1;
    if (e < -127) e = -127;
    if (e > 127) e = 127;
    return (uint8_t)(e + 127);
}

float mx_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t mx_f32_to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040);  /* quiet NaN */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

uint16_t mx_f64_to_bf16(double x)
{
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    if (isnan(x)) return 0x7FC0;
    if (isinf(x)) return sign | 0x7F80;
    double a = fabs(x);
    if (a == 0.0) return sign;
    int ef, mf;
    if (!round_to_format(a, &FMT_BF16, &ef, &mf)) return sign | 0x7F80;
    return (uint16_t)(sign | (ef << 7) | mf);
}

/* ---- Block quantization ---------------------------------------------- */

const char *mx_scale_mode_name(mx_scale_mode m)
{
    return m == MX_SCALE_RCEIL ? "rceil" : "floor";
}

int mx_scale_mode_parse(const char *s, mx_scale_mode *out)
{
    if (s && strcasecmp(s, "floor") == 0) { *out = MX_SCALE_FLOOR; return A2AMM_OK; }
    if (s && strcasecmp(s, "rceil") == 0) { *out = MX_SCALE_RCEIL; return A2AMM_OK; }
    return A2AMM_E_INVAL;
}

static int clamp_scale_exponent(int e)
{
    return e < -127 ? -127 : (e > 127 ? 127 : e);
}

uint8_t mx_scale_of_amax(uint32_t amax_bits, a2amm_fp8_type type, mx_scale_mode mode)
{
    if (amax_bits >= 0x7F800000u) return MX_E8M0_NAN; /* a NaN or an Inf in the block */
    if (amax_bits == 0) return 0;
    if (mode == MX_SCALE_FLOOR) {
        int biased = (int)(amax_bits >> 23);     /* 0 for subnormal amax */
        return (uint8_t)(clamp_scale_exponent(biased - 127 - mx_fp8_emax(type)) + 127);
    }
    /* RCEIL: d = fl32(amax * fl32(1/max)); exponent of d rounded up unless
     * d is an exact power of two. */
    float amax;
    memcpy(&amax, &amax_bits, sizeof amax);
    volatile float inv_max = 1.0f / mx_fp8_max(type);   /* fl32(1/max) */
    float d = amax * inv_max;
    uint32_t u;
    memcpy(&u, &d, sizeof u);
    if (u == 0) return 0;
    /* ceil(log2 d) from d's bits: a normal d's exponent, one more unless its mantissa is zero; a subnormal d
     * (m 2^-149) is above 2^-127 when m > 2^22, else at most 2^-127, which the clamp takes to -127 */
    const int biased = (int)(u >> 23), mantissa = (int)(u & 0x7FFFFF);
    const int e = biased ? biased - 127 + (mantissa != 0) : (mantissa > 0x400000 ? -126 : -127);
    return (uint8_t)(clamp_scale_exponent(e) + 127);
}

uint8_t mx_block_scale(const float *x, size_t n, a2amm_fp8_type type, mx_scale_mode mode)
{
    /* the largest magnitude's bits: they order as the magnitudes do, Inf and NaN above every finite one;
     * no early exit, no branch on the values */
    uint32_t amax = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        u &= 0x7FFFFFFFu;
        amax = u > amax ? u : amax;
    }
    return mx_scale_of_amax(amax, type, mode);
}

void mx_quantize_block(const float *x, size_t n, a2amm_fp8_type type, mx_scale_mode mode,
                       uint8_t *codes, uint8_t *scale)
{
    uint8_t b = mx_block_scale(x, n, type, mode);
    *scale = b;
    if (b == MX_E8M0_NAN) {
        memset(codes, MX_FP8_NAN, n);
        return;
    }
    /* Divide by the scale in fp32: exact where the quotient is at least 2^-126, and below that (far under
     * half of fp8's smallest subnormal) every rounding gives a zero of x's sign; then one rounding to fp8
     * (mx_f32_to_fp8_sat: the bits of mx_f64_to_fp8, tests/test_mx.c, without its generic rounding). */
    const float inv = mx_scale_inverse(b);
    const int e4m3 = type == A2AMM_E4M3;
    for (size_t i = 0; i < n; i++) codes[i] = encode_sat(x[i] * inv, e4m3);
}

float mx_scale_inverse(uint8_t scale)
{
    return (float)pow2(127 - (int)scale); /* 2^-127 .. 2^127: each a float */
}

void mx_quantize_row_portable(const float *x, size_t len, a2amm_fp8_type type, mx_scale_mode mode,
                              uint8_t *codes, uint8_t *scales)
{
    for (size_t k = 0, blk = 0; k < len; k += MX_BLOCK, blk++) {
        size_t n = len - k < MX_BLOCK ? len - k : MX_BLOCK;
        mx_quantize_block(x + k, n, type, mode, codes + k, scales + blk);
    }
}

double mx_dequant(uint8_t code, uint8_t scale, a2amm_fp8_type type)
{
    if (scale == MX_E8M0_NAN) return NAN;
    return ldexp((double)mx_fp8_to_f32(code, type), (int)scale - 127);
}
