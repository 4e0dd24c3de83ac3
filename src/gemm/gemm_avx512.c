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

#include "gemm/gemm_bf16_order.h"
#include "gemm/gemm_bf16_pack.h"
#include "gemm/gemm_bf16_round.h"
#include "gemm/gemm_bf16_widen.h"
#include "gemm/gemm_level.h"

enum {
    MR = 6,             /* rows of a microkernel call */
    PREFETCH_KPAIRS = 8, /* one line of the next panel every 8 K-pairs */
    B8_AHEAD = 1024      /* bytes of B in fp8 brought into L1 ahead of their use (the small-M path) */
};

/* C's lines the tile reads at its end, for the end: B's stream will push them out of L1 meanwhile. */
typedef struct c_lines {
    const float *c; /* c_in, or c_out when it is written and not read; NULL when neither */
    int64_t ld, lines, next;
} c_lines;

AVX512_INLINE c_lines c_lines_start(const int rows, const gemm_tile *t, int64_t steps)
{
    const float *c_in = t->c_in;
    if (c_in)
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) _mm_prefetch((const char *)(c_in + r * t->ldc_in + 16 * g), _MM_HINT_T0);
    c_lines l = {c_in ? c_in : (t->out ? NULL : t->c_out), c_in ? t->ldc_in : t->ldc_out, 0, 0};
    l.lines = l.c ? rows * 4 : 0;
    l.next = l.lines - steps; /* one a step over the last steps */
    return l;
}

AVX512_INLINE void c_lines_step(c_lines *l)
{
    if (l->next >= 0 && l->next < l->lines)
        _mm_prefetch((const char *)(l->c + (l->next >> 2) * l->ld + 16 * (l->next & 3)), _MM_HINT_T0);
    l->next++;
}

/* c_in (or +0.0f: the bits of C = 0 followed by C += acc) + acc, to c_out or rounded to out. */
AVX512_INLINE void tile_store(const int rows, __m512 acc[MR][4], const gemm_tile *t)
{
    const float *c_in = t->c_in;
    const int64_t ldc_in = t->ldc_in;
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
        float *c_out = t->c_out;
        const int64_t ldc = t->ldc_out;
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++)
                _mm512_storeu_ps(c_out + r * ldc + 16 * g, _mm512_add_ps(_mm512_setzero_ps(), acc[r][g]));
    } else {
        float *c_out = t->c_out;
        const int64_t ldc = t->ldc_out;
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++)
                _mm512_storeu_ps(c_out + r * ldc + 16 * g,
                                 _mm512_add_ps(_mm512_loadu_ps(c_in + r * ldc_in + 16 * g), acc[r][g]));
    }
}

/* acc[r][g] += A row r's K-pair (a[r * BF16_A_LD]) times the B dwords b[g] (columns 16g..16g+15). */
AVX512_INLINE void tile_step(const int rows, __m512 acc[MR][4], const uint32_t *a, const __m512bh b[4])
{
#pragma GCC unroll 8
    for (int r = 0; r < rows; r++) {
        __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[r * BF16_A_LD]);
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) acc[r][g] = _mm512_dpbf16_ps(acc[r][g], av, b[g]);
    }
}

/* acc[r][g] = sum over K-pairs of A row r times B columns 16g..16g+15; then c_in + acc to c_out or out. */
AVX512_INLINE void tile_kernel(const int rows, const gemm_tile *t)
{
    const int64_t kpairs = t->k[0] / 2;
    __m512 acc[MR][4];
#pragma GCC unroll 8
    for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) acc[r][g] = _mm512_setzero_ps();
    const uint32_t *a = t->a[0];
    const __m512i *b = (const __m512i *)t->b[0];
    c_lines cl = c_lines_start(rows, t, (kpairs + PREFETCH_KPAIRS - 1) / PREFETCH_KPAIRS);
    const char *prefetch = t->prefetch;
    for (int64_t kp = 0; kp < kpairs; kp += PREFETCH_KPAIRS) {
        if (prefetch < t->prefetch_end) {
            _mm_prefetch(prefetch, _MM_HINT_T0);
            prefetch += 64;
        }
        c_lines_step(&cl);
#pragma GCC unroll 4
        for (int u = 0; u < PREFETCH_KPAIRS; u++, a++, b += 4) {
            const __m512bh bv[4] = {(__m512bh)_mm512_load_si512(b), (__m512bh)_mm512_load_si512(b + 1),
                                    (__m512bh)_mm512_load_si512(b + 2), (__m512bh)_mm512_load_si512(b + 3)};
            tile_step(rows, acc, a, bv);
        }
    }
    tile_store(rows, acc, t);
}

/* ---- The small-M microkernel: B in fp8, widened in registers ---------------- */

/*
 * kernel8_columns: acc[r][g0 .. g0 + G - 1] (columns 16 g0 .. 16 (g0 + G) - 1
 * of the panel) += the tile's K-pairs of B in fp8 (gemm_bf16_pack.h), each
 * block's K-pairs widened as they are used, in the order tile_step gives
 * them, so the same bits. B comes from memory once (few rows reuse it
 * little): each step brings in, into L2, G / 2 lines of the panel's next
 * call from *prefetch on, and into L1 this call's lines a few steps ahead.
 * cl: NULL, or C's lines to bring in over the pass.
 */
AVX512_INLINE void kernel8_columns(const int rows, const gemm_tile *t, const widen_consts *w, __m512 acc[MR][4],
                                   const int g0, const int G, const char **prefetch, c_lines *cl)
{
    const int64_t nblk = t->k[0] / 32;
    const uint32_t *a = t->a[0];
    const uint8_t *blk = t->b[0];
    for (int64_t j = 0; j < nblk; j++, blk += BF16_B8_BLOCK) {
        const int refused = (t->b_refused[0] >> j) & 1, special = (t->b_special[0] >> j) & 1;
        __m512i offset[4], biased[4];
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            offset[g] = widen_offsets(blk + 16 * (g0 + g));
            biased[g] = _mm512_add_epi16(offset[g], w->bias);
        }
        for (int step = 0; step < 16; step += PREFETCH_KPAIRS) {
            if (cl) c_lines_step(cl);
#pragma GCC unroll 8
            for (int u = 0; u < PREFETCH_KPAIRS; u++, a++) {
                const uint8_t *codes = blk + 64 + (step + u) * 128 + 32 * g0;
                if (*prefetch < t->prefetch_end) {
#pragma GCC unroll 2
                    for (int l = 0; l < G / 2; l++) _mm_prefetch(*prefetch + 64 * l, _MM_HINT_T1);
                    *prefetch += 32 * G;
                }
#pragma GCC unroll 2
                for (int l = 0; l < G / 2; l++) _mm_prefetch((const char *)codes + B8_AHEAD + 64 * l, _MM_HINT_T0);
                __m512bh bv[4];
#pragma GCC unroll 2
                for (int l = 0; l < G / 2; l++) {
                    if (refused) bv[2 * l] = bv[2 * l + 1] = (__m512bh)_mm512_setzero_si512();
                    else widen64(codes + 64 * l, offset + 2 * l, biased + 2 * l, w, special, bv + 2 * l);
                }
#pragma GCC unroll 8
                for (int r = 0; r < rows; r++) {
                    const __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[r * BF16_A_LD]);
#pragma GCC unroll 4
                    for (int g = 0; g < G; g++) acc[r][g0 + g] = _mm512_dpbf16_ps(acc[r][g0 + g], av, bv[g]);
                }
            }
        }
    }
}

/*
 * tile_kernel on B in fp8: kernel8_columns over the panel's 64 columns in
 * one pass up to 4 rows (16 accumulators, 4 widened registers and the
 * constants fit the 32 zmm), in two passes of 32 columns from 5 rows (20-24
 * accumulators and all 4 widened registers do not: GCC spilled accumulators
 * at every step; two passes are about 1.1x at 6 rows on Zen 4); the second
 * pass reads its lines from L2, where the first pass's brought them. Each
 * accumulator takes the same K-pairs in the same order either way: the same
 * bits. The type is a constant in each copy (tile_kernel8): the widening's
 * shifts take an immediate, where a shift by a register is two uops on Intel.
 */
AVX512_INLINE void tile_kernel8_of(const int rows, const gemm_tile *t, const a2amm_fp8_type type)
{
    const widen_consts w = widen_consts_of(type);
    __m512 acc[MR][4];
#pragma GCC unroll 8
    for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) acc[r][g] = _mm512_setzero_ps();
    const char *prefetch = t->prefetch;
    const int64_t steps = t->k[0] / 32 * (16 / PREFETCH_KPAIRS);
    if (rows > 4) {
        kernel8_columns(rows, t, &w, acc, 0, 2, &prefetch, NULL);
        c_lines cl = c_lines_start(rows, t, steps);
        kernel8_columns(rows, t, &w, acc, 2, 2, &prefetch, &cl);
    } else {
        c_lines cl = c_lines_start(rows, t, steps);
        kernel8_columns(rows, t, &w, acc, 0, 4, &prefetch, &cl);
    }
    tile_store(rows, acc, t);
}

AVX512_INLINE void tile_kernel8(const int rows, const gemm_tile *t)
{
    if (t->b_type == A2AMM_E5M2) tile_kernel8_of(rows, t, A2AMM_E5M2);
    else tile_kernel8_of(rows, t, A2AMM_E4M3);
}

GEMM_KERNEL_BY_ROWS(AVX512_TARGET, avx512_kernel, tile_kernel)
GEMM_KERNEL_BY_ROWS(AVX512_TARGET, avx512_kernel8, tile_kernel8)

static const cpu_feature NEEDS[] = {CPU_AVX512F, CPU_AVX512BW, CPU_AVX512BF16, CPU_AVX512VBMI};

/* The level's bits assume VDPBF16PS's order (gemm_bf16_order.h): a CPU that sums otherwise does not run it. */
static const char *avx512_why_not(void)
{
    return gemm_bf16_dot_order_holds() ? NULL
                                       : "this CPU's VDPBF16PS sums a pair in another order than the level's bits "
                                         "assume (the odd product, then the even, each rounded)";
}

const gemm_level gemm_avx512_level = {
    .isa = GEMM_ISA_AVX512,
    .needs = NEEDS,
    .nneeds = (int)(sizeof NEEDS / sizeof NEEDS[0]),
    .why_not = avx512_why_not,
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
    /* two tiles: the second widens B again from L1/L2, which still costs less than reading B in bf16,
     * twice the bytes (Zen 4, `bench gemm M 3584 8192`: 7-12 rows 1.12x the packed path; 13-16 a tie) */
    .small_m = 2 * MR,
    .kernel8 = avx512_kernel8,
    .b8_block = BF16_B8_BLOCK,
    .pack_b8 = gemm_bf16_pack_b8,
    .b8_block_codes = gemm_bf16_b8_block_codes,
};
