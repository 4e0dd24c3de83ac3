/*
 * Tests of the MX number-format layer (src/mx/mx.h), against expectations
 * computed independently here: fp8 / E8M0 / bf16 values from their formulas
 * (ldexp in double), a brute-force nearest-even fp8 encoder over the formula
 * table, a bf16 rounder on integers, the scale rules of op-contract.md and
 * the rows of design/mx-test-vectors.md.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "a2amm.h"
#include "mx/expf.h"
#include "mx/mx.h"

/* ---- Small helpers ------------------------------------------------------ */


static const char *tname(a2amm_fp8_type t) { return t == A2AMM_E4M3 ? "E4M3" : "E5M2"; }
static const char *mname(mx_scale_mode m) { return m == MX_SCALE_FLOOR ? "FLOOR" : "RCEIL"; }

static const a2amm_fp8_type TYPES[2] = {A2AMM_E4M3, A2AMM_E5M2};
static const mx_scale_mode MODES[2] = {MX_SCALE_FLOOR, MX_SCALE_RCEIL};

static int rng_int(int lo, int hi) /* inclusive */
{
    return lo + (int)(rng() % (uint64_t)(hi - lo + 1));
}

/* ---- fp8 reference, from the formulas ----------------------------------- */

/*
 * The formula value of a code's magnitude bits, ignoring the special codes:
 * E4M3 2^(e-7)*(1+m/8), subnormal 2^-6*m/8; E5M2 2^(e-15)*(1+m/4),
 * subnormal 2^-14*m/4. Used for 0..0x7F of either format; the first code
 * past the largest finite one (E4M3 0x7F = 480, E5M2 0x7C = 65536) is the
 * "overflow" neighbour for rounding.
 */
static double fp8_formula_mag_calc(int c, a2amm_fp8_type t)
{
    c &= 0x7F;
    if (t == A2AMM_E4M3) {
        int e = (c >> 3) & 15, m = c & 7;
        return e == 0 ? ldexp(m / 8.0, -6) : ldexp(1.0 + m / 8.0, e - 7);
    } else {
        int e = (c >> 2) & 31, m = c & 3;
        return e == 0 ? ldexp(m / 4.0, -14) : ldexp(1.0 + m / 4.0, e - 15);
    }
}

/* The same, from a table filled once (ref_encode calls it often). */
static double fp8_formula_mag(int c, a2amm_fp8_type t)
{
    static double table[2][128];
    static int filled;
    if (!filled) {
        for (int k = 0; k < 128; k++) {
            table[0][k] = fp8_formula_mag_calc(k, A2AMM_E4M3);
            table[1][k] = fp8_formula_mag_calc(k, A2AMM_E5M2);
        }
        filled = 1;
    }
    return table[t == A2AMM_E4M3 ? 0 : 1][c & 0x7F];
}

static int fp8_is_nan(uint8_t c, a2amm_fp8_type t)
{
    return t == A2AMM_E4M3 ? (c & 0x7F) == 0x7F : (c & 0x7F) > 0x7C;
}

static int fp8_is_inf(uint8_t c, a2amm_fp8_type t)
{
    return t == A2AMM_E5M2 && (c & 0x7F) == 0x7C;
}

/* The full value of a code (NaN, +-Inf, signed zero included). */
static double fp8_value(uint8_t c, a2amm_fp8_type t)
{
    if (fp8_is_nan(c, t))
        return NAN;
    double mag = fp8_is_inf(c, t) ? INFINITY : fp8_formula_mag(c, t);
    return (c & 0x80) ? -mag : mag;
}

static int fp8_overflow_code(a2amm_fp8_type t) { return t == A2AMM_E4M3 ? 0x7F : 0x7C; }
static int fp8_max_code(a2amm_fp8_type t) { return fp8_overflow_code(t) - 1; }

/*
 * Brute-force encoder: the nearest value in the formula table (0 .. the
 * overflow neighbour), ties to the even code; then overflow handling. The
 * sign is kept (a negative value that rounds to zero is 0x80). NaN input
 * returns 0x7F (any NaN code is accepted by the checks).
 */
static uint8_t ref_encode(double x, a2amm_fp8_type t, int sat)
{
    if (isnan(x))
        return 0x7F;
    uint8_t sb = signbit(x) ? 0x80 : 0;
    double a = fabs(x);
    int P = fp8_overflow_code(t);
    int c;
    if (a >= fp8_formula_mag(P, t)) {
        c = P;
    } else {
        c = 0;
        while (c + 1 <= P && fp8_formula_mag(c + 1, t) <= a)
            c++;
        double lo = fp8_formula_mag(c, t), hi = fp8_formula_mag(c + 1, t);
        double mid = (lo + hi) / 2; /* exact: few significant bits */
        if (a > mid || (a == mid && (c & 1)))
            c++;
    }
    if (c >= P) {
        if (sat)
            return (uint8_t)(sb | (P - 1));
        return (uint8_t)(sb | (t == A2AMM_E4M3 ? 0x7F : 0x7C));
    }
    return (uint8_t)(sb | c);
}

/* A code check that accepts any NaN code where a NaN code is expected. */
static int code_ok(uint8_t got, uint8_t want, a2amm_fp8_type t)
{
    if (fp8_is_nan(want, t))
        return fp8_is_nan(got, t);
    return got == want;
}

/* ---- fp8 decode ------------------------------------------------------------ */

static void test_fp8_decode(void)
{
    CHECK(mx_fp8_max(A2AMM_E4M3) == 448.0f, "E4M3 max %a", (double)mx_fp8_max(A2AMM_E4M3));
    CHECK(mx_fp8_max(A2AMM_E5M2) == 57344.0f, "E5M2 max %a", (double)mx_fp8_max(A2AMM_E5M2));
    CHECK(mx_fp8_emax(A2AMM_E4M3) == 8, "E4M3 emax %d", mx_fp8_emax(A2AMM_E4M3));
    CHECK(mx_fp8_emax(A2AMM_E5M2) == 15, "E5M2 emax %d", mx_fp8_emax(A2AMM_E5M2));
    CHECK(MX_FP8_NAN == 0x7F && MX_E8M0_NAN == 0xFF, "NaN constants");

    for (int ti = 0; ti < 2; ti++) {
        a2amm_fp8_type t = TYPES[ti];
        int nans = 0, infs = 0;
        for (int c = 0; c < 256; c++) {
            int s = c >> 7;
            double want;
            int is_nan = 0, is_inf = 0;
            /* The formulas, written out again (not via fp8_value). */
            if (t == A2AMM_E4M3) {
                int e = (c >> 3) & 15, m = c & 7;
                if (e == 15 && m == 7)
                    is_nan = 1;
                want = e == 0 ? ldexp(1.0, -6) * (m / 8.0) : ldexp(1.0, e - 7) * (1.0 + m / 8.0);
            } else {
                int e = (c >> 2) & 31, m = c & 3;
                if (e == 31) {
                    is_inf = m == 0;
                    is_nan = m != 0;
                }
                want = e == 0 ? ldexp(1.0, -14) * (m / 4.0) : ldexp(1.0, e - 15) * (1.0 + m / 4.0);
            }
            if (s)
                want = -want;
            float got = mx_fp8_to_f32((uint8_t)c, t);
            if (is_nan) {
                nans++;
                CHECK(isnan(got), "%s code %02X should be NaN, got %a", tname(t), c, (double)got);
            } else if (is_inf) {
                infs++;
                CHECK(isinf(got) && !!signbit(got) == s, "%s code %02X should be %cInf, got %a",
                      tname(t), c, s ? '-' : '+', (double)got);
            } else {
                CHECK((double)got == want && !!signbit(got) == s, "%s code %02X: got %a want %a",
                      tname(t), c, (double)got, want);
            }
            /* The helper tables used below agree with the formulas. */
            CHECK(is_nan ? isnan(fp8_value((uint8_t)c, t))
                         : fp8_value((uint8_t)c, t) == (is_inf ? (s ? -INFINITY : INFINITY) : want),
                  "reference self-check %s %02X", tname(t), c);
        }
        CHECK(nans == (t == A2AMM_E4M3 ? 2 : 6), "%s NaN code count %d", tname(t), nans);
        CHECK(infs == (t == A2AMM_E4M3 ? 0 : 2), "%s Inf code count %d", tname(t), infs);
    }
    /* A few values written out by hand. */
    CHECK(mx_fp8_to_f32(0x7E, A2AMM_E4M3) == 448.0f, "E4M3 7E");
    CHECK(mx_fp8_to_f32(0x01, A2AMM_E4M3) == 0x1p-9f, "E4M3 01");
    CHECK(mx_fp8_to_f32(0x08, A2AMM_E4M3) == 0x1p-6f, "E4M3 08");
    CHECK(mx_fp8_to_f32(0x38, A2AMM_E4M3) == 1.0f, "E4M3 38");
    CHECK(mx_fp8_to_f32(0xB8, A2AMM_E4M3) == -1.0f, "E4M3 B8");
    CHECK(mx_fp8_to_f32(0x7B, A2AMM_E5M2) == 57344.0f, "E5M2 7B");
    CHECK(mx_fp8_to_f32(0x01, A2AMM_E5M2) == 0x1p-16f, "E5M2 01");
    CHECK(mx_fp8_to_f32(0x3C, A2AMM_E5M2) == 1.0f, "E5M2 3C");
    CHECK(mx_fp8_to_f32(0xFC, A2AMM_E5M2) == -INFINITY, "E5M2 FC");
    CHECK(signbit(mx_fp8_to_f32(0x80, A2AMM_E4M3)) && mx_fp8_to_f32(0x80, A2AMM_E4M3) == 0.0f, "E4M3 -0");
}

/* ---- fp8 encode ------------------------------------------------------------ */

static void check_enc64(double x, a2amm_fp8_type t, int sat, uint8_t want, const char *what)
{
    uint8_t got = mx_f64_to_fp8(x, t, sat);
    CHECK(code_ok(got, want, t), "mx_f64_to_fp8(%a, %s, sat=%d) [%s] = %02X, want %02X", x, tname(t),
          sat, what, got, want);
}

static void check_enc32(float x, a2amm_fp8_type t, int sat, uint8_t want, const char *what)
{
    uint8_t got = mx_f32_to_fp8(x, t, sat);
    CHECK(code_ok(got, want, t), "mx_f32_to_fp8(%a, %s, sat=%d) [%s] = %02X, want %02X", (double)x,
          tname(t), sat, what, got, want);
}

static void test_fp8_roundtrip(void)
{
    for (int ti = 0; ti < 2; ti++) {
        a2amm_fp8_type t = TYPES[ti];
        for (int c = 0; c < 256; c++) {
            if (fp8_is_nan((uint8_t)c, t))
                continue;
            double v = fp8_value((uint8_t)c, t);
            for (int sat = 0; sat <= 1; sat++) {
                uint8_t want = (uint8_t)c;
                if (fp8_is_inf((uint8_t)c, t) && sat)
                    want = (uint8_t)((c & 0x80) | fp8_max_code(t)); /* Inf saturates to max */
                uint8_t g64 = mx_f64_to_fp8(v, t, sat);
                uint8_t g32 = mx_f32_to_fp8((float)v, t, sat);
                CHECK(g64 == want, "%s roundtrip f64 code %02X sat=%d got %02X want %02X", tname(t), c,
                      sat, g64, want);
                CHECK(g32 == want, "%s roundtrip f32 code %02X sat=%d got %02X want %02X", tname(t), c,
                      sat, g32, want);
            }
        }
    }
}

/* Round-to-nearest-even at every midpoint between adjacent finite values. */
static void test_fp8_midpoints(void)
{
    for (int ti = 0; ti < 2; ti++) {
        a2amm_fp8_type t = TYPES[ti];
        int maxc = fp8_max_code(t);
        for (int c = 0; c < maxc; c++) {
            double lo = fp8_formula_mag(c, t), hi = fp8_formula_mag(c + 1, t);
            double mid = (lo + hi) / 2;
            int even = (c & 1) ? c + 1 : c;
            float fmid = (float)mid;
            CHECK((double)fmid == mid, "midpoint %a not a float", mid); /* test self-check */
            for (int neg = 0; neg <= 1; neg++) {
                double sg = neg ? -1.0 : 1.0;
                uint8_t sb = neg ? 0x80 : 0;
                for (int sat = 0; sat <= 1; sat++) {
                    check_enc64(sg * lo, t, sat, (uint8_t)(sb | c), "lo");
                    check_enc64(sg * hi, t, sat, (uint8_t)(sb | (c + 1)), "hi");
                    check_enc64(sg * mid, t, sat, (uint8_t)(sb | even), "tie");
                    check_enc64(sg * nextafter(mid, 0.0), t, sat, (uint8_t)(sb | c), "below tie");
                    check_enc64(sg * nextafter(mid, INFINITY), t, sat, (uint8_t)(sb | (c + 1)), "above tie");
                    /* Off the tie by less than a float ulp: a float-first path ties instead. */
                    check_enc64(sg * mid * (1 + 0x1p-40), t, sat, (uint8_t)(sb | (c + 1)), "tie+2^-40");
                    check_enc64(sg * mid * (1 - 0x1p-40), t, sat, (uint8_t)(sb | c), "tie-2^-40");
                    /* Between the neighbours, away from the tie. */
                    check_enc64(sg * (lo + (hi - lo) / 4), t, sat, (uint8_t)(sb | c), "quarter");
                    check_enc64(sg * (lo + 3 * (hi - lo) / 4), t, sat, (uint8_t)(sb | (c + 1)), "3 quarters");

                    float fs = neg ? -1.0f : 1.0f;
                    check_enc32(fs * (float)lo, t, sat, (uint8_t)(sb | c), "lo");
                    check_enc32(fs * fmid, t, sat, (uint8_t)(sb | even), "tie");
                    check_enc32(fs * nextafterf(fmid, 0.0f), t, sat, (uint8_t)(sb | c), "below tie");
                    check_enc32(fs * nextafterf(fmid, INFINITY), t, sat, (uint8_t)(sb | (c + 1)), "above tie");
                }
            }
        }
    }
    /* Hand-written ones. */
    check_enc64(0x1p-10, A2AMM_E4M3, 1, 0x00, "0 / min subnormal tie");
    check_enc64(nextafter(0x1p-10, 1), A2AMM_E4M3, 1, 0x01, "above 0 / min subnormal tie");
    check_enc64(-0x1p-10, A2AMM_E4M3, 1, 0x80, "-(0 / min subnormal tie)");
    check_enc64(3 * 0x1p-10, A2AMM_E4M3, 1, 0x02, "1.5 subnormal quanta");
    check_enc64(0x1p-17, A2AMM_E5M2, 1, 0x00, "E5M2 0 / min subnormal tie");
    check_enc64(3 * 0x1p-17, A2AMM_E5M2, 1, 0x02, "E5M2 1.5 subnormal quanta");
    check_enc64(1.0625, A2AMM_E4M3, 1, 0x38, "1.0625");
    check_enc64(1.1875, A2AMM_E4M3, 1, 0x3A, "1.1875");
    check_enc64(-1.0625, A2AMM_E4M3, 1, 0xB8, "-1.0625");
    check_enc64(1.125, A2AMM_E5M2, 1, 0x3C, "E5M2 1.125");
    check_enc64(1.375, A2AMM_E5M2, 1, 0x3E, "E5M2 1.375");
    check_enc64(0.0, A2AMM_E4M3, 1, 0x00, "+0");
    check_enc64(-0.0, A2AMM_E4M3, 1, 0x80, "-0");
    check_enc64(-0.0, A2AMM_E5M2, 0, 0x80, "-0");
    check_enc32(-0.0f, A2AMM_E4M3, 0, 0x80, "-0");
    check_enc64(-1e-300, A2AMM_E4M3, 1, 0x80, "tiny negative");
    check_enc64(1e-300, A2AMM_E5M2, 1, 0x00, "tiny positive");
    check_enc32(-0x1p-149f, A2AMM_E5M2, 1, 0x80, "float min subnormal negative");
}

static void test_fp8_saturation(void)
{
    const a2amm_fp8_type E4 = A2AMM_E4M3, E5 = A2AMM_E5M2;
    /* Saturating (mx-test-vectors single-value casts). */
    check_enc64(464, E4, 1, 0x7E, "464 sat");
    check_enc64(465, E4, 1, 0x7E, "465 sat");
    check_enc64(480, E4, 1, 0x7E, "480 sat");
    check_enc64(1000, E4, 1, 0x7E, "1000 sat");
    check_enc64(-1000, E4, 1, 0xFE, "-1000 sat");
    check_enc64(1e300, E4, 1, 0x7E, "1e300 sat");
    check_enc64(-1e300, E4, 1, 0xFE, "-1e300 sat");
    check_enc64(INFINITY, E4, 1, 0x7E, "+Inf sat");
    check_enc64(-INFINITY, E4, 1, 0xFE, "-Inf sat");
    check_enc64(61440, E5, 1, 0x7B, "61440 sat");
    check_enc64(60000, E5, 1, 0x7B, "60000 sat");
    check_enc64(65536, E5, 1, 0x7B, "65536 sat");
    check_enc64(-1e10, E5, 1, 0xFB, "-1e10 sat");
    check_enc64(INFINITY, E5, 1, 0x7B, "+Inf sat");
    check_enc64(-INFINITY, E5, 1, 0xFB, "-Inf sat");
    check_enc32(464.0f, E4, 1, 0x7E, "464 sat");
    check_enc32(465.0f, E4, 1, 0x7E, "465 sat");
    check_enc32(1000.0f, E4, 1, 0x7E, "1000 sat");
    check_enc32(-1000.0f, E4, 1, 0xFE, "-1000 sat");
    check_enc32(FLT_MAX, E4, 1, 0x7E, "FLT_MAX sat");
    check_enc32(INFINITY, E4, 1, 0x7E, "+Inf sat");
    check_enc32(-INFINITY, E4, 1, 0xFE, "-Inf sat");
    check_enc32(61440.0f, E5, 1, 0x7B, "61440 sat");
    check_enc32(-FLT_MAX, E5, 1, 0xFB, "-FLT_MAX sat");
    check_enc32(INFINITY, E5, 1, 0x7B, "+Inf sat");
    check_enc32(-INFINITY, E5, 1, 0xFB, "-Inf sat");

    /* Non-saturating: E4M3 overflow is NaN, E5M2 overflow is Inf. */
    uint8_t g;
    g = mx_f64_to_fp8(465, E4, 0);
    CHECK((g & 0x7F) == 0x7F, "E4M3 465 non-sat gave %02X, want NaN 7F", g);
    g = mx_f32_to_fp8(465.0f, E4, 0);
    CHECK((g & 0x7F) == 0x7F, "E4M3 f32 465 non-sat gave %02X, want NaN 7F", g);
    g = mx_f64_to_fp8(nextafter(464, 1000), E4, 0);
    CHECK((g & 0x7F) == 0x7F, "E4M3 464+ulp non-sat gave %02X, want NaN", g);
    g = mx_f64_to_fp8(-465, E4, 0);
    CHECK((g & 0x7F) == 0x7F, "E4M3 -465 non-sat gave %02X, want NaN", g);
    g = mx_f64_to_fp8(INFINITY, E4, 0);
    CHECK((g & 0x7F) == 0x7F, "E4M3 +Inf non-sat gave %02X, want NaN", g);
    g = mx_f32_to_fp8(-INFINITY, E4, 0);
    CHECK((g & 0x7F) == 0x7F, "E4M3 -Inf non-sat gave %02X, want NaN", g);
    check_enc64(464, E4, 0, 0x7E, "464 non-sat (tie to even 448)");
    check_enc64(-464, E4, 0, 0xFE, "-464 non-sat");
    check_enc32(464.0f, E4, 0, 0x7E, "464 non-sat");
    check_enc64(nextafter(464, 0), E4, 0, 0x7E, "464- non-sat");
    check_enc64(61440, E5, 0, 0x7C, "61440 non-sat (tie to even Inf)");
    check_enc64(-61440, E5, 0, 0xFC, "-61440 non-sat");
    check_enc32(61440.0f, E5, 0, 0x7C, "61440 non-sat");
    check_enc64(nextafter(61440, 0), E5, 0, 0x7B, "61440- non-sat");
    check_enc64(60000, E5, 0, 0x7B, "60000 non-sat");
    check_enc64(1e300, E5, 0, 0x7C, "1e300 non-sat");
    check_enc64(INFINITY, E5, 0, 0x7C, "+Inf non-sat");
    check_enc64(-INFINITY, E5, 0, 0xFC, "-Inf non-sat");
    check_enc32(INFINITY, E5, 0, 0x7C, "+Inf non-sat");
    check_enc32(-INFINITY, E5, 0, 0xFC, "-Inf non-sat");

    /* NaN in gives a NaN code, whatever the mode and sign. */
    for (int ti = 0; ti < 2; ti++) {
        a2amm_fp8_type t = TYPES[ti];
        for (int sat = 0; sat <= 1; sat++) {
            double nans[3] = {NAN, -NAN, u2f(0x7F800001)}; /* quiet, negative, signalling */
            for (int k = 0; k < 3; k++) {
                uint8_t a = mx_f64_to_fp8(nans[k], t, sat);
                uint8_t b = mx_f32_to_fp8((float)nans[k], t, sat);
                CHECK(fp8_is_nan(a, t), "%s f64 NaN #%d sat=%d gave %02X", tname(t), k, sat, a);
                CHECK(fp8_is_nan(b, t), "%s f32 NaN #%d sat=%d gave %02X", tname(t), k, sat, b);
            }
        }
    }
}

/* Random values of many magnitudes against the brute-force encoder. */
static void test_fp8_random(void)
{
    for (int ti = 0; ti < 2; ti++) {
        a2amm_fp8_type t = TYPES[ti];
        for (int i = 0; i < 100000; i++) {
            uint64_t r = rng();
            int e = rng_int(-24, 20);
            double x = ldexp(1.0 + (double)(r >> 12) * 0x1p-52, e);
            if (r & 1)
                x = -x;
            int sat = (int)((r >> 1) & 1);
            uint8_t want = ref_encode(x, t, sat);
            uint8_t got = mx_f64_to_fp8(x, t, sat);
            CHECK(code_ok(got, want, t), "random %s f64 %a sat=%d got %02X want %02X", tname(t), x, sat,
                  got, want);
            float xf = (float)x;
            want = ref_encode((double)xf, t, sat);
            got = mx_f32_to_fp8(xf, t, sat);
            CHECK(code_ok(got, want, t), "random %s f32 %a sat=%d got %02X want %02X", tname(t),
                  (double)xf, sat, got, want);
        }
    }
}

/* ---- E8M0 --------------------------------------------------------------- */

static void test_e8m0(void)
{
    for (int b = 0; b < 256; b++) {
        double d = mx_e8m0_to_f64((uint8_t)b);
        float f = mx_e8m0_to_f32((uint8_t)b);
        if (b == 255) {
            CHECK(isnan(d), "e8m0 FF to f64 gave %a, want NaN", d);
            CHECK(isnan(f), "e8m0 FF to f32 gave %a, want NaN", (double)f);
            continue;
        }
        double want = ldexp(1.0, b - 127);
        CHECK(d == want, "e8m0 %02X to f64 gave %a want %a", b, d, want);
        CHECK((double)f == want, "e8m0 %02X to f32 gave %a want %a", b, (double)f, want);
        uint32_t want_bits = b == 0 ? 0x00400000u : (uint32_t)b << 23; /* 2^-127 = 2^22 * 2^-149, subnormal */
        CHECK(f2u(f) == want_bits, "e8m0 %02X to f32 bits %08X want %08X", b, f2u(f), want_bits);
    }
    CHECK(mx_e8m0_to_f64(0x00) != 0.0, "e8m0 00 must not be zero");
    CHECK(mx_e8m0_to_f32(0x00) == 0x1p-127f, "e8m0 00 to f32 is 2^-127");
    CHECK(mx_e8m0_to_f64(0x7F) == 1.0, "e8m0 7F is 1");
    CHECK(mx_e8m0_to_f64(0xFE) == 0x1p127, "e8m0 FE is 2^127");

    /* Casts of floats to the nearest power of two. */
#define E8(x, want)                                                                           \
    do {                                                                                      \
        float x_ = (x);                                                                       \
        uint8_t g_ = mx_f32_to_e8m0(x_);                                                      \
        CHECK(g_ == (uint8_t)(want), "mx_f32_to_e8m0(%a) = %02X want %02X", (double)x_, g_,   \
              (unsigned)(uint8_t)(want));                                                     \
    } while (0)
    for (int e = -149; e <= 127; e++) {
        int clamped = e + 127 < 0 ? 0 : e + 127;
        float p = ldexpf(1.0f, e);
        E8(p, clamped);
        if (e > -149)
            E8(nextafterf(p, 0.0f), clamped); /* just below 2^e is still nearest 2^e */
        E8(nextafterf(p, INFINITY), clamped);
        if (e >= -126) { /* 1.5*2^e and neighbours are normal floats */
            int up = e + 1 + 127;
            if (up > 254)
                up = 254;
            if (up < 0)
                up = 0;
            float tie = 1.5f * p;
            E8(tie, up);                           /* tie goes up */
            E8(nextafterf(tie, 0.0f), clamped);    /* below the tie: down */
            E8(nextafterf(tie, INFINITY), up);     /* above: up */
            E8(1.25f * p, clamped);
            E8(1.75f * p, up);
        }
    }
    E8(1.0f, 0x7F);
    E8(2.0f, 0x80);
    E8(1.5f, 0x80);
    E8(1.4999999f, 0x7F);
    E8(0.75f, 0x7F);
    E8(nextafterf(0.75f, 0.0f), 0x7E);
    E8(3.0f, 0x81);
    E8(FLT_MAX, 0xFE);
    E8(0x1p127f, 0xFE);
    E8(0x1p-127f, 0x00);
    E8(0x1p-128f, 0x00);
    E8(FLT_MIN, 0x01);
    E8(0x1p-149f, 0x00);
    E8(NAN, 0xFF);
    E8(-NAN, 0xFF);
    E8(INFINITY, 0xFF);
    E8(-INFINITY, 0xFF);
    E8(0.0f, 0xFF);
    E8(-0.0f, 0xFF);
    E8(-1.0f, 0xFF);
    E8(-0x1p-149f, 0xFF);
    E8(-FLT_MAX, 0xFF);
#undef E8
}

/* ---- bf16 --------------------------------------------------------------- */

static int bf16_is_nan(uint16_t h) { return (h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0; }

/* Reference float -> bf16 for non-NaN: round the magnitude bits, ties to even. */
static uint16_t ref_f32_to_bf16(uint32_t u)
{
    uint32_t lower = u & 0xFFFF;
    uint16_t upper = (uint16_t)(u >> 16);
    if (lower > 0x8000 || (lower == 0x8000 && (upper & 1)))
        upper++; /* magnitude + 1; carries into the exponent (up to Inf) */
    return upper;
}

/* Reference double -> bf16 with one rounding, from the value. */
static uint16_t ref_f64_to_bf16(double x)
{
    uint16_t sb = signbit(x) ? 0x8000 : 0;
    double a = fabs(x);
    if (isinf(a) || a >= 0x1.ffp127) /* at or past the midpoint of max and 2^128 */
        return sb | 0x7F80;
    if (a == 0)
        return sb;
    int e;
    frexp(a, &e); /* a = f * 2^e, f in [0.5, 1) */
    int E = e - 1;
    if (E < -126)
        E = -126;
    double q = ldexp(1.0, E - 7); /* bf16 quantum at this exponent */
    double v = nearbyint(a / q) * q; /* exact scaling, ties to even */
    return sb | (uint16_t)(f2u((float)v) >> 16);
}

static void test_bf16_decode(void)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = mx_bf16_to_f32((uint16_t)h);
        if (bf16_is_nan((uint16_t)h)) {
            CHECK(isnan(f), "bf16 %04X should decode to NaN, got %a", h, (double)f);
        } else {
            CHECK(f2u(f) == h << 16, "bf16 %04X decodes to bits %08X", h, f2u(f));
        }
    }
}

static void test_f32_to_bf16(void)
{
    static const uint16_t lows[] = {0x0000, 0x0001, 0x3FFF, 0x7FFF, 0x8000, 0x8001, 0xC000, 0xFFFF};
    for (uint32_t h = 0; h < 65536; h++) {
        for (size_t k = 0; k < sizeof lows / sizeof lows[0] + 1; k++) {
            uint32_t low = k < sizeof lows / sizeof lows[0] ? lows[k] : (uint32_t)(rng() & 0xFFFF);
            uint32_t u = h << 16 | low;
            float x = u2f(u);
            uint16_t got = mx_f32_to_bf16(x);
            if (isnan(x)) {
                CHECK(bf16_is_nan(got) && (got & 0x0040), "f32 %08X (NaN) to bf16 gave %04X, want quiet NaN",
                      u, got);
            } else {
                uint16_t want = ref_f32_to_bf16(u);
                CHECK(got == want, "f32 %08X (%a) to bf16 gave %04X want %04X", u, (double)x, got, want);
            }
        }
    }
    /* Hand-written cases. */
    CHECK(mx_f32_to_bf16(u2f(0x3F808000)) == 0x3F80, "tie to even down: %04X", mx_f32_to_bf16(u2f(0x3F808000)));
    CHECK(mx_f32_to_bf16(u2f(0x3F818000)) == 0x3F82, "tie to even up: %04X", mx_f32_to_bf16(u2f(0x3F818000)));
    CHECK(mx_f32_to_bf16(u2f(0x3F808001)) == 0x3F81, "above tie: %04X", mx_f32_to_bf16(u2f(0x3F808001)));
    CHECK(mx_f32_to_bf16(u2f(0x7F7FFFFF)) == 0x7F80, "FLT_MAX to Inf: %04X", mx_f32_to_bf16(u2f(0x7F7FFFFF)));
    CHECK(mx_f32_to_bf16(u2f(0xFF7FFFFF)) == 0xFF80, "-FLT_MAX to -Inf: %04X", mx_f32_to_bf16(u2f(0xFF7FFFFF)));
    CHECK(mx_f32_to_bf16(u2f(0x7F7F7FFF)) == 0x7F7F, "below overflow tie: %04X", mx_f32_to_bf16(u2f(0x7F7F7FFF)));
    CHECK(mx_f32_to_bf16(INFINITY) == 0x7F80, "Inf");
    CHECK(mx_f32_to_bf16(-INFINITY) == 0xFF80, "-Inf");
    CHECK(mx_f32_to_bf16(-0.0f) == 0x8000, "-0");
    CHECK(mx_f32_to_bf16(0x1p-133f) == 0x0001, "min bf16 subnormal kept: %04X", mx_f32_to_bf16(0x1p-133f));
    CHECK(mx_f32_to_bf16(0x1p-134f) == 0x0000, "half min subnormal ties to 0: %04X", mx_f32_to_bf16(0x1p-134f));
    CHECK(mx_f32_to_bf16(0x1.8p-133f) == 0x0002, "1.5 quanta ties to 2: %04X", mx_f32_to_bf16(0x1.8p-133f));
    CHECK(mx_f32_to_bf16(-0x1p-130f) == 0x8008, "-2^-130: %04X", mx_f32_to_bf16(-0x1p-130f));
    uint16_t n1 = mx_f32_to_bf16(u2f(0x7F800001)); /* signalling NaN: the +0x7FFF trick gives Inf */
    uint16_t n2 = mx_f32_to_bf16(u2f(0x7FFFFFFF)); /* carry would wrap into the sign */
    uint16_t n3 = mx_f32_to_bf16(u2f(0xFF800001));
    uint16_t n4 = mx_f32_to_bf16(NAN);
    CHECK(bf16_is_nan(n1), "sNaN 7F800001 to bf16 gave %04X", n1);
    CHECK(bf16_is_nan(n2), "NaN 7FFFFFFF to bf16 gave %04X", n2);
    CHECK(bf16_is_nan(n3), "NaN FF800001 to bf16 gave %04X", n3);
    CHECK(bf16_is_nan(n4), "NaN to bf16 gave %04X", n4);
}

static void check_d2bf(double x, uint16_t want, const char *what)
{
    uint16_t got = mx_f64_to_bf16(x);
    CHECK(got == want, "mx_f64_to_bf16(%a) [%s] = %04X want %04X", x, what, got, want);
}

static void test_f64_to_bf16(void)
{
    /* The double-rounding case: 1 + 2^-8 + 2^-40 is above the bf16 midpoint
     * 1 + 2^-8 by less than a float ulp, so a float-first path would tie. */
    double x = 1.0 + 0x1p-8 + 0x1p-40;
    CHECK((float)x == 1.0f + 0x1p-8f, "test self-check: float(x) is the tie");
    CHECK(mx_f32_to_bf16((float)x) == 0x3F80, "float-first path gives %04X (tie to even)",
          mx_f32_to_bf16((float)x));
    check_d2bf(x, 0x3F81, "1+2^-8+2^-40 rounds up directly");
    check_d2bf(-x, 0xBF81, "-(1+2^-8+2^-40)");
    check_d2bf(1.0 + 0x1p-8 + 0x1p-7 - 0x1p-40, 0x3F81, "1+3*2^-8-2^-40 rounds down directly");
    check_d2bf(1.0 + 0x1p-8, 0x3F80, "exact tie to even down");
    check_d2bf(1.0 + 3 * 0x1p-8, 0x3F82, "exact tie to even up");
    check_d2bf(257.0, 0x4380, "257 ties to 256");
    check_d2bf(259.0, 0x4382, "259 ties to 260");
    check_d2bf(0.0, 0x0000, "+0");
    check_d2bf(-0.0, 0x8000, "-0");
    /* Subnormal bf16 results. */
    check_d2bf(0x1p-133, 0x0001, "2^-133");
    check_d2bf(0x1p-134, 0x0000, "2^-134 ties to 0");
    check_d2bf(0x1p-134 + 0x1p-170, 0x0001, "2^-134 + tiny");
    check_d2bf(-(0x1p-134 + 0x1p-170), 0x8001, "-(2^-134 + tiny)");
    check_d2bf(3 * 0x1p-134, 0x0002, "1.5 quanta ties to 2");
    check_d2bf(0x1p-127, 0x0040, "2^-127");
    check_d2bf(0x1p-126, 0x0080, "2^-126 (min normal)");
    check_d2bf(0x1p-126 - 0x1p-134, 0x0080, "just under min normal rounds up to it");
    check_d2bf(1e-300, 0x0000, "1e-300");
    check_d2bf(-1e-300, 0x8000, "-1e-300");
    check_d2bf(0x1p-1074, 0x0000, "double min subnormal");
    /* Overflow. */
    check_d2bf(1e300, 0x7F80, "1e300");
    check_d2bf(-1e300, 0xFF80, "-1e300");
    check_d2bf((double)FLT_MAX, 0x7F80, "FLT_MAX");
    check_d2bf(0x1.ffp127, 0x7F80, "overflow tie goes to Inf");
    check_d2bf(nextafter(0x1.ffp127, 0), 0x7F7F, "just below overflow tie");
    check_d2bf(0x1.fep127, 0x7F7F, "bf16 max");
    check_d2bf(INFINITY, 0x7F80, "Inf");
    check_d2bf(-INFINITY, 0xFF80, "-Inf");
    uint16_t n = mx_f64_to_bf16(NAN);
    CHECK(bf16_is_nan(n), "NaN to bf16 gave %04X", n);
    n = mx_f64_to_bf16(-NAN);
    CHECK(bf16_is_nan(n), "-NaN to bf16 gave %04X", n);

    /* Every bf16 midpoint (subnormal, normal, overflow), both signs. */
    for (uint32_t h = 0; h < 0x7F80; h++) {
        double lo = (double)u2f(h << 16);
        double hi = h + 1 == 0x7F80 ? 0x1p128 : (double)u2f((h + 1) << 16);
        double mid = (lo + hi) / 2;
        uint16_t even = (uint16_t)((h & 1) ? h + 1 : h);
        for (int neg = 0; neg <= 1; neg++) {
            double sg = neg ? -1.0 : 1.0;
            uint16_t sb = neg ? 0x8000 : 0;
            check_d2bf(sg * lo, (uint16_t)(sb | h), "lo");
            check_d2bf(sg * mid, (uint16_t)(sb | even), "tie");
            check_d2bf(sg * nextafter(mid, 0.0), (uint16_t)(sb | h), "below tie");
            check_d2bf(sg * nextafter(mid, INFINITY), (uint16_t)(sb | (h + 1)), "above tie");
            check_d2bf(sg * mid * (1 + 0x1p-40), (uint16_t)(sb | (h + 1)), "tie+2^-40");
            check_d2bf(sg * mid * (1 - 0x1p-40), (uint16_t)(sb | h), "tie-2^-40");
        }
    }
    /* Random doubles over the whole bf16 range and beyond, vs the reference. */
    for (int i = 0; i < 200000; i++) {
        uint64_t r = rng();
        double v = ldexp(1.0 + (double)(r >> 12) * 0x1p-52, rng_int(-140, 130));
        if (r & 1)
            v = -v;
        check_d2bf(v, ref_f64_to_bf16(v), "random");
    }
}

/* ---- Block scale reference (op-contract.md) ----------------------------- */

static uint8_t ref_block_scale(const float *x, size_t n, a2amm_fp8_type t, mx_scale_mode mode)
{
    float amax = 0.0f;
    for (size_t i = 0; i < n; i++) {
        if (isnan(x[i]) || isinf(x[i]))
            return 0xFF;
        if (fabsf(x[i]) > amax)
            amax = fabsf(x[i]);
    }
    if (amax == 0.0f)
        return 0x00;
    int emax = t == A2AMM_E4M3 ? 8 : 15;
    int ub;
    if (mode == MX_SCALE_FLOOR) {
        int E = (int)((f2u(amax) >> 23) & 0xFF); /* biased exponent bits */
        ub = E - 127 - emax;
        if (ub < -127)
            ub = -127;
        if (ub > 127)
            ub = 127;
    } else {
        volatile float maxv = t == A2AMM_E4M3 ? 448.0f : 57344.0f;
        volatile float inv = 1.0f / maxv;
        volatile float d = amax * inv;
        if (d == 0.0f) {
            ub = -127;
        } else {
            int e;
            double f = frexp((double)d, &e); /* d = f*2^e, f in [0.5, 1) */
            ub = f == 0.5 ? e - 1 : e;       /* exponent rounded up unless a power of two */
            if (ub < -127)
                ub = -127;
            if (ub > 127)
                ub = 127;
        }
    }
    return (uint8_t)(ub + 127);
}

/* Codes of a block given its scale: saturating RNE of x / 2^(scale-127). */
static uint8_t ref_elem(float x, uint8_t scale, a2amm_fp8_type t)
{
    return ref_encode(ldexp((double)x, 127 - (int)scale), t, 1);
}

/* Checks one quantized block (scale, codes, no write past n) against the reference. */
static void check_block(const float *x, size_t n, a2amm_fp8_type t, mx_scale_mode mode, const char *what)
{
    uint8_t codes[MX_BLOCK + 4], scale = 0x5A;
    memset(codes, 0xA5, sizeof codes);
    mx_quantize_block(x, n, t, mode, codes, &scale);
    uint8_t want_s = ref_block_scale(x, n, t, mode);
    CHECK(scale == want_s, "%s %s %s n=%zu: scale %02X want %02X", what, tname(t), mname(mode), n, scale,
          want_s);
    uint8_t bs = mx_block_scale(x, n, t, mode);
    CHECK(bs == scale, "%s %s %s n=%zu: mx_block_scale %02X vs quantize_block %02X", what, tname(t),
          mname(mode), n, bs, scale);
    for (size_t i = 0; i < n; i++) {
        if (want_s == 0xFF) {
            CHECK(fp8_is_nan(codes[i], t), "%s %s %s: NaN block code[%zu] = %02X", what, tname(t),
                  mname(mode), i, codes[i]);
        } else {
            uint8_t w = ref_elem(x[i], want_s, t);
            CHECK(codes[i] == w, "%s %s %s n=%zu: code[%zu] of %a = %02X want %02X (scale %02X)", what,
                  tname(t), mname(mode), n, i, (double)x[i], codes[i], w, want_s);
        }
    }
    for (size_t i = n; i < sizeof codes; i++)
        CHECK(codes[i] == 0xA5, "%s: mx_quantize_block wrote past n=%zu at %zu", what, n, i);
}

/* ---- The mx-test-vectors table ------------------------------------------ */

typedef struct vec_row {
    const char *name;
    a2amm_fp8_type type;
    int n;          /* listed values */
    float v[6];     /* listed values */
    float fill;
    uint8_t fs;     /* FLOOR scale */
    uint8_t fc[6];  /* FLOOR codes of the listed values */
    uint8_t rs;     /* RCEIL scale */
    uint8_t rc[6];  /* RCEIL codes */
} vec_row;

static void test_vectors(void)
{
    vec_row rows[] = {
        {"+0,-0", A2AMM_E4M3, 2, {0.0f, -0.0f}, 0.0f, 0x00, {0x00, 0x80}, 0x00, {0x00, 0x80}},
        {"448,1,-1", A2AMM_E4M3, 3, {448, 1, -1}, 1, 0x7F, {0x7E, 0x38, 0xB8}, 0x7F, {0x7E, 0x38, 0xB8}},
        {"480,1,3", A2AMM_E4M3, 3, {480, 1, 3}, 1, 0x7F, {0x7E, 0x38, 0x44}, 0x80, {0x77, 0x30, 0x3C}},
        {"464,1", A2AMM_E4M3, 2, {464, 1}, 1, 0x7F, {0x7E, 0x38}, 0x80, {0x76, 0x30}},
        {"465,1", A2AMM_E4M3, 2, {465, 1}, 1, 0x7F, {0x7E, 0x38}, 0x80, {0x77, 0x30}},
        {"0x447FFFFF,1", A2AMM_E4M3, 2, {0 /* set below from bits */, 1}, 1, 0x80, {0x7E, 0x30}, 0x81,
         {0x78, 0x28}},
        {"448,1.0625,1.1875,-1.0625", A2AMM_E4M3, 4, {448, 1.0625f, 1.1875f, -1.0625f}, 1, 0x7F,
         {0x7E, 0x38, 0x3A, 0xB8}, 0x7F, {0x7E, 0x38, 0x3A, 0xB8}},
        {"448,2^-10,5*2^-10,2^-9,3*2^-11", A2AMM_E4M3, 5, {448, 0x1p-10f, 5 * 0x1p-10f, 0x1p-9f, 3 * 0x1p-11f},
         1, 0x7F, {0x7E, 0x00, 0x02, 0x01, 0x01}, 0x7F, {0x7E, 0x00, 0x02, 0x01, 0x01}},
        {"NaN,1,2", A2AMM_E4M3, 3, {NAN, 1, 2}, 1, 0xFF, {0}, 0xFF, {0}},
        {"+Inf,1,2", A2AMM_E4M3, 3, {INFINITY, 1, 2}, 1, 0xFF, {0}, 0xFF, {0}},
        {"1e4,1e-3,0.5,3", A2AMM_E4M3, 4, {1e4f, 1e-3f, 0.5f, 3}, 1e-3f, 0x84, {0x7A, 0x00, 0x08, 0x1C}, 0x84,
         {0x7A, 0x00, 0x08, 0x1C}},
        {"2^-133,2^-134", A2AMM_E4M3, 2, {0x1p-133f, 0x1p-134f}, 0, 0x00, {0x08, 0x04}, 0x00, {0x08, 0x04}},
        {"2^-120,2^-121", A2AMM_E4M3, 2, {0x1p-120f, 0x1p-121f}, 0, 0x00, {0x70, 0x68}, 0x00, {0x70, 0x68}},
        {"FLT_MAX,1e30", A2AMM_E4M3, 2, {FLT_MAX, 1e30f}, 0, 0xF6, {0x7E, 0x00}, 0xF7, {0x78, 0x00}},
        {"E5M2 57344,1,-1", A2AMM_E5M2, 3, {57344, 1, -1}, 1, 0x7F, {0x7B, 0x3C, 0xBC}, 0x7F, {0x7B, 0x3C, 0xBC}},
        {"E5M2 60000,1", A2AMM_E5M2, 2, {60000, 1}, 1, 0x7F, {0x7B, 0x3C}, 0x80, {0x77, 0x38}},
        {"E5M2 61440,1", A2AMM_E5M2, 2, {61440, 1}, 1, 0x7F, {0x7B, 0x3C}, 0x80, {0x78, 0x38}},
        {"E5M2 57344,1.125,1.375,2^-16,3*2^-17", A2AMM_E5M2, 5, {57344, 1.125f, 1.375f, 0x1p-16f, 3 * 0x1p-17f},
         1, 0x7F, {0x7B, 0x3C, 0x3E, 0x01, 0x02}, 0x7F, {0x7B, 0x3C, 0x3E, 0x01, 0x02}},
        /* Not in the table, same rules: more NaN/Inf/zero blocks. */
        {"E5M2 -Inf last", A2AMM_E5M2, 2, {1, 2}, 1, 0xFF, {0}, 0xFF, {0}},
        {"E4M3 NaN last", A2AMM_E4M3, 1, {3}, 1, 0xFF, {0}, 0xFF, {0}},
        {"E5M2 +0,-0", A2AMM_E5M2, 2, {0.0f, -0.0f}, -0.0f, 0x00, {0x00, 0x80}, 0x00, {0x00, 0x80}},
        {"min float subnormal", A2AMM_E4M3, 2, {0x1p-149f, -0x1p-149f}, 0, 0x00, {0x00, 0x80}, 0x00,
         {0x00, 0x80}},
    };
    rows[5].v[0] = u2f(0x447FFFFF);
    CHECK(rows[5].v[0] > 1023.9999f && rows[5].v[0] < 1024.0f, "0x447FFFFF self-check");

    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        vec_row *row = &rows[r];
        float x[MX_BLOCK];
        for (int i = 0; i < MX_BLOCK; i++)
            x[i] = i < row->n ? row->v[i] : row->fill;
        if (strcmp(row->name, "E5M2 -Inf last") == 0)
            x[MX_BLOCK - 1] = -INFINITY;
        if (strcmp(row->name, "E4M3 NaN last") == 0)
            x[MX_BLOCK - 1] = -NAN;
        for (int mi = 0; mi < 2; mi++) {
            mx_scale_mode mode = MODES[mi];
            uint8_t want_s = mode == MX_SCALE_FLOOR ? row->fs : row->rs;
            const uint8_t *want_c = mode == MX_SCALE_FLOOR ? row->fc : row->rc;
            uint8_t codes[MX_BLOCK], scale = 0x5A;
            memset(codes, 0xA5, sizeof codes);
            mx_quantize_block(x, MX_BLOCK, row->type, mode, codes, &scale);
            CHECK(scale == want_s, "vector [%s] %s: scale %02X want %02X", row->name, mname(mode), scale, want_s);
            uint8_t bs = mx_block_scale(x, MX_BLOCK, row->type, mode);
            CHECK(bs == want_s, "vector [%s] %s: mx_block_scale %02X want %02X", row->name, mname(mode), bs,
                  want_s);
            /* The test's own reference agrees with the table. */
            CHECK(ref_block_scale(x, MX_BLOCK, row->type, mode) == want_s, "reference self-check scale [%s] %s",
                  row->name, mname(mode));
            for (int i = 0; i < MX_BLOCK; i++) {
                if (want_s == 0xFF) {
                    CHECK(fp8_is_nan(codes[i], row->type), "vector [%s] %s: NaN block code[%d] = %02X",
                          row->name, mname(mode), i, codes[i]);
                    continue;
                }
                uint8_t w = i < row->n ? want_c[i] : ref_elem(row->fill, want_s, row->type);
                CHECK(codes[i] == w, "vector [%s] %s: code[%d] = %02X want %02X", row->name, mname(mode), i,
                      codes[i], w);
                if (i < row->n)
                    CHECK(ref_elem(x[i], want_s, row->type) == w, "reference self-check code [%s] %s [%d]",
                          row->name, mname(mode), i);
            }
        }
    }
    /* Fill codes written out for the common fill of 1. */
    {
        float x[MX_BLOCK];
        uint8_t codes[MX_BLOCK], scale;
        for (int i = 0; i < MX_BLOCK; i++)
            x[i] = 1;
        x[0] = 480;
        mx_quantize_block(x, MX_BLOCK, A2AMM_E4M3, MX_SCALE_RCEIL, codes, &scale);
        CHECK(scale == 0x80 && codes[31] == 0x30, "480/1 RCEIL fill: scale %02X fill code %02X", scale, codes[31]);
        mx_quantize_block(x, MX_BLOCK, A2AMM_E4M3, MX_SCALE_FLOOR, codes, &scale);
        CHECK(scale == 0x7F && codes[31] == 0x38, "480/1 FLOOR fill: scale %02X fill code %02X", scale, codes[31]);
    }
}

/* The MXFP8 dot example of the test vectors. */
static void test_dot_example(void)
{
    float a[MX_BLOCK] = {16, 1};
    uint8_t codes[MX_BLOCK], scale = 0;
    mx_quantize_block(a, MX_BLOCK, A2AMM_E4M3, MX_SCALE_FLOOR, codes, &scale);
    CHECK(scale == 0x7B, "dot example scale %02X want 7B", scale);
    CHECK(codes[0] == 0x78 && codes[1] == 0x58, "dot example codes %02X %02X want 78 58", codes[0], codes[1]);
    for (int i = 2; i < MX_BLOCK; i++)
        CHECK(codes[i] == 0x00, "dot example code[%d] = %02X want 00", i, codes[i]);
    double dot = 0;
    for (int i = 0; i < MX_BLOCK; i++) {
        double v = mx_dequant(codes[i], scale, A2AMM_E4M3); /* A = B */
        dot += v * v;
    }
    CHECK(dot == 257.0, "dot example exact dot %a want 257", dot);
    CHECK(mx_f64_to_bf16(dot) == 0x4380, "dot example bf16 %04X want 4380", mx_f64_to_bf16(dot));
    CHECK(mx_bf16_to_f32(0x4380) == 256.0f, "bf16 4380 is 256");
}

/* Random blocks of many magnitudes and partial lengths vs the reference. */
static float random_value(int eb)
{
    uint64_t r = rng();
    if ((r & 7) == 0)
        return (r & 8) ? -0.0f : 0.0f;
    float m = 1.0f + (float)((r >> 20) & 0x7FFFFF) * 0x1p-23f;
    float v = ldexpf(m, eb - (int)((r >> 4) % 24));
    return (r & 16) ? -v : v;
}

static void test_random_blocks(void)
{
    for (int it = 0; it < 4000; it++) {
        float x[MX_BLOCK];
        int eb = rng_int(-150, 127);
        size_t n = (it % 4 == 0) ? (size_t)rng_int(1, MX_BLOCK) : MX_BLOCK;
        for (size_t i = 0; i < n; i++)
            x[i] = random_value(eb);
        if (it % 97 == 0)
            x[rng() % n] = NAN;
        if (it % 89 == 0)
            x[rng() % n] = (it & 1) ? INFINITY : -INFINITY;
        for (int ti = 0; ti < 2; ti++)
            for (int mi = 0; mi < 2; mi++)
                check_block(x, n, TYPES[ti], MODES[mi], "random");
    }
    /* Amax at exact multiples of max (RCEIL's power-of-two d) and neighbours. */
    for (int ti = 0; ti < 2; ti++) {
        a2amm_fp8_type t = TYPES[ti];
        float maxv = t == A2AMM_E4M3 ? 448.0f : 57344.0f;
        for (int k = -140; k <= 110; k++) {
            float base = ldexpf(maxv, k);
            float cands[3] = {base, nextafterf(base, 0.0f), nextafterf(base, INFINITY)};
            for (int j = 0; j < 3; j++) {
                float x[MX_BLOCK];
                for (int i = 0; i < MX_BLOCK; i++)
                    x[i] = cands[j] * (float)(i + 1) / 32.0f;
                x[MX_BLOCK - 1] = (j == 1) ? -cands[j] : cands[j];
                for (int mi = 0; mi < 2; mi++)
                    check_block(x, MX_BLOCK, t, MODES[mi], "max*2^k");
            }
        }
        /* Amax just below and at each power of two (the log2 trap). */
        for (int e = -149; e <= 127; e++) {
            float p = ldexpf(1.0f, e);
            float cands[2] = {p, nextafterf(p, 0.0f)};
            for (int j = 0; j < 2; j++) {
                float x[MX_BLOCK] = {cands[j], cands[j] / 3.0f};
                for (int mi = 0; mi < 2; mi++)
                    check_block(x, 2, t, MODES[mi], "2^e");
            }
        }
    }
    /* Direct FLOOR values. */
    {
        float x[1] = {u2f(0x447FFFFF)};
        CHECK(mx_block_scale(x, 1, A2AMM_E4M3, MX_SCALE_FLOOR) == 0x80, "FLOOR 0x447FFFFF");
        x[0] = 1024.0f;
        CHECK(mx_block_scale(x, 1, A2AMM_E4M3, MX_SCALE_FLOOR) == 0x81, "FLOOR 1024");
        x[0] = 1.0f;
        CHECK(mx_block_scale(x, 1, A2AMM_E5M2, MX_SCALE_FLOOR) == 0x70, "E5M2 FLOOR 1 = 127-15");
        CHECK(mx_block_scale(x, 1, A2AMM_E4M3, MX_SCALE_RCEIL) == 0x77, "E4M3 RCEIL 1 = 127-8");
    }
}

/* The quantizer's fast encoder against the generic one: a spread of every float's bit patterns, and around
 * each fp8 value and midpoint (there, one float ulp either side), both signs, both types. */
static void test_f32_to_fp8_sat(void)
{
    long bad = 0;
    for (int ty = 0; ty < 2; ty++) {
        a2amm_fp8_type type = ty ? A2AMM_E5M2 : A2AMM_E4M3;
        for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 4099) {
            float x = u2f((uint32_t)u);
            uint8_t want = mx_f64_to_fp8((double)x, type, 1), got = mx_f32_to_fp8_sat(x, type);
            if (want != got && bad++ < 5)
                CHECK(0, "%s: %a (0x%08x): 0x%02x, expected 0x%02x", ty ? "e5m2" : "e4m3", (double)x, (unsigned)u, got,
                      want);
        }
        for (int c = 0; c < 0x7F; c++) {
            float v = mx_fp8_to_f32((uint8_t)c, type), next = mx_fp8_to_f32((uint8_t)(c + 1), type);
            if (isnan(v)) continue;
            float mid = isnan(next) || isinf(next) ? v * 1.0625f : (v + next) / 2; /* exact: few bits */
            float probes[] = {v, mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY), nextafterf(v, INFINITY)};
            for (size_t i = 0; i < sizeof probes / sizeof *probes; i++)
                for (int neg = 0; neg < 2; neg++) {
                    float x = neg ? -probes[i] : probes[i];
                    uint8_t want = mx_f64_to_fp8((double)x, type, 1), got = mx_f32_to_fp8_sat(x, type);
                    if (want != got && bad++ < 10)
                        CHECK(0, "%s near code 0x%02x: %a: 0x%02x, expected 0x%02x", ty ? "e5m2" : "e4m3", c,
                              (double)x, got, want);
                }
        }
    }
    CHECK(bad == 0, "mx_f32_to_fp8_sat differs from mx_f64_to_fp8 on %ld floats", bad);
}

static void test_quantize_row(void)
{
    static const size_t lens[] = {0, 1, 31, 32, 33, 64, 103, 200, 256};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t len = lens[li];
        size_t nb = (len + MX_BLOCK - 1) / MX_BLOCK;
        /* Exact-size heap buffers (+1 sentinel byte) so ASan sees overruns. */
        float *x = malloc((len ? len : 1) * sizeof *x);
        uint8_t *codes = malloc(len + 1);
        uint8_t *scales = malloc(nb + 1);
        if (!x || !codes || !scales) {
            CHECK(0, "malloc");
            free(x);
            free(codes);
            free(scales);
            return;
        }
        for (size_t b = 0; b < nb; b++) {
            int eb = rng_int(-140, 120);
            size_t end = (b + 1) * MX_BLOCK < len ? (b + 1) * MX_BLOCK : len;
            for (size_t i = b * MX_BLOCK; i < end; i++)
                x[i] = b % 5 == 3 ? 0.0f : random_value(eb);
            if (b % 5 == 2)
                x[b * MX_BLOCK] = NAN;
        }
        for (int ti = 0; ti < 2; ti++) {
            for (int mi = 0; mi < 2; mi++) {
                a2amm_fp8_type t = TYPES[ti];
                mx_scale_mode mode = MODES[mi];
                memset(codes, 0xA5, len + 1);
                memset(scales, 0xA5, nb + 1);
                mx_quantize_row(x, len, t, mode, codes, scales);
                CHECK(codes[len] == 0xA5, "row len %zu: codes written past len", len);
                CHECK(scales[nb] == 0xA5, "row len %zu: scales written past %zu", len, nb);
                for (size_t b = 0; b < nb; b++) {
                    size_t n = len - b * MX_BLOCK < MX_BLOCK ? len - b * MX_BLOCK : MX_BLOCK;
                    uint8_t bc[MX_BLOCK], bsc = 0;
                    mx_quantize_block(x + b * MX_BLOCK, n, t, mode, bc, &bsc);
                    uint8_t ws = ref_block_scale(x + b * MX_BLOCK, n, t, mode);
                    CHECK(scales[b] == bsc, "row len %zu %s %s block %zu: scale %02X vs block %02X", len,
                          tname(t), mname(mode), b, scales[b], bsc);
                    CHECK(scales[b] == ws, "row len %zu %s %s block %zu: scale %02X want %02X", len, tname(t),
                          mname(mode), b, scales[b], ws);
                    for (size_t i = 0; i < n; i++) {
                        uint8_t c = codes[b * MX_BLOCK + i];
                        CHECK(c == bc[i], "row len %zu %s %s block %zu elem %zu: %02X vs block %02X", len,
                              tname(t), mname(mode), b, i, c, bc[i]);
                        if (ws == 0xFF)
                            CHECK(fp8_is_nan(c, t), "row NaN block code %02X", c);
                        else
                            CHECK(c == ref_elem(x[b * MX_BLOCK + i], ws, t), "row len %zu block %zu elem %zu ref",
                                  len, b, i);
                    }
                }
            }
        }
        free(x);
        free(codes);
        free(scales);
    }
}

/* ---- Dequantization ---------------------------------------------------- */

static void test_dequant(void)
{
    static const uint8_t scales[] = {0x00, 0x01, 0x40, 0x70, 0x7E, 0x7F, 0x80, 0x81, 0xC0, 0xFD, 0xFE};
    for (int ti = 0; ti < 2; ti++) {
        a2amm_fp8_type t = TYPES[ti];
        for (int c = 0; c < 256; c++) {
            double v = fp8_value((uint8_t)c, t);
            for (size_t k = 0; k < sizeof scales; k++) {
                uint8_t s = scales[k];
                double want = v * ldexp(1.0, (int)s - 127);
                double got = mx_dequant((uint8_t)c, s, t);
                if (isnan(want))
                    CHECK(isnan(got), "dequant %s code %02X scale %02X: %a want NaN", tname(t), c, s, got);
                else
                    CHECK(got == want && !!signbit(got) == !!signbit(want),
                          "dequant %s code %02X scale %02X: %a want %a", tname(t), c, s, got, want);
            }
            double g = mx_dequant((uint8_t)c, 0xFF, t);
            CHECK(isnan(g), "dequant %s code %02X scale FF: %a want NaN", tname(t), c, g);
        }
    }
    CHECK(mx_dequant(0x01, 0x00, A2AMM_E4M3) == 0x1p-136, "smallest E4M3 dequant");
    CHECK(mx_dequant(0x01, 0x00, A2AMM_E5M2) == 0x1p-143, "smallest E5M2 dequant");
    CHECK(mx_dequant(0x7B, 0xFE, A2AMM_E5M2) == 57344.0 * 0x1p127, "largest E5M2 dequant");
    CHECK(mx_dequant(0x7E, 0xFE, A2AMM_E4M3) == 448.0 * 0x1p127, "largest E4M3 dequant");
}

/* ---- Scale mode names ---------------------------------------------------- */

static void test_scale_mode(void)
{
    for (int mi = 0; mi < 2; mi++) {
        mx_scale_mode m = MODES[mi];
        const char *name = mx_scale_mode_name(m);
        CHECK(name != NULL, "mx_scale_mode_name(%d) is NULL", (int)m);
        if (!name)
            continue;
        CHECK(strcmp(name, m == MX_SCALE_FLOOR ? "floor" : "rceil") == 0, "mx_scale_mode_name(%d) = %s", (int)m,
              name);
        mx_scale_mode out = m == MX_SCALE_FLOOR ? MX_SCALE_RCEIL : MX_SCALE_FLOOR;
        int rc = mx_scale_mode_parse(name, &out);
        CHECK(rc == 0 && out == m, "parse(%s) rc %d out %d", name, rc, (int)out);
    }
    static const char *bad[] = {"bogus", "", "flo", "floorx", "rceil ", "ceil", "round"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mx_scale_mode out = MX_SCALE_FLOOR;
        int rc = mx_scale_mode_parse(bad[i], &out);
        CHECK(rc < 0, "parse(\"%s\") should fail, rc %d", bad[i], rc);
    }
    mx_scale_mode out = MX_SCALE_RCEIL;
    CHECK(mx_scale_mode_parse("floor", &out) == 0 && out == MX_SCALE_FLOOR, "parse floor");
    CHECK(mx_scale_mode_parse("rceil", &out) == 0 && out == MX_SCALE_RCEIL, "parse rceil");
}

/* ---- the MoE activation's exp and SiLU (mx/expf.h) ---------------------------------------------- */

/* Distance in ulps between two non-negative finite floats (their bit patterns are in order). */
static int64_t ulps_apart(float a, float b) { return llabs((int64_t)f2u(a) - (int64_t)f2u(b)); }

static void test_expf(void)
{
    /* over the floats, every 61st bit pattern and its neighbours' sign: within 2 ulp of expf */
    int64_t worst = 0;
    float worst_x = 0;
    long bad = 0;
    for (uint64_t u = 0; u < (1ull << 32); u += 61) {
        float x = u2f((uint32_t)u), want = expf(x), got = mx_expf(x);
        if (x != x) {
            bad += got == got;
            continue;
        }
        if (isinf(want) || want == 0) {
            bad += got != want && ulps_apart(got, want) > 2; /* the thresholds: overflow to Inf, underflow to 0 */
            continue;
        }
        int64_t d = isinf(got) ? INT64_MAX : ulps_apart(got, want);
        if (d > worst) worst = d, worst_x = x;
    }
    CHECK(worst <= 2, "mx_expf is %lld ulp from expf at x = %a (%.9g vs %.9g)", (long long)worst, worst_x,
          mx_expf(worst_x), expf(worst_x));
    CHECK(bad == 0, "mx_expf: %ld NaN, Inf or zero results differ from expf's", bad);
    printf("mx_expf: at most %lld ulp from expf over 1/61 of the floats\n", (long long)worst);
    /* the edges, exactly */
    CHECK(mx_expf(0.0f) == 1.0f && mx_expf(-0.0f) == 1.0f, "e^0 = 1");
    CHECK(mx_expf(INFINITY) == INFINITY && mx_expf(-INFINITY) == 0.0f, "e^Inf = Inf, e^-Inf = 0");
    CHECK(isnan(mx_expf(NAN)), "e^NaN = NaN");
    CHECK(mx_expf(88.72283f) < INFINITY && mx_expf(88.7228394f) == INFINITY, "the overflow threshold is expf's: %a %a",
          mx_expf(88.72283f), mx_expf(88.7228394f));
    const float near_zero[] = {-103.28f, -103.2789f, -103.5f, -103.97f, -103.9720840f, -103.97209f, -104.0f};
    for (size_t i = 0; i < sizeof near_zero / sizeof *near_zero; i++)
        CHECK(ulps_apart(mx_expf(near_zero[i]), expf(near_zero[i])) <= 2, "near the underflow threshold, e^%.9g: %a "
              "vs expf's %a", near_zero[i], mx_expf(near_zero[i]), expf(near_zero[i]));
    CHECK(ulps_apart(mx_expf(-100.0f), expf(-100.0f)) <= 2, "a subnormal result: %a vs %a", mx_expf(-100.0f),
          expf(-100.0f));
    /* SiLU: g / (1 + e^-g) as written, against fp64 within 4 ulp of its value where it is normal */
    int64_t worst_silu = 0;
    for (uint64_t u = 0; u < (1ull << 32); u += 4093) {
        float g = u2f((uint32_t)u);
        double ref = (double)g / (1.0 + exp(-(double)g));
        float got = mx_silu(g);
        /* below -88.72, e^-g is Inf in fp32 and g / Inf is -0 (as written): checked below */
        if (g != g || isinf(g) || g < -88.7f || fabs(ref) < 1e-37 || fabs(ref) > 3e38) continue;
        int64_t d = ulps_apart(fabsf(got), fabsf((float)ref));
        if ((got < 0) != (ref < 0)) d = INT64_MAX;
        if (d > worst_silu) worst_silu = d;
    }
    CHECK(worst_silu <= 4, "mx_silu is %lld ulp from fp64", (long long)worst_silu);
    printf("mx_silu: at most %lld ulp from fp64 over 1/4093 of the floats above -88.7\n", (long long)worst_silu);
    CHECK(f2u(mx_silu(-89.0f)) == 0x80000000u, "silu(-89) as written: -89 / (1 + Inf) = -0, got %a", mx_silu(-89.0f));
    CHECK(mx_silu(0.0f) == 0.0f && mx_silu(INFINITY) == INFINITY && isnan(mx_silu(-INFINITY)) && isnan(mx_silu(NAN)),
          "silu at 0, +-Inf, NaN");
    CHECK(a2amm_expf(1.5f) == mx_expf(1.5f) && a2amm_silu(-2.0f) == mx_silu(-2.0f), "the public calls are these");
}

int main(void)
{
    test_fp8_decode();
    test_fp8_roundtrip();
    test_fp8_midpoints();
    test_fp8_saturation();
    test_fp8_random();
    test_e8m0();
    test_bf16_decode();
    test_f32_to_bf16();
    test_f64_to_bf16();
    test_vectors();
    test_dot_example();
    test_random_blocks();
    test_f32_to_fp8_sat();
    test_quantize_row();
    test_dequant();
    test_scale_mode();
    test_expf();
    return check_summary("test_mx");
}
