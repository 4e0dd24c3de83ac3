/*
 * The exact path of the fast kernels (see gemm_exact.h): B kept in fp8, the
 * per-(K-block, panel) summary of B for the fold rule, and the per-block
 * computation of gemm_ref.c for the blocks the rule refuses. Plain C, built
 * without target flags, so it rounds exactly as gemm_ref.c does.
 */
#include "gemm/gemm_exact.h"

#include "common/hugemem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mx/mx.h"

int gemm_exact_b_alloc(gemm_exact_b *eb, const uint8_t *sb, int64_t N, int64_t K, int64_t ldsb,
                       a2amm_fp8_type type, size_t codes_bytes)
{
    memset(eb, 0, sizeof *eb);
    eb->N = N;
    eb->K = K;
    eb->nkb = K / 32;
    eb->codes = hugemem_alloc(codes_bytes); /* B is read a column (K bytes apart) at a time */
    eb->scales = malloc((size_t)(N * eb->nkb));
    if (!eb->codes || !eb->scales) {
        gemm_exact_b_free(eb);
        return A2AMM_E_NOMEM;
    }
    for (int64_t n = 0; n < N; n++) memcpy(eb->scales + n * eb->nkb, sb + n * ldsb, (size_t)eb->nkb);
    for (int i = 0; i < 256; i++) eb->lut[i] = mx_fp8_to_f32((uint8_t)i, type);
    return A2AMM_OK;
}

void gemm_exact_b_copy_codes(gemm_exact_b *eb, const uint8_t *bq, int64_t n0, int64_t n1)
{
    memcpy(eb->codes + n0 * eb->K, bq + n0 * eb->K, (size_t)((n1 - n0) * eb->K));
}

int gemm_exact_b_init(gemm_exact_b *eb, const uint8_t *bq, const uint8_t *sb, int64_t N, int64_t K,
                      int64_t ldsb, a2amm_fp8_type type)
{
    int rc = gemm_exact_b_alloc(eb, sb, N, K, ldsb, type, (size_t)(N * K));
    if (!rc) gemm_exact_b_copy_codes(eb, bq, 0, N);
    return rc;
}

void gemm_exact_b_free(gemm_exact_b *eb)
{
    free(eb->codes);
    free(eb->scales);
    eb->codes = eb->scales = NULL;
}

/* Whether any of the 8 bytes of x is zero (exact: no false positives for "any"). */
static inline int any_zero_byte(uint64_t x)
{
    return ((x - 0x0101010101010101ull) & ~x & 0x8080808080808080ull) != 0;
}

void gemm_panel_info_build(const gemm_exact_b *eb, const uint8_t *bq, int64_t width, gemm_fold_format format,
                           a2amm_fp8_type type, gemm_panel_info *info, int64_t p0, int64_t p1)
{
    int64_t npanels = (eb->N + width - 1) / width;
    int lo = gemm_fold_scale_lo(format, type), hi = gemm_fold_scale_hi(type);
    const uint64_t special = 0x0101010101010101ull * gemm_fold_special_bits(type), magnitude = 0x7F7F7F7F7F7F7F7Full;
    const uint64_t exponent = 0x0101010101010101ull * (type == A2AMM_E5M2 ? 0x7C : 0x78);
    for (int64_t kb = 0; kb < eb->nkb; kb++)
        for (int64_t p = p0; p < p1; p++) info[kb * npanels + p] = (gemm_panel_info){1, 255, 0, (p + 1) * width <= eb->N};
    /* B's rows in memory order (a column's K-blocks one after the other): by K-block first, every
     * access would be a cache miss 4 KB from the last. */
    int64_t n1 = p1 * width < eb->N ? p1 * width : eb->N;
    for (int64_t n = p0 * width; n < n1; n++) {
        gemm_panel_info *col = info + n / width;
        for (int64_t kb = 0; kb < eb->nkb; kb++) {
            int s = eb->scales[n * eb->nkb + kb];
            const uint8_t *codes = bq + n * eb->K + kb * 32;
            uint64_t nonzero = 0;
            int any_special = 0, any_zero_exponent = 0;
            for (int q = 0; q < 4; q++) { /* 8 codes at a time: a code is special when all its special bits are set */
                uint64_t x;
                memcpy(&x, codes + 8 * q, sizeof x);
                nonzero |= x & magnitude;
                any_special |= any_zero_byte(~x & special);
                any_zero_exponent |= any_zero_byte(x & exponent);
            }
            gemm_panel_info *pi = col + kb * npanels;
            pi->normal &= !any_zero_exponent;
            if (!nonzero && s != MX_E8M0_NAN) continue; /* zeros: nothing to fold */
            pi->ok &= !any_special && s >= lo && s <= hi;
            pi->smin = (uint8_t)(s < pi->smin ? s : pi->smin);
            pi->smax = (uint8_t)(s > pi->smax ? s : pi->smax);
        }
    }
}

void gemm_exact_block(const gemm_exact_b *eb, const float a32[32], uint8_t sa, int64_t kb, int64_t nb,
                      int64_t ne, float *crow)
{
    for (int64_t n = nb; n < ne; n++) {
        uint8_t buf[32], sb;
        const uint8_t *codes = gemm_exact_codes(eb, n, kb, buf, &sb);
        float sum = 0.0f;
        for (int t = 0; t < 32; t++) sum += a32[t] * eb->lut[codes[t]];
        double scale = (sa == MX_E8M0_NAN || sb == MX_E8M0_NAN) ? (double)NAN : ldexp(1.0, sa + sb - 254);
        crow[n] = (float)((double)crow[n] + (double)sum * scale);
    }
}

void gemm_exact_all(const gemm_exact_b *eb, const gemm_a_slab *a, const float *lut_a, int64_t rows, int64_t k0,
                    int64_t klen, int64_t n0, int64_t n1, float *c, int64_t ldc)
{
    for (int64_t i = 0; i < rows; i++) {
        const uint8_t *arow = a->a + i * a->lda, *srow = a->sa + i * a->ldsa;
        for (int64_t t0 = 0; t0 < klen; t0 += 32) {
            float a32[32];
            for (int t = 0; t < 32; t++) a32[t] = lut_a[arow[t0 + t]];
            gemm_exact_block(eb, a32, srow[t0 / 32], (k0 + t0) / 32, n0, n1, c + i * ldc);
        }
    }
}

void gemm_exact_fixup(const gemm_exact_job *job, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                      const int16_t *a_state, int64_t ld_state)
{
    const gemm_a_slab *a = job->a;
    int64_t w = job->panel_width, p0 = job->n0 / w, p1 = (job->n1 - 1) / w;
    for (int64_t i = i0; i < i1; i++) {
        const int16_t *state = a_state + (i - i0) * ld_state;
        for (int64_t j = j0; j < j1; j++) {
            int64_t kb = job->kb_base + j;
            const gemm_panel_info *info = job->info + kb * job->npanels;
            int have_values = 0;
            float a32[32];
            for (int64_t p = p0; p <= p1; p++) {
                if (!gemm_exact_needed(state[j - j0], info[p], job->pair_lo, job->pair_hi)) continue;
                if (!have_values) {
                    const uint8_t *codes = a->a + i * a->lda + j * 32;
                    for (int t = 0; t < 32; t++) a32[t] = job->lut_a[codes[t]];
                    have_values = 1;
                }
                int64_t nb = p * w > job->n0 ? p * w : job->n0;
                int64_t ne = (p + 1) * w < job->n1 ? (p + 1) * w : job->n1;
                gemm_exact_block(job->eb, a32, a->sa[i * a->ldsa + j], kb, nb, ne, job->c + i * job->ldc);
            }
        }
    }
}
