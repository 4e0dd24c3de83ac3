/*
 * The avx2 level (AVX2 + FMA), for CPUs without AVX-512 BF16: MXFP8 -> fp32
 * packing with the block scales folded in, and a 6 x 16 register-blocked
 * vfmadd231ps microkernel. Each call sums its chunk into zeroed
 * accumulators, k ascending, and adds them to C (or to +0.0f) once.
 *
 * Packed B (prepared once): panels of NR = 16 columns (the last one padded
 * with zeros), K rows deep; row k of panel p holds the 16 folded values
 * B[k][16p .. 16p + 15]. Packed A: rows of KC fp32 (one chunk), A's block
 * scale folded in. A block the fold rule refuses (gemm_fold.h, fp32 form)
 * is packed as zeros and taken by the exact path.
 *
 * Folding builds each value from its bits as a float times 2^120 (E4M3) or
 * 2^112 (E5M2), subnormal fp8 values passing through fp32 subnormals, then
 * times 2^(scale - 127): exact under the default MXCSR (no FTZ/DAZ), which
 * the whole library assumes.
 */
#include <immintrin.h>
#include <string.h>

#include "gemm/gemm_bf16_round.h"
#include "gemm/gemm_exact.h"
#include "gemm/gemm_level.h"
#include "gemm/gemm_widen_avx2.h"
#include "mx/mx.h"

#define AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define AVX2_INLINE static inline __attribute__((always_inline)) AVX2_TARGET

enum {
    MR = 6,   /* rows of a microkernel call */
    NR = 16,  /* columns of a panel (2 ymm of 8 fp32) */
    KC = 512, /* K of a chunk: a panel's chunk of B (32 KB) stays in L1 */
    PREFETCH_K = 16, /* the microkernel prefetches one line of the next panel every 16 k */
    B8_BLOCK = NR + 32 * NR, /* B in fp8: a 32-block of a panel, its 16 scales then 32 rows of 16 codes */
    B8_AHEAD = 1024          /* bytes of B in fp8 brought into L1 ahead of their use (the small-M path) */
};

/* ---- fp8 -> fp32 with the scale folded in ------------------------------- */

/*
 * The 32 codes at `codes` times 2^(scale - 127) into out[0..31]; zeros
 * unless the block folds (scale <= hi, no NaN/Inf). Returns the block's fold
 * state (see gemm_exact.h): the scale, GEMM_A_ZERO or GEMM_A_UNFOLDABLE.
 */
AVX2_INLINE int fold32(const uint8_t *codes, int scale, int hi, a2amm_fp8_type type, float *out)
{
    int shift = type == A2AMM_E4M3 ? 20 : 21; /* magnitude bits to fp32's exponent + mantissa */
    __m256 rebias = _mm256_set1_ps(type == A2AMM_E4M3 ? 0x1p120f : 0x1p112f);
    uint32_t scale_bits = scale > 0 ? (uint32_t)scale << 23 : 0x00400000u; /* 2^(scale - 127) */
    __m256 factor = _mm256_castsi256_ps(_mm256_set1_epi32((int)scale_bits));
    __m256i special = _mm256_set1_epi32((int)gemm_fold_special_bits(type));
    __m256i magnitude_mask = _mm256_set1_epi32(0x7F), any_special = _mm256_setzero_si256();
    __m256i any_nonzero = _mm256_setzero_si256();
    __m256 v[4];
    for (int q = 0; q < 4; q++) {
        __m256i code = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(codes + 8 * q)));
        __m256i magnitude = _mm256_and_si256(code, magnitude_mask);
        any_nonzero = _mm256_or_si256(any_nonzero, magnitude);
        any_special = _mm256_or_si256(
            any_special, _mm256_cmpeq_epi32(_mm256_and_si256(magnitude, special), special));
        __m256 x = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_sll_epi32(magnitude, _mm_cvtsi32_si128(shift))), rebias);
        x = _mm256_mul_ps(x, factor);
        __m256i sign = _mm256_slli_epi32(_mm256_srli_epi32(code, 7), 31);
        v[q] = _mm256_or_ps(x, _mm256_castsi256_ps(sign));
    }
    int ok = _mm256_testz_si256(any_special, any_special) && scale <= hi;
    __m256 keep = _mm256_castsi256_ps(_mm256_set1_epi32(-ok));
    for (int q = 0; q < 4; q++) _mm256_storeu_ps(out + 8 * q, _mm256_and_ps(v[q], keep));
    if (_mm256_testz_si256(any_nonzero, any_nonzero) && scale != MX_E8M0_NAN) return GEMM_A_ZERO;
    return ok ? scale : GEMM_A_UNFOLDABLE;
}

/* ---- B ------------------------------------------------------------------ */

/*
 * Panels [p0, p1): per panel and K-block, the 16 columns' folded values
 * into a tile, then written out as 32 whole 64-byte rows of the panel, in
 * order (writing column by column touched a new line per value).
 */
AVX2_TARGET static void avx2_pack_b(const gemm_b *b, const uint8_t *bq, int64_t p0, int64_t p1)
{
    const int64_t N = b->N, K = b->K, nkb = K / 32;
    const gemm_exact_b *eb = &b->exact;
    int hi = gemm_fold_scale_hi(b->type);
    float tile[NR][32];
    for (int64_t p = p0; p < p1; p++) {
        float *panel = (float *)b->packed + p * K * NR;
        int64_t n0 = p * NR, cols = N - n0 < NR ? N - n0 : NR;
        for (int64_t kb = 0; kb < nkb; kb++) {
            float *dst = panel + kb * 32 * NR;
            if (!b->info[kb * b->npanels + p].ok) { /* exact path: zeros */
                memset(dst, 0, 32 * NR * sizeof *dst);
                continue;
            }
            for (int c = 0; c < NR; c++) {
                if (c < cols)
                    fold32(bq + (n0 + c) * K + kb * 32, eb->scales[(n0 + c) * nkb + kb], hi, b->type, tile[c]);
                else
                    memset(tile[c], 0, sizeof tile[c]); /* the last panel's padding */
            }
            for (int t = 0; t < 32; t++)
                for (int c = 0; c < NR; c++) dst[t * NR + c] = tile[c][t];
        }
    }
}

/*
 * B in fp8 (the small-M path, and the exact path's copy of B): per panel and
 * 32-block, the 16 columns' scale bytes, then the block's 32 rows of the
 * panel's 16 codes (row t: B[32kb + t][16p .. 16p + 15]), the order the
 * microkernel widens them in; columns past N are zeros.
 */
/* x[c]: 16 bytes of column c; out[t]: byte c of each column's byte t (a 16 x 16 byte transpose). */
AVX2_INLINE void transpose16x16(const __m128i x[16], __m128i out[16])
{
    __m128i s1[8][2], s2[4][2][2], s3[2][2][2][2];
    for (int k = 0; k < 8; k++) {
        s1[k][0] = _mm_unpacklo_epi8(x[2 * k], x[2 * k + 1]);
        s1[k][1] = _mm_unpackhi_epi8(x[2 * k], x[2 * k + 1]);
    }
    for (int m = 0; m < 4; m++)
        for (int h = 0; h < 2; h++) {
            s2[m][h][0] = _mm_unpacklo_epi16(s1[2 * m][h], s1[2 * m + 1][h]);
            s2[m][h][1] = _mm_unpackhi_epi16(s1[2 * m][h], s1[2 * m + 1][h]);
        }
    for (int q = 0; q < 2; q++)
        for (int h = 0; h < 2; h++)
            for (int g = 0; g < 2; g++) {
                s3[q][h][g][0] = _mm_unpacklo_epi32(s2[2 * q][h][g], s2[2 * q + 1][h][g]);
                s3[q][h][g][1] = _mm_unpackhi_epi32(s2[2 * q][h][g], s2[2 * q + 1][h][g]);
            }
    for (int h = 0; h < 2; h++)
        for (int g = 0; g < 2; g++)
            for (int e = 0; e < 2; e++) {
                out[8 * h + 4 * g + 2 * e] = _mm_unpacklo_epi64(s3[0][h][g][e], s3[1][h][g][e]);
                out[8 * h + 4 * g + 2 * e + 1] = _mm_unpackhi_epi64(s3[0][h][g][e], s3[1][h][g][e]);
            }
}

AVX2_TARGET static void avx2_pack_b8(const gemm_b *b, const uint8_t *bq, int64_t p0, int64_t p1)
{
    const int64_t N = b->N, K = b->K, nkb = K / 32;
    for (int64_t p = p0; p < p1; p++)
        for (int64_t kb = 0; kb < nkb; kb++) {
            uint8_t *blk = b->exact.codes + (p * nkb + kb) * B8_BLOCK;
            __m128i x[2][NR], rows[NR];
            for (int64_t c = 0; c < NR; c++) {
                const int64_t n = p * NR + c;
                const uint8_t *src = bq + n * K + kb * 32;
                blk[c] = n < N ? b->exact.scales[n * nkb + kb] : 0;
                for (int h = 0; h < 2; h++)
                    x[h][c] = n < N ? _mm_loadu_si128((const __m128i *)(src + 16 * h)) : _mm_setzero_si128();
            }
            for (int h = 0; h < 2; h++) {
                transpose16x16(x[h], rows);
                for (int t = 0; t < 16; t++) _mm_storeu_si128((__m128i *)(blk + NR + (16 * h + t) * NR), rows[t]);
            }
        }
}

static uint8_t avx2_b8_block_codes(const gemm_exact_b *eb, int64_t n, int64_t kb, uint8_t out[32])
{
    const uint8_t *blk = eb->codes + (n / NR * eb->nkb + kb) * B8_BLOCK;
    const int c = (int)(n % NR);
    for (int t = 0; t < 32; t++) out[t] = blk[NR + t * NR + c];
    return blk[c];
}

/* ---- A ------------------------------------------------------------------ */

AVX2_TARGET static void avx2_pack_a_row(const uint8_t *codes, const uint8_t *scales, int64_t nblk,
                                        a2amm_fp8_type type, void *row, int16_t *state)
{
    int hi = gemm_fold_scale_hi(type);
    for (int64_t j = 0; j < nblk; j++) state[j] = (int16_t)fold32(codes + j * 32, scales[j], hi, type, (float *)row + j * 32);
}

/* ---- The microkernel ------------------------------------------------------ */

/* A tile's start: the C lines it will read or write brought in, the accumulators zeroed. */
AVX2_INLINE void tile_begin(const int rows, const gemm_tile *t, __m256 acc[MR][2])
{
    const float *c_first = t->c_in ? t->c_in : (t->out ? NULL : t->c_out);
    const int64_t ld_first = t->c_in ? t->ldc_in : t->ldc_out;
    if (c_first)
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++) _mm_prefetch((const char *)(c_first + r * ld_first), _MM_HINT_T0);
#pragma GCC unroll 8
    for (int r = 0; r < rows; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
}

/* c_in (or +0.0f where there is no C: the bits of C = 0 followed by C += acc) + acc, to c_out or rounded to out. */
AVX2_INLINE void tile_end(const int rows, __m256 acc[MR][2], const gemm_tile *t)
{
#pragma GCC unroll 8
    for (int r = 0; r < rows; r++)
#pragma GCC unroll 2
        for (int g = 0; g < 2; g++) {
            __m256 c = t->c_in ? _mm256_loadu_ps(t->c_in + r * t->ldc_in + 8 * g) : _mm256_setzero_ps();
            __m256 sum = _mm256_add_ps(c, acc[r][g]);
            if (t->out) _mm_storeu_si128((__m128i *)(t->out + r * t->ldo + 8 * g), gemm_bf16_round8(sum));
            else _mm256_storeu_ps(t->c_out + r * t->ldc_out + 8 * g, sum);
        }
}

/* One k: each row's A value (a, rows KC apart) times B's 16 columns (b0, b1) into its accumulators. */
AVX2_INLINE void tile_step(const int rows, __m256 acc[MR][2], const float *a, __m256 b0, __m256 b1)
{
#pragma GCC unroll 8
    for (int r = 0; r < rows; r++) {
        __m256 av = _mm256_broadcast_ss(a + r * KC);
        acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
    }
}

/* acc[r][g] = sum over k of A row r times B columns 8g..8g+7; then c_in + acc to c_out or out. */
AVX2_INLINE void tile_kernel(const int rows, const gemm_tile *t)
{
    const int64_t kc = t->k[0];
    __m256 acc[MR][2];
    tile_begin(rows, t, acc);
    const float *a = t->a[0], *b = t->b[0];
    const char *prefetch = t->prefetch;
    for (int64_t k = 0; k < kc; k += PREFETCH_K) {
        if (prefetch < t->prefetch_end) {
            _mm_prefetch(prefetch, _MM_HINT_T0);
            prefetch += 64;
        }
#pragma GCC unroll 4
        for (int u = 0; u < PREFETCH_K; u++, a++, b += NR) {
            __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
            tile_step(rows, acc, a, b0, b1);
        }
    }
    tile_end(rows, acc, t);
}

/* The factors 2^(scale - 127) of 8 columns from their scale bytes (the low 8 of `scales`), as fold32 makes them. */
AVX2_INLINE __m256 widen_factors(__m128i scales)
{
    __m256i s = _mm256_cvtepu8_epi32(scales);
    __m256i bits = _mm256_slli_epi32(s, 23);
    return _mm256_castsi256_ps(
        _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x00400000), _mm256_cmpeq_epi32(s, _mm256_setzero_si256())));
}

/*
 * 8 codes of a row (raw's low 8 bytes) widened to fp32 with their columns' factors, fold32's
 * values: each code exactly as fp16 (E5M2 is fp16's top byte; E4M3's
 * magnitude 7 places up is fp16 of 2^-8 the value, its sign put in fp16's),
 * vcvtph2ps (exact, and never an fp32 subnormal: fold32's way builds
 * subnormal codes' values through fp32 subnormals, and each such operand
 * costs a microcode assist on Intel: 20x slower on blocks with a subnormal
 * or zero code), then E4M3 times 256 (exact), then one multiply by the
 * factor: the same single rounding as fold32's, so its bits.
 */
AVX2_INLINE __m256 widen8(__m128i raw, int e4m3, __m256 factor)
{
    __m256 x;
    if (e4m3) {
        __m128i h = _mm_and_si128(_mm_slli_epi16(_mm_cvtepi8_epi16(raw), 7), _mm_set1_epi16((short)0xBF80));
        x = _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f));
    } else {
        x = _mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(raw), 8));
    }
    return _mm256_mul_ps(x, factor);
}

/*
 * The small-M kernels' accumulators hold a panel's 16 columns in one of
 * two orders, the one their widening of normal blocks gives (the exact
 * blocks' codes and factors are shuffled into it: order_columns), and put
 * them back in order once a tile (columns_in_order); each column's sums are
 * the same FMAs in the same order either way, so the bits do not change.
 * - ORDER_LANES (the tile kernel, widen16_normal's unpacking within 128-bit
 *   lanes): the first ymm columns 0-3 and 8-11, the second 4-7 and 12-15;
 * - ORDER_STRIDE4 (the panels kernel, widen16_madd): the first 0, 4, 8, 12,
 *   1, 5, 9, 13, the second 2, 6, 10, 14, 3, 7, 11, 15.
 */
enum { ORDER_LANES, ORDER_STRIDE4 };

AVX2_INLINE void columns_in_order(const int order, __m256 *x0, __m256 *x1)
{
    if (order == ORDER_LANES) {
        lanes_in_order(x0, x1);
        return;
    }
    /* a 4 x 4 transpose of column 4q + r at (r, q): [0 4 8 12 | 1 5 9 13] [2 6 10 14 | 3 7 11 15] */
    const __m256 p = _mm256_permute2f128_ps(*x0, *x1, 0x20), q = _mm256_permute2f128_ps(*x0, *x1, 0x31);
    const __m256d lo = _mm256_castps_pd(_mm256_unpacklo_ps(p, q)), hi = _mm256_castps_pd(_mm256_unpackhi_ps(p, q));
    *x0 = _mm256_castpd_ps(_mm256_permute4x64_pd(lo, _MM_SHUFFLE(3, 1, 2, 0)));
    *x1 = _mm256_castpd_ps(_mm256_permute4x64_pd(hi, _MM_SHUFFLE(3, 1, 2, 0)));
}

/*
 * 16 bytes of 16 columns in the accumulators' order, the first ymm's 8 in the low bytes, the second's in
 * the high (a shuffle within the register, where swapping the widened halves crossed lanes: 8 uops a row
 * on Zen 1).
 */
AVX2_INLINE __m128i order_columns(const int order, __m128i x)
{
    if (order == ORDER_LANES) return _mm_shuffle_epi32(x, _MM_SHUFFLE(3, 1, 2, 0));
    return _mm_shuffle_epi8(x, _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
}

/* (bias + scale - 127) << 7 for 16 columns in 16-bit lanes, in the order the widening's words hold the
 * columns (ORDER_LANES: in order; ORDER_STRIDE4: the even columns, then the odd): what it adds to the top
 * halves. */
AVX2_INLINE __m256i offsets16_of(__m128i scales, int bias)
{
    const __m256i s = _mm256_cvtepu8_epi16(scales);
    return _mm256_slli_epi16(_mm256_add_epi16(s, _mm256_set1_epi16((short)(bias - 127))), 7);
}

AVX2_INLINE __m256i widen_offsets16(const int order, const uint8_t *scales, int bias)
{
    __m128i bytes = _mm_loadu_si128((const __m128i *)scales);
    if (order == ORDER_STRIDE4)
        bytes = _mm_shuffle_epi8(bytes, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    return offsets16_of(bytes, bias);
}

/* The multipliers of widen16_madd: 2^4 (E4M3) or 2^5 (E5M2) on the even bytes in the low lane, the odd in the
 * high. */
AVX2_INLINE __m256i widen_madd_mul(int e4m3)
{
    const short m = e4m3 ? 16 : 32;
    return _mm256_set_m128i(_mm_set1_epi16((short)(m << 8)), _mm_set1_epi16(m));
}

/*
 * widen16_normal's values in ORDER_STRIDE4, with one shift or shuffle where
 * it takes four: the row's 16 codes in both lanes (a load), one vpmaddubsw
 * giving each code sign-extended times 2^4 or 2^5 (widen_madd_mul;
 * exact, at most 2^12), the even columns in the low lane, the odd in the
 * high; keep16 and off16 (ORDER_STRIDE4's) as there; then the words'
 * dwords split by a shift (the even words to the top halves) and a mask
 * (the odd). The shuffle and shift pipes the other way needs bound the
 * one-row kernel (Zen 4: 2.46 -> 2.1 cycles a 16 codes in a standalone
 * loop); from 3 rows the FMAs share the multiply's pipe (4 and 6 rows 5%
 * slower so), so the tile kernel keeps widen16_normal.
 */
AVX2_INLINE void widen16_madd(const uint8_t *codes, int e4m3, __m256i keep16, __m256i off16, __m256 *b0,
                              __m256 *b1)
{
    const __m256i x = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)codes));
    const __m256i w =
        _mm256_add_epi16(_mm256_and_si256(_mm256_maddubs_epi16(widen_madd_mul(e4m3), x), keep16), off16);
    *b0 = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    *b1 = _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32((int)0xFFFF0000u)));
}

enum { BLOCK_ZEROS, BLOCK_NORMAL, BLOCK_EXACT };

/*
 * How a block of B in fp8 widens: zeros where the fold rule refused it;
 * by integers where every code is normal (no zero or subnormal code, which
 * the shift cannot make a float: the panel info's normal, so `special` is
 * clear) and every scale is at least 15 (the results stay normal floats:
 * the fold rule bounds them above); else by widen8's multiplies (subnormal
 * results through fp32 subnormals).
 */
AVX2_INLINE int block_mode(const uint8_t *blk, int refused, int special)
{
    if (refused) return BLOCK_ZEROS;
    if (special) return BLOCK_EXACT;
    __m128i low = _mm_cmpeq_epi8(_mm_min_epu8(_mm_loadu_si128((const __m128i *)blk), _mm_set1_epi8(15)),
                                 _mm_set1_epi8(15));
    return _mm_movemask_epi8(low) == 0xFFFF ? BLOCK_NORMAL : BLOCK_EXACT;
}

/* The factors of a block's 16 columns (its scale bytes) in the accumulators' order: f0 for the first ymm's
 * columns, f1 for the second's. */
AVX2_INLINE void ordered_factors(const int order, const uint8_t *scales, __m256 *f0, __m256 *f1)
{
    const __m128i s = order_columns(order, _mm_loadu_si128((const __m128i *)scales));
    *f0 = widen_factors(s), *f1 = widen_factors(_mm_unpackhi_epi64(s, s));
}

/* A row of 16 codes as two ymm of fp32 in the accumulators' order, the way its block widens (block_mode):
 * zeros, integers (off16: widen_offsets16 in that order) or multiplies (f0, f1: ordered_factors). */
AVX2_INLINE void widen_row(const int order, int mode, const uint8_t *row, const int e4m3, __m256i keep16,
                           __m256i off16, __m256 f0, __m256 f1, __m256 *b0, __m256 *b1)
{
    *b0 = *b1 = _mm256_setzero_ps();
    if (mode == BLOCK_NORMAL) {
        if (order == ORDER_STRIDE4) widen16_madd(row, e4m3, keep16, off16, b0, b1);
        else widen16_normal(row, e4m3, keep16, off16, b0, b1);
    } else if (mode == BLOCK_EXACT) {
        const __m128i codes = order_columns(order, _mm_loadu_si128((const __m128i *)row));
        *b0 = widen8(codes, e4m3, f0);
        *b1 = widen8(_mm_unpackhi_epi64(codes, codes), e4m3, f1);
    }
}

/*
 * tile_kernel on B in fp8: each row of 16 codes widened to fp32 as it is
 * used (2 x 8 values: the bits of the packed fp32 values, fed to the same
 * FMAs in the same order; block_mode says how), a refused block as zeros.
 * B comes from memory once: the next call's fp8 into L2 (prefetch, a line
 * every 4 k) and this call's lines 1 KB ahead into L1.
 */
AVX2_INLINE void tile_kernel8_of(const int rows, const gemm_tile *t, const int e4m3)
{
    const int64_t nblk = t->k[0] / 32;
    const __m256i keep16 = widen_keep16(e4m3);
    const int bias = e4m3 ? 120 : 112;
    __m256 acc[MR][2];
    tile_begin(rows, t, acc);
    const float *a = t->a[0];
    const uint8_t *blk = t->b[0];
    const char *prefetch = t->prefetch;
    for (int64_t j = 0; j < nblk; j++, blk += B8_BLOCK) {
        const int mode = block_mode(blk, (t->b_refused[0] >> j) & 1, (t->b_special[0] >> j) & 1);
        const __m256i off16 = widen_offsets16(ORDER_LANES, blk, bias);
        /* the common case, its own loop: no test of the mode a row (written out: one helper for both
         * loops, the mode a constant in this one, ran 6 rows 1.2x slower, GCC's registers) */
        if (mode == BLOCK_NORMAL) {
            for (int k = 0; k < 32; k += 4) {
                const uint8_t *row = blk + NR + k * NR;
                if (prefetch < t->prefetch_end) {
                    _mm_prefetch(prefetch, _MM_HINT_T1);
                    prefetch += 64;
                }
                _mm_prefetch((const char *)row + B8_AHEAD, _MM_HINT_T0);
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++, a++, row += NR) {
                    __m256 b0, b1;
                    widen16_normal(row, e4m3, keep16, off16, &b0, &b1);
                    tile_step(rows, acc, a, b0, b1);
                }
            }
            continue;
        }
        __m256 f0, f1;
        ordered_factors(ORDER_LANES, blk, &f0, &f1);
        for (int k = 0; k < 32; k += 4) {
            const uint8_t *row = blk + NR + k * NR;
            if (prefetch < t->prefetch_end) {
                _mm_prefetch(prefetch, _MM_HINT_T1);
                prefetch += 64;
            }
            _mm_prefetch((const char *)row + B8_AHEAD, _MM_HINT_T0);
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++, a++, row += NR) {
                __m256 b0, b1;
                widen_row(ORDER_LANES, mode, row, e4m3, keep16, off16, f0, f1, &b0, &b1);
                tile_step(rows, acc, a, b0, b1);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < rows; r++) columns_in_order(ORDER_LANES, &acc[r][0], &acc[r][1]);
    tile_end(rows, acc, t);
}

GEMM_KERNEL_BY_ROWS(AVX2_TARGET, avx2_kernel, tile_kernel)
/*
 * tile_kernel8 for `rows` rows (1 or 2) over g->count whole panels
 * (kernel8_panels): each panel's accumulators take its products in the same
 * order as tile_kernel8's, so the same bits, but W panels side by side give
 * 8 independent FMA chains where one panel gives 2 a row (each FMA waits on
 * the one before in its chain: 4-5 cycles on AVX2 CPUs, two FMAs a cycle).
 * Blocks where every panel's codes widen by integers (the common case) run
 * the W-panel loop; the rest (a refused block, a zero or subnormal code,
 * fewer panels) panel by panel.
 */
AVX2_INLINE void panels_kernel8_of(const int rows, const gemm_tile *t, const gemm_panels *g, const int e4m3)
{
    enum { W1 = GEMM_WIDE_PANELS };
    const int W = W1 / rows; /* 8 chains */
    const int np = g->count;
    const int64_t nblk = t->k[0] / 32, pb = g->panel_bytes;
    const __m256i keep16 = widen_keep16(e4m3);
    const int bias = e4m3 ? 120 : 112;
    __m256 acc[W1][MR][2]; /* [panel][row], columns in ORDER_STRIDE4 */
    for (int i = 0; i < W; i++)
#pragma GCC unroll 2
        for (int r = 0; r < rows; r++) acc[i][r][0] = acc[i][r][1] = _mm256_setzero_ps();
    const float *a = t->a[0];
    const uint8_t *blk = t->b[0];
    const char *prefetch = t->prefetch;
    for (int64_t j = 0; j < nblk; j++, blk += B8_BLOCK, a += 32) {
        /* every loop over the panels unrolled with constant indices (i < np inside), so that the
         * accumulators stay in registers (a loop to np kept them in memory) */
        int mode[W1], all_normal = np == W;
        __m256i off[W1];
#pragma GCC unroll 4
        for (int i = 0; i < W; i++) {
            mode[i] = BLOCK_ZEROS, off[i] = _mm256_setzero_si256();
            if (i >= np) continue;
            mode[i] = block_mode(blk + i * pb, (g->refused[i] >> j) & 1, (g->special[i] >> j) & 1);
            all_normal &= mode[i] == BLOCK_NORMAL;
            off[i] = widen_offsets16(ORDER_STRIDE4, blk + i * pb, bias);
        }
        if (all_normal) {
            for (int k = 0; k < 32; k += 4) {
                const uint8_t *row = blk + NR + k * NR;
                if (prefetch < t->prefetch_end) { /* none (both NULL) where no panel follows */
                    for (int i = 0; i < g->prefetch_panels; i++) _mm_prefetch(prefetch + i * pb, _MM_HINT_T1);
                    prefetch += 64;
                }
#pragma GCC unroll 4
                for (int i = 0; i < W; i++) _mm_prefetch((const char *)row + i * pb + B8_AHEAD, _MM_HINT_T0);
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++, row += NR) {
                    __m256 av[2];
#pragma GCC unroll 2
                    for (int r = 0; r < rows; r++) av[r] = _mm256_broadcast_ss(a + r * KC + k + u);
#pragma GCC unroll 4
                    for (int i = 0; i < W; i++) {
                        __m256 b0, b1;
                        widen16_madd(row + i * pb, e4m3, keep16, off[i], &b0, &b1);
#pragma GCC unroll 2
                        for (int r = 0; r < rows; r++) {
                            acc[i][r][0] = _mm256_fmadd_ps(av[r], b0, acc[i][r][0]);
                            acc[i][r][1] = _mm256_fmadd_ps(av[r], b1, acc[i][r][1]);
                        }
                    }
                }
            }
            continue;
        }
#pragma GCC unroll 4
        for (int i = 0; i < W; i++) {
            if (i >= np) break;
            const uint8_t *pblk = blk + i * pb;
            __m256 f0, f1;
            ordered_factors(ORDER_STRIDE4, pblk, &f0, &f1);
            for (int k = 0; k < 32; k++) {
                const uint8_t *row = pblk + NR + k * NR;
                __m256 b0, b1;
                widen_row(ORDER_STRIDE4, mode[i], row, e4m3, keep16, off[i], f0, f1, &b0, &b1);
#pragma GCC unroll 2
                for (int r = 0; r < rows; r++) {
                    const __m256 av = _mm256_broadcast_ss(a + r * KC + k);
                    acc[i][r][0] = _mm256_fmadd_ps(av, b0, acc[i][r][0]);
                    acc[i][r][1] = _mm256_fmadd_ps(av, b1, acc[i][r][1]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < W; i++) {
        if (i >= np) break;
#pragma GCC unroll 2
        for (int r = 0; r < rows; r++) columns_in_order(ORDER_STRIDE4, &acc[i][r][0], &acc[i][r][1]);
        gemm_tile ti = *t;
        ti.c_in = t->c_in ? t->c_in + i * NR : NULL;
        ti.c_out = t->c_out + i * NR;
        ti.out = t->out ? t->out + i * NR : NULL;
        tile_end(rows, acc[i], &ti);
    }
}

AVX2_TARGET static void avx2_kernel8_panels(const gemm_tile *t, const gemm_panels *g)
{
    if (t->rows == 2) {
        if (t->b_type == A2AMM_E4M3) panels_kernel8_of(2, t, g, 1);
        else panels_kernel8_of(2, t, g, 0);
    } else {
        if (t->b_type == A2AMM_E4M3) panels_kernel8_of(1, t, g, 1);
        else panels_kernel8_of(1, t, g, 0);
    }
}

/* tile_kernel8 with the type a constant in each copy (widen16_normal's shift) */
AVX2_INLINE void tile_kernel8(const int rows, const gemm_tile *t)
{
    if (t->b_type == A2AMM_E4M3) tile_kernel8_of(rows, t, 1);
    else tile_kernel8_of(rows, t, 0);
}

GEMM_KERNEL_BY_ROWS(AVX2_TARGET, avx2_kernel8, tile_kernel8)

/* One row of 16 codes widened (ORDER_LANES), its columns put in order, to pack_b's row of 16 floats. */
AVX2_INLINE void store_row(float *out, __m256 b0, __m256 b1)
{
    lanes_in_order(&b0, &b1);
    _mm256_store_ps(out, b0);
    _mm256_store_ps(out + 8, b1);
}

/*
 * The widening path's B (widen_m, widen_b8): the tile's chunk of its panel in fp8 widened as kernel8
 * widens it, into pack_b's layout (a 32-block's 32 rows of 16 floats; a refused block zeros), once for
 * every row tile. A normal block's codes (and scales) go in ORDER_LANES's shuffle of them, so that the
 * widening's interleaving puts the columns back in order (a shuffle within the register, where
 * lanes_in_order's cross the lanes). The next panel's chunk goes to L2 meanwhile, a share of its lines
 * each block.
 */
AVX2_INLINE void widen_b8_of(const gemm_tile *t, float *out, const int e4m3)
{
    const int64_t nblk = t->k[0] / 32;
    const __m256i keep16 = widen_keep16(e4m3);
    const int bias = e4m3 ? 120 : 112;
    const uint8_t *blk = t->b[0];
    const char *prefetch = t->prefetch;
    const int64_t lines = (t->prefetch_end - t->prefetch + 63) / 64, per_block = (lines + nblk - 1) / nblk;
    for (int64_t j = 0; j < nblk; j++, blk += B8_BLOCK, out += 32 * NR) {
        for (int64_t l = 0; l < per_block && prefetch < t->prefetch_end; l++, prefetch += 64)
            _mm_prefetch(prefetch, _MM_HINT_T1);
        const int mode = block_mode(blk, (t->b_refused[0] >> j) & 1, (t->b_special[0] >> j) & 1);
        __m256 b0, b1;
        if (mode == BLOCK_NORMAL) { /* the common case, no test of the mode a row */
            const __m256i off16 = offsets16_of(order_columns(ORDER_LANES, _mm_loadu_si128((const __m128i *)blk)), bias);
#pragma GCC unroll 4
            for (int r = 0; r < 32; r++) {
                if (r % 4 == 0) _mm_prefetch((const char *)blk + NR + r * NR + B8_AHEAD, _MM_HINT_T0);
                const __m128i codes = _mm_loadu_si128((const __m128i *)(blk + NR + r * NR));
                widen16_normal_of(order_columns(ORDER_LANES, codes), e4m3, keep16, off16, &b0, &b1);
                _mm256_store_ps(out + r * NR, b0);
                _mm256_store_ps(out + r * NR + 8, b1);
            }
            continue;
        }
        const __m256i off16 = widen_offsets16(ORDER_LANES, blk, bias);
        __m256 f0, f1;
        ordered_factors(ORDER_LANES, blk, &f0, &f1);
        for (int r = 0; r < 32; r++) {
            widen_row(ORDER_LANES, mode, blk + NR + r * NR, e4m3, keep16, off16, f0, f1, &b0, &b1);
            store_row(out + r * NR, b0, b1);
        }
    }
}

/* widen_b8_of with the type a constant in each copy (widen16_normal's shift) */
AVX2_TARGET static void avx2_widen_b8(const gemm_tile *t, void *out)
{
    if (t->b_type == A2AMM_E4M3) widen_b8_of(t, out, 1);
    else widen_b8_of(t, out, 0);
}

static const cpu_feature NEEDS[] = {CPU_AVX2, CPU_FMA, CPU_F16C};

const gemm_level gemm_avx2_level = {
    .isa = GEMM_ISA_AVX2,
    .needs = NEEDS,
    .nneeds = (int)(sizeof NEEDS / sizeof NEEDS[0]),
    .kernel = avx2_kernel,
    .format = GEMM_FOLD_F32,
    .nr = NR,
    .kc = KC,
    .mr = MR,
    .mc = 192, /* packed A 384 KB, in L2 */
    .mc_deep = 192,
    .prefetch_k = PREFETCH_K,
    .a_ld = KC * 4,
    .a_block = 32 * 4,
    .b_block = 32 * NR * 4,
    .pack_b = avx2_pack_b,
    .pack_a_row = avx2_pack_a_row,
    /* two tiles: the second widens B again from L1/L2, far cheaper than reading B packed in fp32, four
     * times the bytes (Zen 4 with AVX-512 hidden, `bench gemm M 3584 8192`: 8 rows 1.3x, 12 rows
     * 1.2-1.5x; 16-18 rows in three tiles a tie) */
    .small_m = 2 * MR,
    .kernel8 = avx2_kernel8,
    .b8_block = B8_BLOCK,
    .pack_b8 = avx2_pack_b8,
    .b8_block_codes = avx2_b8_block_codes,
    .kernel8_panels = avx2_kernel8_panels,
    .panels_rows = 2,
    .widen_m = 64,
    .widen_b8 = avx2_widen_b8,
};
