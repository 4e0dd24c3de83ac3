/*
 * The exact path of the fast kernels. A fast level keeps B in fp8 as well
 * as in its packed form, summarizes each (K-block, panel) of B for the fold
 * rule (gemm_fold.h), and sends every (row, K-block, panel) the rule refuses
 * here, where it is computed the way gemm_ref.c computes every block: the
 * 32 exact fp8 products summed in fp32 (t ascending), then times
 * 2^(sa + sb - 254) added into C in double with one rounding. NaN scales and
 * NaN/Inf values propagate as IEEE arithmetic says.
 */
#ifndef A2AMM_GEMM_EXACT_H
#define A2AMM_GEMM_EXACT_H

#include <stdint.h>

#include "gemm/gemm.h"
#include "gemm/gemm_fold.h"

/* B kept in fp8 for the exact path. */
typedef struct gemm_exact_b {
    uint8_t *codes;  /* [N][K]: B transposed, as given; or, with block_codes, a level's fp8 panels */
    uint8_t *scales; /* [N][nkb]; with block_codes, only while B is prepared (the panels hold them) */
    int64_t N, K, nkb;
    /* NULL, or where codes are in a level's own order: the 32 codes of B's row n, K-block kb, into
     * out, and their scale (returned) */
    uint8_t (*block_codes)(const struct gemm_exact_b *eb, int64_t n, int64_t kb, uint8_t out[32]);
    float lut[256]; /* value of each code of B's type */
} gemm_exact_b;

/* Copies B; A2AMM_OK or A2AMM_E_NOMEM. */
int gemm_exact_b_init(gemm_exact_b *eb, const uint8_t *bq, const uint8_t *sb, int64_t N, int64_t K,
                      int64_t ldsb, a2amm_fp8_type type);
/* gemm_exact_b_init in two steps: all but the codes (codes_bytes of room for them), then the
 * codes of B's rows [n0, n1) as given (threads may copy disjoint rows). */
int gemm_exact_b_alloc(gemm_exact_b *eb, const uint8_t *sb, int64_t N, int64_t K, int64_t ldsb,
                       a2amm_fp8_type type, size_t codes_bytes);
void gemm_exact_b_copy_codes(gemm_exact_b *eb, const uint8_t *bq, int64_t n0, int64_t n1);
void gemm_exact_b_free(gemm_exact_b *eb);

/* The 32 codes of B's row n, K-block kb (in place, or gathered into buf), and their scale. */
static inline const uint8_t *gemm_exact_codes(const gemm_exact_b *eb, int64_t n, int64_t kb, uint8_t buf[32],
                                              uint8_t *scale)
{
    if (eb->block_codes) {
        *scale = eb->block_codes(eb, n, kb, buf);
        return buf;
    }
    *scale = eb->scales[n * eb->nkb + kb];
    return eb->codes + n * eb->K + kb * 32;
}

/*
 * What the fold rule needs of one 32-row K-block of one panel of B. A column
 * whose block is all zeros with a scale other than NaN counts for neither
 * (it adds nothing, like GEMM_A_ZERO below).
 */
typedef struct gemm_panel_info {
    uint8_t ok;         /* every (other) column's scale folds and no value is NaN/Inf */
    uint8_t smin, smax; /* the (other) columns' scale range; 255, 0 if none */
    uint8_t normal;     /* a whole panel whose every code is a normal number (no zero or subnormal code):
                         * the small path widens it by shifts alone, untested */
} gemm_panel_info;

/*
 * Panel p's info over 32 K-blocks at once (group g: blocks 32 g .. 32 g +
 * 31), so that the driver reads a panel's chunk in one or two of these,
 * not block by block: the blocks not ok and not normal as bits, and the
 * scale range over the ok blocks (255, 0 if none). The driver's span_of
 * gives the same of any run of at most 32 blocks (its scale range that of
 * the groups holding them).
 */
typedef struct gemm_panel_group {
    uint32_t refused, special;
    uint8_t smin, smax;
} gemm_panel_group;

/*
 * info[kb * npanels + p] for the panels p0 <= p < p1 of `width` columns
 * (the last one may be partial; npanels = ceil(N / width)), from B's codes
 * as given (bq, [N][K]) and its scales in eb.
 */
void gemm_panel_info_build(const gemm_exact_b *eb, const uint8_t *bq, int64_t width, gemm_fold_format format,
                           a2amm_fp8_type type, gemm_panel_info *info, int64_t p0, int64_t p1);

/*
 * The fold state of one 32-block of an A row, as the levels' packing records
 * it: its scale byte when the block folds (scale in range, no NaN/Inf
 * value); GEMM_A_ZERO when every value is zero and the scale is not NaN (the
 * block adds exactly nothing against any B block without NaN/Inf, whatever
 * its scale: the contract's quantizers give all-zero blocks scale 0, which
 * no fold range holds); else GEMM_A_UNFOLDABLE.
 */
#define GEMM_A_UNFOLDABLE (-1)
#define GEMM_A_ZERO (-2)

/* Whether (A block with state a_state) x (B block-panel pi) takes the exact path. */
static inline int gemm_exact_needed(int a_state, gemm_panel_info pi, int pair_lo, int pair_hi)
{
    if (a_state == GEMM_A_ZERO) return !pi.ok;
    return a_state < 0 || !pi.ok || a_state + pi.smin < pair_lo || a_state + pi.smax > pair_hi;
}

/* C[n] += exact block kb of one A row (values a32, scale sa) times B, nb <= n < ne. */
void gemm_exact_block(const gemm_exact_b *eb, const float a32[32], uint8_t sa, int64_t kb, int64_t nb,
                      int64_t ne, float *crow);

/* What a fast level's call knows that the fix-up pass needs. */
typedef struct gemm_exact_job {
    const gemm_exact_b *eb;
    const gemm_panel_info *info; /* [nkb][npanels] */
    int64_t npanels, panel_width;
    const gemm_a_slab *a;
    const float *lut_a; /* value of each code of A's type */
    int pair_lo, pair_hi;
    int64_t kb_base; /* B's K-block of the slab's first block: k0 / 32 */
    int64_t n0, n1;
    float *c;
    int64_t ldc;
} gemm_exact_job;

/*
 * C[i][n] += A[i] * B over [k0, k0 + klen) for i < rows, n0 <= n < n1, every
 * block on the exact path, row by row, K-block ascending: the ref level.
 * lut_a: the value of each code of A's type.
 */
void gemm_exact_all(const gemm_exact_b *eb, const gemm_a_slab *a, const float *lut_a, int64_t rows, int64_t k0,
                    int64_t klen, int64_t n0, int64_t n1, float *c, int64_t ldc);

/*
 * Runs the exact path for slab rows [i0, i1) and slab K-blocks [j0, j1)
 * on every panel that meets [n0, n1): for each row, K-block ascending, each
 * (row, block, panel) that gemm_exact_needed names. a_state holds the rows'
 * fold states: a_state[(i - i0) * ld_state + (j - j0)].
 */
void gemm_exact_fixup(const gemm_exact_job *job, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                      const int16_t *a_state, int64_t ld_state);

#endif
