/*
 * The portable reference kernel. Every 32-block of K goes through the exact
 * path (gemm_exact.c): the exact fp8 products summed in fp32 (t ascending),
 * then times the two block scales 2^(sa + sb - 254) added into C with one
 * rounding (computed in double, so no scale overflows or underflows on its
 * own). Exact for every scale; the fast levels use the same code for the
 * blocks they cannot fold, so those blocks match this kernel bit for bit.
 */
#include <stdlib.h>

#include "common/error.h"
#include "gemm/gemm_exact.h"
#include "gemm/gemm_internal.h"
#include "mx/mx.h"

static void ref_release(gemm_b *b)
{
    gemm_exact_b *eb = b->data;
    if (!eb) return;
    gemm_exact_b_free(eb);
    free(eb);
    b->data = NULL;
}

static int ref_prepare(gemm_b *b, const uint8_t *bq, const uint8_t *sb, int64_t ldsb, pool *workers, a2amm_error *err)
{
    (void)workers; /* a copy */
    gemm_exact_b *eb = calloc(1, sizeof *eb);
    if (!eb || gemm_exact_b_init(eb, bq, sb, b->N, b->K, ldsb, b->type) != A2AMM_OK) {
        free(eb);
        return a2amm_fail(err, A2AMM_E_NOMEM, "gemm ref: cannot allocate %.1f MB for B",
                          (double)(b->N * b->K) * 1.04 / 1e6);
    }
    b->data = eb;
    return A2AMM_OK;
}

static void ref_accumulate(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen,
                           int64_t n0, int64_t n1, float *c, int64_t ldc)
{
    const gemm_exact_b *eb = b->data;
    float lut[256];
    for (int i = 0; i < 256; i++) lut[i] = mx_fp8_to_f32((uint8_t)i, a->type);
    for (int64_t i = 0; i < rows; i++) {
        const uint8_t *arow = a->a + i * a->lda, *srow = a->sa + i * a->ldsa;
        for (int64_t t0 = 0; t0 < klen; t0 += 32) {
            float a32[32];
            for (int t = 0; t < 32; t++) a32[t] = lut[arow[t0 + t]];
            gemm_exact_block(eb, a32, srow[t0 / 32], (k0 + t0) / 32, n0, n1, c + i * ldc);
        }
    }
}

const gemm_kernel_ops gemm_ref_ops = {ref_prepare, ref_release, ref_accumulate, NULL, NULL};
