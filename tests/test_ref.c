/*
 * The reference operator (ref_op_rank and ref_op_reverse_rank, the goldens)
 * against an independent scalar computation written here from the
 * contract's formula: long double accumulation of fp8_value *
 * 2^(scale-127) products, one bf16 rounding. Covers all four type pairs,
 * shapes that are multiples of nothing, NaN scales, Inf codes, extreme
 * scales and scale pad bytes; both ops. And the MoE op's bound (ref_moe):
 * its absolute part and its overflow rule against docs/op-contract.md's
 * formulas worked out by hand for a one-token, one-expert case.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gen/gen.h"
#include "io/io.h"
#include "mx/mx.h"
#include "ref/ref_moe.h"
#include "ref/ref_op.h"

typedef struct problem {
    op_shape s;
    op_sizes z;
    io_rank_inputs *in;
} problem;

static int problem_make_op(problem *p, op_kind kind, int64_t M, int64_t K, int64_t N, int64_t R,
                           a2amm_fp8_type at, a2amm_fp8_type bt, gen_dist dist, uint64_t seed)
{
    p->s = (op_shape){M, K, N, R, at, bt, kind};
    if (op_shape_check(&p->s, &p->z, NULL)) return -1;
    p->in = calloc((size_t)R, sizeof *p->in);
    gen_options o = {dist, seed, MX_SCALE_FLOOR};
    for (int r = 0; r < R; r++) {
        if (io_rank_inputs_alloc(&p->z, &p->in[r], NULL)) return -1;
        if (gen_rank_inputs(&p->s, &p->z, &o, r, &p->in[r], NULL)) return -1;
    }
    return 0;
}

static int problem_make(problem *p, int64_t M, int64_t K, int64_t N, int64_t R, a2amm_fp8_type at,
                        a2amm_fp8_type bt, gen_dist dist, uint64_t seed)
{
    return problem_make_op(p, OP_ALLTOALL_MATMUL, M, K, N, R, at, bt, dist, seed);
}

static void problem_free(problem *p)
{
    for (int r = 0; r < p->s.R; r++) io_rank_inputs_free(&p->in[r]);
    free(p->in);
}

/* The contract, literally: element (row, kk) of A_r uses scale byte
 * row*ska + kk/32; B[kk][c] = b[c*K + kk] with scale c*sk + kk/32. */
static long double value_table[2][256], scale_table[256];

static void tables_init(void)
{
    for (int c = 0; c < 256; c++) {
        value_table[0][c] = mx_fp8_to_f32((uint8_t)c, A2AMM_E4M3);
        value_table[1][c] = mx_fp8_to_f32((uint8_t)c, A2AMM_E5M2);
        scale_table[c] = c == 0xFF ? NAN : ldexpl(1.0L, c - 127);
    }
}

static long double element(uint8_t code, uint8_t scale, a2amm_fp8_type t)
{
    return value_table[t][code] * scale_table[scale];
}

/* Exact sum and the sum of |products| for out_j[i][c]. */
static void scalar_dot(const problem *p, int j, int64_t i, int64_t c, long double *sum, long double *mag)
{
    const op_shape *s = &p->s;
    const op_sizes *z = &p->z;
    long double acc = 0, abs_acc = 0;
    for (int64_t r = 0; r < s->R; r++)
        for (int64_t t = 0; t < z->ka; t++) {
            int64_t row = j * s->M + i, kk = r * z->ka + t;
            long double av = element(p->in[r].a[row * z->ka + t], p->in[r].sa[row * z->ska + t / 32], s->a_type);
            long double bv = element(p->in[j].b[c * s->K + kk], p->in[j].sb[c * z->sk + kk / 32], s->b_type);
            acc += av * bv;
            abs_acc += fabsl(av * bv);
        }
    *sum = acc;
    *mag = abs_acc;
}

/* Is `got` the bf16 rounding of `sum`? Allows a neighbour only where the sum
 * sits so close to a rounding midpoint that fp64 accumulation order decides. */
static int golden_ok(uint16_t got, long double sum, long double mag)
{
    uint16_t want = mx_f64_to_bf16((double)sum);
    float g = mx_bf16_to_f32(got), w = mx_bf16_to_f32(want);
    if (isnan(w)) return isnan(g);
    if (got == want || (g == 0 && w == 0)) return 1;
    long double mid = ((long double)g + (long double)w) / 2;
    return fabsl(sum - mid) <= mag * 0x1p-45L;
}

static void check_problem(const char *what, problem *p)
{
    const op_shape *s = &p->s;
    const uint8_t **a = malloc((size_t)s->R * sizeof *a), **sa = malloc((size_t)s->R * sizeof *sa);
    uint16_t *out = malloc(p->z.out_bytes);
    for (int r = 0; r < s->R; r++) a[r] = p->in[r].a, sa[r] = p->in[r].sa;
    for (int j = 0; j < s->R; j++) {
        a2amm_error err = {0, ""};
        int rc = ref_op_rank(s, j, a, sa, p->in[j].b, p->in[j].sb, out, &err);
        CHECK(rc == 0, "%s: ref_op_rank rank %d: %s", what, j, err.msg);
        long bad = 0;
        for (int64_t i = 0; i < s->M; i++)
            for (int64_t c = 0; c < s->N; c++) {
                long double sum, mag;
                scalar_dot(p, j, i, c, &sum, &mag);
                if (!golden_ok(out[i * s->N + c], sum, mag) && bad++ < 3)
                    CHECK(0, "%s: rank %d (%lld,%lld): golden 0x%04x, scalar %.10Lg", what, j,
                          (long long)i, (long long)c, out[i * s->N + c], sum);
            }
        CHECK(bad == 0, "%s: rank %d: %ld elements disagree with the scalar computation", what, j, bad);
    }
    free(a), free(sa), free(out);
}

static void test_type_pairs(void)
{
    for (int at = 0; at < 2; at++)
        for (int bt = 0; bt < 2; bt++) {
            problem p;
            char what[64];
            snprintf(what, sizeof what, "M700 N96 K256 R2 %s x %s", at ? "e5m2" : "e4m3", bt ? "e5m2" : "e4m3");
            CHECK(problem_make(&p, 700, 256, 96, 2, at, bt, GEN_DIST_NORMAL, 7 + at * 2 + bt) == 0, "%s", what);
            check_problem(what, &p);
            problem_free(&p);
        }
}

static void test_odd_shapes(void)
{
    static const int64_t shapes[][4] = {{1, 32, 1, 1}, {5, 96, 7, 3}, {33, 64, 65, 2}, {3, 128, 1, 4}, {2, 256, 3, 8}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        for (int d = 0; d < 3; d++) {
            gen_dist dist = d == 0 ? GEN_DIST_SEED : d == 1 ? GEN_DIST_UNIFORM : GEN_DIST_EXTREME;
            problem p;
            char what[96];
            snprintf(what, sizeof what, "M%lld K%lld N%lld R%lld dist %s", (long long)shapes[k][0],
                     (long long)shapes[k][1], (long long)shapes[k][2], (long long)shapes[k][3], gen_dist_name(dist));
            CHECK(problem_make(&p, shapes[k][0], shapes[k][1], shapes[k][2], shapes[k][3], A2AMM_E4M3,
                               A2AMM_E5M2, dist, 100 + k) == 0, "%s", what);
            check_problem(what, &p);
            problem_free(&p);
        }
    }
}

/* Extreme scales give results in bf16's normal range that a fold-into-bf16
 * fast path would lose; the golden keeps them. */
static void test_extreme_scales(void)
{
    problem p;
    CHECK(problem_make(&p, 16, 64, 8, 2, A2AMM_E4M3, A2AMM_E4M3, GEN_DIST_EXTREME, 5) == 0, "extreme");
    check_problem("extreme", &p);
    const uint8_t *a[2] = {p.in[0].a, p.in[1].a}, *sa[2] = {p.in[0].sa, p.in[1].sa};
    uint16_t out[16 * 8];
    ref_op_rank(&p.s, 0, a, sa, p.in[0].b, p.in[0].sb, out, NULL);
    int nonzero = 0;
    for (int i = 0; i < 16 * 8; i++) nonzero += mx_bf16_to_f32(out[i]) != 0;
    CHECK(nonzero > 100, "extreme scales: only %d of 128 outputs are non-zero", nonzero);
    problem_free(&p);
}

/* NaN scales poison their block, so the whole output row (for an A scale)
 * or column (for a B scale) is NaN. */
static void test_nan_scales(void)
{
    problem p;
    CHECK(problem_make(&p, 9, 64, 5, 2, A2AMM_E4M3, A2AMM_E4M3, GEN_DIST_NORMAL, 11) == 0, "nan");
    p.in[1].sa[(0 * 9 + 4) * p.z.ska + 0] = 0xFF; /* rank 1 block sent to rank 0, row 4 */
    p.in[0].sb[3 * p.z.sk + 0] = 0xFF;             /* rank 0's B column 3 */
    const uint8_t *a[2] = {p.in[0].a, p.in[1].a}, *sa[2] = {p.in[0].sa, p.in[1].sa};
    uint16_t out[9 * 5];
    CHECK(ref_op_rank(&p.s, 0, a, sa, p.in[0].b, p.in[0].sb, out, NULL) == 0, "nan scales");
    for (int i = 0; i < 9; i++)
        for (int c = 0; c < 5; c++) {
            int want_nan = i == 4 || c == 3;
            CHECK(isnan(mx_bf16_to_f32(out[i * 5 + c])) == want_nan, "NaN scale: (%d,%d) is %g", i, c,
                  (double)mx_bf16_to_f32(out[i * 5 + c]));
        }
    check_problem("nan scales", &p);
    problem_free(&p);
}

/* E5M2 infinities: Inf * finite = Inf, Inf * 0 = NaN, Inf - Inf = NaN. */
static void test_infinities(void)
{
    problem p;
    CHECK(problem_make(&p, 3, 32, 3, 1, A2AMM_E5M2, A2AMM_E5M2, GEN_DIST_SEED, 3) == 0, "inf");
    /* seed dist: all values positive and non-zero */
    p.in[0].a[0 * 32 + 5] = 0x7C;                 /* row 0: +Inf at k=5 */
    p.in[0].a[1 * 32 + 5] = 0x7C;                 /* row 1: +Inf at k=5 ... */
    p.in[0].a[1 * 32 + 6] = 0xFC;                 /* ... and -Inf at k=6 */
    p.in[0].b[2 * 32 + 5] = 0x00;                 /* column 2: zero at k=5 */
    const uint8_t *a[1] = {p.in[0].a}, *sa[1] = {p.in[0].sa};
    uint16_t out[9];
    CHECK(ref_op_rank(&p.s, 0, a, sa, p.in[0].b, p.in[0].sb, out, NULL) == 0, "inf");
    CHECK(out[0] == 0x7F80 && out[1] == 0x7F80, "Inf*finite: got 0x%04x 0x%04x", out[0], out[1]);
    CHECK(isnan(mx_bf16_to_f32(out[2])), "Inf*0 gives NaN: got 0x%04x", out[2]);
    CHECK(isnan(mx_bf16_to_f32(out[3])) && isnan(mx_bf16_to_f32(out[4])), "Inf-Inf gives NaN");
    CHECK(isfinite(mx_bf16_to_f32(out[6])), "row 2 stays finite");
    check_problem("infinities", &p);
    problem_free(&p);
}

/* Scale pad bytes carry no meaning: any value gives the same result. */
static void test_pad_bytes(void)
{
    problem p;
    CHECK(problem_make(&p, 6, 96, 4, 1, A2AMM_E4M3, A2AMM_E4M3, GEN_DIST_NORMAL, 13) == 0, "pad");
    CHECK(p.z.ska == 4 && p.z.sk == 4, "ka=96 has 3 blocks and 1 pad byte per row");
    const uint8_t *a[1] = {p.in[0].a}, *sa[1] = {p.in[0].sa};
    uint16_t before[24], after[24];
    ref_op_rank(&p.s, 0, a, sa, p.in[0].b, p.in[0].sb, before, NULL);
    for (int i = 0; i < 6; i++) p.in[0].sa[i * 4 + 3] = 0xFF;
    for (int c = 0; c < 4; c++) p.in[0].sb[c * 4 + 3] = 0x9C;
    ref_op_rank(&p.s, 0, a, sa, p.in[0].b, p.in[0].sb, after, NULL);
    CHECK(memcmp(before, after, sizeof before) == 0, "pad bytes changed the result");
    problem_free(&p);
}

/* The MXFP8 dot example from mx-test-vectors.md: 257 rounds to 256. */
static void test_dot_rounding(void)
{
    problem p;
    CHECK(problem_make(&p, 1, 32, 1, 1, A2AMM_E4M3, A2AMM_E4M3, GEN_DIST_NORMAL, 1) == 0, "dot");
    float v[32] = {16, 1};
    mx_quantize_row(v, 32, A2AMM_E4M3, MX_SCALE_FLOOR, p.in[0].a, p.in[0].sa);
    mx_quantize_row(v, 32, A2AMM_E4M3, MX_SCALE_FLOOR, p.in[0].b, p.in[0].sb);
    const uint8_t *a[1] = {p.in[0].a}, *sa[1] = {p.in[0].sa};
    uint16_t out;
    ref_op_rank(&p.s, 0, a, sa, p.in[0].b, p.in[0].sb, &out, NULL);
    CHECK(out == 0x4380, "dot of [16,1] with itself: want bf16 0x4380 (256), got 0x%04x", out);
    problem_free(&p);
}

/* matmul-alltoall: out_j[row][c] for row = i*M + r is X_i[r] . B_i[j*N/R + c], over all of K. */
static void scalar_dot_reverse(const problem *p, int j, int64_t row, int64_t c, long double *sum, long double *mag)
{
    const op_shape *s = &p->s;
    const op_sizes *z = &p->z;
    int64_t i = row / s->M, r = row % s->M, col = j * (s->N / s->R) + c;
    long double acc = 0, abs_acc = 0;
    for (int64_t kk = 0; kk < s->K; kk++) {
        long double xv = element(p->in[i].a[r * s->K + kk], p->in[i].sa[r * z->ska + kk / 32], s->a_type);
        long double bv = element(p->in[i].b[col * s->K + kk], p->in[i].sb[col * z->sk + kk / 32], s->b_type);
        acc += xv * bv;
        abs_acc += fabsl(xv * bv);
    }
    *sum = acc;
    *mag = abs_acc;
}

static void check_reverse(const char *what, problem *p)
{
    const op_shape *s = &p->s;
    const uint8_t **x = malloc((size_t)s->R * sizeof *x), **sx = malloc((size_t)s->R * sizeof *sx);
    const uint8_t **b = malloc((size_t)s->R * sizeof *b), **sb = malloc((size_t)s->R * sizeof *sb);
    uint16_t *out = malloc(p->z.out_bytes);
    for (int r = 0; r < s->R; r++) x[r] = p->in[r].a, sx[r] = p->in[r].sa, b[r] = p->in[r].b, sb[r] = p->in[r].sb;
    CHECK(p->z.out_rows == s->R * s->M && p->z.out_cols == s->N / s->R, "%s: out [R*M, N/R]", what);
    for (int j = 0; j < s->R; j++) {
        a2amm_error err = {0, ""};
        int rc = ref_op_reverse_rank(s, j, x, sx, b, sb, out, &err);
        CHECK(rc == 0, "%s: ref_op_reverse_rank rank %d: %s", what, j, err.msg);
        long bad = 0;
        for (int64_t row = 0; row < p->z.out_rows; row++)
            for (int64_t c = 0; c < p->z.out_cols; c++) {
                long double sum, mag;
                uint16_t got = out[row * p->z.out_cols + c];
                scalar_dot_reverse(p, j, row, c, &sum, &mag);
                if (!golden_ok(got, sum, mag) && bad++ < 3)
                    CHECK(0, "%s: rank %d (%lld,%lld): golden 0x%04x, scalar %.10Lg", what, j, (long long)row,
                          (long long)c, got, sum);
            }
        CHECK(bad == 0, "%s: rank %d: %ld elements disagree with the scalar computation", what, j, bad);
    }
    free(x), free(sx), free(b), free(sb), free(out);
}

/* The reverse op's golden: every type pair, odd shapes (N/R of 1, 3, 7), NaN and Inf, extreme scales. */
static void test_reverse(void)
{
    static const int64_t shapes[][4] = {{1, 32, 1, 1}, {5, 96, 21, 3}, {33, 64, 6, 2}, {3, 128, 4, 4}, {2, 256, 8, 8},
                                        {70, 256, 96, 2}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (int d = 0; d < 4; d++) {
            gen_dist dist = d == 0 ? GEN_DIST_NORMAL : d == 1 ? GEN_DIST_SEED : d == 2 ? GEN_DIST_EXTREME : GEN_DIST_SPECIAL;
            a2amm_fp8_type at = (k + (size_t)d) % 2 ? A2AMM_E5M2 : A2AMM_E4M3, bt = (k / 2 + (size_t)d) % 2 ? A2AMM_E5M2 : A2AMM_E4M3;
            problem p;
            char what[128];
            snprintf(what, sizeof what, "matmul-alltoall M%lld K%lld N%lld R%lld %s x %s dist %s",
                     (long long)shapes[k][0], (long long)shapes[k][1], (long long)shapes[k][2],
                     (long long)shapes[k][3], a2amm_fp8_type_name(at), a2amm_fp8_type_name(bt), gen_dist_name(dist));
            CHECK(problem_make_op(&p, OP_MATMUL_ALLTOALL, shapes[k][0], shapes[k][1], shapes[k][2], shapes[k][3], at,
                                  bt, dist, 200 + k) == 0, "%s", what);
            check_reverse(what, &p);
            problem_free(&p);
        }
    /* a NaN scale of X_1's row 2 poisons row M + 2 of every output; one of B_0's column 3, column 3 - nb of
     * rank 1's rows 0..M-1 */
    problem p;
    CHECK(problem_make_op(&p, OP_MATMUL_ALLTOALL, 4, 64, 8, 2, A2AMM_E4M3, A2AMM_E4M3, GEN_DIST_NORMAL, 17) == 0, "nan");
    p.in[1].sa[2 * p.z.ska] = 0xFF;
    p.in[0].b[5 * 64 + 7] = MX_FP8_NAN;
    const uint8_t *x[2] = {p.in[0].a, p.in[1].a}, *sx[2] = {p.in[0].sa, p.in[1].sa};
    const uint8_t *b[2] = {p.in[0].b, p.in[1].b}, *sb[2] = {p.in[0].sb, p.in[1].sb};
    uint16_t out[8 * 4];
    for (int j = 0; j < 2; j++) {
        CHECK(ref_op_reverse_rank(&p.s, j, x, sx, b, sb, out, NULL) == 0, "nan, rank %d", j);
        for (int row = 0; row < 8; row++)
            for (int c = 0; c < 4; c++) {
                int want_nan = row == 4 + 2 || (j == 1 && row < 4 && c == 1);
                CHECK(isnan(mx_bf16_to_f32(out[row * 4 + c])) == want_nan, "NaN in the reverse op: rank %d (%d,%d) is %g",
                      j, row, c, (double)mx_bf16_to_f32(out[row * 4 + c]));
            }
    }
    check_reverse("nan", &p);
    a2amm_error err = {0, ""};
    CHECK(ref_op_rank(&p.s, 0, x, sx, b[0], sb[0], out, &err) == A2AMM_E_INVAL && strstr(err.msg, "matmul-alltoall"),
          "the forward golden refuses a reverse shape: %s", err.msg);
    problem_free(&p);
}

static void test_bad_rank(void)
{
    op_shape s = {4, 64, 4, 2, A2AMM_E4M3, A2AMM_E4M3, OP_ALLTOALL_MATMUL};
    a2amm_error err = {0, ""};
    uint8_t buf[1024] = {0};
    const uint8_t *a[2] = {buf, buf};
    uint16_t out[16];
    CHECK(ref_op_rank(&s, 2, a, a, buf, buf, out, &err) == A2AMM_E_INVAL && strstr(err.msg, "rank 2"),
          "rank 2 of 2 is refused: %s", err.msg);
}

/*
 * The MoE reference on one token, one expert (R = E = K = 1, H = I = 32), every code 1.0 (E4M3 0x38) with
 * scale 2^0 but W1's codes g1 (0: W1 = 0, so g = 0 and a = 0) and W2's scale byte s2: x_h = 1, g_i = 32 g1,
 * u_i = 32, a_i = silu(g_i) * 32, y_c = 32 a_i 2^(s2 - 127). ref, bound and reach against the contract's
 * formulas written out here.
 */
static void moe_one(uint8_t g1, uint8_t s2, float w, double *ref, double *bound, double *reach)
{
    moe_io_shape s = {.T = 1, .H = 32, .I = 32, .R = 1, .E = 1, .K = 1, .tokens = {1},
                      .a_type = A2AMM_E4M3, .b_type = A2AMM_E4M3};
    moe_io_rank d;
    CHECK(moe_io_rank_alloc(&s, 0, &d, NULL) == 0, "moe_io_rank_alloc");
    const int64_t sr = moe_io_scale_row(32);
    memset(d.x, 0x38, 32), memset(d.sx, 127, (size_t)sr);
    d.idx[0] = 0, d.w[0] = w;
    memset(d.w13, g1, 32 * 32), memset(d.w13 + 32 * 32, 0x38, 32 * 32), memset(d.s13, 127, (size_t)(64 * sr));
    memset(d.w2, 0x38, 32 * 32), memset(d.s2, s2, (size_t)(32 * sr));
    double bd[32], rf[32], rc[32];
    double *refp = rf, *bp = bd, *rp = rc;
    a2amm_error err = {0, ""};
    CHECK(ref_moe(&s, &d, &refp, &bp, &rp, &err) == 0, "ref_moe: %s", err.msg);
    for (int c = 1; c < 32; c++)
        CHECK(rf[c] == rf[0] && bd[c] == bd[0] && rc[c] == rc[0], "every column alike (column %d)", c);
    *ref = rf[0], *bound = bd[0], *reach = rc[0];
    moe_io_rank_free(&d);
}

static void test_moe_bound(void)
{
    const double eta8 = ldexp(1, -133), eta24 = ldexp(1, -149), u8 = ldexp(1, -8), u24 = ldexp(1, -24);
    double ref, bound, reach;
    /* W1 = 0: a = 0, so ref = 0, P = Q = 0 and the bound is its absolute part alone, A = eta8 (out) + eta8 +
     * eta24 (the partial, w * y) + |w| (I eta24 + Z), Z = sum_i (eta8 + (H + 1) eta24 (1 + 1.1 |u_i| + 0)) |W2| */
    for (int s2 = 0; s2 <= 254; s2 += 127) {
        const double w2 = ldexp(1, s2 - 127), w = 0.5;
        const double z = 32 * (eta8 + 33 * eta24 * (1 + 1.1 * 32)) * w2;
        const double want = eta8 + eta8 + eta24 + w * (32 * eta24 + z);
        moe_one(0x00, (uint8_t)s2, (float)w, &ref, &bound, &reach);
        CHECK(ref == 0, "W1 = 0: ref %g", ref);
        CHECK(fabs(bound - want) <= 1e-12 * want, "W1 = 0, W2 = 2^%d: bound %.17g, the contract's A %.17g", s2 - 127,
              bound, want);
        CHECK(bound < 1e-30 || s2 > 127, "W1 = 0, W2 = 2^%d: the bound %g is far below 1e-30", s2 - 127, bound);
    }
    /* W1 = 1, W2 = 1, w = 1: g = u = 32, a = 32 silu(32), y = 32 a = P (every term positive), Sg = Su = 32,
     * Q = 32 (1.1 * 32 * 32 + silu(32) * 32); the bound is the contract's four terms, reach = P + bound */
    const double silu = 32 / (1 + exp(-32.0)), a = 32 * silu, y = 32 * a, P = y, Q = 32 * (1.1 * 32 * 32 + silu * 32);
    moe_one(0x38, 127, 1.0f, &ref, &bound, &reach);
    const double z = 32 * (eta8 + 33 * eta24 * (1 + 1.1 * 32 + silu));
    const double want = u8 * y + (2 * u8 + (32 + 1 + 1 + 8) * u24) * P + 32 * u24 * Q + 2 * eta8 + eta24 + 32 * eta24 + z;
    CHECK(fabs(ref - y) <= 1e-12 * y, "W1 = 1: ref %.17g, want %.17g", ref, y);
    CHECK(fabs(bound - want) <= 1e-12 * want, "W1 = 1: bound %.17g, the contract's %.17g", bound, want);
    CHECK(fabs(reach - (P + want)) <= 1e-12 * reach, "W1 = 1, w = 1: reach %.17g, want P + bound %.17g", reach, P + want);
    /* the overflow rule: a weight of 2^114 takes ref (2^114 y, y about 2^15) to about 2^129, past Omega */
    const float big = ldexpf(1, 114);
    moe_one(0x38, 127, big, &ref, &bound, &reach);
    CHECK(ref > REF_MOE_OMEGA && reach >= ref, "w = 2^114: ref %g beyond Omega, reach %g", ref, reach);
    CHECK(ref_moe_close(0x7F80, ref, bound, reach), "w = 2^114: +Inf is the answer");
    CHECK(!ref_moe_close(0xFF80, ref, bound, reach), "w = 2^114: -Inf is not");
    CHECK(!ref_moe_close(0x7F7F, ref, bound, reach), "w = 2^114: the largest finite bf16 is not (out of the bound)");
    CHECK(!ref_moe_close(0x7FC0, ref, bound, reach), "w = 2^114: NaN is not");
    moe_one(0x38, 127, -ldexpf(1, 100), &ref, &bound, &reach);
    CHECK(reach < REF_MOE_OMEGA, "w = -2^100: reach %g below Omega", reach);
    CHECK(!ref_moe_close(0xFF80, ref, bound, reach), "w = -2^100: nothing overflows, -Inf is out of the contract");
    /* the rule itself: an Inf of ref's sign where reach >= Omega; not the other sign, not at ref = 0 */
    CHECK(ref_moe_close(0xFF80, -1e38, 1e36, REF_MOE_OMEGA), "reach at Omega: -Inf for a negative ref");
    CHECK(!ref_moe_close(0xFF80, -1e38, 1e36, nextafter(REF_MOE_OMEGA, 0)), "reach below Omega: no Inf");
    CHECK(!ref_moe_close(0x7F80, -1e38, 1e36, 1e300), "an Inf of the other sign, whatever the reach");
    CHECK(!ref_moe_close(0x7F80, 0.0, 1e36, 1e300), "an Inf where ref is 0 (terms of both signs)");
    CHECK(ref_moe_close(0x7F80, INFINITY, 0, 0) && !ref_moe_close(0xFF80, INFINITY, 0, 0), "an Inf ref: itself only");
}

int main(void)
{
    tables_init();
    test_type_pairs();
    test_odd_shapes();
    test_extreme_scales();
    test_nan_scales();
    test_infinities();
    test_pad_bytes();
    test_dot_rounding();
    test_bad_rank();
    test_reverse();
    test_moe_bound();
    return check_summary("test_ref");
}
