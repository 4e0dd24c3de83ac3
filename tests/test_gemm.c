/*
 * Tests of the gemm layer (src/gemm/gemm.h): every fast ISA level this CPU
 * can run against the reference kernel and against sums in double, within
 * the contract's tolerance |fast - ref| <= 2^-12 * sum|a*b| + one bf16 ulp;
 * over every fp8 code, all four type pairs, edge shapes, k ranges, extreme,
 * zero, 0xFE and NaN scales, Inf/NaN codes; bit-identical results whatever
 * the split of rows or columns between calls; and gemm_store_bf16.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/cpu.h"
#include "gemm/gemm.h"
#include "gemm/gemm_bf16_order.h"
#include "gemm/gemm_exact.h"
#include "gemm/gemm_fold.h"
#include "mx/mx.h"

/* ---- Helpers ---------------------------------------------------------- */

static int64_t rng_in(int64_t lo, int64_t hi) { return lo + (int64_t)(rng() % (uint64_t)(hi - lo + 1)); }


static const a2amm_fp8_type TYPES[2] = {A2AMM_E4M3, A2AMM_E5M2};
static const char *tname(a2amm_fp8_type t) { return t == A2AMM_E4M3 ? "e4m3" : "e5m2"; }

static int code_special(uint8_t code, a2amm_fp8_type t) { return !isfinite(mx_fp8_to_f32(code, t)); }
/* A finite code: special ones moved off the top exponent. */
static uint8_t finite_code(uint8_t code, a2amm_fp8_type t)
{
    return code_special(code, t) ? (uint8_t)(code ^ 0x08) : code;
}

/* One problem: A [rows, K] and B^T [N, K] with scales, strides padded. */
typedef struct problem {
    a2amm_fp8_type ta, tb;
    int64_t rows, N, K, lda, ldsa, ldsb;
    uint8_t *a, *sa, *b, *sb;
} problem;

/* Allocates with random codes (finite), scales in [slo, shi], 0xFF in scale padding. */
static void problem_init(problem *p, a2amm_fp8_type ta, a2amm_fp8_type tb, int64_t rows, int64_t N,
                         int64_t K, int slo, int shi)
{
    p->ta = ta;
    p->tb = tb;
    p->rows = rows;
    p->N = N;
    p->K = K;
    p->lda = K + rng_in(0, 3);
    p->ldsa = K / 32 + rng_in(0, 2);
    p->ldsb = K / 32 + rng_in(0, 2);
    p->a = malloc((size_t)(rows * p->lda));
    p->sa = malloc((size_t)(rows * p->ldsa));
    p->b = malloc((size_t)(N * K));
    p->sb = malloc((size_t)(N * p->ldsb));
    for (int64_t i = 0; i < rows * p->lda; i++) p->a[i] = finite_code((uint8_t)rng(), ta);
    for (int64_t i = 0; i < N * K; i++) p->b[i] = finite_code((uint8_t)rng(), tb);
    memset(p->sa, 0xFF, (size_t)(rows * p->ldsa));
    memset(p->sb, 0xFF, (size_t)(N * p->ldsb));
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < K / 32; j++) p->sa[i * p->ldsa + j] = (uint8_t)rng_in(slo, shi);
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < K / 32; j++) p->sb[n * p->ldsb + j] = (uint8_t)rng_in(slo, shi);
}

static void problem_free(problem *p)
{
    free(p->a);
    free(p->sa);
    free(p->b);
    free(p->sb);
}

static uint8_t *sa_at(problem *p, int64_t i, int64_t j) { return &p->sa[i * p->ldsa + j]; }
static uint8_t *sb_at(problem *p, int64_t n, int64_t j) { return &p->sb[n * p->ldsb + j]; }

static gemm_b *prepare(gemm_isa isa, const problem *p)
{
    gemm_b *gb = NULL;
    a2amm_error err;
    int rc = gemm_b_prepare(isa, p->b, p->sb, p->N, p->K, p->ldsb, p->tb, &gb, &err);
    CHECK(rc == 0, "prepare %s: %s", gemm_isa_name(isa), err.msg);
    return gb;
}

/* C (rows x ldc, initialized from c0) += A[i0.., k0..k1) B over [n0, n1). */
static void accumulate(const gemm_b *gb, const problem *p, int64_t i0, int64_t nrows, int64_t k0, int64_t k1,
                       int64_t n0, int64_t n1, float *c, int64_t ldc)
{
    gemm_a_slab slab = {p->a + i0 * p->lda + k0, p->sa + i0 * p->ldsa + k0 / 32, p->lda, p->ldsa, p->ta};
    gemm_accumulate(gb, &slab, nrows, k0, k1 - k0, n0, n1, c + i0 * ldc, ldc);
}

static float *initial_c(int64_t rows, int64_t ldc, int random)
{
    float *c = malloc((size_t)(rows * ldc) * sizeof *c);
    for (int64_t i = 0; i < rows * ldc; i++) c[i] = random ? (float)((double)rng_in(-1000, 1000) / 64.0) : 0.0f;
    return c;
}

static float *copy_c(const float *c, int64_t count)
{
    float *d = malloc((size_t)count * sizeof *d);
    memcpy(d, c, (size_t)count * sizeof *d);
    return d;
}

/*
 * The calls that end in bf16: gemm_multiply_store over [0, k1) (then, if
 * k1 < K, gemm_multiply and gemm_accumulate_store over [k1, K)) on a C full
 * of garbage: out holds exactly gemm_store_bf16 of `want` (C after the
 * plain calls) inside [n0, n1), and nothing outside is written.
 */
static void check_store(const gemm_b *gb, const problem *p, int64_t ldc, int64_t k1, int64_t n0, int64_t n1,
                        const float *want)
{
    const uint16_t POISON = 0x7FA5;
    int64_t count = p->rows * ldc;
    float *c = malloc((size_t)count * sizeof *c);
    uint16_t *expect = malloc((size_t)count * sizeof *expect), *out = malloc((size_t)count * sizeof *out);
    for (int64_t i = 0; i < count; i++) c[i] = u2f(0x7FC0DEADu), out[i] = POISON;
    gemm_store_bf16(want, ldc, p->rows, n0, n1, expect, ldc);
    gemm_a_slab slab = {p->a, p->sa, p->lda, p->ldsa, p->ta};
    if (k1 < p->K) {
        gemm_multiply(gb, &slab, p->rows, 0, k1, n0, n1, c, ldc);
        gemm_a_slab rest = {p->a + k1, p->sa + k1 / 32, p->lda, p->ldsa, p->ta};
        gemm_accumulate_store(gb, &rest, p->rows, k1, p->K - k1, n0, n1, c, ldc, out, ldc);
    } else {
        gemm_multiply_store(gb, &slab, p->rows, 0, k1, n0, n1, c, ldc, out, ldc);
    }
    long bad = 0;
    for (int64_t i = 0; i < p->rows; i++)
        for (int64_t n = 0; n < ldc; n++)
            bad += out[i * ldc + n] != (n >= n0 && n < n1 ? expect[i * ldc + n] : POISON);
    CHECK(bad == 0, "%s %s [%lld, %lld) rows %lld N %lld K %lld split %lld: %ld bf16 outputs differ from the "
                    "plain calls + gemm_store_bf16",
          gemm_isa_name(gemm_b_isa(gb)), k1 < p->K ? "accumulate_store" : "multiply_store", (long long)n0,
          (long long)n1, (long long)p->rows, (long long)p->N, (long long)p->K, (long long)k1, bad);
    free(c);
    free(expect);
    free(out);
}

/*
 * gemm_multiply over [n0, n1) on a C full of garbage (NaNs, -0.0f, large
 * values), then gemm_accumulate of the rest of K: the bits of C = 0 and the
 * same accumulates, inside [n0, n1); C untouched outside.
 */
static void check_multiply_cols(const gemm_b *gb, const problem *p, int64_t ldc, int64_t ksplit, int64_t n0,
                                int64_t n1)
{
    static const uint32_t GARBAGE[4] = {0x7FC01234u, 0x80000000u, 0x7F7FFFFFu, 0xFF800000u};
    int64_t count = p->rows * ldc, k1 = ksplit > 0 && ksplit < p->K ? ksplit : p->K;
    float *want = initial_c(p->rows, ldc, 0), *got = malloc((size_t)count * sizeof *got);
    for (int64_t i = 0; i < count; i++) got[i] = u2f(GARBAGE[i % 4]);
    accumulate(gb, p, 0, p->rows, 0, k1, n0, n1, want, ldc);
    gemm_a_slab slab = {p->a, p->sa, p->lda, p->ldsa, p->ta};
    gemm_multiply(gb, &slab, p->rows, 0, k1, n0, n1, got, ldc);
    if (k1 < p->K) {
        accumulate(gb, p, 0, p->rows, k1, p->K, n0, n1, want, ldc);
        accumulate(gb, p, 0, p->rows, k1, p->K, n0, n1, got, ldc);
    }
    long bad = 0;
    for (int64_t i = 0; i < p->rows; i++)
        for (int64_t n = 0; n < ldc; n++) {
            uint32_t w = n >= n0 && n < n1 ? f2u(want[i * ldc + n]) : GARBAGE[(i * ldc + n) % 4];
            bad += f2u(got[i * ldc + n]) != w;
        }
    CHECK(bad == 0, "%s multiply [%lld, %lld) rows %lld N %lld K %lld split %lld: %ld elements differ from zero + accumulate",
          gemm_isa_name(gemm_b_isa(gb)), (long long)n0, (long long)n1, (long long)p->rows, (long long)p->N,
          (long long)p->K, (long long)ksplit, bad);
    check_store(gb, p, ldc, k1, n0, n1, want);
    free(want);
    free(got);
}

static void check_multiply(const gemm_b *gb, const problem *p, int64_t ldc, int64_t ksplit)
{
    check_multiply_cols(gb, p, ldc, ksplit, 0, p->N);
    if (p->N > 8) check_multiply_cols(gb, p, ldc, ksplit, 5, p->N - 3);
}

/* C after accumulating the whole problem in the k pieces [0, ksplit), [ksplit, K). */
static float *compute(gemm_isa isa, const problem *p, const float *c0, int64_t ldc, int64_t ksplit)
{
    float *c = copy_c(c0, p->rows * ldc);
    gemm_b *gb = prepare(isa, p);
    if (!gb) return c;
    if (ksplit > 0 && ksplit < p->K) {
        accumulate(gb, p, 0, p->rows, 0, ksplit, 0, p->N, c, ldc);
        accumulate(gb, p, 0, p->rows, ksplit, p->K, 0, p->N, c, ldc);
    } else {
        accumulate(gb, p, 0, p->rows, 0, p->K, 0, p->N, c, ldc);
    }
    check_multiply(gb, p, ldc, ksplit);
    gemm_b_free(gb);
    return c;
}

/* One bf16 ulp at |x| (subnormal spacing below 2^-126). */
static double bf16_ulp(double x)
{
    int e;
    if (x == 0 || !isfinite(x)) return ldexp(1.0, -133);
    frexp(fabs(x), &e);
    return ldexp(1.0, (e - 1 < -126 ? -126 : e - 1) - 7);
}

static int same_class(float x, float y)
{
    if (isnan(x) || isnan(y)) return isnan(x) && isnan(y);
    if (isinf(x) || isinf(y)) return x == y;
    return 1;
}

/*
 * Checks got against want (the reference kernel) and against the double sum,
 * at every (i, n) with n in [0, N): same NaN/Inf class, finite values within
 * 2^-12 * (sum|a*b| + |c0|) + one bf16 ulp. Returns the number of mismatches.
 */
static long compare(const char *what, const problem *p, const float *c0, const float *got, const float *want,
                    int64_t ldc)
{
    double *da = malloc((size_t)(p->rows * p->K) * sizeof *da);
    double *db = malloc((size_t)(p->N * p->K) * sizeof *db);
    for (int64_t i = 0; i < p->rows; i++)
        for (int64_t k = 0; k < p->K; k++)
            da[i * p->K + k] = mx_dequant(p->a[i * p->lda + k], p->sa[i * p->ldsa + k / 32], p->ta);
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t k = 0; k < p->K; k++)
            db[n * p->K + k] = mx_dequant(p->b[n * p->K + k], p->sb[n * p->ldsb + k / 32], p->tb);
    long bad = 0;
    for (int64_t i = 0; i < p->rows; i++)
        for (int64_t n = 0; n < p->N; n++) {
            const double *x = da + i * p->K, *y = db + n * p->K;
            double sum = c0[i * ldc + n], sum_abs = fabs(c0[i * ldc + n]);
            for (int64_t k = 0; k < p->K; k++) {
                sum += x[k] * y[k];
                sum_abs += fabs(x[k] * y[k]);
            }
            float g = got[i * ldc + n], w = want[i * ldc + n];
            int ok = same_class(g, w);
            if (ok && isfinite(w)) {
                double tol = ldexp(sum_abs, -12);
                ok = fabs((double)g - (double)w) <= tol + bf16_ulp(w) &&
                     (!isfinite(sum) || fabs((double)g - sum) <= tol + bf16_ulp(sum));
            }
            if (!ok && ++bad <= 5)
                CHECK(0, "%s: C[%lld][%lld] = %.9g (0x%08x), ref %.9g (0x%08x), double %.9g, sum|ab| %.3g", what,
                      (long long)i, (long long)n, (double)g, f2u(g), (double)w, f2u(w), sum, sum_abs);
        }
    CHECK(bad == 0, "%s: %ld of %lld values out of tolerance", what, bad, (long long)(p->rows * p->N));
    free(da);
    free(db);
    return bad;
}

/*
 * Runs isa and ref on p (C from c0, random or zero, K split at ksplit) and
 * compares. A random C hides what tiny products lose (the tolerance grows
 * with |c0|): the tests of low scales start from zero.
 */
static void check_against_ref_from(gemm_isa isa, const problem *p, int64_t ksplit, const char *what, int random_c)
{
    int64_t ldc = p->N + rng_in(0, 3);
    float *c0 = initial_c(p->rows, ldc, random_c);
    float *got = compute(isa, p, c0, ldc, ksplit);
    float *want = compute(GEMM_ISA_REF, p, c0, ldc, ksplit);
    char label[256];
    snprintf(label, sizeof label, "%s %s: %s x %s rows=%lld N=%lld K=%lld ksplit=%lld", gemm_isa_name(isa), what,
             tname(p->ta), tname(p->tb), (long long)p->rows, (long long)p->N, (long long)p->K, (long long)ksplit);
    compare(label, p, c0, got, want, ldc);
    /* Padding columns of C beyond N are never touched. */
    long touched = 0;
    for (int64_t i = 0; i < p->rows; i++)
        for (int64_t n = p->N; n < ldc; n++) touched += f2u(got[i * ldc + n]) != f2u(c0[i * ldc + n]);
    CHECK(touched == 0, "%s: %ld values outside [0, N) changed", label, touched);
    free(c0);
    free(got);
    free(want);
}

static void check_against_ref(gemm_isa isa, const problem *p, int64_t ksplit, const char *what)
{
    check_against_ref_from(isa, p, ksplit, what, 1);
}

/* ---- Values: every code, every type pair --------------------------------- */

/*
 * Every code of A's type against every code of B's type: row i, k = t holds
 * code t + 64 i; column n, k = t holds code (t + n) so that each pair of
 * codes meets at some (i, n, k). Scales in [lo, hi].
 */
static void test_all_codes(gemm_isa isa, int lo, int hi, const char *what)
{
    for (int x = 0; x < 2; x++)
        for (int y = 0; y < 2; y++) {
            problem p;
            problem_init(&p, TYPES[x], TYPES[y], 4, 256, 256, lo, hi);
            for (int64_t i = 0; i < p.rows; i++)
                for (int64_t t = 0; t < p.K; t++) p.a[i * p.lda + t] = finite_code((uint8_t)(t + 64 * i), p.ta);
            for (int64_t n = 0; n < p.N; n++)
                for (int64_t t = 0; t < p.K; t++) p.b[n * p.K + t] = finite_code((uint8_t)(t + n), p.tb);
            check_against_ref(isa, &p, 0, what);
            problem_free(&p);
        }
}

/* Random codes, all type pairs, scales in [lo, hi]: a mix of fast and exact blocks. */
static void test_random_scales(gemm_isa isa, int lo, int hi, const char *what)
{
    for (int x = 0; x < 2; x++)
        for (int y = 0; y < 2; y++) {
            problem p;
            problem_init(&p, TYPES[x], TYPES[y], 29, 150, 320, lo, hi);
            check_against_ref(isa, &p, 160, what);
            problem_free(&p);
        }
}

/* Scales from the edges of the fold rule's ranges, block by block. */
static void test_edge_scales(gemm_isa isa)
{
    static const uint8_t EDGE[] = {0, 1, 9, 10, 11, 16, 17, 18, 60, 100, 127, 140, 200, 238, 239, 240, 245, 246, 247, 253, 254};
    for (int x = 0; x < 2; x++)
        for (int y = 0; y < 2; y++) {
            problem p;
            problem_init(&p, TYPES[x], TYPES[y], 20, 140, 256, 127, 127);
            for (int64_t i = 0; i < p.rows; i++)
                for (int64_t j = 0; j < p.K / 32; j++) *sa_at(&p, i, j) = EDGE[rng() % sizeof EDGE];
            for (int64_t n = 0; n < p.N; n++)
                for (int64_t j = 0; j < p.K / 32; j++) *sb_at(&p, n, j) = EDGE[rng() % sizeof EDGE];
            check_against_ref(isa, &p, 0, "edge scales");
            problem_free(&p);
        }
}

/*
 * Low scales on both sides (sa + sb from 80 to 200): products from far below
 * fp32's normal range to well inside it, where vdpbf16ps would flush what the
 * exact arithmetic keeps.
 */
static void test_low_scales(gemm_isa isa)
{
    for (int x = 0; x < 2; x++)
        for (int y = 0; y < 2; y++) {
            problem p;
            problem_init(&p, TYPES[x], TYPES[y], 20, 130, 256, 40, 100);
            check_against_ref_from(isa, &p, 0, "low scales", 0);
            problem_free(&p);
            /* The same scale everywhere, so no block hides another's loss; then small codes only. */
            for (int small = 0; small < 2; small++)
                for (int s = 50; s <= 100; s += 5) {
                    problem_init(&p, TYPES[x], TYPES[y], 7, 70, 64, s, s);
                    for (int64_t i = 0; small && i < p.rows * p.lda; i++) p.a[i] &= 0x9F;
                    for (int64_t i = 0; small && i < p.N * p.K; i++) p.b[i] &= 0x9F;
                    check_against_ref_from(isa, &p, 0, small ? "uniform low scales, small codes" : "uniform low scales", 0);
                    problem_free(&p);
                }
        }
}

/* ---- Shapes and k ranges ------------------------------------------------- */

static void test_shapes(gemm_isa isa)
{
    static const int64_t SMALL[] = {1, 5, 63, 64, 65, 127};
    for (size_t r = 0; r < sizeof SMALL / sizeof *SMALL; r++)
        for (size_t n = 0; n < sizeof SMALL / sizeof *SMALL; n++) {
            problem p;
            problem_init(&p, TYPES[rng() % 2], TYPES[rng() % 2], SMALL[r], SMALL[n], 160, 115, 135);
            check_against_ref(isa, &p, 0, "shape");
            problem_free(&p);
        }
    /* K in 32-blocks: 1, 5, 63, 64, 65, 127, 700; then the big dimensions once each. */
    static const int64_t KS[] = {32, 160, 2016, 2048, 2080, 4064, 22400};
    for (size_t k = 0; k < sizeof KS / sizeof *KS; k++) {
        problem p;
        problem_init(&p, TYPES[k % 2], TYPES[(k / 2) % 2], 13, 130, KS[k], 115, 135);
        check_against_ref(isa, &p, KS[k] > 32 ? 32 * (KS[k] / 64) : 0, "K");
        problem_free(&p);
    }
    struct { int64_t rows, N, K; } big[] = {{700, 65, 544}, {7, 700, 2080}, {127, 127, 2048}, {65, 700, 160}};
    for (size_t s = 0; s < sizeof big / sizeof *big; s++) {
        problem p;
        problem_init(&p, TYPES[s % 2], TYPES[(s + 1) % 2], big[s].rows, big[s].N, big[s].K, 110, 140);
        check_against_ref(isa, &p, 0, "large");
        problem_free(&p);
    }
}

/*
 * Across the kernels' row blocks and K chunks, with exact blocks sprinkled
 * among the fast ones and the k range split off the chunk grid.
 */
static void test_large_mixed(gemm_isa isa)
{
    problem p;
    problem_init(&p, A2AMM_E5M2, A2AMM_E4M3, 400, 150, 2080, 105, 145);
    for (int k = 0; k < 60; k++) {
        *sa_at(&p, rng_in(0, p.rows - 1), rng_in(0, p.K / 32 - 1)) = (uint8_t)rng_in(0, 16);
        *sb_at(&p, rng_in(0, p.N - 1), rng_in(0, p.K / 32 - 1)) = (uint8_t)rng_in(240, 254);
    }
    check_against_ref(isa, &p, 1056, "large, mixed paths");
    problem_free(&p);
}

/* ---- Determinism: splits of rows and columns ----------------------------- */

/*
 * The same problem accumulated in one call and in pieces: random column
 * ranges, random row ranges, both together. Bit-identical C everywhere. The
 * scales mix fast and exact blocks so the routing is split too.
 */
static void test_splits(gemm_isa isa)
{
    /* Scales, and a shape: the last two cross the kernels' row blocks and K chunks. */
    static const struct { int slo, shi; int64_t rows, N, K; } CASES[] = {
        {115, 135, 61, 333, 608}, {0, 254, 61, 333, 608}, {100, 150, 400, 200, 2080}, {100, 150, 300, 130, 1568}};
    for (size_t s = 0; s < sizeof CASES / sizeof *CASES; s++) {
        problem p;
        problem_init(&p, TYPES[s % 2], TYPES[1 - s % 2], CASES[s].rows, CASES[s].N, CASES[s].K, CASES[s].slo,
                     CASES[s].shi);
        if (s == 2) /* exact blocks among the fast ones, on both sides */
            for (int k = 0; k < 40; k++) {
                *sa_at(&p, rng_in(0, p.rows - 1), rng_in(0, p.K / 32 - 1)) = (uint8_t)rng_in(0, 9);
                *sb_at(&p, rng_in(0, p.N - 1), rng_in(0, p.K / 32 - 1)) = (uint8_t)rng_in(247, 255);
            }
        /* Two A rows with exact blocks: the row blocks holding them go chunk by chunk through C, the
         * others (AMX) pack all of K and sum the chunks in L1; a row's bits must not depend on which. */
        for (int k = 0; s == 3 && k < 2; k++) *sa_at(&p, rng_in(0, p.rows - 1), rng_in(0, p.K / 32 - 1)) = 3;
        int64_t ldc = p.N + 5;
        float *c0 = initial_c(p.rows, ldc, 1);
        gemm_b *gb = prepare(isa, &p);
        if (!gb) return;
        float *whole = copy_c(c0, p.rows * ldc);
        accumulate(gb, &p, 0, p.rows, 0, p.K, 0, p.N, whole, ldc);
        for (int trial = 0; trial < 6; trial++) {
            float *pieces = copy_c(c0, p.rows * ldc);
            int split_rows = trial % 3 != 0, split_cols = trial % 3 != 1;
            for (int64_t i0 = 0; i0 < p.rows;) {
                int64_t ni = split_rows ? rng_in(1, p.rows > 200 ? 250 : 20) : p.rows;
                ni = ni < p.rows - i0 ? ni : p.rows - i0;
                for (int64_t n0 = 0; n0 < p.N;) {
                    int64_t nn = split_cols ? rng_in(1, 130) : p.N;
                    nn = nn < p.N - n0 ? nn : p.N - n0;
                    accumulate(gb, &p, i0, ni, 0, p.K, n0, n0 + nn, pieces, ldc);
                    n0 += nn;
                }
                i0 += ni;
            }
            long diff = 0;
            for (int64_t i = 0; i < p.rows * ldc; i++) diff += f2u(pieces[i]) != f2u(whole[i]);
            CHECK(diff == 0, "%s splits (case %zu, trial %d): %ld values differ from one call", gemm_isa_name(isa), s,
                  trial, diff);
            free(pieces);
        }
        /* The same call twice gives the same bits. */
        float *again = copy_c(c0, p.rows * ldc);
        accumulate(gb, &p, 0, p.rows, 0, p.K, 0, p.N, again, ldc);
        CHECK(memcmp(again, whole, (size_t)(p.rows * ldc) * sizeof *again) == 0, "%s: repeat differs",
              gemm_isa_name(isa));
        free(again);
        free(whole);
        free(c0);
        gemm_b_free(gb);
        problem_free(&p);
    }
}

/* ---- Threads ---------------------------------------------------------------- */

typedef struct thread_job {
    const gemm_b *gb;
    const problem *p;
    int64_t n0, n1;
    float *c;
    int64_t ldc;
} thread_job;

static void *thread_main(void *arg)
{
    const thread_job *j = arg;
    accumulate(j->gb, j->p, 0, j->p->rows, 0, j->p->K, j->n0, j->n1, j->c, j->ldc);
    return NULL;
}

/* Four threads on disjoint column ranges of one C, one prepared B: the bits of one call. */
static void test_threads(gemm_isa isa)
{
    problem p;
    problem_init(&p, A2AMM_E4M3, A2AMM_E5M2, 50, 301, 1088, 100, 150);
    int64_t ldc = p.N;
    float *c0 = initial_c(p.rows, ldc, 1);
    gemm_b *gb = prepare(isa, &p);
    if (!gb) return;
    float *whole = copy_c(c0, p.rows * ldc), *threaded = copy_c(c0, p.rows * ldc);
    accumulate(gb, &p, 0, p.rows, 0, p.K, 0, p.N, whole, ldc);
    static const int64_t CUTS[] = {0, 77, 128, 250, 301};
    pthread_t tid[4];
    thread_job jobs[4];
    for (int t = 0; t < 4; t++) {
        jobs[t] = (thread_job){gb, &p, CUTS[t], CUTS[t + 1], threaded, ldc};
        CHECK(pthread_create(&tid[t], NULL, thread_main, &jobs[t]) == 0, "pthread_create");
    }
    for (int t = 0; t < 4; t++) pthread_join(tid[t], NULL);
    CHECK(memcmp(whole, threaded, (size_t)(p.rows * ldc) * sizeof *whole) == 0,
          "%s: four threads on column ranges differ from one call", gemm_isa_name(isa));
    free(c0);
    free(whole);
    free(threaded);
    gemm_b_free(gb);
    problem_free(&p);
}

/* ---- Extreme scales and special values ----------------------------------- */

/*
 * A scales near 2^-120 with B scales near 2^+115: in bf16 no A value folds,
 * so every block takes the exact path and equals ref bit for bit; fp32
 * holds these values and folds them.
 */
static void test_extreme_scales(gemm_isa isa)
{
    for (int x = 0; x < 2; x++)
        for (int y = 0; y < 2; y++) {
            problem p;
            problem_init(&p, TYPES[x], TYPES[y], 11, 70, 96, 5, 9);
            for (int64_t n = 0; n < p.N; n++)
                for (int64_t j = 0; j < p.K / 32; j++) *sb_at(&p, n, j) = (uint8_t)rng_in(240, 244);
            int64_t ldc = p.N;
            float *c0 = initial_c(p.rows, ldc, 0);
            float *got = compute(isa, &p, c0, ldc, 0), *want = compute(GEMM_ISA_REF, &p, c0, ldc, 0);
            compare("extreme scales", &p, c0, got, want, ldc);
            if (isa == GEMM_ISA_AVX512 || isa == GEMM_ISA_AMX)
                CHECK(memcmp(got, want, (size_t)(p.rows * ldc) * sizeof *got) == 0,
                      "%s extreme scales: not the exact path's bits", gemm_isa_name(isa));
            free(c0);
            free(got);
            free(want);
            problem_free(&p);
        }
    /* Scales 0x00 and 0xFE, against each other and against ordinary ones. */
    problem p;
    problem_init(&p, A2AMM_E4M3, A2AMM_E5M2, 17, 90, 192, 127, 127);
    for (int64_t i = 0; i < p.rows; i++)
        for (int64_t j = 0; j < p.K / 32; j++) *sa_at(&p, i, j) = (uint8_t)(rng() % 3 == 0 ? 0x00 : rng() % 2 ? 0xFE : 120);
    for (int64_t n = 0; n < p.N; n++)
        for (int64_t j = 0; j < p.K / 32; j++) *sb_at(&p, n, j) = (uint8_t)(rng() % 3 == 0 ? 0xFE : rng() % 2 ? 0x00 : 130);
    check_against_ref(isa, &p, 0, "scales 0x00/0xFE");
    problem_free(&p);
    /* Products that overflow: large values, scales 0xFE on both sides. */
    problem_init(&p, A2AMM_E5M2, A2AMM_E5M2, 6, 66, 64, 0xFE, 0xFE);
    for (int64_t i = 0; i < p.rows * p.lda; i++) p.a[i] = 0x7B; /* 57344 */
    for (int64_t i = 0; i < p.N * p.K; i++) p.b[i] = (uint8_t)(rng() % 2 ? 0x7B : 0xFB);
    check_against_ref(isa, &p, 0, "overflow");
    problem_free(&p);
}

/* Every A scale sa and every B scale sb, so that no block hides another. */
static void set_scales(problem *p, int sa, int sb)
{
    for (int64_t i = 0; i < p->rows; i++)
        for (int64_t j = 0; j < p->K / 32; j++) *sa_at(p, i, j) = (uint8_t)sa;
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t j = 0; j < p->K / 32; j++) *sb_at(p, n, j) = (uint8_t)sb;
}

/*
 * One scale pair at a time, at the ends of the byte's range and of the fold
 * rules: each must be right on its own, whichever path takes it.
 */
static void test_scale_pairs(gemm_isa isa)
{
    static const int PAIRS[][2] = {{0, 200},  {200, 0},  {1, 170},  {0, 254},   {254, 0},  {9, 200},
                                   {10, 152}, {17, 160}, {246, 60}, {247, 60},  {239, 70}, {240, 70},
                                   {181, 181}, {172, 172}, {165, 165}, {254, 254}, {0, 0},   {127, 127}};
    for (size_t q = 0; q < sizeof PAIRS / sizeof *PAIRS; q++)
        for (int x = 0; x < 2; x++) {
            problem p;
            problem_init(&p, TYPES[x], TYPES[(x + q) % 2], 7, 70, 96, 127, 127);
            set_scales(&p, PAIRS[q][0], PAIRS[q][1]);
            check_against_ref(isa, &p, 0, "scale pair");
            problem_free(&p);
        }
}

/*
 * Large products that cancel inside each block: runs of 8 values +-448 (E4M3)
 * with sa + sb = 362, products near 2^125.6. The exact block sums are 0; a
 * longer fp32 chain of them overflows, which the fold rule's upper bound on
 * sa + sb must prevent.
 */
static void test_cancelling_large(gemm_isa isa)
{
    static const int SUMS[] = {344, 350, 362};
    for (size_t q = 0; q < sizeof SUMS / sizeof *SUMS; q++) {
        problem p;
        problem_init(&p, A2AMM_E4M3, A2AMM_E4M3, 6, 64, 64, 127, 127);
        set_scales(&p, SUMS[q] / 2, SUMS[q] - SUMS[q] / 2);
        for (int64_t i = 0; i < p.rows; i++)
            for (int64_t k = 0; k < p.K; k++) p.a[i * p.lda + k] = 0x7E; /* 448 */
        for (int64_t n = 0; n < p.N; n++)
            for (int64_t k = 0; k < p.K; k++) p.b[n * p.K + k] = (k / 8) % 2 ? 0xFE : 0x7E; /* -448 / +448 */
        check_against_ref(isa, &p, 0, "cancelling large products");
        problem_free(&p);
    }
}

/*
 * All-zero blocks (codes +0 and -0), as quantizers write them with scale 0,
 * on both sides, among ordinary ones; then with scales 0xFE and 0xFF (NaN
 * still poisons), and against B blocks that hold an Inf (0 * Inf = NaN).
 */
static void test_zero_blocks(gemm_isa isa)
{
    for (int x = 0; x < 2; x++)
        for (int variant = 0; variant < 3; variant++) {
            problem p;
            problem_init(&p, TYPES[x], TYPES[1 - x], 25, 140, 320, 110, 140);
            for (int k = 0; k < 40; k++) {
                int64_t i = rng_in(0, p.rows - 1), n = rng_in(0, p.N - 1), ja = rng_in(0, p.K / 32 - 1),
                        jb = rng_in(0, p.K / 32 - 1);
                for (int t = 0; t < 32; t++) {
                    p.a[i * p.lda + ja * 32 + t] = (uint8_t)(rng() % 2 ? 0x80 : 0x00);
                    p.b[n * p.K + jb * 32 + t] = (uint8_t)(rng() % 2 ? 0x80 : 0x00);
                }
                static const uint8_t ZERO_SCALES[3][2] = {{0, 0}, {0xFE, 0x00}, {0x00, 0xFE}};
                *sa_at(&p, i, ja) = ZERO_SCALES[variant][0];
                *sb_at(&p, n, jb) = ZERO_SCALES[variant][1];
            }
            if (variant == 2) { /* NaN-scaled zero blocks on both sides, and Infs against zero blocks */
                int64_t i = rng_in(0, p.rows - 1), n = rng_in(0, p.N - 1), j = rng_in(0, p.K / 32 - 1);
                memset(p.a + i * p.lda + j * 32, 0, 32);
                *sa_at(&p, i, j) = 0xFF;
                memset(p.b + n * p.K + j * 32, 0x80, 32);
                *sb_at(&p, n, j) = 0xFF;
                if (p.tb == A2AMM_E5M2)
                    for (int k = 0; k < 5; k++) p.b[rng_in(0, p.N - 1) * p.K + rng_in(0, p.K - 1)] = 0x7C;
            }
            check_against_ref(isa, &p, 0, variant == 0 ? "zero blocks" : "zero blocks, odd scales");
            problem_free(&p);
        }
}

/*
 * NaN scales: an A block with scale 0xFF makes its whole row NaN, a B block
 * with 0xFF its whole column; nothing else (no NaN/Inf codes here).
 */
static void test_nan_scales(gemm_isa isa)
{
    for (int x = 0; x < 2; x++) {
        problem p;
        problem_init(&p, TYPES[x], TYPES[1 - x], 23, 200, 256, 118, 134);
        int nan_row[23] = {0}, nan_col[200] = {0};
        for (int k = 0; k < 3; k++) {
            int64_t i = rng_in(0, p.rows - 1), n = rng_in(0, p.N - 1);
            *sa_at(&p, i, rng_in(0, p.K / 32 - 1)) = 0xFF;
            *sb_at(&p, n, rng_in(0, p.K / 32 - 1)) = 0xFF;
            nan_row[i] = nan_col[n] = 1;
        }
        int64_t ldc = p.N;
        float *c0 = initial_c(p.rows, ldc, 1);
        float *got = compute(isa, &p, c0, ldc, 0), *want = compute(GEMM_ISA_REF, &p, c0, ldc, 0);
        long wrong = 0;
        for (int64_t i = 0; i < p.rows; i++)
            for (int64_t n = 0; n < p.N; n++)
                wrong += !!isnan(got[i * ldc + n]) != (nan_row[i] || nan_col[n]);
        CHECK(wrong == 0, "%s NaN scales: %ld outputs NaN where they should not be or not where they should",
              gemm_isa_name(isa), wrong);
        compare("NaN scales", &p, c0, got, want, ldc);
        free(c0);
        free(got);
        free(want);
        problem_free(&p);
    }
}

/* Inf and NaN codes scattered in A and B (Inf only exists in E5M2). */
static void test_special_codes(gemm_isa isa)
{
    static const uint8_t E5M2_SPECIAL[] = {0x7C, 0xFC, 0x7D, 0xFE, 0x7F, 0xFF};
    static const uint8_t E4M3_SPECIAL[] = {0x7F, 0xFF};
    for (int x = 0; x < 2; x++)
        for (int y = 0; y < 2; y++) {
            problem p;
            problem_init(&p, TYPES[x], TYPES[y], 30, 150, 192, 118, 134);
            for (int k = 0; k < 6; k++) {
                uint8_t ca = p.ta == A2AMM_E5M2 ? E5M2_SPECIAL[rng() % 6] : E4M3_SPECIAL[rng() % 2];
                uint8_t cb = p.tb == A2AMM_E5M2 ? E5M2_SPECIAL[rng() % 6] : E4M3_SPECIAL[rng() % 2];
                p.a[rng_in(0, p.rows - 1) * p.lda + rng_in(0, p.K - 1)] = ca;
                p.b[rng_in(0, p.N - 1) * p.K + rng_in(0, p.K - 1)] = cb;
            }
            /* An Inf against zeros: NaN. */
            if (p.ta == A2AMM_E5M2) {
                p.a[0] = 0x7C;
                for (int64_t n = 0; n < p.N; n++) p.b[n * p.K] = 0x00;
            }
            check_against_ref(isa, &p, 0, "Inf/NaN codes");
            problem_free(&p);
        }
}

/* ---- gemm_store_bf16 ------------------------------------------------------ */

static void test_store_bf16(void)
{
    enum { ROWS = 3, COLS = 4096, LDC = COLS + 3, LDO = COLS + 5 };
    float *c = malloc((size_t)ROWS * LDC * sizeof *c);
    uint16_t *out = malloc((size_t)ROWS * LDO * sizeof *out);
    for (int64_t i = 0; i < ROWS * LDC; i++) {
        uint32_t u = (uint32_t)rng();
        switch (i % 4) {
        case 0: u &= 0x807FFFFFu; break;                      /* subnormals and zeros */
        case 1: u = (u & 0x8000FFFFu) | 0x00800000u * (i % 3); break; /* near the smallest normals */
        case 2: break;                                        /* anything, NaN and Inf included */
        default: u = (u & 0x800FFFFFu) | 0x7F000000u;         /* near overflow */
        }
        c[i] = u2f(u);
    }
    c[0] = u2f(0x00008000u); /* exactly half the smallest bf16 subnormal: ties to even, zero */
    c[1] = u2f(0x00018000u); /* 1.5 ulps: ties to even, 2 ulps */
    c[2] = u2f(0x7F7FFFFFu); /* FLT_MAX rounds to Inf */
    memset(out, 0xAB, (size_t)ROWS * LDO * sizeof *out);
    gemm_store_bf16(c, LDC, ROWS, 7, COLS - 9, out, LDO);
    long wrong = 0, touched = 0;
    for (int64_t i = 0; i < ROWS; i++)
        for (int64_t n = 0; n < LDO; n++) {
            uint16_t o = out[i * LDO + n];
            if (n >= 7 && n < COLS - 9)
                wrong += o != mx_f32_to_bf16(c[i * LDC + n]);
            else
                touched += o != 0xABAB;
        }
    CHECK(wrong == 0, "gemm_store_bf16: %ld values differ from mx_f32_to_bf16", wrong);
    CHECK(touched == 0, "gemm_store_bf16: %ld values outside [n0, n1) written", touched);
    gemm_store_bf16(c, LDC, 1, 0, 3, out, LDO);
    CHECK(out[0] == 0x0000 && out[1] == 0x0002 && out[2] == 0x7F80, "gemm_store_bf16 ties/overflow: %04x %04x %04x",
          out[0], out[1], out[2]);
    free(c);
    free(out);
}

/* gemm_split: every (row, column) in exactly one task, at most `threads`
 * tasks, rows cut at multiples of 6 and columns at whole 64-column panels. */
static void test_split(void)
{
    static const int64_t ROWS[] = {1, 5, 6, 191, 383, 384, 512, 700, 2048};
    static const int64_t COLS[] = {1, 63, 64, 65, 200, 1024, 3584};
    static const int64_t KLEN[] = {32, 4096};
    for (size_t ri = 0; ri < sizeof ROWS / sizeof *ROWS; ri++)
        for (size_t ci = 0; ci < sizeof COLS / sizeof *COLS; ci++)
            for (int threads = 1; threads <= 5; threads++) {
                int64_t rows = ROWS[ri], N = COLS[ci], klen = KLEN[(ri + ci + (size_t)threads) % 2];
                int count = gemm_split_count(rows, N, klen, threads);
                unsigned char *seen = calloc((size_t)(rows * N), 1);
                int cuts_ok = count >= 1 && count <= threads;
                for (int t = 0; t < count; t++) {
                    gemm_split p = gemm_split_task(rows, N, klen, threads, t);
                    cuts_ok &= p.r0 % 6 == 0 && (p.r1 == rows || p.r1 % 6 == 0) && p.n0 % 64 == 0 &&
                               (p.n1 == N || p.n1 % 64 == 0) && p.r0 < p.r1 && p.n0 < p.n1;
                    for (int64_t i = p.r0; i < p.r1; i++)
                        for (int64_t n = p.n0; n < p.n1; n++) seen[i * N + n]++;
                }
                long wrong = 0;
                for (int64_t x = 0; x < rows * N; x++) wrong += seen[x] != 1;
                /* a big problem uses every thread it can: one row block or panel each at least */
                int64_t units = rows >= threads * 192 ? (rows + 5) / 6 : (N + 63) / 64;
                int want = (double)rows * (double)N * (double)klen < 2e6 ? 1 : (int)(units < threads ? units : threads);
                CHECK(cuts_ok && wrong == 0 && count == want, "gemm_split rows %lld N %lld K %lld threads %d: %d tasks "
                      "(expected %d), cuts %s, %ld elements not covered exactly once", (long long)rows, (long long)N,
                      (long long)klen, threads, count, want, cuts_ok ? "ok" : "bad", wrong);
                free(seen);
            }
}

/*
 * B prepared over pools of 1-3 threads (tasks of a few panels each) gives
 * the same handle as prepared by the caller alone: the same bits out, on B
 * with NaN/Inf codes, NaN and extreme scales, zero blocks and a partial
 * last panel, so that every panel summary matters.
 */
static void test_prepare_on_pool(gemm_isa isa)
{
    for (int x = 0; x < 2; x++) {
        problem p;
        problem_init(&p, TYPES[x], TYPES[1 - x], 33, 64 * 5 + 7, 256, 60, 200);
        for (int k = 0; k < 30; k++) p.b[rng_in(0, p.N * p.K - 1)] = p.tb == A2AMM_E4M3 ? 0x7F : 0xFC;
        for (int k = 0; k < 30; k++) *sb_at(&p, rng_in(0, p.N - 1), rng_in(0, p.K / 32 - 1)) = (uint8_t)rng_in(0, 255);
        for (int k = 0; k < 10; k++) memset(p.b + rng_in(0, p.N - 1) * p.K + 32 * rng_in(0, p.K / 32 - 1), 0, 32);
        float *want = malloc((size_t)(p.rows * p.N) * sizeof *want), *got = malloc((size_t)(p.rows * p.N) * sizeof *got);
        gemm_a_slab slab = {p.a, p.sa, p.lda, p.ldsa, p.ta};
        gemm_b *alone = prepare(isa, &p);
        gemm_multiply(alone, &slab, p.rows, 0, p.K, 0, p.N, want, p.N);
        gemm_b_free(alone);
        for (int threads = 1; threads <= 3; threads++) {
            pool *workers = NULL;
            a2amm_error err;
            gemm_b *gb = NULL;
            CHECK(pool_create(threads, &workers, &err) == 0, "pool of %d: %s", threads, err.msg);
            int rc = gemm_b_prepare_on(workers, isa, p.b, p.sb, p.N, p.K, p.ldsb, p.tb, &gb, &err);
            CHECK(rc == 0, "prepare %s on %d threads: %s", gemm_isa_name(isa), threads, err.msg);
            if (gb) {
                memset(got, 0x55, (size_t)(p.rows * p.N) * sizeof *got);
                gemm_multiply(gb, &slab, p.rows, 0, p.K, 0, p.N, got, p.N);
                long differ = 0;
                for (int64_t i = 0; i < p.rows * p.N; i++) differ += f2u(got[i]) != f2u(want[i]);
                CHECK(differ == 0, "%s, B prepared on %d threads: %ld of %lld values differ from B prepared alone",
                      gemm_isa_name(isa), threads, differ, (long long)(p.rows * p.N));
            }
            gemm_b_free(gb);
            pool_destroy(workers);
        }
        free(want);
        free(got);
        problem_free(&p);
    }
}

/*
 * B prepared for calls of few rows (gemm_b_prepare_for): where the level
 * reads B in fp8 for so few rows, B is kept in fp8 only (no more memory
 * than its codes and scales, the last panel padded, and the fold rule's
 * summary), and every call, of few rows or many, gives the bits of B
 * prepared for any rows; elsewhere it is the same handle as ever.
 */
static void test_prepare_for_rows(gemm_isa isa)
{
    const int64_t small = gemm_b_small_rows(isa);
    for (int x = 0; x < 2; x++) {
        problem p;
        problem_init(&p, TYPES[x], TYPES[1 - x], 70, 64 * 3 + 9, 2080, 100, 150);
        for (int k = 0; k < 20; k++) p.b[rng_in(0, p.N * p.K - 1)] = p.tb == A2AMM_E4M3 ? 0x7F : 0xFC;
        for (int k = 0; k < 30; k++) {
            *sb_at(&p, rng_in(0, p.N - 1), rng_in(0, p.K / 32 - 1)) = (uint8_t)rng_in(0, 255);
            *sa_at(&p, rng_in(0, p.rows - 1), rng_in(0, p.K / 32 - 1)) = (uint8_t)rng_in(0, 12);
        }
        for (int k = 0; k < 10; k++) memset(p.b + rng_in(0, p.N - 1) * p.K + 32 * rng_in(0, p.K / 32 - 1), 0x80, 32);
        a2amm_error err;
        gemm_b *any = prepare(isa, &p), *few = NULL;
        int rc = gemm_b_prepare_for(NULL, isa, p.b, p.sb, p.N, p.K, p.ldsb, p.tb, small > 0 ? small : 1, &few, &err);
        CHECK(rc == 0 && few, "prepare %s for few rows: %s", gemm_isa_name(isa), err.msg);
        if (!any || !few) return;
        int64_t nkb = p.K / 32, npanels = (p.N + 63) / 64;
        if (small > 0)
            CHECK(gemm_b_bytes(few) <= npanels * 64 * p.K * 33 / 32 + nkb * npanels * (int64_t)sizeof(gemm_panel_info) +
                                           (nkb + 31) / 32 * npanels * (int64_t)sizeof(gemm_panel_group) &&
                      gemm_b_bytes(few) + 2 * p.N * p.K <= gemm_b_bytes(any),
                  "%s: B for few rows holds %lld bytes (B for any rows %lld; its codes and scales %lld)",
                  gemm_isa_name(isa), (long long)gemm_b_bytes(few), (long long)gemm_b_bytes(any),
                  (long long)(p.N * p.K * 33 / 32));
        else
            CHECK(gemm_b_bytes(few) == gemm_b_bytes(any), "%s: B for few rows differs in size", gemm_isa_name(isa));
        int64_t ldc = p.N + 3;
        float *c0 = initial_c(p.rows, ldc, 1);
        static const int64_t ROWS[] = {1, 5, 20, 70}; /* 20: avx2's widening path */
        for (int call = 0; call < 4; call++)
            for (size_t r = 0; r < sizeof ROWS / sizeof *ROWS; r++) {
                float *want = copy_c(c0, p.rows * ldc), *got = copy_c(c0, p.rows * ldc);
                uint16_t *want_out = calloc((size_t)(p.rows * p.N), 2), *got_out = calloc((size_t)(p.rows * p.N), 2);
                gemm_a_slab slab = {p.a + 32, p.sa + 1, p.lda, p.ldsa, p.ta};
                const gemm_b *bs[2] = {any, few};
                float *cs[2] = {want, got};
                uint16_t *outs[2] = {want_out, got_out};
                for (int h = 0; h < 2; h++) {
                    int64_t klen = p.K - 64, n0 = 3, n1 = p.N;
                    if (call == 0) gemm_accumulate(bs[h], &slab, ROWS[r], 32, klen, n0, n1, cs[h], ldc);
                    if (call == 1) gemm_multiply(bs[h], &slab, ROWS[r], 32, klen, n0, n1, cs[h], ldc);
                    if (call == 2) gemm_accumulate_store(bs[h], &slab, ROWS[r], 32, klen, n0, n1, cs[h], ldc, outs[h], p.N);
                    if (call == 3) gemm_multiply_store(bs[h], &slab, ROWS[r], 32, klen, n0, n1, cs[h], ldc, outs[h], p.N);
                }
                long differ = 0;
                if (call < 2)
                    for (int64_t i = 0; i < p.rows * ldc; i++) differ += f2u(got[i]) != f2u(want[i]);
                else
                    differ = memcmp(got_out, want_out, (size_t)(p.rows * p.N) * 2) != 0;
                CHECK(differ == 0, "%s: B for few rows, call %d on %lld rows: %ld values differ from B for any rows",
                      gemm_isa_name(isa), call, (long long)ROWS[r], differ);
                free(want);
                free(got);
                free(want_out);
                free(got_out);
            }
        free(c0);
        gemm_b_free(any);
        gemm_b_free(few);
        problem_free(&p);
    }
}

/*
 * Every B value through the small-M path (B kept in fp8, widened in
 * registers) and the widening path (widened once a panel), checked one value at a time: each row of A is one-hot (1.0
 * at one k, scale sa), so C[r][n] is one folded B value times 2^(sa - 127),
 * one product, exact; wherever the fold rule lets the fast kernel take the
 * pair (B's scale in range, sa + sb in the pair range) it must be that
 * product's bits. B is 1024 x 512, in two layouts:
 * - every scale: 16 x 16 panel blocks (64 columns by 32 of K, each of one
 *   scale, since the kernels take or refuse a panel's block whole), every
 *   scale byte but NaN's on one of them, each holding every finite code of
 *   its type 8 times (NaN and Inf codes moved to a neighbour); sa = 98, 127
 *   and 152 put every scale the fold rule takes in the pair range;
 * - a scale a column: 64 scales in each panel block (100 + n % 64), so that
 *   a column given its neighbour's scale is seen;
 * - the same with normal codes only (every one in turn): a block with a zero
 *   or subnormal code takes another way in some levels (avx2's widening by
 *   integers, its several-panel loop at one and two rows).
 * At one row, two, seven, 12, 16 and the most rows the level reads B in
 * fp8 for (gemm_b_small_rows: avx2's widening path from 13 rows).
 */
static void test_fp8_b_every_value(gemm_isa isa)
{
    const int64_t small = gemm_b_small_rows(isa), N = 1024, K = 512;
    if (small <= 0) return; /* the level has no small-M path */
    float *c = malloc(sizeof *c * (size_t)(small * N));
    for (int x = 0; x < 6; x++) {
        const a2amm_fp8_type tb = TYPES[x % 2], ta = A2AMM_E4M3;
        const int per_column = x >= 2, normal_only = x >= 4;
        uint8_t normal[256];
        int nnormal = 0;
        for (int code = 0; code < 256; code++)
            if ((code & (tb == A2AMM_E4M3 ? 0x78 : 0x7C)) && !code_special((uint8_t)code, tb))
                normal[nnormal++] = (uint8_t)code;
        problem p;
        problem_init(&p, ta, tb, small, N, K, 127, 127);
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < K; k++) {
                p.b[n * K + k] = normal_only ? normal[(n * 32 + k) % nnormal]
                                             : finite_code((uint8_t)(32 * (n % 64) + k % 32), tb);
                *sb_at(&p, n, k / 32) = (uint8_t)(per_column ? 100 + n % 64 : (16 * (n / 64) + k / 32) % 255);
            }
        gemm_b *few = NULL;
        a2amm_error err;
        CHECK(gemm_b_prepare_for(NULL, isa, p.b, p.sb, N, K, p.ldsb, tb, small, &few, &err) == 0, "prepare %s: %s",
              gemm_isa_name(isa), err.msg);
        const int lo = gemm_fold_scale_lo(GEMM_FOLD_BF16, tb), hi = gemm_fold_scale_hi(tb);
        const int pair_lo = gemm_fold_pair_lo(GEMM_FOLD_BF16, ta, tb), pair_hi = gemm_fold_pair_hi(ta, tb);
        static const int SA[] = {127, 98, 152};
        long wrong = 0, fast = 0;
        /* 7: two tiles sharing the rows (4 + 3); 12: the small-M path's most on avx2 and avx512; 16: B
         * widened once for three tiles (avx2's widening path) */
        const int rows_of[6] = {1, 2, 7, 12, 16, (int)small};
        for (int pass = 0; few && pass < 6; pass++) {
            const int rows = rows_of[pass];
            if (rows > small || (pass > 0 && rows <= rows_of[pass - 1])) continue; /* each count once */
            for (int q = 0; q < (per_column ? 1 : 3); q++)
                for (int64_t k0 = 0; k0 < K; k0 += rows) {
                    const int m = K - k0 < rows ? (int)(K - k0) : rows; /* row r one-hot at k0 + r */
                    memset(p.a, 0, (size_t)(p.rows * p.lda));
                    memset(p.sa, SA[q], (size_t)(p.rows * p.ldsa));
                    for (int r = 0; r < m; r++) p.a[r * p.lda + k0 + r] = 0x38; /* 1.0 in E4M3 */
                    gemm_a_slab slab = {p.a, p.sa, p.lda, p.ldsa, ta};
                    gemm_multiply(few, &slab, m, 0, K, 0, N, c, N);
                    for (int r = 0; r < m; r++)
                        for (int64_t n = 0; n < N; n++) {
                            const int64_t k = k0 + r;
                            const int sb = *sb_at(&p, n, k / 32);
                            if (sb < lo || sb > hi || SA[q] + sb < pair_lo || SA[q] + sb > pair_hi) continue;
                            /* the sum starts from +0, so a -0 product gives +0 */
                            const float want =
                                0.0f + (float)ldexp((double)mx_fp8_to_f32(p.b[n * K + k], tb), sb + SA[q] - 254);
                            wrong += f2u(c[r * N + n]) != f2u(want);
                            fast++;
                        }
                }
        }
        CHECK(wrong == 0 && fast >= (per_column ? N * K : 2048 * (hi - lo + 1)),
              "%s, B %s kept in fp8 (%s): %ld of %ld folded products wrong", gemm_isa_name(isa), tname(tb),
              normal_only ? "normal codes, a scale a column" : per_column ? "a scale a column" : "every scale", wrong,
              fast);
        gemm_b_free(few);
        problem_free(&p);
    }
    free(c);
}

/*
 * A level this CPU cannot run (or A2AMM_CPU_HIDE hides) is refused, naming
 * the level and why: by gemm_b_prepare and by gemm_isa_select when
 * A2AMM_ISA forces it; and the best level picked instead is one that runs.
 */
static void test_refusal(gemm_isa isa)
{
    problem p;
    problem_init(&p, A2AMM_E4M3, A2AMM_E4M3, 4, 16, 64, 120, 130);
    const char *why = gemm_isa_why_not(isa);
    CHECK(why != NULL, "%s: not supported, yet no reason given", gemm_isa_name(isa));
    char want[128];
    snprintf(want, sizeof want, "cannot run the %s kernels", gemm_isa_name(isa));
    a2amm_error err = {0, ""};
    gemm_b *gb = NULL;
    int rc = gemm_b_prepare(isa, p.b, p.sb, p.N, p.K, p.ldsb, p.tb, &gb, &err);
    CHECK(rc == A2AMM_E_INVAL && gb == NULL, "%s: gemm_b_prepare gave %d, expected a refusal", gemm_isa_name(isa), rc);
    CHECK(strstr(err.msg, want) && why && strstr(err.msg, why), "%s: refusal says '%s'", gemm_isa_name(isa), err.msg);
    gemm_b_free(gb);
    setenv("A2AMM_ISA", gemm_isa_name(isa), 1);
    gemm_isa got = GEMM_ISA_COUNT;
    rc = gemm_isa_select(&got, &err);
    CHECK(rc == A2AMM_E_INVAL && strstr(err.msg, want), "A2AMM_ISA=%s: select gave %d (%s)", gemm_isa_name(isa), rc,
          err.msg);
    unsetenv("A2AMM_ISA");
    rc = gemm_isa_select(&got, &err);
    CHECK(rc == 0 && got != isa && gemm_isa_supported(got), "the best level instead of %s: %s (rc %d)",
          gemm_isa_name(isa), gemm_isa_name(got), rc);
    /* the highest level that runs (a level refused for VDPBF16PS's order may sit below amx, which runs) */
    for (int higher = got + 1; higher < GEMM_ISA_COUNT; higher++)
        CHECK(!gemm_isa_supported((gemm_isa)higher), "%s runs, yet the best level picked was %s",
              gemm_isa_name((gemm_isa)higher), gemm_isa_name(got));
    problem_free(&p);
}

static void test_level(gemm_isa isa)
{
    test_all_codes(isa, 118, 136, "all codes");
    test_all_codes(isa, 0, 254, "all codes, any scale");
    test_random_scales(isa, 100, 150, "random scales");
    test_random_scales(isa, 0, 254, "random scales, any");
    test_edge_scales(isa);
    test_low_scales(isa);
    test_shapes(isa);
    test_large_mixed(isa);
    test_splits(isa);
    test_threads(isa);
    test_extreme_scales(isa);
    test_scale_pairs(isa);
    test_cancelling_large(isa);
    test_nan_scales(isa);
    test_zero_blocks(isa);
    test_special_codes(isa);
    test_prepare_on_pool(isa);
    test_prepare_for_rows(isa);
    test_fp8_b_every_value(isa);
}

/*
 * The avx512 level runs exactly where VDPBF16PS sums in the order its bits
 * assume (gemm_bf16_order.h), and the probe tells that order from the
 * others (else a CPU summing otherwise would pass it); where the CPU has
 * the level's features but another order, its refusal says so.
 */
static void test_dot_order(void)
{
    static const char *NAMES[GEMM_DOT_ORDERS] = {"odd first", "even first", "pair first", "one rounding"};
    int holding = 0;
    for (int o = 0; o < GEMM_DOT_ORDERS; o++) {
        const int holds = gemm_bf16_dot_sums_as((gemm_dot_order)o);
        printf("VDPBF16PS sums as '%s': %s\n", NAMES[o], holds ? "yes" : "no");
        holding += holds;
    }
    CHECK(holding <= 1, "the probe cannot tell VDPBF16PS's orders apart: %d of them hold", holding);
    const int holds = gemm_bf16_dot_order_holds();
    CHECK(holds == gemm_bf16_dot_sums_as(GEMM_DOT_ODD_FIRST), "the once-a-process probe says %d", holds);
    CHECK(gemm_isa_supported(GEMM_ISA_AVX512) == holds, "the avx512 level %s, yet its order %s",
          gemm_isa_supported(GEMM_ISA_AVX512) ? "runs" : "is refused", holds ? "holds" : "does not hold");
    if (!holds) {
        const char *why = gemm_isa_why_not(GEMM_ISA_AVX512);
        CHECK(why && strstr(why, "VDPBF16PS"), "the avx512 level refused for another order says '%s'",
              why ? why : "(nothing)");
    }
}

/*
 * test_gemm [common|avx2|avx512|amx]: one part (the suite runs each as a
 * test of its own), or all of them. A level this CPU cannot run is checked
 * to be refused, then reported as skipped: "SKIP: <why>" and exit 77.
 */
int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    int known = !only || !strcmp(only, "common");
    for (int isa = GEMM_ISA_AVX2; isa < GEMM_ISA_COUNT; isa++) known |= only && !strcmp(only, gemm_isa_name(isa));
    if (argc > 2 || !known) {
        fprintf(stderr, "usage: test_gemm [common|avx2|avx512|amx]\n");
        return 2;
    }
    rng_state = 0x2545F4914F6CDD1Dull; /* this test's own sequence */
    if (!only || !strcmp(only, "common")) {
        test_store_bf16();
        test_split();
    }
    int skipped = 0;
    for (int isa = GEMM_ISA_AVX2; isa < GEMM_ISA_COUNT; isa++) {
        if (only && strcmp(only, gemm_isa_name((gemm_isa)isa))) continue;
        /* the avx512 level's other condition, where the CPU has its features (A2AMM_CPU_HIDE aside) */
        if (isa == GEMM_ISA_AVX512 && cpu_has(CPU_AVX512F) && cpu_has(CPU_AVX512BW) && cpu_has(CPU_AVX512BF16) &&
            cpu_has(CPU_AVX512VBMI))
            test_dot_order();
        if (!gemm_isa_supported((gemm_isa)isa)) {
            test_refusal((gemm_isa)isa);
            printf("SKIP: the %s kernels against the reference: %s (its refusal checked)\n",
                   gemm_isa_name((gemm_isa)isa), gemm_isa_why_not((gemm_isa)isa));
            skipped++;
            continue;
        }
        test_level((gemm_isa)isa);
    }
    int rc = check_summary("test_gemm");
    return rc == 0 && skipped ? 77 : rc;
}
