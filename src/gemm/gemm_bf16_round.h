/*
 * fp32 -> bf16, round to nearest even in integer arithmetic (subnormals
 * kept, NaN stays a quiet NaN): mx_f32_to_bf16 on 16 lanes (AVX-512) or 8
 * (AVX2). Shared by the bf16 store and the microkernels' epilogues, so that
 * all give the same bits.
 */
#ifndef A2AMM_GEMM_BF16_ROUND_H
#define A2AMM_GEMM_BF16_ROUND_H

#include <immintrin.h>

static inline __attribute__((always_inline, target("avx512f,avx512bw"))) __m256i gemm_bf16_round16(__m512 x)
{
    const __m512i u = _mm512_castps_si512(x);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb)), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
                                            _mm512_set1_epi32(0x7F800000));
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x0040)));
    return _mm512_cvtepi32_epi16(r);
}

static inline __attribute__((always_inline, target("avx2"))) __m128i gemm_bf16_round8(__m256 x)
{
    const __m256i u = _mm256_castps_si256(x);
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb)), 16);
    /* |u| > Inf's bits: both sides below 2^31, so the signed compare is the unsigned one */
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x0040)), nan);
    /* every lane below 2^16: the saturating pack is exact; it packs within 128-bit halves */
    __m256i packed = _mm256_packus_epi32(r, r);
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

#endif
