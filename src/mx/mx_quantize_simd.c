/*
 * The MX quantizer's vector levels (avx512: 16 values a step, avx2: 8):
 * the bytes of mx_quantize_block, block for block, faster. Each whole block
 * of 32 takes its largest magnitude as the largest of its values' bits with
 * the sign cleared (they order as the magnitudes do, Inf and NaN above every
 * finite one), its scale from mx_scale_of_amax (the portable level's own
 * function), and each value's code by the portable encoder's integer steps
 * on every lane at once: the normal code (the mantissa rounded at its bit,
 * the exponent rebiased), the subnormal one (|y| 2^(bias - 1 + mbits) + 2^23
 * in fp32, an exact product rounded once as the portable level rounds it),
 * the saturated one, then the right one picked and the sign put back (no
 * NaN reaches the encoder: a block with a NaN or an Inf has the NaN scale,
 * and its codes are NaN). A last partial block goes to mx_quantize_block. tests/test_mx_quantize.c
 * compares every level with the portable one, byte for byte.
 *
 * Why: a model hands the op float activations every call; the portable
 * loop took 6-7 ns a value (200 us for 16 tokens of 2048), more than a
 * decode call's exchange.
 */
#include <immintrin.h>
#include <string.h>

#include "common/cpu.h"
#include "mx/mx.h"

#define AVX512_TARGET __attribute__((target("avx512f,avx512bw")))
#define AVX2_TARGET __attribute__((target("avx2")))

/* What the encoder's steps need for a type, as 32-bit lanes. */
typedef struct encode_consts {
    int drop;                       /* fp32 mantissa bits below the format's */
    int32_t round_half;             /* 2^(drop - 1) - 1 */
    int32_t rebias;                 /* (127 - bias) << mbits */
    int32_t min_normal;             /* bits of the smallest normal */
    int32_t saturate_at, saturated; /* bits of the largest finite value's rounding limit, and its code */
    float subnormal_scale;          /* 2^(bias - 1 + mbits) */
} encode_consts;

static encode_consts encode_consts_of(a2amm_fp8_type type)
{
    const int e4m3 = type == A2AMM_E4M3, mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
    return (encode_consts){23 - mbits,
                           (1 << (23 - mbits - 1)) - 1,
                           (127 - bias) << mbits,
                           (127 + 1 - bias) << 23,
                           e4m3 ? 0x43E00000 : 0x47600000,
                           e4m3 ? 0x7E : 0x7B,
                           e4m3 ? 0x1p9f : 0x1p16f};
}

/* ---- avx512 ------------------------------------------------------------------------------------- */

/* 16 finite values already divided by the scale to their codes (mx_quantize_block's encoder, lane by lane). */
static inline __attribute__((always_inline)) AVX512_TARGET __m128i encode16(__m512 y, const encode_consts *k)
{
    const __m512i u = _mm512_castps_si512(y), a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, (unsigned)k->drop), _mm512_set1_epi32(1));
    const __m512i r = _mm512_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32(k->round_half)), odd);
    __m512i code = _mm512_sub_epi32(_mm512_srli_epi32(r, (unsigned)k->drop), _mm512_set1_epi32(k->rebias));
    const __m512 t = _mm512_add_ps(_mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(k->subnormal_scale)),
                                   _mm512_set1_ps(0x1p23f));
    const __m512i sub = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(0x4B000000));
    code = _mm512_mask_mov_epi32(code, _mm512_cmplt_epi32_mask(a, _mm512_set1_epi32(k->min_normal)), sub);
    code = _mm512_mask_mov_epi32(code, _mm512_cmpge_epi32_mask(a, _mm512_set1_epi32(k->saturate_at)),
                                 _mm512_set1_epi32(k->saturated));
    code = _mm512_or_si512(_mm512_and_si512(code, _mm512_set1_epi32(0x7F)),
                           _mm512_and_si512(_mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80)));
    return _mm512_cvtepi32_epi8(code);
}

/* 16 values from x: floats, or (bf16) bf16 bits widened by the shift, exactly. */
static inline __attribute__((always_inline)) AVX512_TARGET __m512 load16(const void *x, size_t i, int bf16)
{
    if (bf16)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)x + i))), 16));
    return _mm512_loadu_ps((const float *)x + i);
}

static AVX512_TARGET void quantize_blocks_avx512(const void *x, int bf16, size_t blocks, a2amm_fp8_type type,
                                                 mx_scale_mode mode, uint8_t *codes, uint8_t *scales)
{
    const encode_consts k = encode_consts_of(type);
    const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF);
    for (size_t b = 0; b < blocks; b++, codes += MX_BLOCK) {
        const __m512 x0 = load16(x, b * MX_BLOCK, bf16), x1 = load16(x, b * MX_BLOCK + 16, bf16);
        const __m512i m = _mm512_max_epi32(_mm512_and_si512(_mm512_castps_si512(x0), magnitude),
                                           _mm512_and_si512(_mm512_castps_si512(x1), magnitude));
        const uint8_t s = mx_scale_of_amax((uint32_t)_mm512_reduce_max_epi32(m), type, mode);
        scales[b] = s;
        if (s == MX_E8M0_NAN) {
            memset(codes, MX_FP8_NAN, MX_BLOCK);
            continue;
        }
        const __m512 inv = _mm512_set1_ps(mx_scale_inverse(s));
        _mm_storeu_si128((__m128i *)codes, encode16(_mm512_mul_ps(x0, inv), &k));
        _mm_storeu_si128((__m128i *)(codes + 16), encode16(_mm512_mul_ps(x1, inv), &k));
    }
}

/* ---- avx2 --------------------------------------------------------------------------------------- */

/* 8 finite values already divided by the scale to their codes as 32-bit lanes (encode16's steps). */
static inline __attribute__((always_inline)) AVX2_TARGET __m256i encode8(__m256 y, const encode_consts *k)
{
    const __m256i u = _mm256_castps_si256(y), a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, k->drop), _mm256_set1_epi32(1));
    const __m256i r = _mm256_add_epi32(_mm256_add_epi32(a, _mm256_set1_epi32(k->round_half)), odd);
    __m256i code = _mm256_sub_epi32(_mm256_srli_epi32(r, k->drop), _mm256_set1_epi32(k->rebias));
    const __m256 t = _mm256_add_ps(_mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(k->subnormal_scale)),
                                   _mm256_set1_ps(0x1p23f));
    const __m256i sub = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4B000000));
    code = _mm256_blendv_epi8(code, sub, _mm256_cmpgt_epi32(_mm256_set1_epi32(k->min_normal), a));
    code = _mm256_blendv_epi8(code, _mm256_set1_epi32(k->saturated),
                              _mm256_cmpgt_epi32(a, _mm256_set1_epi32(k->saturate_at - 1)));
    return _mm256_or_si256(_mm256_and_si256(code, _mm256_set1_epi32(0x7F)),
                           _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80)));
}

/* 8 values from x: floats, or (bf16) bf16 bits widened by the shift, exactly. */
static inline __attribute__((always_inline)) AVX2_TARGET __m256 load8(const void *x, size_t i, int bf16)
{
    if (bf16)
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)x + i))), 16));
    return _mm256_loadu_ps((const float *)x + i);
}

static AVX2_TARGET void quantize_blocks_avx2(const void *x, int bf16, size_t blocks, a2amm_fp8_type type,
                                             mx_scale_mode mode, uint8_t *codes, uint8_t *scales)
{
    const encode_consts k = encode_consts_of(type);
    const __m256i magnitude = _mm256_set1_epi32(0x7FFFFFFF);
    for (size_t b = 0; b < blocks; b++, codes += MX_BLOCK) {
        __m256 v[4];
        __m256i m = _mm256_setzero_si256();
        for (int q = 0; q < 4; q++) {
            v[q] = load8(x, b * MX_BLOCK + 8 * (size_t)q, bf16);
            m = _mm256_max_epi32(m, _mm256_and_si256(_mm256_castps_si256(v[q]), magnitude));
        }
        __m128i h = _mm_max_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
        h = _mm_max_epi32(h, _mm_shuffle_epi32(h, 0x4E));
        h = _mm_max_epi32(h, _mm_shuffle_epi32(h, 0xB1));
        const uint8_t s = mx_scale_of_amax((uint32_t)_mm_cvtsi128_si32(h), type, mode);
        scales[b] = s;
        if (s == MX_E8M0_NAN) {
            memset(codes, MX_FP8_NAN, MX_BLOCK);
            continue;
        }
        const __m256 inv = _mm256_set1_ps(mx_scale_inverse(s));
        __m256i c[4];
        for (int q = 0; q < 4; q++) c[q] = encode8(_mm256_mul_ps(v[q], inv), &k);
        /* 32 lanes of 0..255 to bytes: the packs work per 128-bit half, the permute puts them in order */
        const __m256i bytes = _mm256_packus_epi16(_mm256_packus_epi32(c[0], c[1]), _mm256_packus_epi32(c[2], c[3]));
        _mm256_storeu_si256((__m256i *)codes,
                            _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
}

/* ---- levels ------------------------------------------------------------------------------------- */

/* The levels are common/cpu.h's vector levels, the same numbers. */
int mx_quantize_level_usable(mx_quantize_level level) { return cpu_vector_usable((cpu_vector_level)level); }
mx_quantize_level mx_quantize_level_best(void) { return (mx_quantize_level)cpu_vector_best(); }
const char *mx_quantize_level_name(mx_quantize_level level) { return cpu_vector_name((cpu_vector_level)level); }

/* A row of floats or (bf16) of bf16 bits: the level's whole blocks, then the rest by the portable level. */
static void quantize_row(mx_quantize_level level, const void *x, int bf16, size_t len, a2amm_fp8_type type,
                         mx_scale_mode mode, uint8_t *codes, uint8_t *scales)
{
    size_t whole = level == MX_QUANTIZE_PORTABLE ? 0 : len / MX_BLOCK;
    if (level == MX_QUANTIZE_AVX512) quantize_blocks_avx512(x, bf16, whole, type, mode, codes, scales);
    else if (level == MX_QUANTIZE_AVX2) quantize_blocks_avx2(x, bf16, whole, type, mode, codes, scales);
    if (!bf16) {
        const size_t done = whole * MX_BLOCK;
        mx_quantize_row_portable((const float *)x + done, len - done, type, mode, codes + done, scales + whole);
        return;
    }
    for (; whole * MX_BLOCK < len; whole++) { /* block by block, widened into a block's room */
        const size_t at = whole * MX_BLOCK, n = len - at < MX_BLOCK ? len - at : MX_BLOCK;
        float block[MX_BLOCK];
        for (size_t i = 0; i < n; i++) block[i] = mx_bf16_to_f32(((const uint16_t *)x)[at + i]);
        mx_quantize_block(block, n, type, mode, codes + at, scales + whole);
    }
}

void mx_quantize_row_at(mx_quantize_level level, const float *x, size_t len, a2amm_fp8_type type,
                        mx_scale_mode mode, uint8_t *codes, uint8_t *scales)
{
    quantize_row(level, x, 0, len, type, mode, codes, scales);
}

void mx_quantize_row(const float *x, size_t len, a2amm_fp8_type type, mx_scale_mode mode, uint8_t *codes,
                     uint8_t *scales)
{
    quantize_row(mx_quantize_level_best(), x, 0, len, type, mode, codes, scales);
}

void mx_quantize_row_bf16_at(mx_quantize_level level, const uint16_t *x, size_t len, a2amm_fp8_type type,
                             mx_scale_mode mode, uint8_t *codes, uint8_t *scales)
{
    quantize_row(level, x, 1, len, type, mode, codes, scales);
}

void mx_quantize_row_bf16(const uint16_t *x, size_t len, a2amm_fp8_type type, mx_scale_mode mode, uint8_t *codes,
                          uint8_t *scales)
{
    quantize_row(mx_quantize_level_best(), x, 1, len, type, mode, codes, scales);
}
