/*
 * B in fp8 widened to the bf16 K-pair dwords gemm_bf16_pack_b packs, in
 * registers, as the small-M microkernels (avx512 and amx) read it: B in fp8
 * is half the bytes of packed bf16 B, and where few rows of A reuse B the
 * matmul is a read of it. The layout is gemm_bf16_pack.h's "B in fp8"; the
 * dwords are exactly the packed ones for every block the fold rule takes.
 */
#ifndef A2AMM_GEMM_BF16_WIDEN_H
#define A2AMM_GEMM_BF16_WIDEN_H

#include <immintrin.h>

#include "gemm/gemm_bf16_pack.h"

/*
 * The widening's constants for a type: the shift that puts a code's
 * magnitude (exponent and mantissa) at bf16's, the mask of the sign and
 * magnitude bits so placed (an arithmetic shift copies the sign over the
 * bits in between), the exponent bias between the two formats (in bf16's
 * exponent field), the exponent mask of a code (zero: a zero or subnormal
 * code, which the shift cannot make a bf16), and the bf16 of the 32 smallest
 * magnitudes (the subnormals among them) from the conversion's tables.
 */
typedef struct widen_consts {
    int shift;
    __m512i sign_magnitude, bias, exponent8, exponent16, sign, subnormals;
} widen_consts;

AVX512_INLINE widen_consts widen_consts_of(a2amm_fp8_type type)
{
    const int e5m2 = type == A2AMM_E5M2, shift = e5m2 ? 5 : 4, exponent = e5m2 ? 0x7C : 0x78;
    const uint8_t *lut = gemm_bf16_lut(type); /* 128 low bytes, then 128 high bytes */
    const __m512i lo = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)lut));
    const __m512i hi = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(lut + 128)));
    return (widen_consts){shift,
                          _mm512_set1_epi16((short)(0x8000 | 0x7F << shift)),
                          _mm512_set1_epi16((short)((e5m2 ? 127 - 15 : 127 - 7) << 7)),
                          _mm512_set1_epi8((char)exponent),
                          _mm512_set1_epi16((short)(exponent << 8)),
                          _mm512_set1_epi16((short)0x8000),
                          _mm512_or_si512(lo, _mm512_slli_epi16(hi, 8))};
}

/*
 * The words of codes x (each code in its word's high byte, as x8 holds it):
 * bf16 of the code with offset (its column's scale, (s - 127) << 7) added to
 * the exponent of a nonzero value; those of zero or subnormal codes (mask
 * special) from the table, the rest by shift, mask and add: the sign comes
 * along in bit 15, and the add cannot reach it, since the fold rule keeps
 * every value a block it takes folds to a finite normal bf16 (its magnitude
 * bits below 0x7F80).
 */
AVX512_INLINE __m512i widen_words(__m512i x, __m512i offset, __m512i biased, __mmask32 special, const widen_consts *w)
{
    __m512i v = _mm512_add_epi16(_mm512_and_si512(_mm512_srai_epi16(x, 8 - w->shift), w->sign_magnitude), biased);
    if (special) {
        __m512i sub = _mm512_permutexvar_epi16(_mm512_srli_epi16(x, 8), w->subnormals);
        sub = _mm512_mask_add_epi16(sub, _mm512_test_epi16_mask(sub, sub), sub, offset);
        v = _mm512_mask_blend_epi16(special, v, _mm512_ternarylogic_epi32(sub, x, w->sign, 0xF8)); /* sub | (x & sign) */
    }
    return v;
}

/*
 * 64 fp8 codes of a K-pair row's half (32 columns, in the order
 * gemm_bf16_pack_b8 stores them: the low byte of each word for the first
 * 16 columns, the high byte for the second) as the two groups' 16 dwords of
 * bf16 K-pairs: the dwords gemm_bf16_pack_b packs for a block the fold rule
 * takes (a refused block is not widened: it is zeros). No table lookup for
 * normal codes: seven vector instructions for the 64 (a shift to put the low
 * bytes' codes high, then per group an arithmetic shift, a mask and the add
 * of the scale and the exponent's bias); a zero or subnormal code (rare in
 * scaled data) is looked up, in a block that may hold one (may_special: the
 * panel info's normal is not set) a test per 64 codes finds them.
 */
AVX512_INLINE void widen64(const uint8_t *codes, const __m512i offset[2], const __m512i biased[2], const widen_consts *w,
                           int may_special, __m512bh out[2])
{
    const __m512i c = _mm512_loadu_si512(codes);
    const __m512i low = _mm512_slli_epi16(c, 8); /* the low bytes' codes in the high bytes */
    __mmask32 special[2] = {0, 0};
    if (may_special && _mm512_testn_epi8_mask(c, w->exponent8)) {
        special[0] = _mm512_testn_epi16_mask(low, w->exponent16);
        special[1] = _mm512_testn_epi16_mask(c, w->exponent16);
    }
    out[0] = (__m512bh)widen_words(low, offset[0], biased[0], special[0], w);
    out[1] = (__m512bh)widen_words(c, offset[1], biased[1], special[1], w);
}

/*
 * The offsets of 16 columns from their scale bytes: (s - 127) << 7 in both
 * halves of each dword, by putting each byte in both words' high bytes
 * (one vpermb, the rest zero), shifting down one and taking 127 << 7.
 */
AVX512_INLINE __m512i widen_offsets(const uint8_t *scales)
{
    const __m512i both_high = _mm512_set_epi32(0x0F000F00, 0x0E000E00, 0x0D000D00, 0x0C000C00, 0x0B000B00, 0x0A000A00,
                                                0x09000900, 0x08000800, 0x07000700, 0x06000600, 0x05000500, 0x04000400,
                                                0x03000300, 0x02000200, 0x01000100, 0x00000000);
    const __m512i s = _mm512_maskz_permutexvar_epi8((__mmask64)0xAAAAAAAAAAAAAAAAull, both_high,
                                                    _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)scales)));
    return _mm512_sub_epi16(_mm512_srli_epi16(s, 1), _mm512_set1_epi16(127 << 7));
}

#endif
