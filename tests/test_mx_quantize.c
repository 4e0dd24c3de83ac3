/*
 * The MX quantizer's vector levels (src/mx/mx_quantize_simd.c) against the
 * portable level (mx_quantize_block, which tests/test_mx.c holds to the
 * generic fp64 encoder), byte for byte, codes and scales, both types and
 * both scale modes:
 * - blocks whose values share an exponent give or take 12 (the encoder's
 *   every path: normal, subnormal, saturated, zero), at every scale from
 *   2^-149 to 2^127;
 * - every fp8 rounding midpoint and its neighbours one ulp away, at several
 *   scales (the ties go to even, the carries into the exponent);
 * - a sweep of fp32 bit patterns (every 4099th, all exponents, both signs:
 *   NaN, Inf, subnormal and zero included), 32 at a time;
 * - NaN, Inf, all-zero and subnormal-only blocks, the largest finite
 *   values (which saturate), and rows of every length 0..100 (a partial last
 *   block) and 2048;
 * - every row again as bf16 bits (the values' top halves) through the bf16
 *   entry, against the portable level on the same values as floats.
 *
 * test_mx_quantize [avx2|avx512]: one level (the suite runs each as a test
 * of its own); a level this CPU lacks is reported skipped (exit 77).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mx/mx.h"

static const a2amm_fp8_type TYPES[2] = {A2AMM_E4M3, A2AMM_E5M2};
static const mx_scale_mode MODES[2] = {MX_SCALE_FLOOR, MX_SCALE_RCEIL};

/* One row through the level and through the portable level: the first difference, if any. */
static void compare_row(mx_quantize_level level, const float *x, size_t len, const char *what)
{
    const size_t nb = (len + MX_BLOCK - 1) / MX_BLOCK;
    uint8_t *c0 = malloc(len + 1), *c1 = malloc(len + 1), *s0 = malloc(nb + 1), *s1 = malloc(nb + 1);
    uint16_t *bits = malloc(sizeof *bits * (len + 1));
    float *wide = malloc(sizeof *wide * (len + 1));
    for (int t = 0; t < 2; t++)
        for (int m = 0; m < 2; m++) {
            memset(c1, 0xA5, len + 1), memset(s1, 0xA5, nb + 1);
            mx_quantize_row_portable(x, len, TYPES[t], MODES[m], c0, s0);
            mx_quantize_row_at(level, x, len, TYPES[t], MODES[m], c1, s1);
            size_t i = 0, b = 0;
            while (i < len && c0[i] == c1[i]) i++;
            while (b < nb && s0[b] == s1[b]) b++;
            CHECK(i == len && b == nb, "%s, %s, %s, %s, len %zu: %s %zu: portable %02X, %s %02X (value %a)",
                  mx_quantize_level_name(level), what, TYPES[t] == A2AMM_E4M3 ? "E4M3" : "E5M2",
                  mx_scale_mode_name(MODES[m]), len, b < nb ? "scale" : "code", b < nb ? b : i,
                  b < nb ? s0[b] : c0[i], mx_quantize_level_name(level), b < nb ? s1[b] : c1[i],
                  b < nb ? (double)x[b * MX_BLOCK] : (double)x[i]);
            CHECK(c1[len] == 0xA5 && s1[nb] == 0xA5, "%s, %s, len %zu: wrote past the row",
                  mx_quantize_level_name(level), what, len);
            /* the same values' top halves as bf16 bits: the bytes of the portable level on their floats */
            for (size_t q = 0; q < len; q++) bits[q] = (uint16_t)(f2u(x[q]) >> 16), wide[q] = u2f((uint32_t)bits[q] << 16);
            memset(c1, 0xA5, len + 1), memset(s1, 0xA5, nb + 1);
            mx_quantize_row_portable(wide, len, TYPES[t], MODES[m], c0, s0);
            mx_quantize_row_bf16_at(level, bits, len, TYPES[t], MODES[m], c1, s1);
            CHECK(!memcmp(c0, c1, len) && !memcmp(s0, s1, nb) && c1[len] == 0xA5 && s1[nb] == 0xA5,
                  "%s, %s, %s, %s, len %zu: bf16 input: other bytes than the portable level on its floats",
                  mx_quantize_level_name(level), what, TYPES[t] == A2AMM_E4M3 ? "E4M3" : "E5M2",
                  mx_scale_mode_name(MODES[m]), len);
        }
    free(c0), free(c1), free(s0), free(s1), free(bits), free(wide);
}

/* A value of exponent e (2^e .. 2^(e+1)), a random mantissa and sign; subnormal or zero below fp32's range. */
static float value_at(int e)
{
    const uint64_t r = rng();
    const float v = ldexpf(1.0f + (float)(r & 0x7FFFFF) / 0x1p23f, e);
    return (r >> 40) & 1 ? -v : v;
}

/* Blocks whose values lie within 2^12 of a top exponent, for every top from -149 to 127. */
static void check_shared_exponents(mx_quantize_level level)
{
    enum { BLOCKS = 64 };
    float x[BLOCKS * MX_BLOCK];
    for (int top = -149; top <= 127; top += 2) {
        for (int i = 0; i < BLOCKS * MX_BLOCK; i++) x[i] = (rng() % 29 == 0) ? 0.0f : value_at(top - (int)(rng() % 13));
        char what[96];
        snprintf(what, sizeof what, "values of exponent %d-12 .. %d", top, top);
        compare_row(level, x, BLOCKS * MX_BLOCK, what);
    }
}

/* Every fp8 value's midpoints to its neighbours, and one ulp either side, under a block maximum setting
 * the scale (the block's first value: the type's largest finite value times 2^shift). */
static void check_midpoints(mx_quantize_level level)
{
    for (int t = 0; t < 2; t++) {
        float x[256 * 3 + MX_BLOCK];
        size_t n = 0;
        for (int code = 0; code < 0x7F; code++) {
            const float lo = mx_fp8_to_f32((uint8_t)code, TYPES[t]), hi = mx_fp8_to_f32((uint8_t)(code + 1), TYPES[t]);
            if (!isfinite(hi)) continue;
            const float mid = (lo + hi) / 2; /* exact: fp8 values have few bits */
            x[n++] = mid, x[n++] = nextafterf(mid, 0.0f), x[n++] = nextafterf(mid, INFINITY);
        }
        for (int shift = -130; shift <= 120; shift += 25) {
            float y[sizeof x / sizeof *x];
            size_t len = 0;
            for (size_t i = 0; i < n; i++) {
                if (len % MX_BLOCK == 0) y[len++] = ldexpf(mx_fp8_max(TYPES[t]), shift); /* the block's scale */
                y[len++] = ldexpf((i & 1) ? -x[i] : x[i], shift);
            }
            char what[96];
            snprintf(what, sizeof what, "midpoints of %s x 2^%d", TYPES[t] == A2AMM_E4M3 ? "E4M3" : "E5M2", shift);
            compare_row(level, y, len - len % MX_BLOCK, what);
        }
    }
}

/* fp32 bit patterns 4099 apart over all 2^32, 32 to a block, a row of 4096 at a time. */
static void check_bit_sweep(mx_quantize_level level)
{
    enum { ROW = 4096 };
    float x[ROW];
    size_t n = 0;
    for (uint64_t u = 0; u < (1ull << 32); u += 4099) {
        x[n++] = u2f((uint32_t)u);
        if (n == ROW) compare_row(level, x, n, "fp32 bit patterns"), n = 0;
    }
    compare_row(level, x, n, "fp32 bit patterns");
}

/* Special blocks, and rows of every length (a partial last block goes to the portable level). */
static void check_special_rows(mx_quantize_level level)
{
    float x[2048];
    for (int i = 0; i < 2048; i++) x[i] = value_at(-20 + (int)(rng() % 40));
    x[3] = NAN, x[40] = INFINITY, x[70] = -INFINITY, x[100] = -NAN;   /* one special each in blocks 0, 1, 2, 3 */
    x[300] = u2f(0x7F800001u), x[340] = u2f(0xFF800001u);               /* the smallest NaNs: blocks 9, 10 */
    for (int i = 128; i < 160; i++) x[i] = (i & 1) ? -0.0f : 0.0f;    /* block 4: zeros */
    for (int i = 160; i < 192; i++) x[i] = u2f((uint32_t)(rng() & 0x807FFFFF)); /* block 5: subnormals */
    for (int i = 192; i < 224; i++) x[i] = (i & 1) ? -FLT_MAX : FLT_MAX;        /* block 6: the largest */
    for (int i = 224; i < 256; i++) x[i] = (i % 3) ? 1e-40f : 3e38f;             /* block 7: far apart */
    for (size_t len = 0; len <= 100; len++) compare_row(level, x + 128 - len % 64, len, "rows of every length");
    compare_row(level, x, 2048, "special blocks");
}

static void check_level(mx_quantize_level level)
{
    check_shared_exponents(level);
    check_midpoints(level);
    check_bit_sweep(level);
    check_special_rows(level);
    printf("test_mx_quantize: the %s level gives the portable level's bytes\n", mx_quantize_level_name(level));
}

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    if (argc > 2 || (only && strcmp(only, "avx2") && strcmp(only, "avx512"))) {
        fprintf(stderr, "usage: test_mx_quantize [avx2|avx512]\n");
        return 2;
    }
    rng_state = 0x2545F4914F6CDD1Dull;
    const mx_quantize_level best = mx_quantize_level_best();
    CHECK(mx_quantize_level_usable(best) && (best == MX_QUANTIZE_AVX512 ||
                                             !mx_quantize_level_usable(best + 1)),
          "the best level (%s) is the highest this CPU runs", mx_quantize_level_name(best));
    int skipped = 0;
    const struct { const char *name; mx_quantize_level level; } levels[] = {{"avx2", MX_QUANTIZE_AVX2},
                                                                             {"avx512", MX_QUANTIZE_AVX512}};
    for (int i = 0; i < 2; i++) {
        if (only && strcmp(only, levels[i].name)) continue;
        if (mx_quantize_level_usable(levels[i].level))
            check_level(levels[i].level);
        else
            printf("SKIP: the %s quantizer: this CPU lacks its features (or A2AMM_CPU_HIDE hides them)\n",
                   levels[i].name),
                skipped++;
    }
    int rc = check_summary("test_mx_quantize");
    return rc == 0 && skipped ? 77 : rc;
}
