/*
 * The down projection's amx level (moe_down.h; docs/op-contract.md, "The
 * MoE op"). Each 32-block's sums of a row, a_i * W2[c][i] over the block,
 * are one TDPBF16PS from zero (a tile of up to 16 rows, 16 columns, the
 * block's 16 K-pairs), in the order the instruction keeps; then, as on
 * every level, acc = fma(sum, 2^(scale - 127), acc), blocks ascending. That
 * is the amx level's order, as a2amm_matmul's levels each have theirs: the
 * block sums are not the sequential ones of the other levels (no fp32 model
 * of TDPBF16PS's sums was found: docs/performance.md), so this level's bits
 * are its own, within the contract's tolerance of the others, and the same
 * whatever the rows beside a row (a tile row's sums do not depend on the
 * other rows, nor on how many the tile has), threads or schedule.
 *
 * TDPBF16PS flushes subnormal inputs, products and sums to zero. A row goes
 * through the tiles where none of that can happen (row_for_pairs,
 * moe_down_panel.h: every a_i zero or finite with 2^-103 <= |a_i| < 2^100);
 * any other row (tiny, huge, Inf or NaN values: rare in a model) is
 * computed alone by the sequential rule, so a row's bits never depend on
 * the rows it came with.
 *
 * W2 stays fp8 in the shared packed layout; each panel of 16 columns is
 * widened once a call into bf16 K-pair tiles (1 KB a block) that every row
 * tile then reads: a decode call reads W2's bytes once.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "common/scratch.h"
#include "gemm/gemm_amx.h"
#include "mx/mx.h"
#include "op/moe_down.h"
#include "op/moe_down_panel.h"

#define AMX_DOWN_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vbmi,avx2,fma,f16c")))
#define AMX_DOWN_INLINE static inline __attribute__((always_inline)) AMX_DOWN_TARGET

enum {
    TILE_ROWS = 16,   /* rows of A a tile holds */
    WIDE_BLOCK = 256, /* dwords of a widened block: 16 K-pairs x 16 columns */
};

/*
 * One configuration for each count r = 1..16 of rows: C (tmm0-3) and A
 * (tmm4-5) r rows, B (tmm6-7) 16 K-pair rows.
 */
#define DOWN_CONFIG(r) {.palette = 1, .colsb = {64, 64, 64, 64, 64, 64, 64, 64}, .rows = {r, r, r, r, r, r, 16, 16}}
static const gemm_amx_config CONFIGS[TILE_ROWS] __attribute__((aligned(64))) = {
    DOWN_CONFIG(1),  DOWN_CONFIG(2),  DOWN_CONFIG(3),  DOWN_CONFIG(4),  DOWN_CONFIG(5),  DOWN_CONFIG(6),
    DOWN_CONFIG(7),  DOWN_CONFIG(8),  DOWN_CONFIG(9),  DOWN_CONFIG(10), DOWN_CONFIG(11), DOWN_CONFIG(12),
    DOWN_CONFIG(13), DOWN_CONFIG(14), DOWN_CONFIG(15), DOWN_CONFIG(16)};

/* A panel's blocks as TDPBF16PS's B tiles (block b's K-pair row kp: its codes' rows 2kp and 2kp + 1) and its
 * 16 scales a block as floats. */
AMX_DOWN_INLINE void widen_panel_tiles(const uint8_t *panel, int64_t nkb, const pair_widen *w, uint32_t *wide,
                                       float *scales)
{
    for (int64_t b = 0; b < nkb; b++) {
        const uint8_t *blk = panel + HEAD + (size_t)b * BLOCK;
        for (int c = 0; c < NR; c++) scales[b * NR + c] = scale_float(blk[c]);
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++) {
            __m512i pair0, pair1;
            widen_rows4(blk + NR + 4 * q * NR, w, &pair0, &pair1);
            _mm512_store_si512(wide + b * WIDE_BLOCK + q * 32, pair0);
            _mm512_store_si512(wide + b * WIDE_BLOCK + q * 32 + 16, pair1);
        }
    }
}

/* acc[r] += the sums of C tile `buf` (rows 16 floats apart) times the block's scales, for the tile's rows. */
#define ADD_BLOCK(buf, scale)                                                                                  \
    do {                                                                                                       \
        const __m512 s_ = (scale);                                                                             \
        _Pragma("GCC unroll 16") for (int r = 0; r < TILE_ROWS; r++) if (r < rows) acc[r] =                    \
            _mm512_fmadd_ps(_mm512_load_ps((buf) + 16 * r), s_, acc[r]);                                       \
    } while (0)

/* Block b (< nkb) into C tile C (A tile A, B tile B), stored to cbuf's slot C; then block b - 2's slot added
 * to acc: a C tile's store has two blocks' work to land before its loads. */
#define TILE_STEP(C, A, B)                                                                                     \
    do {                                                                                                       \
        if (b < nkb) {                                                                                         \
            _tile_zero(C);                                                                                     \
            _tile_loadd(A, a + b * 32, a_stride);                                                              \
            _tile_loadd(B, wide + b * WIDE_BLOCK, 64);                                                         \
            _tile_dpbf16ps(C, A, B);                                                                           \
            _tile_stored(C, cbuf + (C) * TILE_ROWS * 16, 64);                                                  \
        }                                                                                                      \
        if (b >= 2 && b - 2 < nkb) ADD_BLOCK(cbuf + (((C) + 2) & 3) * TILE_ROWS * 16, _mm512_loadu_ps(scales + (b - 2) * NR)); \
        b++;                                                                                                   \
    } while (0)

/*
 * `rows` rows of a (bf16, I apart) over one widened panel: each block's sums
 * by a tile, four C tiles in turn (cbuf: four tiles' room), each added to
 * acc two blocks after its store; then ys[r][col ..], NaN canonical, the
 * panel's NaN columns NaN.
 */
static AMX_DOWN_TARGET void tile_panel(const uint16_t *a, int64_t I, int rows, const uint32_t *wide,
                                       const float *scales, unsigned nan, float *cbuf, float *const *ys,
                                       int64_t col)
{
    const int64_t nkb = I / 32, a_stride = I * 2;
    __m512 acc[TILE_ROWS];
#pragma GCC unroll 16
    for (int r = 0; r < TILE_ROWS; r++) acc[r] = _mm512_setzero_ps();
    int64_t b = 0;
    while (b < nkb + 2) {
        TILE_STEP(0, 4, 6);
        TILE_STEP(1, 5, 7);
        TILE_STEP(2, 4, 6);
        TILE_STEP(3, 5, 7);
    }
#pragma GCC unroll 16
    for (int r = 0; r < TILE_ROWS; r++)
        if (r < rows) {
            const __m512 v = acc[r];
            const __mmask16 bad = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) | (__mmask16)nan;
            _mm512_storeu_ps(ys[r] + col, _mm512_mask_mov_ps(v, bad, _mm512_set1_ps(NAN)));
        }
}

static size_t up64(size_t bytes) { return (bytes + 63) / 64 * 64; }

static AMX_DOWN_TARGET void tiles_over_panels(int64_t H, int64_t I, a2amm_fp8_type type, const uint16_t *abf, int64_t nt,
                                              const uint8_t *packed, float *const *ysel, uint32_t *wide,
                                              float *scales, float *cbuf)
{
    const pair_widen w = pair_widen_of(type);
    _tile_loadconfig(&CONFIGS[(nt < TILE_ROWS ? nt : TILE_ROWS) - 1]);
    for (int64_t p = 0; p < H / NR; p++) {
        const uint8_t *panel = packed + (size_t)p * panel_bytes(I);
        widen_panel_tiles(panel, I / 32, &w, wide, scales);
        for (int64_t r0 = 0; r0 < nt; r0 += TILE_ROWS)
            tile_panel(abf + r0 * I, I, nt - r0 < TILE_ROWS ? (int)(nt - r0) : TILE_ROWS, wide, scales,
                       nan_columns(panel), cbuf, ysel + r0, p * NR);
    }
    _tile_release();
}

AMX_DOWN_TARGET int moe_down_amx(int64_t H, int64_t I, a2amm_fp8_type b_type, const float *a, int64_t n, const uint8_t *packed,
                 float *const *ys)
{
    if (n <= 0) return 0;
    /* the tiles' rows counted first, for the buffer's size (the check is a fraction of a row's work) */
    int64_t nt = 0;
    for (int64_t i = 0; i < n; i++) nt += row_for_pairs(a + i * I, I);
    const int64_t padded = (nt + TILE_ROWS - 1) / TILE_ROWS * TILE_ROWS, nkb = I / 32;
    /* one buffer: a's tile rows as bf16 (zeros to a whole tile), their ys, a widened panel, its scales,
     * four C tiles */
    const size_t a_bytes = up64((size_t)(padded * I) * sizeof(uint16_t)), ys_bytes = up64((size_t)nt * sizeof(float *));
    const size_t wide_bytes = (size_t)nkb * WIDE_BLOCK * sizeof(uint32_t), scale_bytes = (size_t)nkb * NR * sizeof(float);
    char *mem = scratch_get(SCRATCH_MOE_TILES, a_bytes + ys_bytes + wide_bytes + scale_bytes + 4 * 1024);
    if (!mem) return -1;
    uint16_t *abf = (uint16_t *)mem;
    float **ysel = (float **)(mem + a_bytes);
    uint32_t *wide = (uint32_t *)(mem + a_bytes + ys_bytes);
    float *scales = (float *)(mem + a_bytes + ys_bytes + wide_bytes), *cbuf = (float *)((char *)scales + scale_bytes);
    int64_t t = 0;
    for (int64_t i = 0; i < n; i++) {
        if (row_for_pairs(a + i * I, I)) {
            row_to_bf16(a + i * I, I, abf + t * I);
            ysel[t++] = ys[i];
        } else {
            moe_down_sequential_avx512(H, I, b_type, a + i * I, 1, packed, ys + i); /* the sequential rule, the row alone */
        }
    }
    if (nt == 0) return 0;
    memset(abf + nt * I, 0, (size_t)((padded - nt) * I) * sizeof(uint16_t));
    tiles_over_panels(H, I, b_type, abf, nt, packed, ysel, wide, scales, cbuf);
    return 0;
}
