/*
 * The MoE op's down projection (src/op/moe_down*.c): the portable level
 * against the rule written out here on W2 as given (codes [H][I], scales
 * [H][I/32], before the packing), the portable twin of the avx512 level's
 * K-pairs against their order written out here, and the avx2 level (and
 * the sequential rule on AVX-512) against the portable one, the avx512
 * level against its twin, bit for bit (the amx level, whose block sums are
 * its tiles', against the exact value and row by row: check_problem_amx):
 * all fp8 codes of both types, every scale (NaN's 0xFF too), products that
 * underflow and sums that overflow, a at the edges of what dot products
 * take, rows of both kinds in one call, NaN and Inf in a, and shapes from
 * one 32-block to a DeepSeek-V2-Lite expert, with every row count up to
 * past two groups of rows; W2 of normal codes only, and of blocks of both
 * kinds (the avx2 level widens normal blocks by integers).
 *
 * test_moe_down [avx2|avx512|amx]: one level (the suite runs each as a test of
 * its own); a level this CPU lacks is reported skipped (exit 77).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/cpu.h"
#include "mx/mx.h"
#include "gemm/gemm.h"
#include "gemm/gemm_amx.h"
#include "gemm/gemm_bf16_order.h"
#include "op/moe_down.h"

/* One problem: a [n][I] bf16 values, W2 codes [H][I] and scales [H][I/32]. */
typedef struct problem {
    int64_t H, I, n;
    a2amm_fp8_type type;
    float *a;
    uint8_t *w2, *s2, *packed;
} problem;

/* A bf16 value with a random sign, exponent in [lo, hi] and mantissa; sometimes zero. */
static float random_bf16(int lo, int hi)
{
    uint64_t r = rng();
    if (r % 37 == 0) return 0.0f;
    float v = ldexpf(1.0f + (float)((r >> 8) & 0x7F) / 128.0f, lo + (int)((r >> 16) % (uint64_t)(hi - lo + 1)));
    return mx_bf16_to_f32(mx_f32_to_bf16((r >> 32) & 1 ? -v : v));
}

static int special_code(uint8_t code, a2amm_fp8_type type)
{
    return type == A2AMM_E4M3 ? (code & 0x7F) == 0x7F : (code & 0x7F) >= 0x7C;
}

/* Which codes W2 holds: every one; normal ones only (a nonzero exponent, finite: every block is one the
 * avx2 level widens by integers, moe_down_panel.h's block_normal); or those with a zero or subnormal code
 * in every fifth block of a column (blocks of both kinds side by side, and in one panel). */
enum { CODES_ALL, CODES_NORMAL, CODES_MIXED };

static int normal_code(uint8_t code, a2amm_fp8_type type)
{
    return (code & (type == A2AMM_E4M3 ? 0x78 : 0x7C)) != 0 && !special_code(code, type);
}

/* Every code of the kind appears (H * I >= 256); the specials (NaN, Inf) only where `specials`, and then in
 * about a third of the columns, once each (a special anywhere in a column makes all of it NaN or Inf). */
static void problem_make_kind(problem *p, int64_t H, int64_t I, int64_t n, a2amm_fp8_type type, int a_lo, int a_hi,
                              int s_lo, int s_hi, int specials, int kind)
{
    p->H = H, p->I = I, p->n = n, p->type = type;
    p->a = malloc(sizeof *p->a * (size_t)(n * I + 1));
    p->w2 = malloc((size_t)(H * I)), p->s2 = malloc((size_t)(H * I / 32));
    p->packed = malloc(moe_down_bytes(H, I));
    for (int64_t i = 0; i < n * I; i++) p->a[i] = random_bf16(a_lo, a_hi);
    uint8_t normal[256];
    int nnormal = 0;
    for (int code = 0; code < 256; code++)
        if (normal_code((uint8_t)code, type)) normal[nnormal++] = (uint8_t)code;
    uint64_t start = rng();
    for (int64_t i = 0; i < H * I; i++) {
        uint8_t code = (uint8_t)(start + (uint64_t)i * 73);
        if (kind != CODES_ALL) code = normal[(start + (uint64_t)i * 73) % (uint64_t)nnormal];
        p->w2[i] = special_code(code, type) ? code ^ 0x08 : code; /* a finite code instead */
    }
    for (int64_t c = 0; kind == CODES_MIXED && c < H; c++)
        for (int64_t b = (c / 16) % 5; b < I / 32; b += 5) /* zero, or subnormal of either sign */
            p->w2[c * I + b * 32 + (c * 7 + b) % 32] = (uint8_t)(rng() % 3 == 0 ? 0 : (rng() % 2) << 7 | 1);
    static const uint8_t special[2][4] = {{0x7F, 0xFF, 0x7F, 0xFF}, {0x7C, 0xFC, 0x7D, 0xFF}}; /* NaN; +-Inf, NaN */
    for (int64_t c = 0; specials && c < H; c++)
        if (rng() % 3 == 0) p->w2[c * I + (int64_t)(rng() % (uint64_t)I)] = special[type == A2AMM_E5M2][rng() % 4];
    for (int64_t i = 0; i < H * I / 32; i++) p->s2[i] = (uint8_t)(s_lo + (int)(rng() % (uint64_t)(s_hi - s_lo + 1)));
    moe_down_pack(H, I, type, p->w2, I, p->s2, I / 32, p->packed);
}

static void problem_make_codes(problem *p, int64_t H, int64_t I, int64_t n, a2amm_fp8_type type, int a_lo, int a_hi,
                               int s_lo, int s_hi, int specials)
{
    problem_make_kind(p, H, I, n, type, a_lo, a_hi, s_lo, s_hi, specials, CODES_ALL);
}

static void problem_make(problem *p, int64_t H, int64_t I, int64_t n, a2amm_fp8_type type, int a_lo, int a_hi,
                         int s_lo, int s_hi)
{
    problem_make_codes(p, H, I, n, type, a_lo, a_hi, s_lo, s_hi, 0);
}

static void problem_free(problem *p) { free(p->a), free(p->w2), free(p->s2), free(p->packed); }

/* The rule (moe_down.h) on the unpacked W2, one column at a time. */
static void rule(const problem *p, float *y)
{
    for (int64_t i = 0; i < p->n; i++)
        for (int64_t c = 0; c < p->H; c++) {
            float acc = 0.0f;
            for (int64_t b = 0; b < p->I / 32; b++) {
                float sum = 0.0f;
                for (int t = 0; t < 32; t++) {
                    float product = p->a[i * p->I + b * 32 + t] * mx_fp8_to_f32(p->w2[c * p->I + b * 32 + t], p->type);
                    sum = sum + product;
                }
                acc = (float)((double)acc + (double)sum * mx_e8m0_to_f64(p->s2[c * (p->I / 32) + b]));
            }
            y[i * p->H + c] = isnan(acc) ? NAN : acc;
        }
}

/* Whether the avx512 and amx levels send a row through bf16 dot products (VDPBF16PS, TDPBF16PS):
 * moe_down_panel.h's row_for_pairs, written again. */
static int pair_row(const float *a, int64_t I)
{
    for (int64_t i = 0; i < I; i++) {
        double m = fabs((double)a[i]);
        if (!(m == 0 || (m >= ldexp(1, -103) && m < ldexp(1, 100)))) return 0;
    }
    return 1;
}

/*
 * The avx512 level's order (moe_down_pairs.c), on the unpacked W2: a row the
 * pairs take sums each block's K-pairs (t, t + 1) as VDPBF16PS does, the
 * odd product and then the even one, each add rounded to fp32; any other
 * row, the rule above.
 */
static void rule_pairs(const problem *p, float *y)
{
    rule(p, y);
    for (int64_t i = 0; i < p->n; i++) {
        const float *a = p->a + i * p->I;
        if (!pair_row(a, p->I)) continue;
        for (int64_t c = 0; c < p->H; c++) {
            const uint8_t *w = p->w2 + c * p->I;
            float acc = 0.0f;
            for (int64_t b = 0; b < p->I / 32; b++) {
                float sum = 0.0f;
                for (int64_t t = b * 32; t < b * 32 + 32; t += 2) {
                    float odd = a[t + 1] * mx_fp8_to_f32(w[t + 1], p->type), even = a[t] * mx_fp8_to_f32(w[t], p->type);
                    sum = sum + odd;
                    sum = sum + even;
                }
                acc = (float)((double)acc + (double)sum * mx_e8m0_to_f64(p->s2[c * (p->I / 32) + b]));
            }
            y[i * p->H + c] = isnan(acc) ? NAN : acc;
        }
    }
}

static void run_level(moe_down_fn *fn, const problem *p, float *y)
{
    float **ys = malloc(sizeof *ys * (size_t)(p->n + 1));
    for (int64_t i = 0; i < p->n; i++) ys[i] = y + i * p->H;
    CHECK(fn(p->H, p->I, p->type, p->a, p->n, p->packed, ys) == 0, "the down projection ran out of memory");
    free(ys);
}

/* want vs got for the problem, bit for bit: the first difference named. */
static void compare(const char *what, const char *level, const problem *p, const float *want, const float *got)
{
    int64_t bad = -1;
    for (int64_t i = 0; bad < 0 && i < p->n * p->H; i++)
        if (f2u(want[i]) != f2u(got[i])) bad = i;
    CHECK(bad < 0, "%s, %s, %s, H %lld I %lld n %lld: row %lld column %lld: %a (0x%08x), expected %a (0x%08x)", what,
          level, p->type == A2AMM_E4M3 ? "e4m3" : "e5m2", (long long)p->H, (long long)p->I, (long long)p->n,
          (long long)(bad / p->H), (long long)(bad % p->H), (double)got[bad < 0 ? 0 : bad],
          f2u(got[bad < 0 ? 0 : bad]), (double)want[bad < 0 ? 0 : bad], f2u(want[bad < 0 ? 0 : bad]));
}

/*
 * The amx level, whose block sums are TDPBF16PS's (an order of its own): a
 * row it takes through the tiles within (I + 2) fp32 roundings of the sum of
 * |terms| of the exact value (the NaN and Inf of the portable level where
 * that one is not finite); a row it leaves to the sequential rule, the
 * portable bits; and every row the same bits whether the call has all rows,
 * one, or the rows split in two (a tile row's sums do not depend on the
 * other rows, nor on how many the tile has).
 */
static void check_problem_amx(const char *what, const problem *p)
{
    const int64_t H = p->H, I = p->I;
    size_t bytes = sizeof(float) * (size_t)(p->n * H + 1);
    float *portable = malloc(bytes), *got = malloc(bytes), *alone = malloc(bytes), *halves = malloc(bytes);
    memset(got, 0xA5, bytes), memset(alone, 0x5A, bytes), memset(halves, 0x3C, bytes);
    run_level(moe_down_portable, p, portable);
    run_level(moe_down_amx, p, got);
    for (int64_t i = 0; i < p->n; i++) {
        problem q = *p;
        q.a = p->a + i * I, q.n = 1;
        run_level(moe_down_amx, &q, alone + i * H);
    }
    for (int64_t h = 0; h < 2; h++) {
        problem q = *p;
        int64_t r0 = h ? p->n / 2 : 0, r1 = h ? p->n : p->n / 2;
        q.a = p->a + r0 * I, q.n = r1 - r0;
        run_level(moe_down_amx, &q, halves + r0 * H);
    }
    compare(what, "amx: rows one at a time against all at once", p, got, alone);
    compare(what, "amx: rows in two calls against all at once", p, got, halves);
    int64_t bad = 0, tiled = 0;
    for (int64_t i = 0; i < p->n; i++) {
        const int tiles = pair_row(p->a + i * I, I);
        tiled += tiles;
        for (int64_t c = 0; c < H; c++) {
            const float g = got[i * H + c], w = portable[i * H + c];
            double exact = 0, size = 0;
            for (int64_t k = 0; k < I; k++) {
                double term = (double)p->a[i * I + k] * mx_fp8_to_f32(p->w2[c * I + k], p->type) *
                              mx_e8m0_to_f64(p->s2[c * (I / 32) + k / 32]);
                exact += term, size += fabs(term);
            }
            int ok;
            if (!tiles) ok = f2u(g) == f2u(w);
            else if (!isfinite(w)) ok = isnan(w) ? isnan(g) != 0 : g == w;
            else ok = isfinite(g) && fabs((double)g - exact) <= (double)(I + 2) * ldexp(size, -24) + ldexp(1, -149);
            if (!ok && ++bad <= 3)
                CHECK(0, "%s, amx, %s, H %lld I %lld: row %lld (%s) column %lld: %a, portable %a, exact %a", what,
                      p->type == A2AMM_E4M3 ? "e4m3" : "e5m2", (long long)H, (long long)I, (long long)i,
                      tiles ? "tiles" : "sequential", (long long)c, (double)g, (double)w, exact);
        }
    }
    CHECK(bad == 0, "%s, amx: %lld values wrong (%lld of %lld rows through the tiles)", what, (long long)bad,
          (long long)tiled, (long long)p->n);
    free(portable), free(got), free(alone), free(halves);
}

/*
 * One problem through the portable twin of fn's order (against that order's rule written here, where
 * `rule_too`) and through fn, bit for bit: the sequential rule's twin for the avx2 level, the K-pairs' for
 * the avx512 level; the amx level as check_problem_amx says.
 */
static void check_problem(const char *what, const char *level, moe_down_fn *fn, int pairs, const problem *p,
                          int rule_too)
{
    moe_down_fn *twin = pairs ? moe_down_portable_pairs : moe_down_portable;
    size_t bytes = sizeof(float) * (size_t)(p->n * p->H + 1);
    float *want = malloc(bytes), *portable = malloc(bytes), *got = malloc(bytes);
    memset(got, 0xA5, bytes);
    run_level(twin, p, portable);
    if (rule_too) {
        (pairs ? rule_pairs : rule)(p, want);
        compare(what, pairs ? "portable pairs" : "portable", p, want, portable);
    }
    if (fn == moe_down_amx)
        check_problem_amx(what, p);
    else if (fn) {
        run_level(fn, p, got);
        compare(what, level, p, portable, got);
    }
    free(want), free(portable), free(got);
}

/* fn (NULL: the portable twin alone) in the sequential order, or in the K-pairs' where `pairs`. */
static void check_level(const char *level, moe_down_fn *fn, int pairs)
{
    static const struct {
        int64_t H, I;
    } shapes[] = {{32, 32}, {32, 64}, {64, 96}, {96, 1408}};
    for (int type = 0; type < 2; type++) {
        a2amm_fp8_type ty = type ? A2AMM_E5M2 : A2AMM_E4M3;
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int64_t n = 0; n <= 41; n += n < 17 ? (s < 2 ? 1 : 5) : 8) { /* then 17, 25, 33, 41: many rows */
                problem p;
                problem_make(&p, shapes[s].H, shapes[s].I, n, ty, -10, 10, 118, 136);
                check_problem("all codes", level, fn, pairs, &p, s < 3);
                problem_free(&p);
            }
        struct {
            const char *what;
            int a_lo, a_hi, s_lo, s_hi;
        } ranges[] = {
            {"any scale, NaN's too", -20, 20, 0, 255},
            {"products that underflow", -133, -110, 0, 20},   /* fp32 subnormal products: rounded twice */
            {"tiny a, large scales", -135, -100, 200, 254},   /* subnormal a and products, results normal */
            {"sums that overflow", 100, 127, 240, 254},       /* Inf, and Inf - Inf = NaN */
            {"cancelling large sums", 60, 70, 180, 200},
            {"a just above the pairs' floor", -103, -96, 0, 40},   /* the smallest values dot products take */
            {"a just below the pairs' ceiling", 92, 99, 200, 254}, /* the largest */
        };
        for (size_t r = 0; r < sizeof ranges / sizeof *ranges; r++)
            for (int64_t n = 11; n <= 21; n += 10) { /* a few rows, and many (a level's other loops) */
                problem p;
                problem_make(&p, 64, 256, n, ty, ranges[r].a_lo, ranges[r].a_hi, ranges[r].s_lo, ranges[r].s_hi);
                check_problem(ranges[r].what, level, fn, pairs, &p, 1);
                problem_free(&p);
            }
        problem p;
        for (int64_t n = 9; n <= 19; n += 10) {
            problem_make_codes(&p, 64, 128, n, ty, -6, 6, 118, 136, 1);
            check_problem("NaN and Inf codes", level, fn, pairs, &p, 1);
            problem_free(&p);
            /* NaN and Inf in a */
            problem_make(&p, 32, 64, n, ty, -5, 5, 120, 134);
            for (int64_t i = 0; i < p.n * p.I; i += 13)
                p.a[i] = (i / 13) % 3 == 0 ? NAN : (i / 13) % 3 == 1 ? INFINITY : -INFINITY;
            check_problem("NaN and Inf in a", level, fn, pairs, &p, 1);
            problem_free(&p);
        }
        for (int64_t n = 11; n <= 21; n += 10) {
            /* rows the dot products take between rows they do not: one value 2^100 or 2^-110 in every third
             * row (the sequential rule's rows, some through its scaled E4M3 copy, between the others') */
            problem_make(&p, 64, 128, n, ty, -6, 6, 118, 136);
            for (int64_t i = 1; i < p.n; i += 3) p.a[i * p.I + (i * 7) % p.I] = i % 2 ? 0x1p100f : -0x1p-110f;
            check_problem("rows of both kinds", level, fn, pairs, &p, 1);
            problem_free(&p);
        }
        for (int64_t n = 3; n <= 24; n += 21) {
            problem_make(&p, 2048, 1408, n, ty, -8, 8, 120, 134); /* a DeepSeek-V2-Lite expert's W2 */
            check_problem("a DeepSeek-V2-Lite expert", level, fn, pairs, &p, 0);
            problem_free(&p);
        }
        /* normal codes only, and blocks of both kinds: each row count of a group, the FMA and the
         * multiply-and-add copies (large a and scales), NaN codes, and a DeepSeek-V2-Lite expert */
        static const struct {
            const char *what;
            int a_lo, a_hi, s_lo, s_hi, specials;
        } kinds[] = {{"", -10, 10, 118, 136, 0}, {", sums that overflow", 100, 127, 240, 254, 0},
                     {", products that underflow", -133, -110, 0, 20, 0}, {", NaN and Inf codes", -6, 6, 118, 136, 1}};
        for (int kind = CODES_NORMAL; kind <= CODES_MIXED; kind++)
            for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
                for (int64_t n = 1; n <= 21; n += n < 6 ? 1 : 10) {
                    char what[96];
                    snprintf(what, sizeof what, "%s%s", kind == CODES_NORMAL ? "normal codes" : "normal and other blocks",
                             kinds[k].what);
                    problem_make_kind(&p, 64, 256, n, ty, kinds[k].a_lo, kinds[k].a_hi, kinds[k].s_lo, kinds[k].s_hi,
                                      kinds[k].specials, kind);
                    check_problem(what, level, fn, pairs, &p, 1);
                    problem_free(&p);
                }
        problem_make_kind(&p, 2048, 1408, 4, ty, -8, 8, 120, 134, 0, CODES_MIXED);
        check_problem("a DeepSeek-V2-Lite expert, blocks of both kinds", level, fn, pairs, &p, 0);
        problem_free(&p);
    }
}

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    if (argc > 2 || (only && strcmp(only, "avx2") && strcmp(only, "avx512") && strcmp(only, "amx"))) {
        fprintf(stderr, "usage: test_moe_down [avx2|avx512|amx]\n");
        return 2;
    }
    rng_state = 0x5DEECE66Dull;
    CHECK(moe_down_for(GEMM_ISA_REF) == moe_down_portable && moe_down_for(GEMM_ISA_AVX2) == moe_down_avx2 &&
              moe_down_for(GEMM_ISA_AVX512) == moe_down_avx512 && moe_down_for(GEMM_ISA_AMX) == moe_down_amx,
          "each kernel level's down projection");
    int skipped = 0;
    if (!only) check_level("portable only", NULL, 0), check_level("portable pairs only", NULL, 1);
    if (!only || !strcmp(only, "avx2")) {
        if (cpu_has(CPU_AVX2) && cpu_has(CPU_FMA))
            check_level("avx2", moe_down_avx2, 0);
        else
            printf("SKIP: the avx2 down projection: this CPU has no AVX2 and FMA (or A2AMM_CPU_HIDE hides them)\n"),
                skipped++;
    }
    if (!only || !strcmp(only, "avx512")) {
        if (gemm_isa_supported(GEMM_ISA_AVX512)) {
            /* the K-pairs' bits where this CPU's VDPBF16PS keeps their order, else the documented fallback */
            const int pairs = gemm_bf16_dot_order_holds();
            if (!pairs)
                printf("NOTE: this CPU's VDPBF16PS sums in another order: the avx512 level is checked for its "
                       "fallback, the sequential rule's bits\n");
            check_level("avx512", moe_down_avx512, pairs);
            check_level("avx512 sequential", moe_down_sequential_avx512, 0);
        }
        else
            printf("SKIP: the avx512 down projection: this CPU lacks the avx512 level (AVX-512 F, BW, VBMI and BF16), "
                   "or A2AMM_CPU_HIDE hides it\n"),
                skipped++;
    }
    if (!only || !strcmp(only, "amx")) {
        if (gemm_amx_usable())
            check_level("amx", moe_down_amx, 0);
        else
            printf("SKIP: the amx down projection: this CPU has no AMX-BF16, its kernel does not grant the tiles, or "
                   "A2AMM_CPU_HIDE hides it\n"),
                skipped++;
    }
    int rc = check_summary("test_moe_down");
    return rc == 0 && skipped ? 77 : rc;
}
