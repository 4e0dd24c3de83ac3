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

static inline size_t panel_bytes(int64_t I) { return HEAD + (size_t)(I / 32) * BLOCK; }

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

#define AVX2_TARGET __attribute__((target("avx2,fma,f16c"))) /* F16C: every AVX2 CPU has it */
#define AVX2_INLINE static inline __attribute__((always_inline)) AVX2_TARGET
#define AVX512_TARGET __attribute__((target("avx512f,avx2,fma,f16c")))
#define AVX512_INLINE static inline __attribute__((always_inline)) AVX512_TARGET

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

#endif
