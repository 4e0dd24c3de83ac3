/*
 * The packed W2 every level of the down projection reads (moe_down.h says
 * the layout) and the pieces its vector levels share: a panel's bytes, its
 * NaN columns, a scale byte as a float, codes widened in registers. Private
 * to src/op/moe_down*.c.
 */
#ifndef A2AMM_OP_MOE_DOWN_PANEL_H
#define A2AMM_OP_MOE_DOWN_PANEL_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "op/moe_down.h"

enum {
    NR = MOE_DOWN_NR,
    HEAD = 16,            /* bytes before a panel's blocks: bit c of its first two, column c has a NaN code */
    BLOCK = NR + 32 * NR, /* bytes of a panel's 32-block: 16 scales, then 32 rows of 16 codes */
};

/* Bytes after a panel's blocks: bit b (byte b / 8), block b's codes are all normal (block_normal). */
static inline size_t tail_bytes(int64_t I) { return (size_t)(I / 32 + 127) / 128 * 16; }

static inline size_t panel_bytes(int64_t I) { return HEAD + (size_t)(I / 32) * BLOCK + tail_bytes(I); }

/*
 * Whether block b of the panel holds normal codes only (a nonzero exponent; E5M2's Inf and NaN not, E4M3's
 * NaN code yes: it widens to 480 either way, and its column is NaN whatever the sum): then the avx2 level
 * widens them by integers (gemm_widen_avx2.h), where a zero or subnormal code needs the fp16 way.
 */
static inline int block_normal(const uint8_t *panel, int64_t I, int64_t b)
{
    return panel[HEAD + (size_t)(I / 32) * BLOCK + (size_t)b / 8] >> (b % 8) & 1;
}

/* The panel's NaN columns (its head). */
static inline unsigned nan_columns(const uint8_t *panel) { return panel[0] | (unsigned)panel[1] << 8; }

/*
 * 2^(scale - 127) as a float (2^-127 is a subnormal, exact), NaN for 0xFF.
 * With it one FMA, fma(sums, scale, acc), gives the rule's
 * float((double)acc + (double)sums * 2^(scale - 127)): the product is exact
 * in both, and a sum of two floats rounded to double (53 bits >= 2 * 24 + 2)
 * then to float is the sum rounded once to float, which the FMA does; in
 * float's subnormal range the double sum is exact or far below its grid.
 */
static inline float scale_float(uint8_t s)
{
    uint32_t bits = s == 0 ? 0x00400000u : (uint32_t)s << 23;
    float v;
    memcpy(&v, &bits, sizeof v);
    return s == 0xFF ? NAN : v;
}

/*
 * Block b of the `count` panels from `next` on (stride apart) into L2: a
 * group of panels brings in the next group's block as it reads its own
 * (NULL next: none). From memory the hardware prefetcher alone left the
 * kernels waiting (docs/performance.md, Zen 4, "The MoE experts").
 * always_inline: as a function of its own GCC 12 found it "const" (a
 * prefetch writes no memory) and deleted every call; test_kernel_code.sh
 * checks the kernels keep them.
 */
static inline __attribute__((always_inline)) void prefetch_block(const uint8_t *next, int count, size_t stride, int64_t b)
{
    if (!next) return;
    for (int p = 0; p < count; p++)
        for (int l = 0; l < BLOCK; l += 64)
            _mm_prefetch((const char *)next + (size_t)p * stride + HEAD + (size_t)b * BLOCK + l, _MM_HINT_T1);
}

#define AVX2_TARGET __attribute__((target("avx2,fma,f16c"))) /* F16C: every AVX2 CPU has it */
#define AVX2_INLINE static inline __attribute__((always_inline)) AVX2_TARGET
#define AVX512_TARGET __attribute__((target("avx512f,avx2,fma,f16c")))
#define AVX512_INLINE static inline __attribute__((always_inline)) AVX512_TARGET

/* A block's 16 scale bytes as scale_float's floats: 2^(s - 127) from the bits, 2^-127 (a subnormal) for 0,
 * NaN for 0xFF. */
AVX512_INLINE __m512 block_scales_avx512(const uint8_t *blk)
{
    const __m512i s = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)blk));
    __m512i bits = _mm512_slli_epi32(s, 23);
    bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(s, _mm512_setzero_si512()), _mm512_set1_epi32(0x00400000));
    bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(s, _mm512_set1_epi32(0xFF)), _mm512_set1_epi32(0x7FC00000));
    return _mm512_castsi512_ps(bits);
}

/*
 * 16 codes as fp16 bits: E5M2 is fp16's top byte (its Inf and NaN are
 * fp16's); E4M3's magnitude bits go 7 places up (an fp16 of 2^-8 the value,
 * subnormals as fp16 subnormals: exact) and its sign to fp16's (the code
 * sign-extended to 16 bits, shifted 7, bit 14 cleared). E4M3's NaN codes
 * widen to 480 here: a column with one is NaN whatever else, which the
 * panel's NaN columns say at the end. Widening fp16 with vcvtph2ps never
 * meets an fp32 subnormal: building the value as a float times 2^120 did,
 * and each subnormal operand cost a microcode assist (0.5 GB/s of W2).
 */
AVX2_INLINE __m256i fp16_bits(const uint8_t *codes, int e4m3)
{
    const __m128i raw = _mm_loadu_si128((const __m128i *)codes);
    if (e4m3)
        return _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(raw), 7), _mm256_set1_epi16((short)0xBF80));
    return _mm256_slli_epi16(_mm256_cvtepu8_epi16(raw), 8);
}

/* 16 codes to their fp32 values. */
AVX512_INLINE __m512 widen16_avx512(const uint8_t *codes, int e4m3)
{
    __m512 x = _mm512_cvtph_ps(fp16_bits(codes, e4m3));
    return e4m3 ? _mm512_mul_ps(x, _mm512_set1_ps(256.0f)) : x;
}

/* 16 codes to their fp32 values, 8 in each half (E4M3 at 2^-8 their value where `e4m3_low`). */
AVX2_INLINE void widen16_avx2(const uint8_t *codes, int e4m3, int e4m3_low, __m256 *lo, __m256 *hi)
{
    __m256i h = fp16_bits(codes, e4m3);
    *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
    if (e4m3 && !e4m3_low)
        *lo = _mm256_mul_ps(*lo, _mm256_set1_ps(256.0f)), *hi = _mm256_mul_ps(*hi, _mm256_set1_ps(256.0f));
}

/* ---- the bf16 dot-product levels' pieces (avx512's VDPBF16PS, amx's TDPBF16PS) -------------------- */

/* AVX-512 with VBMI's byte permutes: every CPU of the avx512 and amx levels has it. */
#define VBMI_TARGET __attribute__((target("avx512f,avx512bw,avx512vbmi,avx2,fma,f16c")))
#define VBMI_INLINE static inline __attribute__((always_inline)) VBMI_TARGET

/*
 * Whether a row's sums can go through bf16 dot products, which flush
 * subnormal inputs, products and sums to zero: every a_i zero or finite with
 * 2^-103 <= |a_i| < 2^100. Then every product is a multiple of 2^-126 (a's
 * last bit is at 2^-110 or above, W2's at 2^-16 or above), so is every sum
 * of them, and no nonzero one is below 2^-126; and no block's sum overflows
 * (32 products below 2^116). NaN fails both compares; 16 values a step.
 */
VBMI_INLINE int row_for_pairs(const float *a, int64_t I)
{
    const __m512 lo = _mm512_set1_ps(0x1p-103f), hi = _mm512_set1_ps(0x1p100f);
    __mmask16 bad = 0;
    for (int64_t i = 0; i < I; i += 16) {
        const __m512 m = _mm512_abs_ps(_mm512_loadu_ps(a + i));
        const __mmask16 in = _mm512_cmp_ps_mask(m, lo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(m, hi, _CMP_LT_OQ);
        bad |= (__mmask16)~(in | _mm512_cmp_ps_mask(m, _mm512_setzero_ps(), _CMP_EQ_OQ));
    }
    return bad == 0;
}

/* A row of bf16 values held as floats, as bf16 (their top halves: exact). */
VBMI_INLINE void row_to_bf16(const float *a, int64_t I, uint16_t *out)
{
    for (int64_t i = 0; i < I; i += 16) {
        const __m512i bits = _mm512_srli_epi32(_mm512_castps_si512(_mm512_loadu_ps(a + i)), 16);
        _mm256_storeu_si256((__m256i *)(out + i), _mm512_cvtepi32_epi16(bits));
    }
}

/*
 * The widening into K-pairs' tables: the low and the high byte of the bf16
 * of each code magnitude 0-127 (exact: 4 significant bits at most; E4M3's
 * NaN magnitude as NaN, which the panel's NaN columns overrule anyway; E5M2's
 * Inf as Inf), two registers each for VPERMI2B; and the byte order that,
 * after the unpacking of low and high bytes into words, leaves each
 * column's K-pair side by side (see widen_rows4). moe_down_pair_bytes (in
 * moe_down.c) builds the bytes once a process: lo[128], hi[128], order[64].
 */
typedef struct pair_widen {
    __m512i lo[2], hi[2], order, sign;
} pair_widen;

const uint8_t *moe_down_pair_bytes(a2amm_fp8_type type);

static inline VBMI_TARGET pair_widen pair_widen_of(a2amm_fp8_type type)
{
    const uint8_t *t = moe_down_pair_bytes(type);
    return (pair_widen){{_mm512_loadu_si512(t), _mm512_loadu_si512(t + 64)},
                        {_mm512_loadu_si512(t + 128), _mm512_loadu_si512(t + 192)},
                        _mm512_loadu_si512(t + 256),
                        _mm512_set1_epi8((char)0x80)};
}

/*
 * Four rows of a block's codes (16 columns each, 64 bytes) as two K-pair
 * rows: column c's two values at words 2c (the even row) and 2c + 1, as
 * bf16, by two table lookups (VPERMI2B on the codes' low 7 bits) and the
 * sign put back. pair0: code rows 0 and 1, pair1: rows 2 and 3.
 */
VBMI_INLINE void widen_rows4(const uint8_t *codes, const pair_widen *w, __m512i *pair0, __m512i *pair1)
{
    const __m512i x = _mm512_permutexvar_epi8(w->order, _mm512_loadu_si512(codes));
    const __m512i lo = _mm512_permutex2var_epi8(w->lo[0], x, w->lo[1]);
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(w->hi[0], x, w->hi[1]), x, w->sign, 0xF8);
    *pair0 = _mm512_unpacklo_epi8(lo, hi);
    *pair1 = _mm512_unpackhi_epi8(lo, hi);
}

#endif
