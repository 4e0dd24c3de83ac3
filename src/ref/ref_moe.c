/* The MoE op's fp64 reference and its tolerance. */
#include "ref/ref_moe.h"

#include <cblas.h>
#undef I /* complex.h's imaginary unit, which cblas.h may bring: I is the inner size here */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "mx/mx.h"
#include "op/moe.h"

/* One expert's routed rows over every rank: pair p is (rank, token, slot). */
typedef struct routed {
    int64_t n;
    int *rank;
    int64_t *token;
    int *slot;
} routed;

/* rows x cols codes with scale rows of stride bytes, dequantized into out (and |out| into mag). */
static void deq(const uint8_t *codes, const uint8_t *scales, int64_t rows, int64_t cols, int64_t stride,
                a2amm_fp8_type type, double *out, double *mag)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t c = 0; c < cols; c++) {
            double v = mx_dequant(codes[i * cols + c], scales[i * stride + c / 32], type);
            out[i * cols + c] = v, mag[i * cols + c] = fabs(v);
        }
}

/* C [m, n] = A [m, k] x B [n, k]^T. */
static void gemm_nt(int64_t m, int64_t n, int64_t k, const double *a, const double *b, double *c)
{
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0, a, (int)k, b, (int)k, 0.0, c,
                (int)n);
}

int ref_moe_close(uint16_t got, double ref, double bound, double reach)
{
    double g = mx_bf16_to_f32(got);
    if (isnan(ref)) return isnan(g);
    if (isinf(ref)) return g == ref;
    if (isinf(g)) return ref_moe_overflow_allowed(got, ref, reach);
    return fabs(g - ref) <= bound;
}

int ref_moe_overflow_allowed(uint16_t got, double ref, double reach)
{
    double g = mx_bf16_to_f32(got);
    return isinf(g) && isfinite(ref) && ref != 0 && (g > 0) == (ref > 0) && reach >= REF_MOE_OMEGA;
}

int ref_moe(const moe_io_shape *s, const moe_io_rank *data, double *const *ref, double *const *bound,
            double *const *reach, a2amm_error *err)
{
    const int R = s->R, E = s->E, K = s->K, L = E / R;
    const int64_t H = s->H, In = s->I, sh = moe_io_scale_row(H), si = moe_io_scale_row(In);
    int64_t total = 0;
    for (int r = 0; r < R; r++) total += s->tokens[r];
    /* the sizes below assume what the op checks: an expert at most once a token, every id in range */
    for (int r = 0; r < R; r++) {
        const moe_shape ms = {R, r, E, L, K, H, In, s->a_type, s->b_type};
        a2amm_error why = {0, ""};
        if (moe_check_routing(&ms, s->tokens[r], data[r].idx, data[r].w, &why))
            return a2amm_fail(err, why.code, "%s (in input/%d/input_topk_idx.bin and input_topk_w.bin), as run "
                              "refuses it: no reference for such a routing", why.msg, r);
    }
    const int64_t most = total * K > 0 ? total : 1; /* an expert appears once a token */
    /* a bf16 and an fp32 rounding: relative (u8, u24), or absolute below the smallest normal (eta8 = bf16's
     * smallest subnormal, the spacing of its values there; eta24 = fp32's) */
    const double u8 = ldexp(1, -8), u24 = ldexp(1, -24), eta8 = ldexp(1, -133), eta24 = ldexp(1, -149);
    /* per output value: sum_j |w_j| P_j, sum_j |w_j| Q_j, sum_j (eta24 + |w_j| (I eta24 + Z_j)), sum_j max(1, |w_j|) P_j */
    double **tol1 = calloc((size_t)R, sizeof *tol1), **tol2 = calloc((size_t)R, sizeof *tol2);
    double **tol3 = calloc((size_t)R, sizeof *tol3), **size = calloc((size_t)R, sizeof *size);
    routed rt = {0, malloc(sizeof(int) * (size_t)most), malloc(sizeof(int64_t) * (size_t)most),
                 malloc(sizeof(int) * (size_t)most)};
    double *x = malloc(sizeof(double) * (size_t)(most * H)), *ax = malloc(sizeof(double) * (size_t)(most * H));
    double *w13 = malloc(sizeof(double) * (size_t)(2 * In * H)), *a13 = malloc(sizeof(double) * (size_t)(2 * In * H));
    double *w2 = malloc(sizeof(double) * (size_t)(H * In)), *a2 = malloc(sizeof(double) * (size_t)(H * In));
    double *g13 = malloc(sizeof(double) * (size_t)(most * 2 * In)), *s13 = malloc(sizeof(double) * (size_t)(most * 2 * In));
    double *act = malloc(sizeof(double) * (size_t)(most * In)), *aact = malloc(sizeof(double) * (size_t)(most * In));
    double *q = malloc(sizeof(double) * (size_t)(most * In));
    double *y = malloc(sizeof(double) * (size_t)(most * H)), *p = malloc(sizeof(double) * (size_t)(most * H));
    double *qq = malloc(sizeof(double) * (size_t)(most * H));
    double *z = malloc(sizeof(double) * (size_t)(most * In)), *zz = malloc(sizeof(double) * (size_t)(most * H));
    int ok = tol1 && tol2 && tol3 && size && z && zz && rt.rank && rt.token && rt.slot && x && ax && w13 && a13 && w2 && a2 && g13 && s13 &&
             act && aact && q && y && p && qq;
    for (int r = 0; ok && r < R; r++) {
        size_t n = (size_t)(s->tokens[r] * H);
        tol1[r] = calloc(n + 1, sizeof(double)), tol2[r] = calloc(n + 1, sizeof(double));
        tol3[r] = calloc(n + 1, sizeof(double)), size[r] = calloc(n + 1, sizeof(double));
        ok = tol1[r] && tol2[r] && tol3[r] && size[r];
        if (ok) memset(ref[r], 0, n * sizeof(double));
    }
    for (int e = 0; ok && e < E; e++) {
        rt.n = 0;
        for (int r = 0; r < R; r++)
            for (int64_t t = 0; t < s->tokens[r]; t++)
                for (int j = 0; j < K; j++)
                    if (data[r].idx[t * K + j] == e) {
                        deq(data[r].x + t * H, data[r].sx + t * sh, 1, H, sh, s->a_type, x + rt.n * H, ax + rt.n * H);
                        rt.rank[rt.n] = r, rt.token[rt.n] = t, rt.slot[rt.n] = j, rt.n++;
                    }
        if (!rt.n) continue;
        const moe_io_rank *own = &data[e / L];
        const int le = e % L;
        deq(own->w13 + (size_t)le * (size_t)(2 * In * H), own->s13 + (size_t)le * (size_t)(2 * In * sh), 2 * In, H, sh,
            s->b_type, w13, a13);
        deq(own->w2 + (size_t)le * (size_t)(H * In), own->s2 + (size_t)le * (size_t)(H * si), H, In, si, s->b_type, w2,
            a2);
        const int64_t n = rt.n;
        gemm_nt(n, 2 * In, H, x, w13, g13);  /* g, u */
        gemm_nt(n, 2 * In, H, ax, a13, s13); /* Sg, Su: the sizes of their terms */
        for (int64_t r = 0; r < n; r++)
            for (int64_t i = 0; i < In; i++) {
                double g = g13[r * 2 * In + i], u = g13[r * 2 * In + In + i];
                double silu = g / (1 + exp(-g)), a = silu * u;
                act[r * In + i] = a, aact[r * In + i] = fabs(a);
                q[r * In + i] = 1.1 * fabs(u) * s13[r * 2 * In + i] + fabs(silu) * s13[r * 2 * In + In + i];
                z[r * In + i] = eta8 + (double)(H + 1) * eta24 * (1 + 1.1 * fabs(u) + fabs(silu));
            }
        gemm_nt(n, H, In, act, w2, y); /* y */
        gemm_nt(n, H, In, aact, a2, p); /* P */
        gemm_nt(n, H, In, q, a2, qq);   /* Q */
        gemm_nt(n, H, In, z, a2, zz);   /* Z */
        for (int64_t r = 0; r < n; r++) {
            const int rk = rt.rank[r];
            const int64_t t = rt.token[r];
            const double w = data[rk].w[t * K + rt.slot[r]], aw = fabs(w);
            double *o = ref[rk] + t * H, *t1 = tol1[rk] + t * H, *t2 = tol2[rk] + t * H;
            double *t3 = tol3[rk] + t * H, *m = size[rk] + t * H;
            for (int64_t c = 0; c < H; c++) {
                o[c] += w * y[r * H + c], t1[c] += aw * p[r * H + c], t2[c] += aw * qq[r * H + c];
                t3[c] += eta8 + eta24 + aw * ((double)In * eta24 + zz[r * H + c]);
                m[c] += (aw > 1 ? aw : 1) * p[r * H + c];
            }
        }
    }
    for (int r = 0; ok && r < R; r++)
        for (int64_t i = 0; i < s->tokens[r] * H; i++) {
            double b = u8 * fabs(ref[r][i]) + (2 * u8 + (double)(In + K + R + 8) * u24) * tol1[r][i] +
                       (double)H * u24 * tol2[r][i] + eta8 + tol3[r][i];
            bound[r][i] = isfinite(ref[r][i]) ? b : 0.0;
            reach[r][i] = isfinite(ref[r][i]) ? size[r][i] + b : 0.0;
        }
    for (int r = 0; r < R && tol1 && tol2 && tol3 && size; r++) free(tol1[r]), free(tol2[r]), free(tol3[r]), free(size[r]);
    free(tol1), free(tol2), free(tol3), free(size), free(z), free(zz), free(rt.rank), free(rt.token), free(rt.slot), free(x), free(ax), free(w13), free(a13);
    free(w2), free(a2), free(g13), free(s13), free(act), free(aact), free(q), free(y), free(p), free(qq);
    return ok ? A2AMM_OK : a2amm_fail(err, A2AMM_E_NOMEM, "the MoE reference: out of memory (%lld tokens, H=%lld, "
                                      "I=%lld)", (long long)total, (long long)H, (long long)In);
}
