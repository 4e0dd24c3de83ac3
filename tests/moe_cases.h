/*
 * The MoE op's test data and its fp64 reference (docs/op-contract.md, "The
 * MoE op"), shared by tests/test_moe.c (shared memory) and tests/mpi_moe.c
 * (MPI messages): every rank makes its own inputs from the case and its
 * rank, so that whoever checks can make every rank's again. The reference
 * evaluates the formulas in fp64 with no rounding; the bound is the
 * contract's. Public API only (mpi_moe links the installed library).
 */
#ifndef A2AMM_TESTS_MOE_CASES_H
#define A2AMM_TESTS_MOE_CASES_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "a2amm.h"

typedef enum moe_route { ROUTE_UNIFORM, ROUTE_SKEWED, ROUTE_EMPTY } moe_route;

typedef struct moe_case {
    int R, E, k;
    int64_t H, I, max_tokens;
    moe_route route;
    a2amm_fp8_type a_type, b_type;
    int calls;
    uint64_t seed;
    int threads; /* each rank's compute threads (0: the op's default) */
    a2amm_schedule schedule; /* fused (0: the default, by size), unfused, or overlap (chunks where max_tokens > 64) */
    int s2_lower; /* W2's scale bytes this much lower (0: none; 105: outputs near 1e-32, where the bound's
                     absolute term A, not a floor, decides) */
} moe_case;

/* A deterministic stream of one (case, what, rank, call). */
static inline uint64_t mc_next(uint64_t *st)
{
    *st ^= *st >> 12, *st ^= *st << 25, *st ^= *st >> 27;
    return *st * 0x2545F4914F6CDD1Dull;
}

static inline uint64_t mc_stream(const moe_case *c, int what, int rank, int call)
{
    uint64_t st = c->seed * 0x9E3779B97F4A7C15ull + (uint64_t)what * 1000003u + (uint64_t)rank * 7919u +
                  (uint64_t)call * 104729u + 1;
    for (int i = 0; i < 4; i++) mc_next(&st);
    return st;
}

/* A code of magnitude under 2 (no NaN, no Inf) for either format. */
static inline uint8_t mc_code(uint64_t *st)
{
    uint64_t r = mc_next(st);
    return (uint8_t)((r & 0x3F) | ((r >> 8) & 0x80));
}

/* Expert e's weights: w13 [2I, H] and its scales [2I, H/32], w2 [H, I] and its scales [H, I/32]. */
static inline void mc_expert(const moe_case *c, int e, uint8_t *w13, uint8_t *s13, uint8_t *w2, uint8_t *s2)
{
    uint64_t st = mc_stream(c, 1, e, 0);
    for (int64_t i = 0; i < 2 * c->I * c->H; i++) w13[i] = mc_code(&st);
    for (int64_t i = 0; i < 2 * c->I * (c->H / 32); i++) s13[i] = (uint8_t)(122 + mc_next(&st) % 3);
    for (int64_t i = 0; i < c->H * c->I; i++) w2[i] = mc_code(&st);
    for (int64_t i = 0; i < c->H * (c->I / 32); i++) s2[i] = (uint8_t)(121 + mc_next(&st) % 3 - (uint64_t)c->s2_lower);
}

/* Rank r's tokens in a call. */
static inline int64_t mc_tokens(const moe_case *c, int r, int call)
{
    if (c->route == ROUTE_EMPTY && r == 1 % c->R && c->R > 1) return 0;
    uint64_t st = mc_stream(c, 2, r, call);
    return (int64_t)(mc_next(&st) % (uint64_t)(c->max_tokens + 1));
}

/* Rank r's inputs of a call: x [T, H], sx [T, H/32], idx [T, k], w [T, k]. */
static inline void mc_inputs(const moe_case *c, int r, int call, int64_t T, uint8_t *x, uint8_t *sx, int32_t *idx,
                             float *w)
{
    uint64_t st = mc_stream(c, 3, r, call);
    for (int64_t i = 0; i < T * c->H; i++) x[i] = mc_code(&st);
    for (int64_t i = 0; i < T * (c->H / 32); i++) sx[i] = (uint8_t)(126 + mc_next(&st) % 3);
    for (int64_t t = 0; t < T; t++) {
        int32_t *ids = idx + t * c->k;
        for (int j = 0; j < c->k; j++) {
            int32_t e;
            int fresh;
            do { /* distinct experts: the skewed route puts every token's first slot on expert 0 */
                e = (c->route == ROUTE_SKEWED && j == 0) ? 0 : (int32_t)(mc_next(&st) % (uint64_t)c->E);
                fresh = 1;
                for (int i = 0; i < j; i++) fresh &= ids[i] != e;
            } while (!fresh);
            ids[j] = e;
            w[t * c->k + j] = (float)((double)(mc_next(&st) % 1000) / 1000.0 + 0.05);
        }
        uint64_t drop = mc_next(&st) % 10; /* some unused slots; on the empty route, some tokens with none */
        if (drop == 0) ids[mc_next(&st) % (uint64_t)c->k] = -1;
        if (c->route == ROUTE_EMPTY && drop == 1)
            for (int j = 0; j < c->k; j++) ids[j] = -1;
    }
}

/* Dequantized rows: out[i][j] for rows x cols codes with scales [rows][cols/32] (exact: fp8 times a power
 * of two in range). */
static inline void mc_deq(const uint8_t *codes, const uint8_t *scales, int64_t rows, int64_t cols,
                          a2amm_fp8_type type, double *out)
{
    float *f = malloc(sizeof *f * (size_t)(rows * cols));
    a2amm_error err;
    if (f && a2amm_mx_dequantize_f32(codes, cols, scales, cols / 32, rows, cols, type, f, cols, &err) == 0)
        for (int64_t i = 0; i < rows * cols; i++) out[i] = f[i];
    else
        for (int64_t i = 0; i < rows * cols; i++) out[i] = NAN;
    free(f);
}

static inline float mc_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Every expert, dequantized: w13 [E][2I][H], w2 [E][H][I]. */
typedef struct mc_experts {
    double *w13, *w2;
} mc_experts;

static inline int mc_experts_make(const moe_case *c, mc_experts *x)
{
    const int64_t H = c->H, I = c->I;
    uint8_t *w13 = malloc((size_t)(2 * I * H)), *s13 = malloc((size_t)(2 * I * H / 32));
    uint8_t *w2 = malloc((size_t)(H * I)), *s2 = malloc((size_t)(H * I / 32));
    x->w13 = malloc(sizeof(double) * (size_t)(c->E * 2 * I * H));
    x->w2 = malloc(sizeof(double) * (size_t)(c->E * H * I));
    int ok = w13 && s13 && w2 && s2 && x->w13 && x->w2;
    for (int e = 0; ok && e < c->E; e++) {
        mc_expert(c, e, w13, s13, w2, s2);
        mc_deq(w13, s13, 2 * I, H, c->b_type, x->w13 + (size_t)e * (size_t)(2 * I * H));
        mc_deq(w2, s2, H, I, c->b_type, x->w2 + (size_t)e * (size_t)(H * I));
    }
    free(w13), free(s13), free(w2), free(s2);
    return ok;
}

static inline void mc_experts_free(mc_experts *x) { free(x->w13), free(x->w2); }

/*
 * One token's check: got [H] bf16 against the fp64 value of the formulas, within the contract's bound.
 * Returns the columns off it; *worst gets the largest |got - ref| / bound seen.
 */
static inline int64_t mc_check_token(const moe_case *c, const mc_experts *ex, const uint8_t *x, const uint8_t *sx,
                              const int32_t *ids, const float *w, const uint16_t *got, double *worst)
{
    const int64_t H = c->H, I = c->I;
    double *xd = malloc(sizeof(double) * (size_t)H), *ref = calloc((size_t)H, sizeof(double));
    double *tol1 = calloc((size_t)H, sizeof(double)), *tol2 = calloc((size_t)H, sizeof(double));
    double *tol3 = calloc((size_t)H, sizeof(double));
    double *a = malloc(sizeof(double) * (size_t)I), *q = malloc(sizeof(double) * (size_t)I);
    double *z = malloc(sizeof(double) * (size_t)I);
    /* docs/op-contract.md, "The MoE op", as src/ref/ref_moe.c computes it: relative roundings (u8, u24) and
     * the absolute term A of those below the smallest normal (eta8: bf16's smallest subnormal; eta24: fp32's) */
    const double u8 = ldexp(1, -8), u24 = ldexp(1, -24), eta8 = ldexp(1, -133), eta24 = ldexp(1, -149);
    mc_deq(x, sx, 1, H, c->a_type, xd);
    for (int j = 0; j < c->k; j++) {
        if (ids[j] < 0) continue;
        const double *w1 = ex->w13 + (size_t)ids[j] * (size_t)(2 * I * H), *w3 = w1 + I * H;
        const double *w2 = ex->w2 + (size_t)ids[j] * (size_t)(H * I);
        for (int64_t i = 0; i < I; i++) {
            double g = 0, u = 0, sg = 0, su = 0;
            for (int64_t h = 0; h < H; h++) {
                g += xd[h] * w1[i * H + h], sg += fabs(xd[h] * w1[i * H + h]);
                u += xd[h] * w3[i * H + h], su += fabs(xd[h] * w3[i * H + h]);
            }
            double silu = g / (1 + exp(-g));
            a[i] = silu * u;
            q[i] = 1.1 * fabs(u) * sg + fabs(silu) * su; /* the sums over H carried through a */
            z[i] = eta8 + (double)(H + 1) * eta24 * (1 + 1.1 * fabs(u) + fabs(silu)); /* a_i's, absolute */
        }
        double wj = fabs((double)w[j]);
        for (int64_t col = 0; col < H; col++) {
            double y = 0, p = 0, qq = 0, zz = 0;
            for (int64_t i = 0; i < I; i++) {
                y += a[i] * w2[col * I + i];
                p += fabs(a[i] * w2[col * I + i]);
                qq += q[i] * fabs(w2[col * I + i]);
                zz += z[i] * fabs(w2[col * I + i]); /* Z_j */
            }
            ref[col] += (double)w[j] * y;
            tol1[col] += wj * p, tol2[col] += wj * qq;
            tol3[col] += eta8 + eta24 + wj * ((double)I * eta24 + zz);
        }
    }
    int64_t off = 0;
    for (int64_t col = 0; col < H; col++) {
        double bound = u8 * fabs(ref[col]) + (2 * u8 + (double)(I + c->k + c->R + 8) * u24) * tol1[col] +
                       (double)H * u24 * tol2[col] + eta8 + tol3[col]; /* the last two: A */
        double diff = fabs((double)mc_bf16(got[col]) - ref[col]);
        if (!(diff <= bound)) off++;
        if (diff / bound > *worst) *worst = diff / bound;
    }
    free(xd), free(ref), free(tol1), free(tol2), free(tol3), free(a), free(q), free(z);
    return off;
}

/* Rank r's MoE config and weights of the case (timeout_s: every wait's): makes the op and sets its E/R
 * experts. */
static inline int mc_make(a2amm_comm *comm, const moe_case *c, int64_t max_recv, double timeout_s, a2amm_moe **m,
                          a2amm_error *err)
{
    a2amm_moe_config cfg = A2AMM_MOE_CONFIG_INIT;
    cfg.experts = c->E, cfg.topk = c->k, cfg.hidden = c->H, cfg.inter = c->I, cfg.max_tokens = c->max_tokens;
    cfg.max_recv = max_recv, cfg.a_type = c->a_type, cfg.b_type = c->b_type, cfg.timeout_s = timeout_s;
    cfg.threads = c->threads, cfg.schedule = c->schedule;
    int rc = a2amm_moe_create(comm, &cfg, m, err);
    if (rc) return rc;
    const int r = a2amm_comm_rank(comm), local = c->E / c->R;
    const int64_t H = c->H, I = c->I, n13 = 2 * I * H, n2 = H * I;
    uint8_t *w13 = malloc((size_t)(local * n13)), *s13 = malloc((size_t)(local * n13 / 32));
    uint8_t *w2 = malloc((size_t)(local * n2)), *s2 = malloc((size_t)(local * n2 / 32));
    for (int le = 0; le < local; le++)
        mc_expert(c, r * local + le, w13 + le * n13, s13 + le * n13 / 32, w2 + le * n2, s2 + le * n2 / 32);
    rc = a2amm_moe_set_weights(*m, w13, s13, H / 32, w2, s2, I / 32, err);
    free(w13), free(s13), free(w2), free(s2);
    return rc;
}

/* Rank r's calls of the case: out[call] [max_tokens, H] each (the rank's tokens first). */
static inline int mc_run_calls(a2amm_comm *comm, a2amm_moe *m, const moe_case *c, uint16_t *out, a2amm_error *err)
{
    const int r = a2amm_comm_rank(comm);
    const int64_t H = c->H, MT = c->max_tokens;
    uint8_t *x = malloc((size_t)(MT * H) + 1), *sx = malloc((size_t)(MT * H / 32) + 1);
    int32_t *idx = malloc(sizeof *idx * (size_t)(MT * c->k) + 1);
    float *w = malloc(sizeof *w * (size_t)(MT * c->k) + 1);
    int rc = A2AMM_OK;
    for (int call = 0; !rc && call < c->calls; call++) {
        int64_t T = mc_tokens(c, r, call);
        mc_inputs(c, r, call, T, x, sx, idx, w);
        rc = a2amm_moe_run(m, T, x, sx, H / 32, idx, w, out + (size_t)call * (size_t)(MT * H), err);
    }
    free(x), free(sx), free(idx), free(w);
    return rc;
}

/* Checks rank r's outputs of the case (out[call], as mc_run_calls wrote them) against the fp64 bound, every
 * expert's weights dequantized in ex: the columns off it; the worst |got - ref| / bound into *worst. */
static inline int64_t mc_check_rank(const moe_case *c, const mc_experts *ex, int r, const uint16_t *out,
                                    double *worst)
{
    const int64_t H = c->H, MT = c->max_tokens;
    uint8_t *x = malloc((size_t)(MT * H) + 1), *sx = malloc((size_t)(MT * H / 32) + 1);
    int32_t *idx = malloc(sizeof *idx * (size_t)(MT * c->k) + 1);
    float *w = malloc(sizeof *w * (size_t)(MT * c->k) + 1);
    int64_t off = 0;
    for (int call = 0; call < c->calls; call++) {
        int64_t T = mc_tokens(c, r, call);
        mc_inputs(c, r, call, T, x, sx, idx, w);
        const uint16_t *got = out + (size_t)call * (size_t)(MT * H);
        for (int64_t t = 0; t < T; t++)
            off += mc_check_token(c, ex, x + t * H, sx + t * (H / 32), idx + t * c->k, w + t * c->k, got + t * H,
                                  worst);
    }
    free(x), free(sx), free(idx), free(w);
    return off;
}

/* Every rank's (outs [R][calls][max_tokens][H]); -1 when out of memory. */
static inline int64_t mc_check_all(const moe_case *c, const uint16_t *outs, double *worst)
{
    mc_experts ex;
    if (!mc_experts_make(c, &ex)) return -1;
    int64_t off = 0;
    for (int r = 0; r < c->R; r++)
        off += mc_check_rank(c, &ex, r, outs + (size_t)r * (size_t)c->calls * (size_t)(c->max_tokens * c->H), worst);
    mc_experts_free(&ex);
    return off;
}

/* A digest (FNV-1a) of rank r's outputs of the case: its tokens' values only. */
static inline uint64_t mc_digest(const moe_case *c, int r, const uint16_t *out)
{
    uint64_t h = 1469598103934665603ull;
    for (int call = 0; call < c->calls; call++) {
        const uint8_t *p = (const uint8_t *)(out + (size_t)call * (size_t)(c->max_tokens * c->H));
        for (size_t i = 0; i < (size_t)(mc_tokens(c, r, call) * c->H) * 2; i++) h = (h ^ p[i]) * 1099511628211ull;
    }
    return h;
}

/* The cases both tests run (test_moe over shared memory, mpi_moe over MPI messages). */
static const moe_case MC_CASES[] = {
    {1, 2, 1, 64, 32, 8, ROUTE_UNIFORM, A2AMM_E4M3, A2AMM_E4M3, 2, 1, 0, A2AMM_SCHEDULE_FUSED, 0},
    {2, 4, 2, 64, 64, 12, ROUTE_UNIFORM, A2AMM_E4M3, A2AMM_E4M3, 3, 2, 0, A2AMM_SCHEDULE_FUSED, 0},
    {2, 2, 2, 32, 32, 9, ROUTE_SKEWED, A2AMM_E4M3, A2AMM_E4M3, 2, 3, 0, A2AMM_SCHEDULE_FUSED, 0},
    {3, 6, 4, 96, 32, 7, ROUTE_EMPTY, A2AMM_E4M3, A2AMM_E4M3, 3, 4, 0, A2AMM_SCHEDULE_FUSED, 0},
    {4, 16, 8, 64, 64, 10, ROUTE_UNIFORM, A2AMM_E5M2, A2AMM_E4M3, 2, 5, 0, A2AMM_SCHEDULE_FUSED, 0},
    {4, 4, 1, 64, 32, 6, ROUTE_SKEWED, A2AMM_E4M3, A2AMM_E5M2, 2, 6, 0, A2AMM_SCHEDULE_FUSED, 0},
    {4, 8, 3, 32, 96, 5, ROUTE_EMPTY, A2AMM_E5M2, A2AMM_E5M2, 2, 7, 0, A2AMM_SCHEDULE_FUSED, 0},
    {2, 32, 6, 128, 64, 16, ROUTE_UNIFORM, A2AMM_E4M3, A2AMM_E4M3, 2, 8, 0, A2AMM_SCHEDULE_FUSED, 0},
    {8, 16, 5, 64, 32, 6, ROUTE_EMPTY, A2AMM_E4M3, A2AMM_E4M3, 2, 9, 0, A2AMM_SCHEDULE_FUSED, 0},
    /* max_tokens over 64: the overlap schedule's two chunks (of at least 64 tokens) */
    {2, 8, 3, 64, 32, 200, ROUTE_UNIFORM, A2AMM_E4M3, A2AMM_E4M3, 2, 10, 0, A2AMM_SCHEDULE_OVERLAP, 0},
    {3, 6, 2, 32, 64, 300, ROUTE_EMPTY, A2AMM_E5M2, A2AMM_E4M3, 2, 11, 0, A2AMM_SCHEDULE_OVERLAP, 0},
};
enum { MC_FIRST_CHUNKED = 9 }; /* the cases from here have calls of several chunks */
#define MC_NCASES (sizeof MC_CASES / sizeof *MC_CASES)

#endif
