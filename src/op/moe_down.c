/* The MoE op's down projection: the packing and its levels (see moe_down.h). */
#include "op/moe_down.h"
#include "op/moe_down_panel.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "common/scratch.h"
#include "gemm/gemm_widen_avx2.h"
#include "mx/mx.h"

enum {
    ROWS_512 = 8,         /* rows the avx512 level keeps in registers at once */
    ROWS_256 = 4,         /* and the avx2 level */
    SUMS_IN_FLIGHT = 8    /* vectors of sums a level keeps (panels side by side x rows, x halves on avx2) */
};

static int nan_code(uint8_t code, a2amm_fp8_type type)
{
    return type == A2AMM_E4M3 ? (code & 0x7F) == 0x7F : (code & 0x7F) > 0x7C;
}

/* block_normal's codes: a nonzero exponent, and not E5M2's Inf or NaN (exponent 31). */
static int normal_code(uint8_t code, a2amm_fp8_type type)
{
    const unsigned exponent = type == A2AMM_E4M3 ? code >> 3 & 0xF : code >> 2 & 0x1F;
    return exponent != 0 && (type == A2AMM_E4M3 || exponent != 0x1F);
}

size_t moe_down_bytes(int64_t H, int64_t I) { return (size_t)(H / NR) * panel_bytes(I); }

void moe_down_pack(int64_t H, int64_t I, a2amm_fp8_type b_type, const uint8_t *w2, int64_t ldw, const uint8_t *s2,
                   int64_t lds, uint8_t *packed)
{
    const int64_t nkb = I / 32;
    for (int64_t p = 0; p < H / NR; p++) {
        uint8_t *panel = packed + (size_t)p * panel_bytes(I), *tail = panel + HEAD + (size_t)nkb * BLOCK;
        unsigned nan_columns = 0;
        memset(tail, 0, tail_bytes(I));
        for (int64_t b = 0; b < nkb; b++) {
            uint8_t *blk = panel + HEAD + (size_t)b * BLOCK;
            int normal = 1;
            for (int c = 0; c < NR; c++) {
                const int64_t col = p * NR + c;
                blk[c] = s2[col * lds + b];
                for (int t = 0; t < 32; t++) {
                    uint8_t code = w2[col * ldw + b * 32 + t];
                    blk[NR + t * NR + c] = code;
                    if (nan_code(code, b_type)) nan_columns |= 1u << c;
                    normal &= normal_code(code, b_type);
                }
            }
            tail[b / 8] |= (uint8_t)(normal << (b % 8));
        }
        memset(panel, 0, HEAD);
        panel[0] = (uint8_t)nan_columns, panel[1] = (uint8_t)(nan_columns >> 8);
    }
}

/* pair_widen_of's bytes for each type (moe_down_panel.h), built once. */
static uint8_t pair_bytes[2][128 + 128 + 64];
static pthread_once_t pair_bytes_once = PTHREAD_ONCE_INIT;

static void pair_bytes_build(void)
{
    for (int type = 0; type < 2; type++) {
        uint8_t *lo = pair_bytes[type], *hi = lo + 128, *order = lo + 256;
        for (int m = 0; m < 128; m++) {
            const float v = mx_fp8_to_f32((uint8_t)m, (a2amm_fp8_type)type);
            uint32_t bits;
            memcpy(&bits, &v, sizeof bits);
            lo[m] = (uint8_t)(bits >> 16), hi[m] = (uint8_t)(bits >> 24);
        }
        /* unpacklo/hi of 128-bit lane q give words 8q + i from bytes 16q + i and 16q + 8 + i; word w of K-pair
         * row h (0: codes rows 0 and 1, 1: rows 2 and 3) is column w / 2's code in row 2h + w % 2 */
        for (int w = 0; w < 32; w++)
            for (int h = 0; h < 2; h++) order[16 * (w / 8) + 8 * h + w % 8] = (uint8_t)(16 * (2 * h + w % 2) + w / 2);
    }
}

const uint8_t *moe_down_pair_bytes(a2amm_fp8_type type)
{
    pthread_once(&pair_bytes_once, pair_bytes_build);
    return pair_bytes[type];
}

/* 2^(scale - 127) for a scale byte, NaN for 0xFF (mx_e8m0_to_f64's values), built from its bits: ldexp
 * per block and column cost more than the block's products. */
static double scale_value(uint8_t s)
{
    uint64_t bits = (uint64_t)(s + 1023 - 127) << 52;
    double v;
    memcpy(&v, &bits, sizeof v);
    return s == 0xFF ? NAN : v;
}

static float canonical(float v) { return isnan(v) ? NAN : v; }

int moe_down_portable(int64_t H, int64_t I, a2amm_fp8_type b_type, const float *a, int64_t n,
                       const uint8_t *packed, float *const *ys)
{
    const int64_t nkb = I / 32;
    float value[256];
    for (int c = 0; c < 256; c++) value[c] = mx_fp8_to_f32((uint8_t)c, b_type);
    for (int64_t p = 0; p < H / NR; p++) {
        const uint8_t *panel = packed + (size_t)p * panel_bytes(I) + HEAD;
        for (int64_t i = 0; i < n; i++) {
            const float *ai = a + i * I;
            float acc[NR] = {0};
            for (int64_t b = 0; b < nkb; b++) {
                const uint8_t *blk = panel + (size_t)b * BLOCK;
                float sums[NR] = {0};
                for (int t = 0; t < 32; t++)
                    for (int c = 0; c < NR; c++) {
                        float product = ai[b * 32 + t] * value[blk[NR + t * NR + c]]; /* its own rounding */
                        sums[c] = sums[c] + product;
                    }
                for (int c = 0; c < NR; c++) acc[c] = (float)((double)acc[c] + (double)sums[c] * scale_value(blk[c]));
            }
            for (int c = 0; c < NR; c++) ys[i][p * NR + c] = canonical(acc[c]);
        }
    }
    return 0;
}

/* The portable level's row condition for the pairs (row_for_pairs in moe_down_panel.h, one value at a time). */
static int row_for_pairs_portable(const float *a, int64_t I)
{
    for (int64_t i = 0; i < I; i++) {
        const float m = fabsf(a[i]);
        if (!(m == 0.0f || (m >= 0x1p-103f && m < 0x1p100f))) return 0;
    }
    return 1;
}

int moe_down_portable_pairs(int64_t H, int64_t I, a2amm_fp8_type b_type, const float *a, int64_t n,
                            const uint8_t *packed, float *const *ys)
{
    const int64_t nkb = I / 32;
    float value[256];
    for (int c = 0; c < 256; c++) value[c] = mx_fp8_to_f32((uint8_t)c, b_type);
    for (int64_t i = 0; i < n; i++) {
        if (!row_for_pairs_portable(a + i * I, I)) {
            moe_down_portable(H, I, b_type, a + i * I, 1, packed, ys + i);
            continue;
        }
        const float *ai = a + i * I;
        for (int64_t p = 0; p < H / NR; p++) {
            const uint8_t *panel = packed + (size_t)p * panel_bytes(I) + HEAD;
            float acc[NR] = {0};
            for (int64_t b = 0; b < nkb; b++) {
                const uint8_t *blk = panel + (size_t)b * BLOCK;
                const float *ab = ai + b * 32;
                float sums[NR] = {0};
                for (int t = 0; t < 32; t += 2) /* a K-pair: the odd product, then the even one */
                    for (int c = 0; c < NR; c++) {
                        float odd = ab[t + 1] * value[blk[NR + (t + 1) * NR + c]];
                        float even = ab[t] * value[blk[NR + t * NR + c]];
                        sums[c] = sums[c] + odd;
                        sums[c] = sums[c] + even;
                    }
                for (int c = 0; c < NR; c++) acc[c] = (float)((double)acc[c] + (double)sums[c] * scale_value(blk[c]));
            }
            for (int c = 0; c < NR; c++) ys[i][p * NR + c] = canonical(acc[c]);
        }
    }
    return 0;
}

/*
 * Whether an FMA gives the rule's bits for these rows: a bf16 value times an
 * fp8 one is exact in fp32 (12 significant bits, the lowest at 2^-142 or
 * above) unless it overflows, so fma(a, w, sum) rounds once what the
 * multiply and the add round once. No product overflows while every finite
 * |a| is below 2^(127 - 9) (E4M3's largest value, and the 480 its NaN code
 * widens to, are below 2^9) or 2^(127 - 16) (E5M2: 57344); NaN and Inf in a
 * give the same with either.
 */
static int products_in_range(const float *a, int rows, int64_t I, a2amm_fp8_type b_type)
{
    const float limit = b_type == A2AMM_E4M3 ? 0x1p118f : 0x1p111f;
    int ok = 1;
    for (int64_t i = 0; i < rows * I; i++) ok &= !(fabsf(a[i]) >= limit) || isinf(a[i]);
    return ok;
}

/* ---- the vector levels' driver ------------------------------------------------------------------- */

/* `rows` rows of `np` panels from `panel` on (a level's copy for that count): ys[r][col ..]. */
typedef void panels_fn(int64_t I, int e4m3, const float *a, const uint8_t *panel, const uint8_t *next, int next_np,
                       float *const *ys, int64_t col);

/* A vector level: rows a group keeps in registers, panels a group of `rows` takes at once, and its copy for
 * each count (and FMA or not). */
typedef struct down_level {
    int max_rows;
    int (*panels_at_once)(int rows);
    panels_fn *(*pick)(int rows, int np, int fma);
} down_level;

/*
 * The rows in groups of max_rows (the last group smaller), each group over every panel: a group reads W2
 * once. The FMA copies widen E4M3 codes to 2^-8 their value (fp16_bits, no multiply by 256 a 16 codes)
 * and take the rows times 256 instead: exact both (the rows are below 2^118 where FMA is used), so each
 * product, and the bits, are the same. Without room for those rows, the multiply-and-add copy (the same
 * bits too, as each product is exact).
 */
static void down_rows(const down_level *level, int64_t H, int64_t I, a2amm_fp8_type b_type, const float *a,
                      int64_t n, const uint8_t *packed, float *const *ys)
{
    const int e4m3 = b_type == A2AMM_E4M3;
    const int64_t panels = H / NR;
    for (int64_t r0 = 0; r0 < n; r0 += level->max_rows) {
        const int rows = n - r0 < level->max_rows ? (int)(n - r0) : level->max_rows;
        const float *ar = a + r0 * I;
        int fma = products_in_range(ar, rows, I, b_type);
        if (fma && e4m3) {
            float *scaled = scratch_get(SCRATCH_MOE_DOWN, (size_t)(rows * I) * sizeof *scaled);
            if (scaled)
                for (int64_t i = 0; i < rows * I; i++) scaled[i] = ar[i] * 256.0f;
            fma = scaled != NULL;
            ar = scaled ? scaled : ar;
        }
        const int most = level->panels_at_once(rows);
        for (int64_t p = 0; p < panels;) {
            const int np = panels - p >= most ? most : 1;
            const int64_t left = panels - p - np; /* the next group's panels (prefetch_block) */
            const uint8_t *panel = packed + (size_t)p * panel_bytes(I);
            level->pick(rows, np, fma)(I, e4m3, ar, panel, left ? panel + (size_t)np * panel_bytes(I) : NULL,
                                       left < np ? (int)left : np, ys + r0, p * NR);
            p += np;
        }
    }
}

/* ---- the vector levels' widening ------------------------------------------------------------------ */



/* 8 bits to 8 lanes of all ones or zeros. */
AVX2_INLINE __m256 column_mask_avx2(unsigned bits)
{
    __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    __m256i set = _mm256_and_si256(_mm256_set1_epi32((int)(bits & 0xFF)), bit);
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(set, bit));
}



/* ---- avx512 ---------------------------------------------------------------------------------------- */

/* `rows` rows of `np` panels side by side (both constants where inlined): rows x np independent sums in
 * flight, as a row's sum over a block is a chain of dependent adds (its order is the rule's). */
AVX512_INLINE void panels_avx512(int rows, int np, int fma, int64_t I, int e4m3, const float *a,
                                 const uint8_t *panel, const uint8_t *next, int next_np, float *const *ys, int64_t col)
{
    /* sums and acc of panel q, row r at q * rows + r: at most 8 of each, indexed by constants once inlined
     * and unrolled, so they live in registers (a [panels][rows] array of 64 did not) */
    const size_t stride = panel_bytes(I);
    __m512 acc[SUMS_IN_FLIGHT];
#pragma GCC unroll 16 /* unrolled, not a memset of the array on the stack (GCC made one each call) */
    for (int i = 0; i < np * rows; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < I / 32; b++) {
        const uint8_t *blk = panel + HEAD + (size_t)b * BLOCK;
        prefetch_block(next, next_np, stride, b);
        __m512 sums[SUMS_IN_FLIGHT];
#pragma GCC unroll 16
        for (int i = 0; i < np * rows; i++) sums[i] = _mm512_setzero_ps();
        for (int t = 0; t < 32; t++)
#pragma GCC unroll 8
            for (int q = 0; q < np; q++) {
                const uint8_t *codes = blk + q * stride + NR + t * NR; /* E4M3 at 2^-8 where fma (down_rows) */
                __m512 w = fma ? _mm512_cvtph_ps(fp16_bits(codes, e4m3)) : widen16_avx512(codes, e4m3);
#pragma GCC unroll 8
                for (int r = 0; r < rows; r++) {
                    __m512 ar = _mm512_set1_ps(a[r * I + b * 32 + t]);
                    sums[q * rows + r] = fma ? _mm512_fmadd_ps(ar, w, sums[q * rows + r])
                                             : _mm512_add_ps(sums[q * rows + r], _mm512_mul_ps(ar, w));
                }
            }
#pragma GCC unroll 8
        for (int q = 0; q < np; q++) {
            const __m512 scale = block_scales_avx512(blk + q * stride); /* one FMA: the rule's bits (scale_float) */
#pragma GCC unroll 8
            for (int r = 0; r < rows; r++)
                acc[q * rows + r] = _mm512_fmadd_ps(sums[q * rows + r], scale, acc[q * rows + r]);
        }
    }
    for (int q = 0; q < np; q++)
        for (int r = 0; r < rows; r++) {
            __m512 v = acc[q * rows + r];
            __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) | nan_columns(panel + q * stride);
            _mm512_storeu_ps(ys[r] + col + q * NR, _mm512_mask_mov_ps(v, nan, _mm512_set1_ps(NAN)));
        }
}

/* The panels a group of rows takes at once: 8 sums in flight at 1 and 2 rows; from 3 rows one panel (two,
 * 6 and 8 sums, ran 0.75x and 0.71x as fast at 3 and 4 rows on a Zen 4: moe_down_probe). */
static int panels_at_once_512(int rows) { return rows == 1 ? 8 : rows == 2 ? 4 : 1; }

/* One copy of panels_avx512 a function for each (rows, panels, fma): the sums stay in registers,
 * and each copy is a function of its own size (one function holding them all took clang with ASan and
 * UBSan a quarter of an hour to compile). */
#define DEFINE_512(k, q, f)                                                                                    \
    static AVX512_TARGET __attribute__((noinline)) void panels512_##k##_##q##_##f(int64_t I, int e4m3, const float *a, \
                                                                  const uint8_t *panel, const uint8_t *next, \
                                                                  int next_np, float *const *ys,            \
                                                                  int64_t col)                             \
    {                                                                                                     \
        panels_avx512(k, q, f, I, e4m3, a, panel, next, next_np, ys, col);                                \
    }
#define VARIANTS(M, k, q) M(k, q, 0) M(k, q, 1)
#define CASES_512(M)                                                                                           \
    VARIANTS(M, 1, 8) VARIANTS(M, 2, 4) VARIANTS(M, 1, 1) VARIANTS(M, 2, 1) \
    VARIANTS(M, 3, 1) VARIANTS(M, 4, 1) VARIANTS(M, 5, 1) VARIANTS(M, 6, 1) VARIANTS(M, 7, 1) VARIANTS(M, 8, 1)
CASES_512(DEFINE_512)
#define PICK(k, q, f)                                                                                          \
    case (k * 16 + q) * 2 + f:                                                                                 \
        return panels512_##k##_##q##_##f;

static panels_fn *pick_512(int rows, int np, int fma)
{
    switch ((rows * 16 + np) * 2 + fma) {
        CASES_512(PICK)
    }
    return NULL;
}
#undef PICK

/*
 * Many rows (prefill): the loops above widen a panel's codes again for every
 * group of rows, and one panel of 8 rows keeps two FMA ports waiting on the
 * widening. Here each 32-block of two panels is widened once, into L1, for
 * every row; a group of 8 rows then takes 16 FMAs a code row (16 sums in
 * flight), and the blocks' sums go into ys, which holds each column's acc
 * between blocks. Each column's order is the rule's, so the bits are the
 * same.
 */
enum { MANY_ROWS = 16 /* from this many rows */, PAIR = 2 /* panels widened together */ };

typedef struct widened_pair {
    __m512 w[PAIR][32];          /* row t of each panel's block, as floats */
    __m512 scale[PAIR];          /* each panel's 16 column scales as floats (scale_float) */
    unsigned nan[PAIR];          /* each panel's NaN columns */
} widened_pair;


AVX512_INLINE void widen_pair(const uint8_t *panel, size_t stride, int64_t b, int e4m3, widened_pair *out)
{
    for (int q = 0; q < PAIR; q++) {
        const uint8_t *blk = panel + q * stride + HEAD + (size_t)b * BLOCK;
        for (int t = 0; t < 32; t++) out->w[q][t] = widen16_avx512(blk + NR + t * NR, e4m3);
        float scale[NR];
        for (int c = 0; c < NR; c++) scale[c] = scale_float(blk[c]);
        out->scale[q] = _mm512_loadu_ps(scale);
        out->nan[q] = nan_columns(panel + q * stride);
    }
}

/* `rows` rows (a: row 0's block, I apart) over a widened block pair: acc (ys, from 0 at the first block)
 * gets the block's sums; the last block stores the final values (NaN canonical, NaN columns). */
AVX512_INLINE void rows_of_pair(int rows, int fma, const widened_pair *wp, const float *a, int64_t I,
                                float *const *ys, int64_t col, int first, int last)
{
    __m512 sums[PAIR * ROWS_512]; /* panel q, row r at q * ROWS_512 + r */
#pragma GCC unroll 16
    for (int r = 0; r < rows; r++) sums[r] = sums[ROWS_512 + r] = _mm512_setzero_ps();
    for (int t = 0; t < 32; t++) {
        const __m512 w0 = wp->w[0][t], w1 = wp->w[1][t];
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++) {
            __m512 ar = _mm512_set1_ps(a[r * I + t]);
            sums[r] = fma ? _mm512_fmadd_ps(ar, w0, sums[r]) : _mm512_add_ps(sums[r], _mm512_mul_ps(ar, w0));
            sums[ROWS_512 + r] = fma ? _mm512_fmadd_ps(ar, w1, sums[ROWS_512 + r])
                                     : _mm512_add_ps(sums[ROWS_512 + r], _mm512_mul_ps(ar, w1));
        }
    }
    for (int q = 0; q < PAIR; q++)
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++) {
            float *at = ys[r] + col + q * NR;
            __m512 acc = first ? _mm512_setzero_ps() : _mm512_loadu_ps(at);
            acc = _mm512_fmadd_ps(sums[q * ROWS_512 + r], wp->scale[q], acc);
            if (last)
                acc = _mm512_mask_mov_ps(acc, _mm512_cmp_ps_mask(acc, acc, _CMP_UNORD_Q) | wp->nan[q],
                                         _mm512_set1_ps(NAN));
            _mm512_storeu_ps(at, acc);
        }
}

typedef void rows_of_pair_fn(const widened_pair *wp, const float *a, int64_t I, float *const *ys, int64_t col,
                             int first, int last);
/* One copy a (rows, fma), each a function of its own (as DEFINE_512, for the compilers' sake). */
#define DEFINE_MANY(k, f)                                                                                      \
    static AVX512_TARGET __attribute__((noinline)) void many512_##k##_##f(                                    \
        const widened_pair *wp, const float *a, int64_t I, float *const *ys, int64_t col, int first, int last) \
    {                                                                                                         \
        rows_of_pair(k, f, wp, a, I, ys, col, first, last);                                                   \
    }
#define CASES_MANY(M) M(1, 0) M(1, 1) M(2, 0) M(2, 1) M(3, 0) M(3, 1) M(4, 0) M(4, 1) \
                      M(5, 0) M(5, 1) M(6, 0) M(6, 1) M(7, 0) M(7, 1) M(8, 0) M(8, 1)
CASES_MANY(DEFINE_MANY)
#define PICK(k, f)                                                                                             \
    case k * 2 + f:                                                                                            \
        return many512_##k##_##f;

static rows_of_pair_fn *pick_many(int rows, int fma)
{
    switch (rows * 2 + fma) {
        CASES_MANY(PICK)
    }
    return NULL;
}
#undef PICK

static AVX512_TARGET void down_many_avx512(int64_t H, int64_t I, a2amm_fp8_type b_type, const float *a, int64_t n,
                                           const uint8_t *packed, float *const *ys)
{
    const int e4m3 = b_type == A2AMM_E4M3, fma = products_in_range(a, (int)n, I, b_type);
    const size_t stride = panel_bytes(I);
    const int64_t nkb = I / 32;
    widened_pair wp;
    for (int64_t p = 0; p < H / NR; p += PAIR)
        for (int64_t b = 0; b < nkb; b++) {
            widen_pair(packed + (size_t)p * stride, stride, b, e4m3, &wp);
            for (int64_t r0 = 0; r0 < n; r0 += ROWS_512) {
                const int rows = n - r0 < ROWS_512 ? (int)(n - r0) : ROWS_512;
                pick_many(rows, fma)(&wp, a + r0 * I + b * 32, I, ys + r0, p * NR, b == 0, b == nkb - 1);
            }
        }
}

int moe_down_sequential_avx512(int64_t H, int64_t I, a2amm_fp8_type b_type, const float *a, int64_t n,
                                const uint8_t *packed, float *const *ys)
{
    if (n >= MANY_ROWS && (H / NR) % PAIR == 0) {
        down_many_avx512(H, I, b_type, a, n, packed, ys);
        return 0;
    }
    const down_level level = {ROWS_512, panels_at_once_512, pick_512};
    down_rows(&level, H, I, b_type, a, n, packed, ys);
    return 0;
}

/* ---- avx2 ------------------------------------------------------------------------------------------ */

/* block_scales_avx512's floats, as two halves of 8. */
AVX2_INLINE void block_scales_avx2(const uint8_t *blk, __m256 out[2])
{
    for (int h = 0; h < 2; h++) {
        const __m256i s = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 8 * h)));
        __m256i bits = _mm256_slli_epi32(s, 23);
        bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x00400000), _mm256_cmpeq_epi32(s, _mm256_setzero_si256()));
        bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x7FC00000), _mm256_cmpeq_epi32(s, _mm256_set1_epi32(0xFF)));
        out[h] = _mm256_castsi256_ps(bits);
    }
}

/*
 * Block b of the np panels into acc (half h of panel q, row r at (q * rows + r) * 2 + h): its products
 * summed t ascending from +0, then acc = fma(sum, scale, acc). `normal` (a constant in each copy): every
 * panel's block holds normal codes only (block_normal), widened by integers (widen16_normal; E4M3 at 2^-8
 * its value where fma, as fp16_bits does: the same values), the sums' halves interleaved until
 * lanes_in_order puts them back; else through fp16 (widen16_avx2).
 */
AVX2_INLINE void block_avx2(const int rows, const int np, const int fma, const int normal, int64_t I, const int e4m3,
                            const float *a, const uint8_t *blk, size_t stride, __m256 acc[SUMS_IN_FLIGHT])
{
    const __m256i keep16 = widen_keep16(e4m3), off16 = _mm256_set1_epi16((short)((e4m3 && !fma ? 120 : 112) << 7));
    __m256 sums[SUMS_IN_FLIGHT];
#pragma GCC unroll 16
    for (int i = 0; i < np * rows * 2; i++) sums[i] = _mm256_setzero_ps();
    for (int t = 0; t < 32; t++)
#pragma GCC unroll 4
        for (int q = 0; q < np; q++) {
            __m256 w[2];
            if (normal) widen16_normal(blk + q * stride + NR + t * NR, e4m3, keep16, off16, &w[0], &w[1]);
            else widen16_avx2(blk + q * stride + NR + t * NR, e4m3, fma, &w[0], &w[1]); /* E4M3 low: down_rows */
#pragma GCC unroll 4
            for (int r = 0; r < rows; r++) {
                __m256 ar = _mm256_broadcast_ss(a + r * I + t);
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++) {
                    __m256 *sum = &sums[(q * rows + r) * 2 + h];
                    *sum = fma ? _mm256_fmadd_ps(ar, w[h], *sum) : _mm256_add_ps(*sum, _mm256_mul_ps(ar, w[h]));
                }
            }
        }
    if (normal)
#pragma GCC unroll 8
        for (int i = 0; i < np * rows; i++) lanes_in_order(&sums[2 * i], &sums[2 * i + 1]);
#pragma GCC unroll 4
    for (int q = 0; q < np; q++) {
        __m256 scale[2]; /* one FMA: the rule's bits (scale_float) */
        block_scales_avx2(blk + q * stride, scale);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
            for (int r = 0; r < rows; r++) {
                const int i = (q * rows + r) * 2 + h;
                acc[i] = _mm256_fmadd_ps(sums[i], scale[h], acc[i]);
            }
    }
}

AVX2_INLINE void panels_avx2(int rows, int np, int fma, int64_t I, int e4m3, const float *a, const uint8_t *panel,
                             const uint8_t *next, int next_np, float *const *ys, int64_t col)
{
    /* half h of panel q, row r at (q * rows + r) * 2 + h: at most 8, in registers as in panels_avx512 */
    const size_t stride = panel_bytes(I);
    __m256 acc[SUMS_IN_FLIGHT];
#pragma GCC unroll 16
    for (int i = 0; i < np * rows * 2; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < I / 32; b++) {
        const uint8_t *blk = panel + HEAD + (size_t)b * BLOCK;
        prefetch_block(next, next_np, stride, b);
        int normal = 1;
        for (int q = 0; q < np; q++) normal &= block_normal(panel + q * stride, I, b);
        if (normal)
            block_avx2(rows, np, fma, 1, I, e4m3, a + b * 32, blk, stride, acc);
        else
            block_avx2(rows, np, fma, 0, I, e4m3, a + b * 32, blk, stride, acc);
    }
    for (int q = 0; q < np; q++)
        for (int r = 0; r < rows; r++)
            for (int h = 0; h < 2; h++) {
                __m256 v = acc[(q * rows + r) * 2 + h];
                __m256 nan = _mm256_or_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q),
                                          column_mask_avx2(nan_columns(panel + q * stride) >> (8 * h)));
                _mm256_storeu_ps(ys[r] + col + q * NR + 8 * h, _mm256_blendv_ps(v, _mm256_set1_ps(NAN), nan));
            }
}

static int panels_at_once_256(int rows) { return rows == 1 ? 4 : rows == 2 ? 2 : 1; } /* x rows x 2 <= 8 */

#define DEFINE_256(k, q, f)                                                                                    \
    static AVX2_TARGET __attribute__((noinline)) void panels256_##k##_##q##_##f(int64_t I, int e4m3, const float *a, \
                                                                  const uint8_t *panel, const uint8_t *next, \
                                                                  int next_np, float *const *ys,            \
                                                                  int64_t col)                             \
    { /* the type a constant in each copy: no test of it a row of codes */                                 \
        if (e4m3) panels_avx2(k, q, f, I, 1, a, panel, next, next_np, ys, col);                           \
        else panels_avx2(k, q, f, I, 0, a, panel, next, next_np, ys, col);                                \
    }
#define CASES_256(M)                                                                                           \
    VARIANTS(M, 1, 4) VARIANTS(M, 2, 2) VARIANTS(M, 1, 1) VARIANTS(M, 2, 1) VARIANTS(M, 3, 1) VARIANTS(M, 4, 1)
CASES_256(DEFINE_256)
#define PICK(k, q, f)                                                                                          \
    case (k * 16 + q) * 2 + f:                                                                                 \
        return panels256_##k##_##q##_##f;

static panels_fn *pick_256(int rows, int np, int fma)
{
    switch ((rows * 16 + np) * 2 + fma) {
        CASES_256(PICK)
    }
    return NULL;
}
#undef PICK

/* Many rows on avx2, as on avx512 (down_many_avx512): each panel's block widened once into L1 for every
 * row, 6 rows x 16 columns of sums in flight (12 of the 16 ymm registers), a block added by one FMA. */
enum { ROWS_MANY_256 = 6 };

typedef struct widened_panel {
    __m256 w[32][2]; /* row t of the block, as floats: columns 0-7, 8-15 */
    __m256 scale[2]; /* the 16 column scales as floats (scale_float) */
    unsigned nan;    /* the panel's NaN columns */
} widened_panel;

AVX2_INLINE void widen_panel(const uint8_t *panel, int64_t b, int e4m3, widened_panel *out)
{
    const uint8_t *blk = panel + HEAD + (size_t)b * BLOCK;
    for (int t = 0; t < 32; t++) widen16_avx2(blk + NR + t * NR, e4m3, 0, &out->w[t][0], &out->w[t][1]);
    float scale[NR];
    for (int c = 0; c < NR; c++) scale[c] = scale_float(blk[c]);
    out->scale[0] = _mm256_loadu_ps(scale), out->scale[1] = _mm256_loadu_ps(scale + 8);
    out->nan = nan_columns(panel);
}

/* acc (at `at`, from 0 at the first block) += sums * scale, 8 columns; the last block's NaN rules (nan: their
 * NaN columns in the low 8 bits). */
AVX2_INLINE void add_half(float *at, __m256 sums, __m256 scale, unsigned nan, int first, int last)
{
    __m256 acc = _mm256_fmadd_ps(sums, scale, first ? _mm256_setzero_ps() : _mm256_loadu_ps(at));
    if (last)
        acc = _mm256_blendv_ps(acc, _mm256_set1_ps(NAN),
                               _mm256_or_ps(_mm256_cmp_ps(acc, acc, _CMP_UNORD_Q), column_mask_avx2(nan)));
    _mm256_storeu_ps(at, acc);
}

AVX2_INLINE void rows_of_panel(int rows, int fma, const widened_panel *wp, const float *a, int64_t I,
                               float *const *ys, int64_t col, int first, int last)
{
    __m256 sums[ROWS_MANY_256 * 2]; /* row r, half h at 2r + h */
#pragma GCC unroll 16
    for (int i = 0; i < 2 * rows; i++) sums[i] = _mm256_setzero_ps();
    for (int t = 0; t < 32; t++) {
        const __m256 w0 = wp->w[t][0], w1 = wp->w[t][1];
#pragma GCC unroll 6
        for (int r = 0; r < rows; r++) {
            __m256 ar = _mm256_broadcast_ss(a + r * I + t);
            sums[2 * r] = fma ? _mm256_fmadd_ps(ar, w0, sums[2 * r]) : _mm256_add_ps(sums[2 * r], _mm256_mul_ps(ar, w0));
            sums[2 * r + 1] = fma ? _mm256_fmadd_ps(ar, w1, sums[2 * r + 1])
                                  : _mm256_add_ps(sums[2 * r + 1], _mm256_mul_ps(ar, w1));
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < rows; r++) { /* each half by name: a loop over them kept the sums on the stack */
        add_half(ys[r] + col, sums[2 * r], wp->scale[0], wp->nan, first, last);
        add_half(ys[r] + col + 8, sums[2 * r + 1], wp->scale[1], wp->nan >> 8, first, last);
    }
}

/* `groups` groups of `rows` rows one after another (a loop here, not a call a group: 1.04x at 64 rows, moe_down_probe). */
typedef void rows_of_panel_fn(const widened_panel *wp, const float *a, int64_t I, float *const *ys, int64_t col,
                              int first, int last, int64_t groups);
#define DEFINE_MANY_256(k, f)                                                                                  \
    static AVX2_TARGET __attribute__((noinline)) void many256_##k##_##f(                                      \
        const widened_panel *wp, const float *a, int64_t I, float *const *ys, int64_t col, int first, int last, \
        int64_t groups)                                                                                       \
    {                                                                                                         \
        for (int64_t g = 0; g < groups; g++)                                                                  \
            rows_of_panel(k, f, wp, a + g * k * I, I, ys + g * k, col, first, last);                          \
    }
#define CASES_MANY_256(M) M(1, 0) M(1, 1) M(2, 0) M(2, 1) M(3, 0) M(3, 1) M(4, 0) M(4, 1) M(5, 0) M(5, 1) M(6, 0) M(6, 1)
CASES_MANY_256(DEFINE_MANY_256)
#define PICK(k, f)                                                                                             \
    case k * 2 + f:                                                                                            \
        return many256_##k##_##f;

static rows_of_panel_fn *pick_many_256(int rows, int fma)
{
    switch (rows * 2 + fma) {
        CASES_MANY_256(PICK)
    }
    return NULL;
}
#undef PICK

static AVX2_TARGET void down_many_avx2(int64_t H, int64_t I, a2amm_fp8_type b_type, const float *a, int64_t n,
                                      const uint8_t *packed, float *const *ys)
{
    const int e4m3 = b_type == A2AMM_E4M3, fma = products_in_range(a, (int)n, I, b_type);
    const int64_t nkb = I / 32;
    widened_panel wp;
    for (int64_t p = 0; p < H / NR; p++)
        for (int64_t b = 0; b < nkb; b++) {
            widen_panel(packed + (size_t)p * panel_bytes(I), b, e4m3, &wp);
            const int64_t whole = n / ROWS_MANY_256, left = n % ROWS_MANY_256;
            pick_many_256(ROWS_MANY_256, fma)(&wp, a + b * 32, I, ys, p * NR, b == 0, b == nkb - 1, whole);
            if (left)
                pick_many_256((int)left, fma)(&wp, a + whole * ROWS_MANY_256 * I + b * 32, I, ys + whole * ROWS_MANY_256,
                                              p * NR, b == 0, b == nkb - 1, 1);
        }
}

int moe_down_avx2(int64_t H, int64_t I, a2amm_fp8_type b_type, const float *a, int64_t n, const uint8_t *packed,
                   float *const *ys)
{
    if (n >= MANY_ROWS) {
        down_many_avx2(H, I, b_type, a, n, packed, ys);
        return 0;
    }
    const down_level level = {ROWS_256, panels_at_once_256, pick_256};
    down_rows(&level, H, I, b_type, a, n, packed, ys);
    return 0;
}

moe_down_fn *moe_down_for(gemm_isa isa)
{
    switch (isa) {
    case GEMM_ISA_AVX2: return moe_down_avx2;
    case GEMM_ISA_AVX512: return moe_down_avx512;
    case GEMM_ISA_AMX: return moe_down_amx;
    default: return moe_down_portable;
    }
}
