/*
 * A kernel level as the driver (gemm_driver.c) sees it, BLIS's way: the
 * driver holds every loop (blocks of rows, chunks of K, panels of B, the
 * packing of A with its scales folded, the exact path for the blocks that
 * do not fold, the bf16 store and the fused last-chunk epilogue); a level
 * supplies a microkernel of the one signature below, its packing of B and
 * of an A row, and a context of block sizes and layouts.
 *
 * Adding a level (AVX10, an ARM SVE or SME kernel): a file with the
 * microkernel, the packing (or the bf16 packing of gemm_bf16_pack.h, which
 * avx512 and amx share) and a gemm_level; its name in gemm.h's gemm_isa and
 * its line in gemm.c's table. No loop of the driver changes.
 *
 * What a level's bits depend on, and so what a level may never tune per
 * CPU: the fold format, NR (the fold rule decides by panel, gemm_exact.h)
 * and KC (each chunk's sum starts from zero and is added to C once, except
 * where the accumulators carry C over chunks, as AMX's tiles do). MR, MC and
 * the prefetching change the speed only (gemm_level_blocking adjusts MC to
 * the CPU's L2).
 */
#ifndef A2AMM_GEMM_LEVEL_H
#define A2AMM_GEMM_LEVEL_H

#include <stdint.h>

#include "common/cpu.h"
#include "gemm/gemm_fold.h"
#include "gemm/gemm_internal.h"

/* Bounds every level keeps, so that the driver's fixed arrays hold any of them. */
enum {
    GEMM_MAX_MR = 32,        /* rows of a microkernel call */
    GEMM_MAX_NR = 64,        /* columns of a panel */
    GEMM_MAX_KC = 1024,      /* K of a chunk: a row's fold states of one chunk are at most 32 */
    GEMM_MAX_A_LD = 2112,    /* bytes of one packed A row (of one chunk) */
    GEMM_MAX_CHUNKS = 2,     /* chunks a microkernel call may take at once */
    GEMM_WIDE_PANELS = 4     /* panels kernel8_panels takes at once, the most */
};

/*
 * One microkernel call: rows x the panel's NR columns of
 *   result = c_in (or +0.0f where c_in is NULL) + A[rows][k] * B[k][NR]
 * over the chunks in order, each chunk's products in the level's order, K
 * ascending. The chunks are whole chunks of the level's KC (the last of a
 * call may be shorter, a multiple of 32); more than one only where the
 * level's context allows (all_k_chunks). The result goes to c_out, or,
 * where out is set, rounded to bf16 to out (as gemm_store_bf16 rounds),
 * c_out then unused. c_in and c_out may be the same. Row strides are in
 * elements; every pointer is at the tile's first row and the panel's first
 * column.
 */
typedef struct gemm_tile {
    const void *a[GEMM_MAX_CHUNKS]; /* packed A at the tile's first row, the level's row stride (a_ld) */
    const void *b[GEMM_MAX_CHUNKS]; /* the panel's packed B at the chunk's first K */
    int64_t k[GEMM_MAX_CHUNKS];     /* K of each chunk */
    int chunks;
    int rows;                       /* 1..MR, or MR where the level takes whole tiles only */
    int rows_used;                  /* of those, the rows the call needs: a level that takes whole tiles
                                     * may leave the rest of C (padding) undone */
    const float *c_in;
    int64_t ldc_in;
    float *c_out;
    int64_t ldc_out;
    uint16_t *out;
    int64_t ldo;
    /* Where B's panel starts, its K-blocks in all, and the K-block each chunk starts at: for a level
     * whose packing is not one block after another (amx's pieces: bf16_piece_at). */
    const void *b_panel;
    int64_t b_nkb, b_kb[GEMM_MAX_CHUNKS];
    /* kernel_block only: room for its C, tiles x MR x NR / 2 floats, 64-byte aligned */
    float *c_buf;
    /* Lines to bring into the cache meanwhile (the next panel's B), spread over the call's steps. */
    const char *prefetch, *prefetch_end;
    /* The small-M microkernel (kernel8) only: b holds B in fp8; bit j of b_refused[i]: chunk i's
     * block j of the panel is refused by the fold rule (taken as zeros, as the packed B holds it). */
    uint32_t b_refused[GEMM_MAX_CHUNKS];
    /* kernel8 only: bit j of b_special[i]: chunk i's block j may hold a zero or subnormal code (the
     * fold rule's panel info says it is not all normal), which the widening must test for */
    uint32_t b_special[GEMM_MAX_CHUNKS];
    a2amm_fp8_type b_type;
} gemm_tile;

/*
 * kernel8_panels' other panels: `count` (2..GEMM_WIDE_PANELS) whole panels, each panel_bytes of B in
 * fp8 after the one before it and NR columns further on in C and out; refused[i] is panel i's
 * b_refused (of the call's one chunk). The next prefetch_panels panels after them (0..count) are
 * brought into L2 over the call, each from the same offset as t->prefetch is in the first of them.
 */
typedef struct gemm_panels {
    int count, prefetch_panels;
    int64_t panel_bytes;
    uint32_t refused[GEMM_WIDE_PANELS];
    uint32_t special[GEMM_WIDE_PANELS]; /* panel i's b_special */
} gemm_panels;

typedef struct gemm_level {
    gemm_isa isa;
    const cpu_feature *needs; /* the CPU features it runs on */
    int nneeds;
    const char *(*why_not)(void); /* NULL, or what else it needs: NULL where it runs, else why not (AMX: the
                                   * OS's grant of the tile state; avx512: VDPBF16PS's order) */
    /* No microkernel: every block takes the exact path (the ref level); nothing below is used. */
    void (*kernel)(const gemm_tile *t);
    /*
     * NULL, or `kernel` over `tiles` whole MR-row tiles of one whole panel at once (t at the first:
     * tile i's A rows, C and out are i * MR rows on), the same bits: a level whose loop keeps a
     * piece of B in L1 for every row tile before the next (amx). The driver calls it where no row
     * is masked and the tiles take the panel's every column; t->c_buf holds tiles x MR x NR / 2 floats.
     */
    void (*kernel_block)(const gemm_tile *t, int tiles);

    /* ---- Fixed by the level: its bits depend on them ---- */
    gemm_fold_format format; /* where folded values live: the fold rule's ranges (gemm_fold.h) */
    int nr;                  /* columns of a panel of packed B */
    int kc;                  /* K of a chunk, a multiple of 32, at most GEMM_MAX_KC */

    /* ---- Speed only ---- */
    int mr;           /* rows of a microkernel call */
    int full_rows;    /* the microkernel takes whole MR-row tiles only (the driver buffers the last one) */
    int mc;           /* rows of A packed at once (a multiple of MR), the most: see gemm_level_blocking */
    int mc_deep;      /* the same where K is a whole chunk or more and goes chunk by chunk */
    int all_k_chunks; /* K of exactly this many chunks (> 1) is all packed and each tile takes it in one
                       * call (the level's accumulators carry C over chunks); 0: chunk by chunk */
    /* Prefetch of the next panel: 0, the panel's range split evenly over its calls; else each call
     * takes the next k / prefetch_k lines, one per prefetch_k of its K, until the range is covered. */
    int prefetch_k;

    /* ---- Layouts ---- */
    int64_t a_ld;    /* bytes from one packed A row to the next (rows hold one chunk) */
    int64_t a_block; /* bytes of one packed 32-block of an A row */
    int64_t b_block; /* bytes of one 32-block of K of one panel of packed B */

    /* ---- Packing ---- */
    /* Panels [p0, p1) of b->packed from B's codes as given (bq, [N][K]), its scales (b->exact) and
     * b->info (filled already): each (K-block, panel) that b->info does not mark ok packed as zeros. */
    void (*pack_b)(const gemm_b *b, const uint8_t *bq, int64_t p0, int64_t p1);
    /*
     * One row of A: its nblk (<= kc / 32) blocks of 32 codes with their scales folded into `row`
     * (a_block bytes each); a block that does not fold packed as zeros. state[j]: block j's fold
     * state (gemm_exact.h: its scale, GEMM_A_ZERO or GEMM_A_UNFOLDABLE).
     */
    void (*pack_a_row)(const uint8_t *codes, const uint8_t *scales, int64_t nblk, a2amm_fp8_type type,
                       void *row, int16_t *state);
    /* NULL, or the calling thread's set-up before its microkernel calls (AMX: the tile configuration)
     * and its release after them. */
    void (*begin)(void);
    void (*end)(void);

    /* ---- The small-M path: B read in fp8, widened in registers (small_m 0: none) ----
     * B's codes are kept in the panels' order (b8_block bytes a 32-block of a panel, pack_b8 writing
     * them into b->exact.codes, b8_block_codes reading them back for the exact path), so the path
     * costs no memory beyond the copy of B every level keeps. A call of at most small_m rows runs
     * kernel8 on them instead of kernel on the packed B: the same arithmetic, the same bits. */
    int small_m;
    void (*kernel8)(const gemm_tile *t);
    int64_t b8_block;
    void (*pack_b8)(const gemm_b *b, const uint8_t *bq, int64_t p0, int64_t p1);
    uint8_t (*b8_block_codes)(const gemm_exact_b *eb, int64_t n, int64_t kb, uint8_t out[32]);
    /* NULL, or kernel8 for t->rows rows (1..panels_rows, one chunk) over g->count whole panels at once
     * (t the first; see gemm_panels), the same bits: a row or two keep only a panel's few accumulators
     * in flight, so a chain of FMAs waits on the one before it; several panels give the FMA units
     * independent work (an AVX2 CPU needs 8-10 chains: issue 31). The driver uses it where the panels
     * need no masking, GEMM_WIDE_PANELS / rows panels at a time. */
    void (*kernel8_panels)(const gemm_tile *t, const gemm_panels *g);
    int panels_rows; /* 0 or 1: one row only */

    /* ---- The widening path: B read in fp8, widened once per panel and chunk (widen_m 0: none) ----
     * A call of more than small_m and at most widen_m rows, chunk by chunk (all_k_chunks 0), widens
     * each panel's chunk of B in fp8 into a buffer of the calling thread (widen_b8: t->b[0], t->k[0],
     * t->b_refused[0], t->b_special[0] and t->b_type as kernel8 takes them, into pack_b's layout and
     * values, b_block bytes a 32-block; the next panel's chunk, t->prefetch..prefetch_end, into L2
     * meanwhile) and runs `kernel` over it for every row tile: the same arithmetic, the same bits.
     * B's bytes are read once in fp8 and widened once, where the small-M path widens them again for
     * each tile and the packed path reads B in fp32, 4 bytes a value. */
    int widen_m;
    void (*widen_b8)(const gemm_tile *t, void *out);
} gemm_level;

/* A microkernel `name` for a level whose kernel(rows, t) is inlined once per row count 1..6 (the
 * count a constant in each instance, built for TARGET): the instance for t->rows (6 for more). */
#define GEMM_KERNEL_BY_ROWS(TARGET, name, kernel)                                                            \
    TARGET static void name##_1(const gemm_tile *t) { kernel(1, t); }                                        \
    TARGET static void name##_2(const gemm_tile *t) { kernel(2, t); }                                        \
    TARGET static void name##_3(const gemm_tile *t) { kernel(3, t); }                                        \
    TARGET static void name##_4(const gemm_tile *t) { kernel(4, t); }                                        \
    TARGET static void name##_5(const gemm_tile *t) { kernel(5, t); }                                        \
    TARGET static void name##_6(const gemm_tile *t) { kernel(6, t); }                                        \
    static void name(const gemm_tile *t)                                                                     \
    {                                                                                                        \
        static void (*const by_rows[6])(const gemm_tile *) = {name##_1, name##_2, name##_3,                  \
                                                               name##_4, name##_5, name##_6};                \
        by_rows[(t->rows < 6 ? t->rows : 6) - 1](t);                                                         \
    }

/* The levels' contexts as their files define them (gemm.c's table lists them by gemm_isa). */
extern const gemm_level gemm_ref_level, gemm_avx2_level, gemm_avx512_level, gemm_amx_level;

/* The level's context with its cache-dependent sizes (MC) set for this CPU, computed once. */
const gemm_level *gemm_level_blocking(gemm_isa isa);

/* ---- The driver (gemm_driver.c) ---- */

/* Fills b->packed, b->info and b->exact for b->level, the work spread over `workers` if not NULL. */
int gemm_driver_prepare(gemm_b *b, const uint8_t *bq, const uint8_t *sb, int64_t ldsb, pool *workers,
                        a2amm_error *err);
void gemm_driver_release(gemm_b *b);
/* What gemm_b_bytes says. */
int64_t gemm_driver_bytes(const gemm_b *b);
/*
 * C = 0 first where overwrite; then C += A_slab * B over [k0, k0 + klen) x [n0, n1); then, with out,
 * out = bf16(C) over the region (C then unspecified). rows, klen and n1 - n0 positive.
 */
void gemm_driver_run(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen,
                     int64_t n0, int64_t n1, float *c, int64_t ldc, int overwrite, uint16_t *out, int64_t ldo);

#endif
