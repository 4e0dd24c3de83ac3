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
 * through the tiles where every a_i is zero or finite with 2^-103 <= |a_i| <
 * 2^100: then every product is a multiple of 2^-126 (a's last bit is at
 * 2^-110 or above, W2's at 2^-16 or above), so is every sum of them, and no
 * nonzero one is below 2^-126; and no block's sum overflows (32 products
 * below 2^116). Any other row (tiny, huge, Inf or NaN values: rare in a
 * model) is computed alone by the avx512 level's sequential rule, so a
 * row's bits never depend on the rows it came with.
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

/* Whether a row goes through the tiles (see the top of the file): |a_i| in {0} or [2^-103, 2^100), NaN
 * failing both compares, 16 values a step. */
static AMX_DOWN_TARGET int row_for_tiles(const float *a, int64_t I)
{
    const __m512 lo = _mm512_set1_ps(0x1p-103f), hi = _mm512_set1_ps(0x1p100f);
    __mmask16 bad = 0;
    for (int64_t i = 0; i < I; i += 16) {
        const __m512 m = _mm512_abs_ps(_mm512_loadu_ps(a + i));
        const __mmask16 in = _mm512_cmp_ps_mask(m, lo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(m, hi, _CMP_LT_OQ);
        bad |= (__mmask16)~(in | _mm512_cmp_ps_mask(m, _mm512_setzero_ps(), _CMP_EQ_OQ));
    }
    return bad == 0;
}

/* A row of bf16 values held as floats, as bf16 (their top halves: exact). */
AMX_DOWN_INLINE void row_to_bf16(const float *a, int64_t I, uint16_t *out)
{
    for (int64_t i = 0; i < I; i += 16) {
        const __m512i bits = _mm512_srli_epi32(_mm512_castps_si512(_mm512_loadu_ps(a + i)), 16);
        _mm256_storeu_si256((__m256i *)(out + i), _mm512_cvtepi32_epi16(bits));
    }
}

/*
 * The widening's tables: the low and the high byte of the bf16 of each
 * code magnitude 0-127 (exact: 4 significant bits at most; E4M3's NaN
 * magnitude as NaN, which the panel's NaN columns overrule anyway), two
 * registers each for VPERMI2B; and the byte order that, after the unpacking
 * of low and high bytes into words, leaves each column's K-pair side by
 * side (see widen_rows4).
 */
typedef struct tile_widen {
    __m512i lo[2], hi[2], order, sign;
} tile_widen;

static AMX_DOWN_TARGET tile_widen tile_widen_of(a2amm_fp8_type type)
{
    uint8_t lo[128], hi[128], order[64];
    for (int m = 0; m < 128; m++) {
        const float v = mx_fp8_to_f32((uint8_t)m, type);
        uint32_t bits;
        memcpy(&bits, &v, sizeof bits);
        lo[m] = (uint8_t)(bits >> 16), hi[m] = (uint8_t)(bits >> 24);
    }
    /* unpacklo/hi of 128-bit lane q give words 8q + i from bytes 16q + i and 16q + 8 + i; word w of K-pair
     * row h (0: codes rows 0 and 1, 1: rows 2 and 3) is column w / 2's code in row 2h + w % 2 */
    for (int w = 0; w < 32; w++)
        for (int h = 0; h < 2; h++) order[16 * (w / 8) + 8 * h + w % 8] = (uint8_t)(16 * (2 * h + w % 2) + w / 2);
    return (tile_widen){{_mm512_loadu_si512(lo), _mm512_loadu_si512(lo + 64)},
                        {_mm512_loadu_si512(hi), _mm512_loadu_si512(hi + 64)},
                        _mm512_loadu_si512(order),
                        _mm512_set1_epi8((char)0x80)};
}

/*
 * Four rows of a block's codes (16 columns each, 64 bytes) as two K-pair
 * rows of the B tile: column c's two values at words 2c and 2c + 1, as
 * bf16, by two table lookups (VPERMI2B on the codes' low 7 bits) and the
 * sign put back.
 */
AMX_DOWN_INLINE void widen_rows4(const uint8_t *codes, const tile_widen *w, uint32_t *out)
{
    const __m512i x = _mm512_permutexvar_epi8(w->order, _mm512_loadu_si512(codes));
    const __m512i lo = _mm512_permutex2var_epi8(w->lo[0], x, w->lo[1]);
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(w->hi[0], x, w->hi[1]), x, w->sign, 0xF8);
    _mm512_store_si512(out, _mm512_unpacklo_epi8(lo, hi));
    _mm512_store_si512(out + 16, _mm512_unpackhi_epi8(lo, hi));
}

/* A panel's blocks as TDPBF16PS's B tiles (block b's K-pair row kp: its codes' rows 2kp and 2kp + 1) and its
 * 16 scales a block as floats. */
AMX_DOWN_INLINE void widen_panel_tiles(const uint8_t *panel, int64_t nkb, const tile_widen *w, uint32_t *wide,
                                       float *scales)
{
    for (int64_t b = 0; b < nkb; b++) {
        const uint8_t *blk = panel + HEAD + (size_t)b * BLOCK;
        for (int c = 0; c < NR; c++) scales[b * NR + c] = scale_float(blk[c]);
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++) widen_rows4(blk + NR + 4 * q * NR, w, wide + b * WIDE_BLOCK + q * 32);
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
    const tile_widen w = tile_widen_of(type);
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
    for (int64_t i = 0; i < n; i++) nt += row_for_tiles(a + i * I, I);
    const int64_t padded = (nt + TILE_ROWS - 1) / TILE_ROWS * TILE_ROWS, nkb = I / 32;
    /* one buffer: a's tile rows as bf16 (zeros to a whole tile), their ys, a widened panel, its scales,
     * four C tiles */
    const size_t a_bytes = up64((size_t)(padded * I) * sizeof(uint16_t)), ys_bytes = up64((size_t)nt * sizeof(float *));
    const size_t wide_bytes = (size_t)nkb * WIDE_BLOCK * sizeof(uint32_t), scale_bytes = (size_t)nkb * NR * sizeof(float);
    char *mem = scratch_get(SCRATCH_MOE_DOWN, a_bytes + ys_bytes + wide_bytes + scale_bytes + 4 * 1024);
    if (!mem) return -1;
    uint16_t *abf = (uint16_t *)mem;
    float **ysel = (float **)(mem + a_bytes);
    uint32_t *wide = (uint32_t *)(mem + a_bytes + ys_bytes);
    float *scales = (float *)(mem + a_bytes + ys_bytes + wide_bytes), *cbuf = (float *)((char *)scales + scale_bytes);
    int64_t t = 0;
    for (int64_t i = 0; i < n; i++) {
        if (row_for_tiles(a + i * I, I)) {
            row_to_bf16(a + i * I, I, abf + t * I);
            ysel[t++] = ys[i];
        } else {
            moe_down_avx512(H, I, b_type, a + i * I, 1, packed, ys + i); /* the sequential rule, the row alone */
        }
    }
    if (nt == 0) return 0;
    memset(abf + nt * I, 0, (size_t)((padded - nt) * I) * sizeof(uint16_t));
    tiles_over_panels(H, I, b_type, abf, nt, packed, ysel, wide, scales, cbuf);
    return 0;
}
