/*
 * The portable reference kernel. Per 32-block of K it sums the exact fp8
 * products in fp32 (t ascending), then adds the block sum times the two
 * block scales 2^(sa + sb - 254) into C with one rounding (computed in
 * double, so no scale ever overflows or underflows on its own). Exact for
 * every scale: it is also the slow exact path of the fast kernels.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "gemm/gemm_internal.h"
#include "mx/mx.h"

#define NCHUNK 64

/* B as fp8 values in float, K-major: val[k * N + n]; scales [K/32][N]. */
typedef struct ref_b {
    float *val;
    uint8_t *scale;
    double pow2[509]; /* 2^(e - 254) for e = sa + sb in 0..508 (0xFF is NaN, checked apart) */
} ref_b;

static void ref_release(gemm_b *b)
{
    ref_b *r = b->data;
    if (!r) return;
    free(r->val);
    free(r->scale);
    free(r);
    b->data = NULL;
}

static int ref_prepare(gemm_b *b, const uint8_t *bq, const uint8_t *sb, int64_t ldsb, a2amm_error *err)
{
    int64_t N = b->N, K = b->K;
    ref_b *r = calloc(1, sizeof *r);
    if (!r) return a2amm_fail(err, A2AMM_E_NOMEM, "gemm ref: out of memory");
    b->data = r;
    r->val = malloc((size_t)(N * K) * sizeof *r->val);
    r->scale = malloc((size_t)(N * (K / 32)));
    if (!r->val || !r->scale) {
        ref_release(b);
        return a2amm_fail(err, A2AMM_E_NOMEM, "gemm ref: cannot allocate %.1f MB for B",
                          (double)(N * K) * 4.25 / 1e6);
    }
    float lut[256];
    for (int i = 0; i < 256; i++) lut[i] = mx_fp8_to_f32((uint8_t)i, b->type);
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) r->val[k * N + n] = lut[bq[n * K + k]];
    for (int64_t n = 0; n < N; n++)
        for (int64_t kb = 0; kb < K / 32; kb++) r->scale[kb * N + n] = sb[n * ldsb + kb];
    for (int e = 0; e < 509; e++) r->pow2[e] = ldexp(1.0, e - 254);
    return A2AMM_OK;
}

/* C[n] += (sum_t a[t] * B[k + t][n]) * 2^(sa + sb[n] - 254) for one row. */
static void ref_row_block(const ref_b *r, int64_t N, const float *a32, uint8_t sa, int64_t kb,
                          int64_t n0, int64_t n1, float *c)
{
    for (int64_t nc = n0; nc < n1; nc += NCHUNK) {
        int64_t len = n1 - nc < NCHUNK ? n1 - nc : NCHUNK;
        float sum[NCHUNK] = {0};
        for (int t = 0; t < 32; t++) {
            const float *brow = r->val + (kb * 32 + t) * N + nc;
            float at = a32[t];
            for (int64_t j = 0; j < len; j++) sum[j] += at * brow[j];
        }
        const uint8_t *sbrow = r->scale + kb * N + nc;
        for (int64_t j = 0; j < len; j++) {
            double scale = (sa == MX_E8M0_NAN || sbrow[j] == MX_E8M0_NAN)
                               ? (double)NAN
                               : r->pow2[sa + sbrow[j]];
            c[nc + j] = (float)((double)c[nc + j] + (double)sum[j] * scale);
        }
    }
}

static void ref_accumulate(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen,
                           int64_t n0, int64_t n1, float *c, int64_t ldc)
{
    const ref_b *r = b->data;
    float lut[256];
    for (int i = 0; i < 256; i++) lut[i] = mx_fp8_to_f32((uint8_t)i, a->type);
    for (int64_t i = 0; i < rows; i++) {
        const uint8_t *arow = a->a + i * a->lda, *srow = a->sa + i * a->ldsa;
        for (int64_t t0 = 0; t0 < klen; t0 += 32) {
            float a32[32];
            for (int t = 0; t < 32; t++) a32[t] = lut[arow[t0 + t]];
            ref_row_block(r, b->N, a32, srow[t0 / 32], (k0 + t0) / 32, n0, n1, c + i * ldc);
        }
    }
}

const gemm_kernel_ops gemm_ref_ops = {ref_prepare, ref_release, ref_accumulate};
