/*
 * The avx512 level (AVX-512 BF16 + VBMI): the bf16 packing of
 * gemm_bf16_pack.h and a 6 x 64 register-blocked vdpbf16ps microkernel (24
 * zmm accumulators; per K-pair 4 loads of B, 6 broadcasts of A, 24
 * vdpbf16ps). Each call sums its chunk into zeroed accumulators, K-pairs
 * ascending, and adds them to C (or to +0.0f) once: C's value depends on KC
 * and on nothing the driver chooses.
 *
 * Memory: the kernel prefetches the C lines it will read as it starts, and
 * again, one a step, the C lines it reads or writes over its last steps
 * (the B stream has pushed them out of L1 by then); and one line of the
 * next panel's B each step of PREFETCH_KPAIRS K-pairs.
 */
#include <immintrin.h>

#include "gemm/gemm_bf16_pack.h"
#include "gemm/gemm_bf16_round.h"
#include "gemm/gemm_level.h"

enum {
    MR = 6,             /* rows of a microkernel call */
    PREFETCH_KPAIRS = 8 /* one line of the next panel every 8 K-pairs */
};

/* acc[r][g] = sum over K-pairs of A row r times B columns 16g..16g+15; then c_in + acc to c_out or out. */
AVX512_INLINE void tile_kernel(const int rows, const gemm_tile *t)
{
    const float *c_in = t->c_in;
    float *c_out = t->c_out;
    const int64_t ldc_in = t->ldc_in, kpairs = t->k[0] / 2;
    __m512 acc[MR][4];
#pragma GCC unroll 8
    for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) acc[r][g] = _mm512_setzero_ps();
    const uint32_t *a = t->a[0];
    const __m512i *b = (const __m512i *)t->b[0];
    if (c_in) /* C's lines, for the end */
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) _mm_prefetch((const char *)(c_in + r * ldc_in + 16 * g), _MM_HINT_T0);
    const char *prefetch = t->prefetch;
    /* C's lines again near the end, one per step: B's stream has pushed them out of L1 by then. */
    const float *c_end = c_in ? c_in : (t->out ? NULL : c_out);
    const int64_t ld_end = c_in ? ldc_in : t->ldc_out, c_lines = c_end ? rows * 4 : 0;
    int64_t c_line = c_lines - (kpairs + PREFETCH_KPAIRS - 1) / PREFETCH_KPAIRS;
    for (int64_t kp = 0; kp < kpairs; kp += PREFETCH_KPAIRS, c_line++) {
        if (prefetch < t->prefetch_end) {
            _mm_prefetch(prefetch, _MM_HINT_T0);
            prefetch += 64;
        }
        if (c_line >= 0) _mm_prefetch((const char *)(c_end + (c_line >> 2) * ld_end + 16 * (c_line & 3)), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int u = 0; u < PREFETCH_KPAIRS; u++, a++, b += 4) {
            __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 1);
            __m512bh b2 = (__m512bh)_mm512_load_si512(b + 2), b3 = (__m512bh)_mm512_load_si512(b + 3);
#pragma GCC unroll 8
            for (int r = 0; r < rows; r++) {
                __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[r * BF16_A_LD]);
                acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
                acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
                acc[r][2] = _mm512_dpbf16_ps(acc[r][2], av, b2);
                acc[r][3] = _mm512_dpbf16_ps(acc[r][3], av, b3);
            }
        }
    }
    /* +0.0f + acc where there is no C: the bits of C = 0 followed by C += acc */
    if (t->out) {
        uint16_t *out = t->out;
        const int64_t ldo = t->ldo;
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                __m512 sum = c_in ? _mm512_add_ps(_mm512_loadu_ps(c_in + r * ldc_in + 16 * g), acc[r][g])
                                  : _mm512_add_ps(_mm512_setzero_ps(), acc[r][g]);
                _mm256_storeu_si256((__m256i *)(out + r * ldo + 16 * g), gemm_bf16_round16(sum));
            }
    } else if (!c_in) {
        const int64_t ldc = t->ldc_out;
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++)
                _mm512_storeu_ps(c_out + r * ldc + 16 * g, _mm512_add_ps(_mm512_setzero_ps(), acc[r][g]));
    } else {
        const int64_t ldc = t->ldc_out;
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++)
                _mm512_storeu_ps(c_out + r * ldc + 16 * g,
                                 _mm512_add_ps(_mm512_loadu_ps(c_in + r * ldc_in + 16 * g), acc[r][g]));
    }
}

#define DEFINE_TILE_KERNEL(R) \
    AVX512_TARGET static void tile_kernel_##R(const gemm_tile *t) { tile_kernel(R, t); }
DEFINE_TILE_KERNEL(1)
DEFINE_TILE_KERNEL(2)
DEFINE_TILE_KERNEL(3)
DEFINE_TILE_KERNEL(4)
DEFINE_TILE_KERNEL(5)
DEFINE_TILE_KERNEL(6)

static void avx512_kernel(const gemm_tile *t)
{
    switch (t->rows) {
    case 1: tile_kernel_1(t); break;
    case 2: tile_kernel_2(t); break;
    case 3: tile_kernel_3(t); break;
    case 4: tile_kernel_4(t); break;
    case 5: tile_kernel_5(t); break;
    default: tile_kernel_6(t); break;
    }
}

static const cpu_feature NEEDS[] = {CPU_AVX512F, CPU_AVX512BW, CPU_AVX512BF16, CPU_AVX512VBMI};

const gemm_level gemm_avx512_level = {
    .isa = GEMM_ISA_AVX512,
    .needs = NEEDS,
    .nneeds = (int)(sizeof NEEDS / sizeof NEEDS[0]),
    .kernel = avx512_kernel,
    .format = GEMM_FOLD_BF16,
    .nr = BF16_NR,
    .kc = BF16_KC,
    .mr = MR,
    .mc = 192,      /* packed A 384 KB, in L2 beside the panel's B chunk (128 KB): 32 tiles reuse each chunk */
    .mc_deep = 192,
    .prefetch_k = 2 * PREFETCH_KPAIRS,
    .a_ld = BF16_A_LD * 4,
    .a_block = 64,
    .b_block = BF16_B_BLOCK,
    .pack_b = gemm_bf16_pack_b,
    .pack_a_row = gemm_bf16_pack_a_row,
};
