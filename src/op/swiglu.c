/*
 * SwiGLU rows (swiglu.h): the portable level, and avx512 and avx2 levels
 * that run mx_expf's and mx_silu's steps on 16 or 8 lanes. Why vectors: the
 * scalar loop took about 20 ns a value, a third of a prefill expert's time
 * (DeepSeek-V2-Lite: 1408 values a row, more than the down projection's).
 */
#include "op/swiglu.h"

#include <immintrin.h>
#include <string.h>

#include "common/cpu.h"
#include "gemm/gemm_bf16_round.h"
#include "mx/expf.h"
#include "mx/mx.h"

/* mx_expf's constants (expf.c), the same float values. */
#define EXP_HI 88.72283935546875f
#define EXP_LO (-103.97208404541015625f)
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693145751953125f
#define LN2_LO 1.42860682030941723212e-6f

static uint16_t swiglu_one(float g, float u)
{
    const float v = mx_silu(g) * u;
    return v != v ? 0x7FC0 : mx_f32_to_bf16(v);
}

static void swiglu_portable(const float *g, const float *u, int64_t n, uint16_t *a)
{
    for (int64_t i = 0; i < n; i++) a[i] = swiglu_one(g[i], u[i]);
}

/* ---- avx512 ---------------------------------------------------------------------------------------- */

#define AVX512_INLINE static inline __attribute__((always_inline, target("avx512f,avx512bw")))

/* mx_expf on 16 lanes: its steps in its order, its branches as masks. */
AVX512_INLINE __m512 expf16(__m512 x)
{
    const __m512 half = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ),
                                             _mm512_set1_ps(-0.5f), _mm512_set1_ps(0.5f));
    const __m512i n = _mm512_cvttps_epi32(_mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(LOG2E)), half));
    const __m512 nf = _mm512_cvtepi32_ps(n);
    const __m512 r = _mm512_sub_ps(_mm512_sub_ps(x, _mm512_mul_ps(nf, _mm512_set1_ps(LN2_HI))),
                                   _mm512_mul_ps(nf, _mm512_set1_ps(LN2_LO)));
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f / 720));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f / 120));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f / 24));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f / 6));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(0.5f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f));
    /* p * 2^n: n - 1 then * 2 above 127, n + 64 then * 2^-64 below -126 (as expf.c), else * 1 (exact) */
    const __mmask16 big = _mm512_cmpgt_epi32_mask(n, _mm512_set1_epi32(127));
    const __mmask16 small = _mm512_cmplt_epi32_mask(n, _mm512_set1_epi32(-126));
    __m512i m = _mm512_mask_sub_epi32(n, big, n, _mm512_set1_epi32(1));
    m = _mm512_mask_add_epi32(m, small, m, _mm512_set1_epi32(64));
    const __m512 pow2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(m, _mm512_set1_epi32(127)), 23));
    __m512 last = _mm512_mask_blend_ps(big, _mm512_set1_ps(1.0f), _mm512_set1_ps(2.0f));
    last = _mm512_mask_blend_ps(small, last, _mm512_set1_ps(0x1p-64f));
    __m512 e = _mm512_mul_ps(_mm512_mul_ps(p, pow2), last);
    e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_LO), _CMP_LT_OQ), e, _mm512_setzero_ps());
    e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_HI), _CMP_GT_OQ), e,
                             _mm512_set1_ps(__builtin_inff()));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), e, _mm512_add_ps(x, x));
}

/* a's 16 values: silu(g) * u, NaN as the quiet NaN, rounded to bf16. */
AVX512_INLINE __m256i swiglu16(__m512 g, __m512 u)
{
    const __m512 neg = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), _mm512_set1_epi32((int)0x80000000u)));
    const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), expf16(neg)));
    __m512 v = _mm512_mul_ps(silu, u);
    v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v, _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
    return gemm_bf16_round16(v);
}

__attribute__((target("avx512f,avx512bw"))) static void swiglu_avx512(const float *g, const float *u, int64_t n,
                                                                    uint16_t *a)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(a + i), swiglu16(_mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i)));
    swiglu_portable(g + i, u + i, n - i, a + i);
}

/* ---- avx2 ------------------------------------------------------------------------------------------ */

#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2")))

/* mx_expf on 8 lanes, as expf16. */
AVX2_INLINE __m256 expf8(__m256 x)
{
    const __m256 half = _mm256_blendv_ps(_mm256_set1_ps(-0.5f), _mm256_set1_ps(0.5f),
                                         _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ));
    const __m256i n = _mm256_cvttps_epi32(_mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)), half));
    const __m256 nf = _mm256_cvtepi32_ps(n);
    const __m256 r = _mm256_sub_ps(_mm256_sub_ps(x, _mm256_mul_ps(nf, _mm256_set1_ps(LN2_HI))),
                                   _mm256_mul_ps(nf, _mm256_set1_ps(LN2_LO)));
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f / 720));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f / 120));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f / 24));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f / 6));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(0.5f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f));
    const __m256i big = _mm256_cmpgt_epi32(n, _mm256_set1_epi32(127));
    const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(-126), n);
    /* big: n - 1 (adding the all-ones mask); small: n + 64 */
    const __m256i m = _mm256_add_epi32(_mm256_add_epi32(n, big), _mm256_and_si256(small, _mm256_set1_epi32(64)));
    const __m256 pow2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(m, _mm256_set1_epi32(127)), 23));
    __m256 last = _mm256_blendv_ps(_mm256_set1_ps(1.0f), _mm256_set1_ps(2.0f), _mm256_castsi256_ps(big));
    last = _mm256_blendv_ps(last, _mm256_set1_ps(0x1p-64f), _mm256_castsi256_ps(small));
    __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, pow2), last);
    e = _mm256_blendv_ps(e, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(EXP_LO), _CMP_LT_OQ));
    e = _mm256_blendv_ps(e, _mm256_set1_ps(__builtin_inff()), _mm256_cmp_ps(x, _mm256_set1_ps(EXP_HI), _CMP_GT_OQ));
    return _mm256_blendv_ps(e, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

AVX2_INLINE __m128i swiglu8(__m256 g, __m256 u)
{
    const __m256 neg = _mm256_xor_ps(g, _mm256_set1_ps(-0.0f));
    const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), expf8(neg)));
    __m256 v = _mm256_mul_ps(silu, u);
    v = _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return gemm_bf16_round8(v);
}

__attribute__((target("avx2"))) static void swiglu_avx2(const float *g, const float *u, int64_t n, uint16_t *a)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(a + i), swiglu8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    swiglu_portable(g + i, u + i, n - i, a + i);
}

/* ---- levels ---------------------------------------------------------------------------------------- */

void swiglu_row_at(cpu_vector_level level, const float *g, const float *u, int64_t n, uint16_t *a)
{
    if (level == CPU_VECTOR_AVX512) swiglu_avx512(g, u, n, a);
    else if (level == CPU_VECTOR_AVX2) swiglu_avx2(g, u, n, a);
    else swiglu_portable(g, u, n, a);
}

void swiglu_row(const float *g, const float *u, int64_t n, uint16_t *a) { swiglu_row_at(cpu_vector_best(), g, u, n, a); }

void swiglu_row_f32(const float *g, const float *u, int64_t n, float *a)
{
    enum { PIECE = 512 };
    uint16_t bits[PIECE];
    const cpu_vector_level level = cpu_vector_best();
    for (int64_t i0 = 0; i0 < n; i0 += PIECE) {
        const int64_t len = n - i0 < PIECE ? n - i0 : PIECE;
        swiglu_row_at(level, g + i0, u + i0, len, bits);
        for (int64_t i = 0; i < len; i++) {
            const uint32_t w = (uint32_t)bits[i] << 16;
            memcpy(a + i0 + i, &w, sizeof w);
        }
    }
}
