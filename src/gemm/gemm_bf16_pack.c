/*
 * The bf16 packing of B and of A's rows (layouts: gemm_bf16_pack.h), for
 * the avx512 and amx levels: fp8 -> bf16 with the block scale folded in,
 * B transposed into K-pair rows.
 */
#include "gemm/gemm_bf16_pack.h"

#include <immintrin.h>
#include <pthread.h>
#include <string.h>

#include "gemm/gemm_exact.h"
#include "gemm/gemm_fold.h"
#include "mx/mx.h"

/* bf16 bits of each fp8 magnitude (NaN/Inf: 0), split in bytes for vpermi2b. */
typedef struct fold_table {
    uint8_t lo[128], hi[128];
} fold_table;

static fold_table tables[2]; /* by a2amm_fp8_type */
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void tables_build(void)
{
    for (int type = 0; type < 2; type++)
        for (int m = 0; m < 128; m++) {
            uint32_t bits = 0;
            float value = mx_fp8_to_f32((uint8_t)m, (a2amm_fp8_type)type);
            if (!gemm_fold_code_special((unsigned)m, (a2amm_fp8_type)type)) memcpy(&bits, &value, sizeof bits);
            tables[type].lo[m] = (uint8_t)(bits >> 16);
            tables[type].hi[m] = (uint8_t)(bits >> 24);
        }
}

static const fold_table *table_of(a2amm_fp8_type type)
{
    pthread_once(&tables_once, tables_build);
    return &tables[type];
}

/* ---- fp8 -> bf16 with the scale folded in ------------------------------- */

typedef struct fold_lut {
    __m512i lo0, lo1, hi0, hi1, special;
} fold_lut;

AVX512_INLINE fold_lut fold_lut_load(a2amm_fp8_type type)
{
    const fold_table *t = table_of(type);
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

/* fold32_unchecked, zero unless the block folds: scale in [lo, hi], no NaN/Inf. */
AVX512_INLINE __m512i fold32(const uint8_t *codes, int scale, int lo, int hi, const fold_lut *t)
{
    int special, zero;
    __m512i v = fold32_unchecked(codes, (short)((scale - 127) * 128), t, &special, &zero);
    int ok = !special && scale >= lo && scale <= hi;
    return _mm512_maskz_mov_epi32((__mmask16)-ok, v);
}

/* ---- B ------------------------------------------------------------------ */

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
 * Panels [p0, p1): each 32-block 16 columns at a time folded (16 K-pairs
 * each) and transposed into the K-pair rows. A block b->info does not mark
 * ok is left zero (the exact path has it).
 */
/* Panels [p0, p1) of packed B, in the plain layout or (pieces) in pieces (gemm_bf16_pack.h). */
AVX512_TARGET static void pack_b_panels(const gemm_b *b, const uint8_t *bq, int64_t p0, int64_t p1, int pieces)
{
    const int64_t N = b->N, K = b->K, nkb = K / 32;
    const gemm_exact_b *eb = &b->exact;
    fold_lut lut = fold_lut_load(b->type);
    int lo = gemm_fold_scale_lo(GEMM_FOLD_BF16, b->type), hi = gemm_fold_scale_hi(b->type);
    for (int64_t p = p0; p < p1; p++) {
        uint32_t *panel = (uint32_t *)((char *)b->packed + p * nkb * BF16_B_BLOCK);
        for (int64_t kb = 0; kb < nkb; kb++) {
            int ok = b->info[kb * b->npanels + p].ok;
            for (int64_t c0 = 0; c0 < BF16_NR; c0 += 16) {
                /* where K-pair row kp of this block's columns c0.. goes, and the rows' distance */
                uint32_t *out = panel + kb * 16 * BF16_NR + c0;
                int64_t ld = BF16_NR;
                if (pieces) {
                    out = (uint32_t *)bf16_piece_at(panel, nkb, kb, (int)(c0 / 32)) + c0 % 32;
                    ld = BF16_NR / 2;
                }
                __m512i r[16];
                for (int64_t i = 0; i < 16; i++) {
                    int64_t n = p * BF16_NR + c0 + i;
                    r[i] = ok && n < N ? fold32(bq + n * K + kb * 32, eb->scales[n * nkb + kb], lo, hi, &lut)
                                       : _mm512_setzero_si512();
                }
                transpose16(r);
                for (int kp = 0; kp < 16; kp++) _mm512_store_si512(out + kp * ld, r[kp]);
            }
        }
    }
}

void gemm_bf16_pack_b(const gemm_b *b, const uint8_t *bq, int64_t p0, int64_t p1) { pack_b_panels(b, bq, p0, p1, 0); }

void gemm_bf16_pack_b_pieces(const gemm_b *b, const uint8_t *bq, int64_t p0, int64_t p1)
{
    pack_b_panels(b, bq, p0, p1, 1);
}

/* ---- A ------------------------------------------------------------------ */

/* One row's nblk blocks, and their fold states, 32 blocks' scales at a time. */
AVX512_TARGET void gemm_bf16_pack_a_row(const uint8_t *codes, const uint8_t *scales, int64_t nblk, a2amm_fp8_type type,
                                        void *row, int16_t *state)
{
    fold_lut lut = fold_lut_load(type);
    const __m512i lo = _mm512_set1_epi16((short)gemm_fold_scale_lo(GEMM_FOLD_BF16, type));
    const __m512i hi = _mm512_set1_epi16((short)gemm_fold_scale_hi(type));
    const __mmask32 blocks = (__mmask32)(nblk >= 32 ? ~0u : (1u << nblk) - 1);
    int16_t offset[32] __attribute__((aligned(64)));
    __m512i scale = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(_mm512_maskz_loadu_epi8(blocks, scales)));
    __mmask32 in_range = _mm512_cmpge_epi16_mask(scale, lo) & _mm512_cmple_epi16_mask(scale, hi);
    _mm512_store_si512(offset, _mm512_slli_epi16(_mm512_sub_epi16(scale, _mm512_set1_epi16(127)), 7));
    uint32_t *out = row, special = 0, zero = 0;
    for (int64_t j = 0; j < nblk; j++) {
        int sp, z;
        _mm512_store_si512(out + j * 16, fold32_unchecked(codes + j * 32, offset[j], &lut, &sp, &z));
        special |= (uint32_t)sp << j;
        zero |= (uint32_t)z << j;
    }
    /* Zeros add nothing whatever their scale (but NaN); the rest must fold. */
    __mmask32 zeros = zero & _mm512_cmpneq_epi16_mask(scale, _mm512_set1_epi16(MX_E8M0_NAN)) & blocks;
    __mmask32 ok = in_range & ~special & ~zeros & blocks, refused = blocks & ~ok & ~zeros;
    for (; refused; refused &= refused - 1) /* rare: the exact path takes these */
        _mm512_store_si512(out + __builtin_ctz(refused) * 16, _mm512_setzero_si512());
    __m512i st = _mm512_mask_blend_epi16(zeros, _mm512_set1_epi16(GEMM_A_UNFOLDABLE), _mm512_set1_epi16(GEMM_A_ZERO));
    _mm512_mask_storeu_epi16(state, blocks, _mm512_mask_blend_epi16(ok, st, scale));
}

/* ---- B in fp8, in the panels' order (the small-M path reads it) ---------- */

/*
 * Where the code of word i (column i / 2 of the 16, k parity i % 2) of a
 * 16-column group lies in its 64-byte half of a K-pair row: in the low byte
 * of word i for group 0 and in the high byte for group 1, so that the
 * microkernel's shifts of the half's 32 words give each group's K-pair
 * words in place (dword j: columns j of both groups, k even then odd).
 */
static inline int b8_byte(int group, int i) { return 4 * (i / 2) + 2 * (i % 2) + group; }

/*
 * Panels [p0, p1) of B in fp8: per 32-block, the columns' scales, then 16
 * columns at a time their 16 code pairs (words) transposed into the K-pair
 * rows (through dwords, with transpose16), each row's halves in the order
 * b8_byte says.
 */
AVX512_TARGET void gemm_bf16_pack_b8(const gemm_b *b, const uint8_t *bq, int64_t p0, int64_t p1)
{
    const int64_t N = b->N, K = b->K, nkb = K / 32;
    uint8_t order[64] __attribute__((aligned(64))); /* natural position of the byte at each position */
    for (int g = 0; g < 2; g++)
        for (int i = 0; i < 32; i++) order[b8_byte(g, i)] = (uint8_t)(32 * g + i);
    const __m512i to_order = _mm512_load_si512(order);
    for (int64_t p = p0; p < p1; p++)
        for (int64_t kb = 0; kb < nkb; kb++) {
            uint8_t *blk = b->exact.codes + (p * nkb + kb) * BF16_B8_BLOCK;
            __m256i rows[4][16]; /* [group of 16 columns][K-pair]: 16 words */
            for (int64_t g = 0; g < 4; g++) {
                __m512i r[16];
                for (int64_t i = 0; i < 16; i++) {
                    int64_t n = p * BF16_NR + 16 * g + i;
                    blk[16 * g + i] = n < N ? b->exact.scales[n * nkb + kb] : 0;
                    r[i] = n < N ? _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(bq + n * K + kb * 32)))
                                 : _mm512_setzero_si512();
                }
                transpose16(r);
                for (int kp = 0; kp < 16; kp++) rows[g][kp] = _mm512_cvtepi32_epi16(r[kp]);
            }
            for (int kp = 0; kp < 16; kp++)
                for (int h = 0; h < 2; h++) {
                    __m512i natural = _mm512_inserti64x4(_mm512_castsi256_si512(rows[2 * h][kp]), rows[2 * h + 1][kp], 1);
                    _mm512_storeu_si512(blk + 64 + kp * 128 + 64 * h, _mm512_permutexvar_epi8(to_order, natural));
                }
        }
}

uint8_t gemm_bf16_b8_block_codes(const gemm_exact_b *eb, int64_t n, int64_t kb, uint8_t out[32])
{
    const uint8_t *blk = eb->codes + (n / BF16_NR * eb->nkb + kb) * BF16_B8_BLOCK;
    const int c = (int)(n % BF16_NR), half = c / 32, group = c % 32 / 16, col = c % 16;
    for (int kp = 0; kp < 16; kp++)
        for (int e = 0; e < 2; e++) out[2 * kp + e] = blk[64 + kp * 128 + 64 * half + b8_byte(group, 2 * col + e)];
    return blk[c];
}

const uint8_t *gemm_bf16_lut(a2amm_fp8_type type)
{
    return table_of(type)->lo;
}
