/*
 * The down projection's avx512 level (moe_down.h; docs/op-contract.md, "The
 * MoE op"). A row whose values VDPBF16PS never flushes (row_for_pairs,
 * moe_down_panel.h) sums each 32-block with one chain of VDPBF16PS from +0
 * over the block's 16 K-pairs (t, t + 1): the instruction adds the odd
 * product, then the even one, each rounded to fp32 (Intel's SDM; an AMD Zen
 * 4 measured the same), and every product is exact, so a block's sum is
 * ((s + a_{t+1} w_{t+1}) + a_t w_t) over t = 0, 2, .., 30 in plain fp32:
 * moe_down_portable_pairs is that twin, bit for bit (tests/test_moe_down.c).
 * Then, as on every level, acc = fma(sum, 2^(scale - 127), acc), blocks
 * ascending. Any other row (tiny, huge, Inf or NaN values: rare in a
 * model) takes the sequential rule (moe_down_sequential_avx512); a row's
 * bits never depend on the rows beside it. A CPU whose VDPBF16PS sums in
 * another order (gemm_bf16_dot_order_holds) does not run the avx512 level;
 * called there all the same, this takes the sequential rule for every row:
 * the portable level's bits, not unknown ones.
 *
 * Why: the sequential rule is one fp32 FMA a product, 16 products a zmm
 * instruction; VDPBF16PS takes 32, and on a Zen 4 (one 512-bit FMA or dot
 * product a cycle) the sequential rule at a few rows was bound by its FMAs.
 *
 * W2 stays fp8 in the shared packed layout: each group of rows widens a
 * block's codes in registers into bf16 K-pairs (widen_rows4: three byte
 * permutes and two unpacks a 64 codes), and a group's a values are made
 * bf16 pairs a block at a time on the stack, so the level needs no memory
 * of its own and never fails.
 */
#include <immintrin.h>
#include <pthread.h>
#include <string.h>

#include "gemm/gemm_bf16_order.h"
#include "mx/mx.h"
#include "op/moe_down.h"
#include "op/moe_down_panel.h"

#define PAIRS_TARGET __attribute__((target("avx512f,avx512bw,avx512vbmi,avx512bf16,avx2,fma,f16c")))
#define PAIRS_INLINE static inline __attribute__((always_inline)) PAIRS_TARGET

enum {
    PAIR_ROWS = 8, /* rows a group keeps in registers */
    PAIR_SUMS = 8, /* sums a group keeps in flight: panels side by side x rows */
};

/* The block's K-pair kp of a row's pairs (bf16 a_t low, a_{t+1} high), broadcast. */
PAIRS_INLINE __m512bh pair_of(const uint32_t *pairs, int kp) { return (__m512bh)_mm512_set1_epi32((int)pairs[kp]); }

/*
 * `rows` rows (floats, I apart) of `np` panels side by side (both constants
 * where inlined): rows x np chains of dot products in flight, as a row's
 * chain over a block is its order; each block brings in the next group's
 * (`next_np` panels from `next` on: prefetch_block).
 */
PAIRS_INLINE void pairs_panels(int rows, int np, const pair_widen *w, int64_t I, const float *a,
                               const uint8_t *panel, const uint8_t *next, int next_np, float *const *ys, int64_t col)
{
    const size_t stride = panel_bytes(I);
    __m512 acc[PAIR_SUMS]; /* panel q, row r at q * rows + r */
#pragma GCC unroll 16 /* unrolled, not a memset of the array on the stack (GCC made one each call) */
    for (int i = 0; i < np * rows; i++) acc[i] = _mm512_setzero_ps();
    uint32_t pairs[PAIR_ROWS][16] __attribute__((aligned(64)));
    for (int64_t b = 0; b < I / 32; b++) {
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++) { /* 32 bf16 values held as floats to bf16: exact */
            const float *ab = a + r * I + b * 32;
            __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(ab + 16), _mm512_loadu_ps(ab));
            _mm512_store_si512(pairs[r], (__m512i)v);
        }
        const uint8_t *blk = panel + HEAD + (size_t)b * BLOCK;
        prefetch_block(next, next_np, stride, b);
        __m512 sums[PAIR_SUMS];
#pragma GCC unroll 16
        for (int i = 0; i < np * rows; i++) sums[i] = _mm512_setzero_ps();
        for (int q = 0; q < 8; q++) /* code rows 4q .. 4q + 3: K-pairs 2q, 2q + 1 */
#pragma GCC unroll 8
            for (int p = 0; p < np; p++) {
                __m512i k0, k1;
                widen_rows4(blk + p * stride + NR + 4 * q * NR, w, &k0, &k1);
#pragma GCC unroll 8
                for (int r = 0; r < rows; r++)
                    sums[p * rows + r] = _mm512_dpbf16_ps(sums[p * rows + r], (__m512bh)k0, pair_of(pairs[r], 2 * q));
#pragma GCC unroll 8
                for (int r = 0; r < rows; r++)
                    sums[p * rows + r] = _mm512_dpbf16_ps(sums[p * rows + r], (__m512bh)k1, pair_of(pairs[r], 2 * q + 1));
            }
#pragma GCC unroll 8
        for (int p = 0; p < np; p++) {
            const __m512 scale = block_scales_avx512(blk + p * stride);
#pragma GCC unroll 8
            for (int r = 0; r < rows; r++) acc[p * rows + r] = _mm512_fmadd_ps(sums[p * rows + r], scale, acc[p * rows + r]);
        }
    }
    for (int p = 0; p < np; p++)
        for (int r = 0; r < rows; r++) {
            const __m512 v = acc[p * rows + r];
            const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) | (__mmask16)nan_columns(panel + p * stride);
            _mm512_storeu_ps(ys[r] + col + p * NR, _mm512_mask_mov_ps(v, nan, _mm512_set1_ps(NAN)));
        }
}

typedef void pairs_fn(const pair_widen *w, int64_t I, const float *a, const uint8_t *panel, const uint8_t *next,
                      int next_np, float *const *ys, int64_t col);

/* The panels a group of rows takes at once: 8 chains in flight where the rows allow. */
static int pairs_panels_at_once(int rows) { return rows == 1 ? 8 : rows == 2 ? 4 : rows <= 4 ? 2 : 1; }

/* One copy of pairs_panels a (rows, panels), each a function of its own (as moe_down.c's, for the compilers'
 * sake). */
#define DEFINE_PAIRS(k, q)                                                                                      \
    static PAIRS_TARGET __attribute__((noinline)) void pairs_##k##_##q(                                        \
        const pair_widen *w, int64_t I, const float *a, const uint8_t *panel, const uint8_t *next, int next_np, \
        float *const *ys, int64_t col)                                                                         \
    {                                                                                                          \
        pairs_panels(k, q, w, I, a, panel, next, next_np, ys, col);                                            \
    }
#define CASES_PAIRS(M)                                                                                          \
    M(1, 8) M(2, 4) M(3, 2) M(4, 2) M(1, 1) M(2, 1) M(3, 1) M(4, 1) M(5, 1) M(6, 1) M(7, 1) M(8, 1)
CASES_PAIRS(DEFINE_PAIRS)
#define PICK(k, q)                                                                                              \
    case k * 16 + q:                                                                                            \
        return pairs_##k##_##q;

static pairs_fn *pick_pairs(int rows, int np)
{
    switch (rows * 16 + np) {
        CASES_PAIRS(PICK)
    }
    return NULL;
}
#undef PICK

/* Rows r0 .. r1 - 1, all of them through the pairs: groups of PAIR_ROWS over every panel. */
static void pairs_rows(int64_t H, int64_t I, const pair_widen *w, const float *a, int64_t r0, int64_t r1,
                       const uint8_t *packed, float *const *ys)
{
    const int64_t panels = H / NR;
    for (int64_t g = r0; g < r1; g += PAIR_ROWS) {
        const int rows = r1 - g < PAIR_ROWS ? (int)(r1 - g) : PAIR_ROWS, most = pairs_panels_at_once(rows);
        for (int64_t p = 0; p < panels;) {
            const int np = panels - p >= most ? most : 1;
            const int64_t left = panels - p - np;
            const uint8_t *panel = packed + (size_t)p * panel_bytes(I);
            pick_pairs(rows, np)(w, I, a + g * I, panel, left ? panel + (size_t)np * panel_bytes(I) : NULL,
                                 left < np ? (int)left : np, ys + g, p * NR);
            p += np;
        }
    }
}

PAIRS_TARGET int moe_down_avx512(int64_t H, int64_t I, a2amm_fp8_type b_type, const float *a, int64_t n,
                                 const uint8_t *packed, float *const *ys)
{
    if (!gemm_bf16_dot_order_holds()) /* another VDPBF16PS: the sequential rule's bits rather than unknown ones */
        return moe_down_sequential_avx512(H, I, b_type, a, n, packed, ys);
    const pair_widen w = pair_widen_of(b_type);
    /* runs of rows alike: the pairs' rows in groups, the others by the sequential rule */
    for (int64_t r0 = 0, r1; r0 < n; r0 = r1) {
        const int pairs = row_for_pairs(a + r0 * I, I);
        for (r1 = r0 + 1; r1 < n && row_for_pairs(a + r1 * I, I) == pairs;) r1++;
        if (pairs)
            pairs_rows(H, I, &w, a, r0, r1, packed, ys);
        else
            moe_down_sequential_avx512(H, I, b_type, a + r0 * I, r1 - r0, packed, ys + r0);
    }
    return 0;
}
