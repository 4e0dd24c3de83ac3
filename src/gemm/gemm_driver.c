/*
 * The one GEMM driver: every loop around the microkernels, for every level
 * (a level's context, gemm_level.h, says its block sizes and layouts and
 * supplies its microkernel and packing).
 *
 * Prepare: B's codes and scales copied for the exact path, the fold rule's
 * summary of each (K-block, panel) (gemm_exact.h), then the level packs the
 * panels; all three a few panels a task over a pool.
 *
 * Run (one call: rows of A x [k0, k0 + klen) x [n0, n1) of B):
 *   rows in blocks of equal size (whole MR tiles, at most MC: a block of a
 *   few rows would stream all of B for little reuse)
 *     K in chunks of KC from k0 (or, where the level's accumulators carry C
 *     over chunks and K is all_k_chunks chunks with no exact work, all of K)
 *       pack the block's rows of the chunk (the level's pack_a_row: values
 *       with their scales folded, and each (row, K-block)'s fold state)
 *       panels of NR columns of [n0, n1), each panel's chunk of B read from
 *       L2 by every tile of the block
 *         tiles of MR rows: the microkernel (C in, C or bf16 out); the next
 *         panel's chunk brought into the cache meanwhile, spread over them
 *       the chunk's exact blocks added to C (gemm_exact_fixup)
 *   A panel's blocks that the fold rule refuses for some rows are computed
 *   with those rows' blocks zeroed in a copy (mask_rows) and left to the
 *   exact path. The last chunk rounds its sums straight to bf16 in the
 *   microkernel's epilogue unless the exact path has blocks to add to them
 *   (then C, then gemm_store_bf16: the same bits).
 *
 * Order of work, fixed so that C[i][n] depends only on the inputs and the k
 * range of the call: per chunk, each (tile, panel) is one microkernel call;
 * the chunk's exact blocks are added after it, K-block ascending. Whether a
 * (row, K-block, panel) is exact depends only on that row's block and that
 * panel's block, so neither `rows`, nor the row or column split, nor MC
 * changes a bit of the result.
 */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/hugemem.h"
#include "common/scratch.h"
#include "gemm/gemm_exact.h"
#include "gemm/gemm_level.h"
#include "mx/mx.h"

enum { A_PREFETCH_ROWS = 8 }; /* pack_a prefetches the source row this far ahead */

/* ---- Prepare -------------------------------------------------------------- */

typedef struct prepare_job {
    gemm_b *b;
    const uint8_t *bq;
    int tasks;
} prepare_job;

/* Panel p's groups from its info (gemm_panel_group). */
static void panel_groups_build(gemm_b *b, int64_t p)
{
    const int64_t nkb = b->K / 32;
    for (int64_t g = 0; g < b->ngroups; g++) {
        gemm_panel_group grp = {0, 0, 255, 0};
        for (int64_t j = 0; j < 32 && 32 * g + j < nkb; j++) {
            const gemm_panel_info pi = b->info[(32 * g + j) * b->npanels + p];
            grp.refused |= (uint32_t)!pi.ok << j;
            grp.special |= (uint32_t)!pi.normal << j;
            if (!pi.ok) continue;
            grp.smin = pi.smin < grp.smin ? pi.smin : grp.smin;
            grp.smax = pi.smax > grp.smax ? pi.smax : grp.smax;
        }
        b->groups[p * b->ngroups + g] = grp;
    }
}

/*
 * Task t of the job's tasks: its share of the panels, one panel at a time
 * copied, summarized and packed, so that the packing reads the codes the
 * copy left in L2 (a task's whole share, 3.6 MB at K = 8192, would not be).
 */
static void prepare_task(void *arg, int t)
{
    const prepare_job *j = arg;
    gemm_b *b = j->b;
    const gemm_level *L = b->level;
    for (int64_t p = b->npanels * t / j->tasks; p < b->npanels * (t + 1) / j->tasks; p++) {
        if (L->pack_b8) L->pack_b8(b, j->bq, p, p + 1);
        else gemm_exact_b_copy_codes(&b->exact, j->bq, p * L->nr, (p + 1) * L->nr < b->N ? (p + 1) * L->nr : b->N);
        gemm_panel_info_build(&b->exact, j->bq, L->nr, L->format, b->type, b->info, p, p + 1);
        panel_groups_build(b, p);
        if (b->packed) L->pack_b(b, j->bq, p, p + 1);
    }
}

int64_t gemm_driver_bytes(const gemm_b *b)
{
    const int64_t nkb = b->K / 32;
    if (!b->level->kernel) return b->N * b->K + b->N * nkb;
    return (int64_t)(b->packed_bytes + b->codes_bytes) + (b->exact.scales ? b->N * nkb : 0) +
           nkb * b->npanels * (int64_t)sizeof *b->info + b->ngroups * b->npanels * (int64_t)sizeof *b->groups;
}

void gemm_driver_release(gemm_b *b)
{
    free(b->packed);
    free(b->info);
    free(b->groups);
    gemm_exact_b_free(&b->exact);
    b->packed = NULL;
    b->info = NULL;
    b->groups = NULL;
}

int gemm_driver_prepare(gemm_b *b, const uint8_t *bq, const uint8_t *sb, int64_t ldsb, pool *workers,
                        a2amm_error *err)
{
    const gemm_level *L = b->level;
    const char *name = gemm_isa_name(b->isa);
    const int64_t N = b->N, K = b->K, nkb = K / 32;
    for (int code = 0; code < 256; code++) {
        b->values[A2AMM_E4M3][code] = mx_fp8_to_f32((uint8_t)code, A2AMM_E4M3);
        b->values[A2AMM_E5M2][code] = mx_fp8_to_f32((uint8_t)code, A2AMM_E5M2);
    }
    if (!L->kernel) { /* the exact path's copy of B is all there is */
        if (gemm_exact_b_init(&b->exact, bq, sb, N, K, ldsb, b->type) != A2AMM_OK)
            return a2amm_fail(err, A2AMM_E_NOMEM, "gemm %s: cannot allocate %.1f MB for B", name,
                              (double)(N * K) * 1.04 / 1e6);
        return A2AMM_OK;
    }
    const int64_t npanels = (N + L->nr - 1) / L->nr;
    if (npanels > INT64_MAX / L->b_block / nkb)
        return a2amm_fail(err, A2AMM_E_OVERFLOW, "gemm %s: B of %lld x %lld is too large to pack", name,
                          (long long)N, (long long)K);
    const size_t packed_bytes = b->fp8_only ? 0 : (size_t)(npanels * nkb * L->b_block);
    /* B's codes for the exact path: as given, or in the panels' order where the small-M path reads them */
    const size_t codes_bytes = L->pack_b8 ? (size_t)(npanels * nkb * L->b8_block) : (size_t)(N * K);
    b->npanels = npanels;
    /* on 2 MB pages: a 117 MB B faults in 59 pages, not 29,000; fewer TLB misses (1.01-1.03x with AMX) */
    b->packed = packed_bytes ? hugemem_alloc(packed_bytes) : NULL;
    b->packed_bytes = packed_bytes;
    b->codes_bytes = codes_bytes;
    b->info = malloc((size_t)(nkb * npanels) * sizeof *b->info);
    b->ngroups = (nkb + 31) / 32;
    b->groups = malloc((size_t)(b->ngroups * npanels) * sizeof *b->groups);
    if ((packed_bytes && !b->packed) || !b->info || !b->groups || gemm_exact_b_alloc(&b->exact, sb, N, K, ldsb, b->type, codes_bytes) != A2AMM_OK) {
        gemm_driver_release(b);
        return a2amm_fail(err, A2AMM_E_NOMEM, "gemm %s: cannot allocate %.1f MB for B", name,
                          (double)(packed_bytes + codes_bytes + (size_t)(nkb * npanels) * sizeof *b->info) / 1e6);
    }
    b->exact.block_codes = L->pack_b8 ? L->b8_block_codes : NULL;
    /* Tasks of a few panels each, so that a busy thread holds the others up little. */
    prepare_job job = {b, bq, 1};
    if (workers) {
        int64_t tasks = 4 * (int64_t)pool_threads(workers);
        job.tasks = (int)(tasks < npanels ? tasks : npanels);
        pool_run(workers, prepare_task, &job, job.tasks);
    } else {
        prepare_task(&job, 0);
    }
    if (L->pack_b8) { /* the panels hold B's scales now */
        free(b->exact.scales);
        b->exact.scales = NULL;
    }
    return A2AMM_OK;
}

/* ---- Packing A -------------------------------------------------------------- */

/* Rows x one chunk of the slab, packed, with their fold states. */
typedef struct a_block {
    char *rows;       /* [capacity] rows of a_ld bytes, 64-byte aligned */
    int16_t *state;   /* [capacity][kc / 32]: fold state of each (row, K-block), see gemm_exact.h */
    int64_t capacity; /* rows, a multiple of MR (rows past the slab's hold garbage) */
    /* Over the block's foldable nonzero rows, by K-block (INT16_MAX / INT16_MIN if none). */
    int16_t min_scale[GEMM_MAX_KC / 32], max_scale[GEMM_MAX_KC / 32];
    int16_t min_all, max_all; /* the same over all of the block's K-blocks */
    int any_unfoldable;
} a_block;

/* Packs slab rows [i0, i0 + rows) x slab K-blocks [j0, j0 + nblk) into blk. */
static void pack_a(const gemm_level *L, const gemm_a_slab *a, int64_t i0, int64_t rows, int64_t j0, int64_t nblk,
                   a_block *blk)
{
    const int64_t ld_state = L->kc / 32, bytes = nblk * 32;
    int any_unfoldable = 0;
    for (int64_t j = 0; j < nblk; j++) {
        blk->min_scale[j] = INT16_MAX;
        blk->max_scale[j] = INT16_MIN;
    }
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *codes = a->a + (i0 + r) * a->lda + j0 * 32, *scales = a->sa + (i0 + r) * a->ldsa + j0;
        /* A row some rows ahead, from memory: short strided runs the hardware prefetcher misses. */
        if (r + A_PREFETCH_ROWS < rows)
            for (int64_t off = 0; off < bytes + 63; off += 64)
                __builtin_prefetch(codes + A_PREFETCH_ROWS * a->lda + (off < bytes ? off : bytes - 1), 0, 3);
        int16_t *state = blk->state + r * ld_state;
        L->pack_a_row(codes, scales, nblk, a->type, blk->rows + r * L->a_ld, state);
        for (int64_t j = 0; j < nblk; j++) {
            int16_t s = state[j];
            if (s >= 0) {
                blk->min_scale[j] = s < blk->min_scale[j] ? s : blk->min_scale[j];
                blk->max_scale[j] = s > blk->max_scale[j] ? s : blk->max_scale[j];
            }
            any_unfoldable |= s == GEMM_A_UNFOLDABLE;
        }
    }
    blk->min_all = INT16_MAX;
    blk->max_all = INT16_MIN;
    for (int64_t j = 0; j < nblk; j++) {
        blk->min_all = blk->min_scale[j] < blk->min_all ? blk->min_scale[j] : blk->min_all;
        blk->max_all = blk->max_scale[j] > blk->max_all ? blk->max_scale[j] : blk->max_all;
    }
    blk->any_unfoldable = any_unfoldable;
}

/* ---- The fold rule per panel ------------------------------------------------ */

/*
 * Blocks [kb, kb + nblk) of panel p (nblk <= 32) from its groups, in one or
 * two reads: bit j of refused (special) is block kb + j's; smin, smax the
 * scale range of the groups that hold them (a range that holds the blocks'
 * own). Inlined: out of line (GCC made it so) it cost 3% of a one-row call.
 */
static inline __attribute__((always_inline)) gemm_panel_group span_of(const gemm_b *b, int64_t p, int64_t kb, int64_t nblk)
{
    const gemm_panel_group *g = b->groups + p * b->ngroups + kb / 32;
    const int shift = (int)(kb % 32);
    uint64_t refused = g[0].refused, special = g[0].special;
    gemm_panel_group span = {0, 0, g[0].smin, g[0].smax};
    if (shift + nblk > 32) {
        refused |= (uint64_t)g[1].refused << 32, special |= (uint64_t)g[1].special << 32;
        span.smin = g[1].smin < span.smin ? g[1].smin : span.smin;
        span.smax = g[1].smax > span.smax ? g[1].smax : span.smax;
    }
    const uint64_t mask = (1ull << nblk) - 1;
    span.refused = (uint32_t)((refused >> shift) & mask), span.special = (uint32_t)((special >> shift) & mask);
    return span;
}

/*
 * Whether panel p's blocks of the chunk at K-block kb leave work to the
 * exact path; *clean: whether every packed row folds against all of them
 * (else the rows must be masked).
 */
static int panel_needs_exact(const gemm_b *b, const a_block *blk, int64_t kb, int64_t nblk, int64_t p, int pair_lo,
                             int pair_hi, int *clean)
{
    /* The common case in one or two reads: every A block's range against the panel's groups' range. */
    const gemm_panel_group span = span_of(b, p, kb, nblk);
    if (blk->min_all + span.smin >= pair_lo && blk->max_all + span.smax <= pair_hi) {
        *clean = 1;
        return span.refused != 0;
    }
    const gemm_panel_info *info = b->info + kb * b->npanels + p;
    int unfoldable = 0;
    *clean = 1;
    for (int64_t j = 0; j < nblk; j++) {
        gemm_panel_info pi = info[j * b->npanels];
        if (!pi.ok)
            unfoldable = 1;
        else if (blk->min_scale[j] + pi.smin < pair_lo || blk->max_scale[j] + pi.smax > pair_hi)
            *clean = 0;
    }
    return unfoldable || !*clean;
}

/*
 * Rows [r0, r0 + nr) of blk copied to `copy` (same row stride), with the
 * (row, K-block) pairs that the panel's blocks make exact zeroed, so that
 * the fast sum leaves them to the exact path. info[j * stride] is the
 * panel's block j.
 */
static const void *mask_rows(const gemm_level *L, const a_block *blk, int64_t r0, int64_t nr, int64_t nblk,
                             const gemm_panel_info *info, int64_t stride, int pair_lo, int pair_hi, char *copy)
{
    const int64_t ld_state = L->kc / 32;
    memcpy(copy, blk->rows + r0 * L->a_ld, (size_t)(nr * L->a_ld));
    for (int64_t r = 0; r < nr; r++)
        for (int64_t j = 0; j < nblk; j++)
            if (gemm_exact_needed(blk->state[(r0 + r) * ld_state + j], info[j * stride], pair_lo, pair_hi))
                memset(copy + r * L->a_ld + j * L->a_block, 0, (size_t)L->a_block);
    return copy;
}

/* ---- The panels of one chunk ----------------------------------------------- */

/* What a call multiplies, and what the level and the fold rule make of it. */
typedef struct call {
    const gemm_b *b;
    const gemm_level *L;
    const gemm_a_slab *a;
    int64_t rows, k0, klen, n0, n1;
    float *c;
    int64_t ldc;
    int overwrite;
    uint16_t *out;
    int64_t ldo;
    int pair_lo, pair_hi;
    char *masked; /* room for MR packed rows */
    float *c_buf; /* room for the level's kernel_block, or NULL (then tile by tile: the same bits) */
    int small;    /* the small-M path: kernel8 on B in fp8 */
    int widen;    /* the widening path: each panel's chunk of B in fp8 widened into wide_buf, then kernel */
    void *wide_buf;
} call;

/* A block of rows over the panels: one chunk, or (all_k_chunks) all of K in one microkernel call. */
typedef struct pass {
    const call *x;
    const a_block *blk[GEMM_MAX_CHUNKS];
    int64_t k[GEMM_MAX_CHUNKS];
    int chunks;
    int64_t kb;    /* B's K-block of the first chunk */
    int64_t rows;  /* of the block */
    float *c;      /* at the block's first row */
    int overwrite; /* C = +0.0f + sums: C's old contents unread */
    uint16_t *out; /* at the block's first row: the sums go rounded here, not to C; or NULL */
} pass;

/* Panel p's packed B from K-block kb on; or (small) its B in fp8. */
static inline const char *panel_at(const gemm_b *b, int small, int64_t p, int64_t kb)
{
    if (small) return (const char *)b->exact.codes + (p * (b->K / 32) + kb) * b->level->b8_block;
    return (const char *)b->packed + (p * (b->K / 32) + kb) * b->level->b_block;
}

/*
 * Of panel p's nblk blocks from K-block kb on, bit j for block j: those the fold rule refuses (*refused)
 * and those that may hold a zero or subnormal code (*special: the panel info's normal is not set).
 */
static void block_bits(const gemm_b *b, int64_t p, int64_t kb, int64_t nblk, uint32_t *refused, uint32_t *special)
{
    const gemm_panel_group span = span_of(b, p, kb, nblk);
    *refused = span.refused, *special = span.special;
}

/* K of the chunk that starts kc0 into a call's klen. */
static inline int64_t chunk_len(int64_t klen, int64_t kc0, int64_t kc) { return klen - kc0 < kc ? klen - kc0 : kc; }

/* Part `part` of `parts` of a range of `bytes`, in whole lines: [*from, *to). */
static void share_of(int64_t bytes, int64_t parts, int64_t part, int64_t *from, int64_t *to)
{
    int64_t share = (bytes / 64 + parts - 1) / parts * 64;
    *from = part * share < bytes ? part * share : bytes;
    *to = *from + share < bytes ? *from + share : bytes;
}

/*
 * The tiles of panel p, its columns [n0, n1) of the call. A whole tile goes
 * straight between C (or out) and the microkernel; a part of one (the
 * panel's edge, or the last rows where the level takes whole tiles only)
 * through a buffer, so that nothing outside the region is read or written.
 */
static void run_panel(const pass *s, int64_t p, int clean, int next_panel)
{
    const call *x = s->x;
    const gemm_level *L = x->L;
    const gemm_b *b = x->b;
    const int64_t nr = L->nr, mr = L->mr, ldc = x->ldc, ldo = x->ldo;
    const int64_t cb = (p * nr > x->n0 ? p * nr : x->n0) - p * nr;
    const int64_t ce = ((p + 1) * nr < x->n1 ? (p + 1) * nr : x->n1) - p * nr;
    const int whole_cols = cb == 0 && ce == nr;
    float buf[GEMM_MAX_MR * GEMM_MAX_NR] __attribute__((aligned(64)));
    gemm_tile t = {.chunks = s->chunks, .b_type = b->type, .b_panel = panel_at(b, x->small, p, 0), .b_nkb = b->K / 32};
    int64_t k = 0;
    for (int ch = 0; ch < s->chunks; ch++) {
        t.b[ch] = panel_at(b, x->small, p, s->kb + ch * (L->kc / 32));
        t.b_kb[ch] = s->kb + ch * (L->kc / 32);
        t.k[ch] = s->k[ch];
        if (x->small) block_bits(b, p, t.b_kb[ch], s->k[ch] / 32, &t.b_refused[ch], &t.b_special[ch]);
        k += s->k[ch];
    }
    void (*kernel)(const gemm_tile *) = x->small ? L->kernel8 : L->kernel;
    /* The next panel's part of K, brought in over this panel's tiles (or its widening). */
    const int fp8 = x->small || x->widen;
    const char *next = panel_at(b, fp8, p + next_panel, s->kb);
    const int64_t block_bytes = fp8 ? L->b8_block : L->b_block;
    int64_t next_bytes = next_panel ? k / 32 * block_bytes : 0;
    const int64_t tiles = (s->rows + mr - 1) / mr;
    if (x->widen) { /* one chunk: the tiles read it widened, from L1 */
        gemm_tile w = {.chunks = 1, .b = {panel_at(b, 1, p, s->kb)}, .k = {s->k[0]}, .b_type = b->type,
                       .prefetch = next, .prefetch_end = next + next_bytes};
        block_bits(b, p, s->kb, s->k[0] / 32, &w.b_refused[0], &w.b_special[0]);
        L->widen_b8(&w, x->wide_buf);
        t.b[0] = x->wide_buf;
        next_bytes = 0;
    }
    /* the small path reads B from memory at a byte a value: the whole next call's part goes to L2 */
    const int64_t cap = L->prefetch_k && !x->small ? k / L->prefetch_k * 64 : 0;
    const gemm_panel_info *info = b->info + s->kb * b->npanels + p;
    int64_t first = 0; /* the first tile left to take one at a time */
    if (L->kernel_block && x->c_buf && !x->small && clean && whole_cols && s->rows >= mr) {
        /* the whole tiles at once, the next panel brought in over all of them */
        for (int ch = 0; ch < s->chunks; ch++) t.a[ch] = s->blk[ch]->rows;
        t.rows = t.rows_used = (int)mr;
        t.c_in = s->overwrite ? NULL : s->c + p * nr;
        t.ldc_in = t.ldc_out = ldc;
        t.c_out = s->c + p * nr;
        t.out = s->out ? s->out + p * nr : NULL;
        t.ldo = ldo;
        t.prefetch = next;
        t.prefetch_end = next + next_bytes;
        t.c_buf = x->c_buf;
        first = s->rows / mr;
        L->kernel_block(&t, (int)first);
    }
    /* The small path's tiles share the rows evenly (7 as 4 + 3, not 6 + 1): a tile of 4-6 rows keeps
     * the FMA units busy, where one of 1-2 rows leaves them waiting on its few chains (Zen 4, B in L2:
     * 7 and 8 rows 1.1-1.2x on the avx2 and avx512 levels). Each row's sums are the same either way. */
    const int balance = x->small && !L->full_rows && !first;
    for (int64_t i = first; i < tiles; i++) {
        const int64_t r0 = balance ? i * s->rows / tiles : i * mr;
        const int64_t rows = balance ? (i + 1) * s->rows / tiles - r0 : s->rows - r0 < mr ? s->rows - r0 : mr;
        int64_t from, to;
        if (first) {
            from = to = 0;
        } else if (cap) {
            from = i * cap < next_bytes ? i * cap : next_bytes;
            to = from + cap < next_bytes ? from + cap : next_bytes;
        } else {
            share_of(next_bytes, tiles, i, &from, &to);
        }
        t.prefetch = next + from;
        t.prefetch_end = next + to;
        for (int ch = 0; ch < s->chunks; ch++)
            t.a[ch] = clean ? s->blk[ch]->rows + r0 * L->a_ld
                            : mask_rows(L, s->blk[0], r0, rows, s->k[0] / 32, info, b->npanels, x->pair_lo,
                                        x->pair_hi, x->masked);
        float *c = s->c + r0 * ldc + p * nr;
        uint16_t *out = s->out ? s->out + r0 * ldo + p * nr : NULL;
        t.rows_used = (int)rows;
        if (whole_cols && (rows == mr || !L->full_rows)) {
            t.rows = (int)rows;
            t.c_in = s->overwrite ? NULL : c;
            t.ldc_in = ldc;
            t.c_out = c;
            t.ldc_out = ldc;
            t.out = out;
            t.ldo = ldo;
            kernel(&t);
            continue;
        }
        const int64_t krows = L->full_rows ? mr : rows;
        if (!s->overwrite) {
            memset(buf, 0, (size_t)(krows * nr) * sizeof *buf);
            for (int64_t r = 0; r < rows; r++) memcpy(buf + r * nr + cb, c + r * ldc + cb, (size_t)(ce - cb) * sizeof *c);
        }
        t.rows = (int)krows;
        t.c_in = s->overwrite ? NULL : buf;
        t.ldc_in = nr;
        t.c_out = buf;
        t.ldc_out = nr;
        t.out = NULL;
        kernel(&t);
        if (out) gemm_store_bf16(buf, nr, rows, cb, ce, out, ldo);
        else
            for (int64_t r = 0; r < rows; r++) memcpy(c + r * ldc + cb, buf + r * nr + cb, (size_t)(ce - cb) * sizeof *c);
    }
}

/*
 * How many of panels [p, last] from p on kernel8_panels may take at once:
 * whole panels of the call's columns whose A rows need no masking (clean);
 * their exact-path work, if any, is added to *any_exact. 0 or 1: none.
 */
static int wide_panels(const pass *s, int64_t p, int64_t last, int *any_exact)
{
    const call *x = s->x;
    const int64_t nr = x->L->nr;
    int n = 0;
    for (int64_t q = p; q <= last && q * nr >= x->n0 && (q + 1) * nr <= x->n1; q++, n++) {
        int clean, exact = panel_needs_exact(x->b, s->blk[0], s->kb, s->k[0] / 32, q, x->pair_lo, x->pair_hi, &clean);
        if (!clean) break;
        *any_exact |= exact;
    }
    return n;
}

/* Panels [p, p + n) of the pass's rows by kernel8_panels (wide_panels said they may); p1: the call's last panel. */
static void run_panels_wide(const pass *s, int64_t p, int n, int64_t p1)
{
    const call *x = s->x;
    const gemm_level *L = x->L;
    const gemm_b *b = x->b;
    const int64_t nr = L->nr, nblk = s->k[0] / 32;
    gemm_tile t = {.chunks = 1, .rows = (int)s->rows, .rows_used = (int)s->rows, .b_type = b->type, .b_nkb = b->K / 32};
    t.a[0] = s->blk[0]->rows;
    t.b[0] = t.b_panel = panel_at(b, 1, p, s->kb);
    t.b_kb[0] = s->kb;
    t.k[0] = s->k[0];
    t.c_in = s->overwrite ? NULL : s->c + p * nr;
    t.c_out = s->c + p * nr;
    t.ldc_in = t.ldc_out = x->ldc;
    t.out = s->out ? s->out + p * nr : NULL;
    t.ldo = x->ldo;
    gemm_panels g = {.count = n, .panel_bytes = panel_at(b, 1, p + 1, s->kb) - panel_at(b, 1, p, s->kb)};
    for (int i = 0; i < n; i++) block_bits(b, p + i, s->kb, nblk, &g.refused[i], &g.special[i]);
    /* the next panels' part of K into L2 over the call, as run_panel brings in the next one */
    const int64_t after = p1 - (p + n) + 1;
    g.prefetch_panels = after < n ? (int)after : n;
    if (g.prefetch_panels > 0) {
        t.prefetch = panel_at(b, 1, p + n, s->kb);
        t.prefetch_end = t.prefetch + nblk * L->b8_block;
    }
    L->kernel8_panels(&t, &g);
}

/*
 * The panels [p0, p1] of the call's columns for one pass. Returns whether
 * any panel leaves work to the exact path (a pass of several chunks must
 * have none: its rows are never masked). A few rows on B in fp8 take their
 * panels several at a time where the level can (kernel8_panels, panels_rows).
 */
static int run_panels(const pass *s, int64_t p0, int64_t p1)
{
    const call *x = s->x;
    const int panels_rows = x->L->panels_rows > 1 ? x->L->panels_rows : 1;
    const int wide = x->small && x->L->kernel8_panels && s->rows <= panels_rows && s->chunks == 1
                         ? GEMM_WIDE_PANELS / (int)s->rows
                         : 1;
    int any_exact = 0;
    for (int64_t p = p0; p <= p1;) {
        const int n = wide > 1 ? wide_panels(s, p, p + wide - 1 < p1 ? p + wide - 1 : p1, &any_exact) : 0;
        if (n >= 2) {
            run_panels_wide(s, p, n, p1);
            p += n;
            continue;
        }
        if (n == 1) { /* whole and clean, its exact-path work counted already */
            run_panel(s, p, 1, p < p1);
            p++;
            continue;
        }
        int clean = 1;
        if (s->chunks == 1)
            any_exact |= panel_needs_exact(x->b, s->blk[0], s->kb, s->k[0] / 32, p, x->pair_lo, x->pair_hi, &clean);
        run_panel(s, p, clean, p < p1);
        p++;
    }
    return any_exact;
}

/* Whether the packed chunks of a row block (all of K) leave any work to the exact path on panels [p0, p1]. */
static int chunks_need_exact(const call *x, const a_block *blks, int64_t chunks, int64_t p0, int64_t p1)
{
    const int64_t kc = x->L->kc;
    for (int64_t ch = 0; ch < chunks; ch++) {
        int64_t nblk = chunk_len(x->klen, ch * kc, kc) / 32;
        int clean;
        if (blks[ch].any_unfoldable) return 1;
        for (int64_t p = p0; p <= p1; p++)
            if (panel_needs_exact(x->b, &blks[ch], x->k0 / 32 + ch * (kc / 32), nblk, p, x->pair_lo, x->pair_hi,
                                  &clean))
                return 1;
    }
    return 0;
}

/* ---- The loops -------------------------------------------------------------- */

/*
 * Rows in blocks of equal size (whole tiles, at most the a_blocks'
 * capacity); K in chunks. With one a_block, each chunk packs its A block,
 * runs every panel, then adds the chunk's exact blocks. With one a_block
 * per chunk (packs > 1: the level's all_k_chunks), all of K is packed first
 * and, unless the exact path has work, each tile takes all of it at once.
 */
static void run_blocks(const call *x, a_block *blks, int packs)
{
    const gemm_level *L = x->L;
    const gemm_b *b = x->b;
    const int64_t rows = x->rows, klen = x->klen, kc = L->kc, kcb = kc / 32, ldc = x->ldc, ldo = x->ldo;
    const int64_t capacity = blks[0].capacity, p0 = x->n0 / L->nr, p1 = (x->n1 - 1) / L->nr;
    if (L->begin) L->begin();
    gemm_exact_job job = {&b->exact, b->info,    b->npanels, L->nr, x->a,  b->values[x->a->type], x->pair_lo,
                          x->pair_hi, x->k0 / 32, x->n0,     x->n1, x->c, ldc};
    /* Row blocks of equal size (in whole tiles), not full ones and a short last one: every block streams */
    /* all of the panels' B, and a block of a few rows reuses it little (1.04-1.07x at 416 and 992 rows). */
    const int64_t unit = L->mr, units = (rows + unit - 1) / unit, nblocks = (rows + capacity - 1) / capacity;
    for (int64_t block = 0, ic = 0, mcl = 0; ic < rows; block++, ic += mcl) {
        int64_t end = (block + 1) * units / nblocks * unit;
        mcl = (end < rows ? end : rows) - ic;
        pass s = {.x = x, .rows = mcl, .c = x->c + ic * ldc};
        if (packs > 1) {
            for (int64_t ch = 0; ch < packs; ch++)
                pack_a(L, x->a, ic, mcl, ch * kcb, chunk_len(klen, ch * kc, kc) / 32, &blks[ch]);
            if (!chunks_need_exact(x, blks, packs, p0, p1)) {
                s.chunks = packs;
                s.kb = x->k0 / 32;
                for (int ch = 0; ch < packs; ch++) {
                    s.blk[ch] = &blks[ch];
                    s.k[ch] = chunk_len(klen, ch * kc, kc);
                }
                s.overwrite = x->overwrite;
                s.out = x->out ? x->out + ic * ldo : NULL;
                run_panels(&s, p0, p1);
                continue;
            }
        }
        for (int64_t kc0 = 0; kc0 < klen; kc0 += kc) {
            const int64_t nblk = chunk_len(klen, kc0, kc) / 32, j0 = kc0 / 32, kb = x->k0 / 32 + j0;
            const int last = kc0 + kc >= klen;
            a_block *blk = &blks[packs > 1 ? kc0 / kc : 0];
            if (packs == 1) pack_a(L, x->a, ic, mcl, j0, nblk, blk);
            int any_exact = blk->any_unfoldable, clean;
            /* The last chunk rounds its sums straight to out, unless the exact path must add to them first. */
            int fuse_out = x->out && last && !any_exact;
            for (int64_t p = p0; fuse_out && p <= p1; p++)
                fuse_out = !panel_needs_exact(b, blk, kb, nblk, p, x->pair_lo, x->pair_hi, &clean);
            s.chunks = 1;
            s.blk[0] = blk;
            s.k[0] = nblk * 32;
            s.kb = kb;
            s.overwrite = x->overwrite && kc0 == 0;
            s.out = fuse_out ? x->out + ic * ldo : NULL;
            any_exact |= run_panels(&s, p0, p1);
            if (any_exact) gemm_exact_fixup(&job, ic, ic + mcl, j0, j0 + nblk, blk->state, kcb);
            if (x->out && last && !fuse_out)
                gemm_store_bf16(x->c + ic * ldc, ldc, mcl, x->n0, x->n1, x->out + ic * ldo, ldo);
        }
    }
    if (L->end) L->end();
}

/* Out of memory for the scratch: one tile of rows at a time, on the stack (the same bits, slower). */
static __attribute__((noinline)) void run_on_stack(call *x)
{
    char rows[GEMM_MAX_MR * GEMM_MAX_A_LD] __attribute__((aligned(64)));
    char masked[GEMM_MAX_MR * GEMM_MAX_A_LD] __attribute__((aligned(64)));
    int16_t state[GEMM_MAX_MR * (GEMM_MAX_KC / 32)];
    a_block blk = {.rows = rows, .state = state, .capacity = x->L->mr};
    x->masked = masked;
    run_blocks(x, &blk, 1);
}

void gemm_driver_run(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen, int64_t n0,
                     int64_t n1, float *c, int64_t ldc, int overwrite, uint16_t *out, int64_t ldo)
{
    const gemm_level *L = b->level;
    if (!L->kernel) { /* every block exact */
        if (overwrite)
            for (int64_t i = 0; i < rows; i++) memset(c + i * ldc + n0, 0, (size_t)(n1 - n0) * sizeof *c);
        gemm_exact_all(&b->exact, a, b->values[a->type], rows, k0, klen, n0, n1, c, ldc);
        if (out) gemm_store_bf16(c, ldc, rows, n0, n1, out, ldo);
        return;
    }
    call x = {.b = b, .L = L, .a = a, .rows = rows, .k0 = k0, .klen = klen, .n0 = n0, .n1 = n1, .c = c, .ldc = ldc,
              .overwrite = overwrite, .out = out, .ldo = ldo,
              .pair_lo = gemm_fold_pair_lo(L->format, a->type, b->type),
              .pair_hi = gemm_fold_pair_hi(a->type, b->type),
              /* small M: the matmul is a read of B, in fewer bytes */
              .small = rows <= L->small_m};
    const int64_t kc = L->kc, chunks = (klen + kc - 1) / kc, unit = L->mr;
    const int packs = L->all_k_chunks > 1 && chunks == L->all_k_chunks ? (int)chunks : 1;
    /* more rows than the small-M path takes, few enough that reading B in its packed form costs more
     * than widening it once */
    if (!x.small && L->widen_b8 && rows <= L->widen_m && packs == 1) {
        x.wide_buf = scratch_get(SCRATCH_GEMM_WIDE, (size_t)(kc / 32 * L->b_block));
        x.widen = x.wide_buf != NULL;
    }
    /* B kept in fp8 only: what the widening path does not take, the small-M path does (the same bits) */
    if (!b->packed && !x.widen) x.small = 1;
    const int64_t mc = packs == 1 && klen >= kc ? L->mc_deep : L->mc;
    int64_t capacity = (rows < mc ? rows : mc) + unit - 1;
    capacity -= capacity % unit;
    char *packed = scratch_get(0, (size_t)(packs * capacity * L->a_ld));
    int16_t *state = scratch_get(1, (size_t)(packs * capacity * (kc / 32)) * sizeof *state);
    x.masked = scratch_get(2, (size_t)(unit * L->a_ld));
    if (L->kernel_block) x.c_buf = scratch_get(3, (size_t)(capacity * L->nr / 2) * sizeof(float));
    if (!packed || !state || !x.masked) {
        run_on_stack(&x);
        return;
    }
    a_block blks[GEMM_MAX_CHUNKS];
    for (int ch = 0; ch < packs; ch++)
        blks[ch] = (a_block){.rows = packed + ch * capacity * L->a_ld, .state = state + ch * capacity * (kc / 32),
                             .capacity = capacity};
    run_blocks(&x, blks, packs);
}
