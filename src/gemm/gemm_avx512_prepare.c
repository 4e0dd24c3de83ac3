/*
 * The AVX-512 level's prepared B (gemm_avx512_internal.h has its layout):
 * each panel's blocks summarized for the fold rule, folded to bf16 and
 * transposed into K-pair rows, the codes kept for the exact path; spread
 * over a pool a few panels a task.
 */
#include <stdlib.h>
#include <string.h>

#include "common/hugemem.h"
#include "gemm/gemm_avx512_internal.h"
#include "gemm/gemm_fold.h"
#include "mx/mx.h"

static void fold_table_build(fold_table *t, a2amm_fp8_type type)
{
    for (int code = 0; code < 256; code++) t->value[code] = mx_fp8_to_f32((uint8_t)code, type);
    for (int m = 0; m < 128; m++) {
        uint32_t bits = 0;
        if (!gemm_fold_code_special((unsigned)m, type)) memcpy(&bits, &t->value[m], sizeof bits);
        t->lo[m] = (uint8_t)(bits >> 16);
        t->hi[m] = (uint8_t)(bits >> 24);
    }
}

/* fold32_unchecked, zero unless the block folds: scale in [lo, hi], no NaN/Inf. */
AVX512_INLINE __m512i fold32(const uint8_t *codes, int scale, int lo, int hi, const fold_lut *t)
{
    int special, zero;
    __m512i v = fold32_unchecked(codes, (short)((scale - 127) * 128), t, &special, &zero);
    int ok = !special && scale >= lo && scale <= hi;
    return _mm512_maskz_mov_epi32((__mmask16)-ok, v);
}

/* Rows r[0..15] of 16 dwords become its columns: r[k][i] = old r[i][k]. */
AVX512_INLINE void transpose16(__m512i r[16])
{
    __m512i t[16];
    /* In each 128-bit lane: t[i] = a0 b0 a1 b1, t[i + 1] = a2 b2 a3 b3 (rows a = i, b = i + 1). */
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    /* r[4q + j], lane L: element 4L + j of rows 4q .. 4q + 3. */
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* Row 4L + j gathers lane L of r[j], r[4 + j], r[8 + j], r[12 + j]. */
    for (int j = 0; j < 4; j++) {
        __m512i even_lo = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x88), odd_lo = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xDD);
        __m512i even_hi = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x88);
        __m512i odd_hi = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xDD);
        t[j] = _mm512_shuffle_i32x4(even_lo, even_hi, 0x88);
        t[8 + j] = _mm512_shuffle_i32x4(even_lo, even_hi, 0xDD);
        t[4 + j] = _mm512_shuffle_i32x4(odd_lo, odd_hi, 0x88);
        t[12 + j] = _mm512_shuffle_i32x4(odd_lo, odd_hi, 0xDD);
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

/*
 * Panel p's summary of K-block kb for the fold rule: what
 * gemm_panel_info_build computes, 32 codes at a time.
 */
AVX512_TARGET static gemm_panel_info panel_block_info(const gemm_exact_b *eb, int64_t p, int64_t kb, int lo, int hi,
                                                       unsigned special)
{
    gemm_panel_info pi = {1, 255, 0};
    const __m256i special_bits = _mm256_set1_epi8((char)special), magnitude = _mm256_set1_epi8(0x7F);
    for (int64_t n = p * NR; n < (p + 1) * NR && n < eb->N; n++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(eb->codes + n * eb->K + kb * 32));
        int s = eb->scales[n * eb->nkb + kb];
        if (_mm256_testz_si256(v, magnitude) && s != MX_E8M0_NAN) continue; /* zeros: nothing to fold */
        int any_special = _mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_and_si256(v, special_bits), special_bits));
        pi.ok &= !any_special && s >= lo && s <= hi;
        pi.smin = (uint8_t)(s < pi.smin ? s : pi.smin);
        pi.smax = (uint8_t)(s > pi.smax ? s : pi.smax);
    }
    return pi;
}

/*
 * Panels [p0, p1) of B: their rows' codes copied for the exact path, their
 * blocks' summaries, and the packed panels: each 32-block 16 columns at a
 * time folded (16 K-pairs each) and transposed into the K-pair rows. A
 * block that does not fold is left zero (the exact path has it).
 */
AVX512_TARGET static void prepare_panels(avx512_b *pb, const gemm_b *b, const uint8_t *bq, int64_t p0, int64_t p1)
{
    int64_t N = b->N, K = b->K, nkb = K / 32;
    const gemm_exact_b *eb = &pb->exact;
    gemm_exact_b_copy_codes(&pb->exact, bq, p0 * NR, p1 * NR < N ? p1 * NR : N);
    fold_lut lut = fold_lut_load(&pb->table[b->type], b->type);
    int lo = gemm_fold_scale_lo(GEMM_FOLD_BF16, b->type), hi = gemm_fold_scale_hi(b->type);
    unsigned special = gemm_fold_special_bits(b->type);
    for (int64_t p = p0; p < p1; p++) {
        uint32_t *panel = (uint32_t *)(pb->packed + p * K * NR);
        for (int64_t kb = 0; kb < nkb; kb++) {
            gemm_panel_info info = panel_block_info(eb, p, kb, lo, hi, special);
            pb->info[kb * pb->npanels + p] = info;
            uint32_t *out = panel + kb * 16 * NR;
            for (int64_t c0 = 0; c0 < NR; c0 += 16) {
                __m512i r[16];
                for (int64_t i = 0; i < 16; i++) {
                    int64_t n = p * NR + c0 + i;
                    r[i] = info.ok && n < N
                               ? fold32(eb->codes + n * K + kb * 32, eb->scales[n * nkb + kb], lo, hi, &lut)
                               : _mm512_setzero_si512();
                }
                transpose16(r);
                for (int kp = 0; kp < 16; kp++) _mm512_store_si512(out + kp * NR + c0, r[kp]);
            }
        }
    }
}

/* prepare_panels over a pool: task t of `tasks` takes its share of the panels. */
typedef struct prepare_job {
    avx512_b *pb;
    const gemm_b *b;
    const uint8_t *bq;
    int tasks;
} prepare_job;

static void prepare_task(void *arg, int t)
{
    const prepare_job *j = arg;
    int64_t n = j->pb->npanels;
    prepare_panels(j->pb, j->b, j->bq, n * t / j->tasks, n * (t + 1) / j->tasks);
}

void gemm_avx512_release(gemm_b *b)
{
    avx512_b *pb = b->data;
    if (!pb) return;
    free(pb->packed);
    free(pb->info);
    gemm_exact_b_free(&pb->exact);
    free(pb);
    b->data = NULL;
}

int gemm_avx512_prepare(gemm_b *b, const uint8_t *bq, const uint8_t *sb, int64_t ldsb, pool *workers,
                        a2amm_error *err)
{
    int64_t N = b->N, K = b->K, npanels = (N + NR - 1) / NR;
    if (npanels > INT64_MAX / 2 / NR / K)
        return a2amm_fail(err, A2AMM_E_OVERFLOW, "gemm avx512: B of %lld x %lld is too large to pack",
                          (long long)N, (long long)K);
    avx512_b *pb = calloc(1, sizeof *pb);
    if (!pb) return a2amm_fail(err, A2AMM_E_NOMEM, "gemm avx512: out of memory");
    b->data = pb;
    pb->npanels = npanels;
    size_t packed_bytes = (size_t)(npanels * K * NR) * sizeof(uint16_t);
    pb->packed = hugemem_alloc(packed_bytes); /* on 2 MB pages: fewer TLB misses, 1.01-1.03x with AMX */
    pb->info = malloc((size_t)(K / 32 * npanels) * sizeof *pb->info);
    if (!pb->packed || !pb->info || gemm_exact_b_alloc(&pb->exact, sb, N, K, ldsb, b->type) != A2AMM_OK) {
        gemm_avx512_release(b);
        return a2amm_fail(err, A2AMM_E_NOMEM, "gemm avx512: cannot allocate %.1f MB for B",
                          (double)packed_bytes * 1.5 / 1e6);
    }
    fold_table_build(&pb->table[A2AMM_E4M3], A2AMM_E4M3);
    fold_table_build(&pb->table[A2AMM_E5M2], A2AMM_E5M2);
    /* Tasks of a few panels each, so that a busy thread holds the others up little. */
    prepare_job job = {pb, b, bq, 1};
    if (workers) {
        int64_t tasks = 4 * (int64_t)pool_threads(workers);
        job.tasks = (int)(tasks < npanels ? tasks : npanels);
        pool_run(workers, prepare_task, &job, job.tasks);
    } else {
        prepare_task(&job, 0);
    }
    return A2AMM_OK;
}
