/*
 * What the AVX-512 level's two halves share (private to gemm_avx512*.c):
 * the prepared B (gemm_avx512_prepare.c builds it, gemm_avx512.c runs on
 * it) and the fp8 -> bf16 conversion both use.
 *
 * Packed B (prepared once): panels of NR = 64 columns (the last one padded
 * with zeros), each K/2 K-pairs deep; K-pair kp of panel p holds 64 dwords,
 * dword c = (bf16 B[2kp][64p + c], bf16 B[2kp + 1][64p + c]) with B's block
 * scale folded in. A block-panel the fold rule refuses (gemm_fold.h) is
 * packed as zeros and taken by the exact path.
 * Conversion: vpermi2b looks the low and the high byte of each bf16 up in two
 * 128-entry tables (by magnitude); the scale is an add to the exponent field
 * of the nonzero values; no per-element branch anywhere.
 */
#ifndef A2AMM_GEMM_AVX512_INTERNAL_H
#define A2AMM_GEMM_AVX512_INTERNAL_H

#include <immintrin.h>
#include <stdint.h>

#include "common/error.h"
#include "common/pool.h"
#include "gemm/gemm_exact.h"
#include "gemm/gemm_internal.h"

#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16,avx512vbmi")))
#define AVX512_INLINE static inline __attribute__((always_inline)) AVX512_TARGET

enum { NR = 64 }; /* columns of a panel (4 zmm of 16 fp32) */

/* bf16 bits of each fp8 magnitude (NaN/Inf: 0), split in bytes for vpermi2b. */
typedef struct fold_table {
    uint8_t lo[128], hi[128];
    float value[256]; /* each code's value, for the exact path */
} fold_table;

typedef struct avx512_b {
    uint16_t *packed;      /* npanels panels of K * NR bf16, 64-byte aligned */
    gemm_panel_info *info; /* [nkb][npanels] */
    int64_t npanels;
    gemm_exact_b exact;
    fold_table table[2]; /* by a2amm_fp8_type */
} avx512_b;

/* Fills b->data with B's panels (see above), the work spread over `workers` if not NULL. */
int gemm_avx512_prepare(gemm_b *b, const uint8_t *bq, const uint8_t *sb, int64_t ldsb, pool *workers,
                        a2amm_error *err);
void gemm_avx512_release(gemm_b *b);

/* ---- fp8 -> bf16 with the scale folded in ------------------------------- */

typedef struct fold_lut {
    __m512i lo0, lo1, hi0, hi1, special;
} fold_lut;

AVX512_INLINE fold_lut fold_lut_load(const fold_table *t, a2amm_fp8_type type)
{
    return (fold_lut){_mm512_loadu_si512(t->lo), _mm512_loadu_si512(t->lo + 64), _mm512_loadu_si512(t->hi),
                      _mm512_loadu_si512(t->hi + 64),
                      _mm512_set1_epi16((short)gemm_fold_special_bits(type))};
}

/*
 * The 32 codes at `codes` as bf16 with `offset` = (scale - 127) << 7 added to
 * the exponent of every nonzero value: 16 dwords of K-pairs. Valid where the
 * block folds; *special says whether it holds a NaN/Inf code, *zero whether
 * every value is zero.
 */
AVX512_INLINE __m512i fold32_unchecked(const uint8_t *codes, short offset, const fold_lut *t, int *special,
                                       int *zero)
{
    /* Each word holds its code twice: the low byte picks the low table, the high one the high. */
    const __m512i dup = _mm512_set_epi8(31, 31, 30, 30, 29, 29, 28, 28, 27, 27, 26, 26, 25, 25, 24, 24, 23, 23,
                                        22, 22, 21, 21, 20, 20, 19, 19, 18, 18, 17, 17, 16, 16, 15, 15, 14, 14,
                                        13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8, 7, 7, 6, 6, 5, 5, 4, 4, 3, 3,
                                        2, 2, 1, 1, 0, 0);
    __m512i idx = _mm512_permutexvar_epi8(dup, _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)codes)));
    __m512i lo_bytes = _mm512_permutex2var_epi8(t->lo0, idx, t->lo1);
    __m512i hi_bytes = _mm512_permutex2var_epi8(t->hi0, idx, t->hi1);
    __m512i v = _mm512_mask_blend_epi8((__mmask64)0xAAAAAAAAAAAAAAAAull, lo_bytes, hi_bytes);
    __mmask32 nonzero = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x7F));
    *zero = nonzero == 0;
    v = _mm512_mask_add_epi16(v, nonzero, v, _mm512_set1_epi16(offset));
    *special = _mm512_cmpeq_epi16_mask(_mm512_and_si512(idx, t->special), t->special) != 0;
    return _mm512_ternarylogic_epi32(v, idx, _mm512_set1_epi16((short)0x8000), 0xF8); /* v | (idx & sign) */
}

#endif
