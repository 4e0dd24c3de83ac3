/*
 * fp8 codes to fp32 by integer arithmetic on AVX2, where every code is
 * normal: the small-M matmul's widening (gemm_avx2.c) and the MoE down
 * projection's (op/moe_down.c) share it.
 */
#ifndef A2AMM_GEMM_WIDEN_AVX2_H
#define A2AMM_GEMM_WIDEN_AVX2_H

#include <immintrin.h>
#include <stdint.h>

#define WIDEN_AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* keep16 of widen16_normal: the sign and the code's magnitude bits where its shift puts them. */
WIDEN_AVX2_INLINE __m256i widen_keep16(int e4m3)
{
    return _mm256_set1_epi16((short)(0x8000u | (e4m3 ? 0x7Fu << 4 : 0x7Fu << 5)));
}

/*
 * A row of 16 codes, each normal (a nonzero exponent; no E5M2 Inf or NaN),
 * as fp32 values times 2^x, in the top halves of the values: each code
 * sign-extended to 16 bits and shifted so that its magnitude is the top
 * half of fp32's exponent and mantissa and its sign fp32's, masked (keep16),
 * off16 added (per column, in 16-bit lanes: (bias + x) << 7, bias 120 for
 * E4M3 and 112 for E5M2; no carry reaches the sign where the results are
 * normal floats), then each word unpacked into a dword's top half (the
 * low half is zero: 3 mantissa bits at most). Exact, in 6 operations a 16
 * codes; the columns come out interleaved within 128-bit lanes: b0 holds
 * columns 0-3 and 8-11, b1 4-7 and 12-15 (lanes_in_order).
 */
WIDEN_AVX2_INLINE void widen16_normal_of(__m128i codes, int e4m3, __m256i keep16, __m256i off16, __m256 *b0,
                                         __m256 *b1)
{
    __m256i w = _mm256_cvtepi8_epi16(codes);
    w = e4m3 ? _mm256_slli_epi16(w, 4) : _mm256_slli_epi16(w, 5); /* an immediate shift: one uop, where a shift by a register is two on Intel */
    w = _mm256_add_epi16(_mm256_and_si256(w, keep16), off16);
    *b0 = _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), w));
    *b1 = _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), w));
}

/* widen16_normal_of on the 16 codes at `codes`. */
WIDEN_AVX2_INLINE void widen16_normal(const uint8_t *codes, int e4m3, __m256i keep16, __m256i off16, __m256 *b0,
                                      __m256 *b1)
{
    widen16_normal_of(_mm_loadu_si128((const __m128i *)codes), e4m3, keep16, off16, b0, b1);
}

/* widen16_normal's two registers (or sums of them) with the columns in order: columns 0-7, then 8-15 (the
 * first's high half swapped with the second's low half). */
WIDEN_AVX2_INLINE void lanes_in_order(__m256 *x0, __m256 *x1)
{
    const __m256 lo = _mm256_permute2f128_ps(*x0, *x1, 0x20), hi = _mm256_permute2f128_ps(*x0, *x1, 0x31);
    *x0 = lo, *x1 = hi;
}

#endif
