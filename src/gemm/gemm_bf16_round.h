/*
 * fp32 -> bf16, round to nearest even in integer arithmetic (subnormals
 * kept, NaN stays a quiet NaN): mx_f32_to_bf16 on 16 lanes. Shared by the
 * bf16 store and the AVX-512 kernel's epilogue, so both give the same bits.
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

#endif
