/*
 * The AVX-512 level: MXFP8 -> bf16 packing with the block scales folded in,
 * and a 6 x 64 register-blocked vdpbf16ps microkernel (24 zmm accumulators;
 * per K-pair 4 loads of B, 6 broadcasts of A, 24 vdpbf16ps). The AMX level
 * shares all of it but the multiply: 32-row groups of the packed rows go
 * through gemm_amx_block (gemm_amx.h), whose tiles carry C over the chunks
 * (see "AMX" below).
 *
 * Packed B: gemm_avx512_internal.h (gemm_avx512_prepare.c builds it).
 * Packed A (per call, per MC x KC block of the slab): row-major, each row's
 * dwords (A[r][2kp], A[r][2kp + 1]) with A's block scale folded in; a tile is
 * MR = 6 consecutive rows, broadcast at constant offsets. A row block that
 * cannot fold is packed as zeros (the conversion as B's).
 *
 * Order of work, fixed so that C[i][n] depends only on the inputs and the
 * k range of the call: K in chunks of KC from k0; per chunk each (tile,
 * panel) sums its products into zeroed fp32 accumulators (K-pairs ascending)
 * and adds them to C once; then the chunk's exact blocks are added, K-block
 * ascending. Whether a (row, K-block, panel) is exact depends only on that
 * row's block and that panel's block, so neither `rows`, nor the row or
 * column split, nor MC changes a bit of the result.
 *
 * Memory: the kernel prefetches its C lines as it starts (unless it
 * overwrites C) and again, one a step, over its last steps (the B stream has
 * pushed them out of L1 by then), and, spread over a panel's tiles, the next
 * panel's B chunk; pack_a prefetches the fp8 rows it will read a few rows
 * ahead. gemm_multiply's first chunk stores +0.0f + its sums without reading
 * C: the bits of C = 0 followed by the accumulate. The *_store calls' last
 * chunk rounds C + its sums to bf16 in the epilogue and writes only the
 * output (gemm_bf16_round.h: the bits of gemm_store_bf16), unless the exact
 * path has blocks to add to that chunk first.
 *
 * AMX: rows in groups of 32 (the packed block's capacity a multiple of 32;
 * rows past the slab's are garbage the results never read). A group's tiles
 * start from C (or zero) and carry on over the chunks, so its values depend
 * only on the sequence of K-pairs: a row block with K in two chunks and no
 * exact work packs both and runs them in one go (run_panels_all_k); the
 * others go chunk by chunk, loading the tiles from C and storing them back,
 * with the exact blocks added to C between chunks: the same bits.
 */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "common/scratch.h"
#include "gemm/gemm_amx.h"
#include "gemm/gemm_avx512_internal.h"
#include "gemm/gemm_bf16_round.h"
#include "gemm/gemm_exact.h"
#include "mx/mx.h"

enum {
    MR = 6,    /* rows of a microkernel tile */
    KC = 1024, /* K per chunk: a panel's chunk of B is 128 KB, read from L2 by every tile */
    MC = 192,  /* rows of A packed at once: 384 KB, in L2; 32 tiles reuse each B chunk */
    /* AMX chunk by chunk (K of one whole chunk, or of 3 or more): A's block one chunk deep, 384 rows */
    /* (811 KB, the all-K path's footprint), reuses each panel's B chunk over twice the rows: 1.05-1.08x */
    /* at K 3072-8192, 1.03-1.04x at 1024; neutral below a whole chunk (K 512, 768) */
    MC_AMX_CHUNKS = 384,
    KC_PAIRS = KC / 2,
    KC_BLOCKS = KC / 32,
    A_LD = KC_PAIRS + 16,        /* dwords from one packed A row to the next: not 4 KB, which would put */
                                 /* a tile's rows in one L1 set */
    TILE_DWORDS = A_LD * MR,     /* one packed A tile of one chunk */
    A_PREFETCH_ROWS = 8,         /* pack_a prefetches the source row this far ahead */
    /* AMX packs all of K at once when it is this many chunks: a panel's B over both (256 KB) and the */
    /* block's A (MC rows, 800 KB) then share L2; with 3 or more chunks going chunk by chunk measured faster */
    ALL_K_CHUNKS = 2,
    PREFETCH_KPAIRS = 8          /* the microkernel prefetches one line of B every 8 K-pairs */
};

/* ---- Accumulate: pack A, run the tiles, fix up the exact blocks ---------- */

/* Rows the kernel reads in whole units of: an AMX group or a vdpbf16ps tile. */
static inline int64_t row_unit(int amx) { return amx ? GEMM_AMX_ROWS : MR; }

/* Rows x KC of the slab, packed, with their fold states. */
typedef struct a_block {
    uint32_t *rows;   /* [capacity][A_LD]: each row's K-pairs, 64-byte aligned */
    int16_t *state;   /* [capacity][KC_BLOCKS]: fold state of each (row, K-block), see gemm_exact.h */
    int64_t capacity; /* rows, a multiple of MR (of GEMM_AMX_ROWS for AMX; rows past the slab's hold garbage) */
    /* Over the block's foldable nonzero rows, by K-block (INT16_MAX / INT16_MIN if none). */
    int16_t min_scale[32] __attribute__((aligned(64)));
    int16_t max_scale[32] __attribute__((aligned(64)));
    int any_unfoldable;
} a_block;
_Static_assert(KC_BLOCKS <= 32, "a row's scales of one chunk fill one zmm of words");

/*
 * Packs slab rows [i0, i0 + rows) x slab K-blocks [j0, j0 + nblk) into blk:
 * the values, and each row's fold states, computed 32 K-blocks at a time.
 */
AVX512_TARGET static void pack_a(const gemm_a_slab *a, const fold_table *table, int64_t i0, int64_t rows,
                                 int64_t j0, int64_t nblk, a_block *blk)
{
    fold_lut lut = fold_lut_load(table, a->type);
    const __m512i lo = _mm512_set1_epi16((short)gemm_fold_scale_lo(GEMM_FOLD_BF16, a->type));
    const __m512i hi = _mm512_set1_epi16((short)gemm_fold_scale_hi(a->type));
    const __mmask32 blocks = (__mmask32)(nblk >= 32 ? ~0u : (1u << nblk) - 1);
    __m512i min_scale = _mm512_set1_epi16(INT16_MAX), max_scale = _mm512_set1_epi16(INT16_MIN);
    int16_t offset[32] __attribute__((aligned(64)));
    uint32_t any_unfoldable = 0;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *codes = a->a + (i0 + r) * a->lda + j0 * 32, *scales = a->sa + (i0 + r) * a->ldsa + j0;
        /* A row some rows ahead, from memory: short strided runs the hardware prefetcher misses. */
        if (r + A_PREFETCH_ROWS < rows)
            for (int64_t off = 0; off < nblk * 32 + 63; off += 64)
                _mm_prefetch((const char *)(codes + A_PREFETCH_ROWS * a->lda + (off < nblk * 32 ? off : nblk * 32 - 1)),
                             _MM_HINT_T0);
        __m512i scale = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(_mm512_maskz_loadu_epi8(blocks, scales)));
        __mmask32 in_range = _mm512_cmpge_epi16_mask(scale, lo) & _mm512_cmple_epi16_mask(scale, hi);
        _mm512_store_si512(offset, _mm512_slli_epi16(_mm512_sub_epi16(scale, _mm512_set1_epi16(127)), 7));
        uint32_t *out = blk->rows + r * A_LD, special = 0, zero = 0;
        for (int64_t j = 0; j < nblk; j++) {
            int sp, z;
            _mm512_store_si512(out + j * 16, fold32_unchecked(codes + j * 32, offset[j], &lut, &sp, &z));
            special |= (uint32_t)sp << j;
            zero |= (uint32_t)z << j;
        }
        /* Zeros add nothing whatever their scale (but NaN); the rest must fold. */
        __mmask32 zeros = zero & _mm512_cmpneq_epi16_mask(scale, _mm512_set1_epi16(MX_E8M0_NAN)) & blocks;
        __mmask32 ok = in_range & ~special & ~zeros & blocks, refused = blocks & ~ok & ~zeros;
        any_unfoldable |= refused;
        for (; refused; refused &= refused - 1) /* rare: the exact path takes these */
            _mm512_store_si512(out + __builtin_ctz(refused) * 16, _mm512_setzero_si512());
        __m512i state = _mm512_mask_blend_epi16(zeros, _mm512_set1_epi16(GEMM_A_UNFOLDABLE),
                                                _mm512_set1_epi16(GEMM_A_ZERO));
        _mm512_mask_storeu_epi16(blk->state + r * KC_BLOCKS, blocks, _mm512_mask_blend_epi16(ok, state, scale));
        min_scale = _mm512_mask_min_epi16(min_scale, ok, min_scale, scale);
        max_scale = _mm512_mask_max_epi16(max_scale, ok, max_scale, scale);
    }
    _mm512_store_si512(blk->min_scale, min_scale);
    _mm512_store_si512(blk->max_scale, max_scale);
    blk->any_unfoldable = any_unfoldable != 0;
}

/* One microkernel call: a tile of packed A times a panel chunk of packed B. */
typedef struct tile_args {
    const uint32_t *a; /* [MR][A_LD]: row r's K-pair kp at a[r * A_LD + kp] */
    const uint16_t *b; /* [kpairs][NR][2], 64-byte aligned */
    int64_t kpairs;
    float *c;     /* C at the tile's first row and the panel's first column; or NULL: */
    float *spill; /* then the sums go to spill[MR][NR] instead */
    int64_t ldc;
    int overwrite; /* C = +0.0f + acc (C's old contents unread): the bits of C = 0, C += acc */
    uint16_t *out; /* or NULL; else out = bf16(C + acc) at the tile's first row, and C is not written */
    int64_t ldo;
    /* Lines to prefetch into L2, one per PREFETCH_KPAIRS K-pairs: [prefetch, prefetch_end). */
    const char *prefetch, *prefetch_end;
} tile_args;

/* acc[r][g] = sum over K-pairs of A row r times B columns 16g..16g+15; C += acc (or spill). */
AVX512_INLINE void tile_kernel(const int rows, const tile_args *t)
{
    float *c = t->c, *spill = t->spill;
    const int64_t ldc = t->ldc, kpairs = t->kpairs;
    __m512 acc[MR][4];
#pragma GCC unroll 8
    for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) acc[r][g] = _mm512_setzero_ps();
    const uint32_t *a = t->a;
    const __m512i *b = (const __m512i *)t->b;
    const int reads_c = c && !t->overwrite, writes_c = c && !t->out;
    if (reads_c) /* C's lines, for the end */
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) _mm_prefetch((const char *)(c + r * ldc + 16 * g), _MM_HINT_T0);
    const char *prefetch = t->prefetch;
    /* C's lines again near the end, one per step: B's stream has pushed them out of L1 by then. */
    const int64_t c_lines = reads_c || writes_c ? rows * 4 : 0;
    int64_t c_line = c_lines - (kpairs + PREFETCH_KPAIRS - 1) / PREFETCH_KPAIRS;
    for (int64_t kp = 0; kp < kpairs; kp += PREFETCH_KPAIRS, c_line++) {
        if (prefetch < t->prefetch_end) {
            _mm_prefetch(prefetch, _MM_HINT_T0);
            prefetch += 64;
        }
        if (c_line >= 0) _mm_prefetch((const char *)(c + (c_line >> 2) * ldc + 16 * (c_line & 3)), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int u = 0; u < PREFETCH_KPAIRS; u++, a++, b += 4) {
            __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 1);
            __m512bh b2 = (__m512bh)_mm512_load_si512(b + 2), b3 = (__m512bh)_mm512_load_si512(b + 3);
#pragma GCC unroll 8
            for (int r = 0; r < rows; r++) {
                __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[r * A_LD]);
                acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
                acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
                acc[r][2] = _mm512_dpbf16_ps(acc[r][2], av, b2);
                acc[r][3] = _mm512_dpbf16_ps(acc[r][3], av, b3);
            }
        }
    }
    if (c && t->out) {
        uint16_t *out = t->out;
        const int64_t ldo = t->ldo;
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                __m512 sum = t->overwrite ? _mm512_add_ps(_mm512_setzero_ps(), acc[r][g])
                                          : _mm512_add_ps(_mm512_loadu_ps(c + r * ldc + 16 * g), acc[r][g]);
                _mm256_storeu_si256((__m256i *)(out + r * ldo + 16 * g), gemm_bf16_round16(sum));
            }
    } else if (c && t->overwrite) {
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++)
                _mm512_storeu_ps(c + r * ldc + 16 * g, _mm512_add_ps(_mm512_setzero_ps(), acc[r][g]));
    } else if (c) {
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                float *p = c + r * ldc + 16 * g;
                _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), acc[r][g]));
            }
    } else {
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) _mm512_store_ps(spill + r * NR + 16 * g, acc[r][g]);
    }
}

#define DEFINE_TILE_KERNEL(R) \
    AVX512_TARGET static void tile_kernel_##R(const tile_args *t) { tile_kernel(R, t); }
DEFINE_TILE_KERNEL(1)
DEFINE_TILE_KERNEL(2)
DEFINE_TILE_KERNEL(3)
DEFINE_TILE_KERNEL(4)
DEFINE_TILE_KERNEL(5)
DEFINE_TILE_KERNEL(6)

static void (*const TILE_KERNELS[MR + 1])(const tile_args *) = {
    NULL, tile_kernel_1, tile_kernel_2, tile_kernel_3, tile_kernel_4, tile_kernel_5, tile_kernel_6};

/*
 * Rows [r0, r0 + nr) of blk copied to `copy` (same row stride), with the
 * (row, K-block) pairs that the panel's blocks make exact zeroed, so that
 * the fast sum leaves them to the exact path. info[j * stride] is the
 * panel's block j.
 */
static const uint32_t *mask_rows(const a_block *blk, int64_t r0, int64_t nr, int64_t nblk,
                                 const gemm_panel_info *info, int64_t stride, int pair_lo, int pair_hi,
                                 uint32_t *copy)
{
    memcpy(copy, blk->rows + r0 * A_LD, (size_t)(nr * A_LD) * sizeof *copy);
    for (int64_t r = 0; r < nr; r++)
        for (int64_t j = 0; j < nblk; j++)
            if (gemm_exact_needed(blk->state[(r0 + r) * KC_BLOCKS + j], info[j * stride], pair_lo, pair_hi))
                memset(copy + r * A_LD + j * 16, 0, 16 * sizeof *copy);
    return copy;
}

/*
 * Whether panel p's blocks of the chunk at K-block kb leave work to the
 * exact path; *clean: whether every packed row folds against all of them
 * (else the rows must be masked).
 */
static int panel_needs_exact(const avx512_b *pb, const a_block *blk, int64_t kb, int64_t nblk, int64_t p,
                             int pair_lo, int pair_hi, int *clean)
{
    const gemm_panel_info *info = pb->info + kb * pb->npanels + p;
    int unfoldable = 0;
    *clean = 1;
    for (int64_t j = 0; j < nblk; j++) {
        gemm_panel_info pi = info[j * pb->npanels];
        if (!pi.ok)
            unfoldable = 1;
        else if (blk->min_scale[j] + pi.smin < pair_lo || blk->max_scale[j] + pi.smax > pair_hi)
            *clean = 0;
    }
    return unfoldable || !*clean;
}

/* Panel p's columns within [n0, n1), counted from the panel's first: [*cb, *ce) of 0..NR. */
static void panel_cols(int64_t p, int64_t n0, int64_t n1, int64_t *cb, int64_t *ce)
{
    *cb = (p * NR > n0 ? p * NR : n0) - p * NR;
    *ce = ((p + 1) * NR < n1 ? (p + 1) * NR : n1) - p * NR;
}

/* K of the chunk that starts kc0 into a call's klen. */
static inline int64_t chunk_len(int64_t klen, int64_t kc0) { return klen - kc0 < KC ? klen - kc0 : KC; }

/* Panel p's packed B from K-block kb on: 64 dwords a K-pair. */
static inline const uint32_t *panel_at(const avx512_b *pb, int64_t K, int64_t p, int64_t kb)
{
    return (const uint32_t *)(pb->packed + (p * K + kb * 32) * NR);
}

/* Part `part` of `parts` of a range of `bytes`, in whole lines: [*from, *to). */
static void share_of(int64_t bytes, int64_t parts, int64_t part, int64_t *from, int64_t *to)
{
    int64_t share = (bytes / 64 + parts - 1) / parts * 64;
    *from = part * share < bytes ? part * share : bytes;
    *to = *from + share < bytes ? *from + share : bytes;
}

/*
 * dst[r][n] = (base ? base[r][n] : +0.0f) + sums[r][n] for r < nr and the
 * panel's columns cb <= n < ce (0 <= cb < ce <= NR); base, dst and out
 * point at the panel's first column, sums has row stride NR. With out, the
 * result goes to out as bf16 (rounded as gemm_store_bf16 does) instead of
 * to dst. The bits of tile_kernel's epilogue.
 */
AVX512_TARGET static void add_sums(const float *sums, int64_t nr, int64_t cb, int64_t ce, const float *base,
                                   int64_t ldb, float *dst, int64_t ldd, uint16_t *out, int64_t ldo)
{
    if (cb == 0 && ce == NR) {
        for (int64_t r = 0; r < nr; r++)
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                __m512 old = base ? _mm512_loadu_ps(base + r * ldb + 16 * g) : _mm512_setzero_ps();
                __m512 sum = _mm512_add_ps(old, _mm512_load_ps(sums + r * NR + 16 * g));
                if (out) _mm256_storeu_si256((__m256i *)(out + r * ldo + 16 * g), gemm_bf16_round16(sum));
                else _mm512_storeu_ps(dst + r * ldd + 16 * g, sum);
            }
        return;
    }
    for (int64_t r = 0; r < nr; r++)
        for (int64_t n = cb; n < ce; n++) {
            float sum = (base ? base[r * ldb + n] : 0.0f) + sums[r * NR + n];
            if (out) out[r * ldo + n] = mx_f32_to_bf16(sum);
            else dst[r * ldd + n] = sum;
        }
}

/* C (and out) of nr rows of a panel from their sums: add_sums onto C, or onto +0.0f when overwriting. */
static void apply_sums(const float *sums, int64_t nr, int64_t cb, int64_t ce, float *c, int64_t ldc, int overwrite,
                       uint16_t *out, int64_t ldo)
{
    add_sums(sums, nr, cb, ce, overwrite ? NULL : c, ldc, c, ldc, out, ldo);
}

/* What run_panels needs besides the panel: the chunk's place and where its sums go. */
typedef struct chunk_job {
    const avx512_b *pb;
    const a_block *blk;
    int64_t rows, K, kb, nblk, n0, n1;
    int pair_lo, pair_hi;
    int amx;
    uint32_t *masked; /* AMX: room for GEMM_AMX_ROWS packed rows, for panels whose rows must be masked */
    float *c;         /* at the block's first row, column 0 */
    int64_t ldc;
    int overwrite;
    uint16_t *out; /* or NULL */
    int64_t ldo;
} chunk_job;

/* The vdpbf16ps tiles of one panel, its columns [cb, ce) of 0..NR. */
static void panel_tiles(const chunk_job *j, int64_t p, int clean, int64_t cb, int64_t ce, int next_panel)
{
    uint32_t masked[TILE_DWORDS] __attribute__((aligned(64)));
    float spill[MR * NR] __attribute__((aligned(64)));
    const gemm_panel_info *info = j->pb->info + j->kb * j->pb->npanels + p;
    int full = cb == 0 && ce == NR;
    tile_args ta = {NULL, (const uint16_t *)panel_at(j->pb, j->K, p, j->kb), j->nblk * 16, NULL, spill, j->ldc,
                    j->overwrite, NULL, j->ldo, NULL, NULL};
    /* The next panel's chunk, spread over this panel's tiles. */
    const char *next = (const char *)panel_at(j->pb, j->K, p + next_panel, j->kb);
    const char *next_end = next + (next_panel ? j->nblk * 16 * NR * sizeof(uint32_t) : 0);
    for (int64_t t = 0; t * MR < j->rows; t++) {
        int64_t lines = j->nblk * 16 / PREFETCH_KPAIRS;
        ta.prefetch = next + (t * lines * 64 < next_end - next ? t * lines * 64 : next_end - next);
        ta.prefetch_end = next_end;
        int64_t r0 = t * MR, nr = j->rows - r0 < MR ? j->rows - r0 : MR;
        ta.a = clean ? j->blk->rows + t * TILE_DWORDS
                     : mask_rows(j->blk, r0, nr, j->nblk, info, j->pb->npanels, j->pair_lo, j->pair_hi, masked);
        ta.c = full ? j->c + r0 * j->ldc + p * NR : NULL;
        ta.out = full && j->out ? j->out + r0 * j->ldo + p * NR : NULL;
        TILE_KERNELS[nr](&ta);
        if (!full)
            apply_sums(spill, nr, cb, ce, j->c + r0 * j->ldc + p * NR, j->ldc, j->overwrite,
                       j->out ? j->out + r0 * j->ldo + p * NR : NULL, j->ldo);
    }
}

/*
 * C (or out) of nr rows x the panel's columns [cb, ce) from a 32 x 64
 * buffer of their values (row stride NR): copied to C, or rounded to bf16
 * into out (as gemm_store_bf16 rounds C). c and out point at the panel's
 * first column.
 */
AVX512_TARGET static void store_block(const float *buf, int64_t nr, int64_t cb, int64_t ce, float *c, int64_t ldc,
                                      uint16_t *out, int64_t ldo)
{
    for (int64_t r = 0; r < nr; r++) {
        if (out && cb == 0 && ce == NR) {
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++)
                _mm256_storeu_si256((__m256i *)(out + r * ldo + 16 * g), gemm_bf16_round16(_mm512_load_ps(buf + r * NR + 16 * g)));
        } else if (out) {
            for (int64_t n = cb; n < ce; n++) out[r * ldo + n] = mx_f32_to_bf16(buf[r * NR + n]);
        } else {
            memcpy(c + r * ldc + cb, buf + r * NR + cb, (size_t)(ce - cb) * sizeof *c);
        }
    }
}

/*
 * One 32-row group x one panel through the AMX tiles over `chunks` pieces
 * of K (gemm_amx_block): from C, or from zero when overwriting, to C, or to
 * out as bf16 (C then unspecified). Rows nr and the panel's columns
 * [cb, ce); c and out point at the group's first row and the panel's first
 * column. A whole block goes straight between C and the tiles; a partial
 * one through a buffer, so that nothing outside it is read or written.
 */
static void amx_group(const uint32_t *const *a, const uint32_t *const *b, const int64_t *kpairs, int chunks,
                      int64_t nr, int64_t cb, int64_t ce, float *c, int64_t ldc, int overwrite, uint16_t *out,
                      int64_t ldo, const char *prefetch, const char *prefetch_end)
{
    float buf[GEMM_AMX_ROWS * NR] __attribute__((aligned(64)));
    const int whole = nr == GEMM_AMX_ROWS && cb == 0 && ce == NR;
    const float *in = overwrite ? NULL : c;
    int64_t ld_in = ldc;
    if (!overwrite && !whole) {
        memset(buf, 0, sizeof buf);
        for (int64_t r = 0; r < nr; r++) memcpy(buf + r * NR + cb, c + r * ldc + cb, (size_t)(ce - cb) * sizeof *c);
        in = buf;
        ld_in = NR;
    }
    const int direct = whole && !out;
    gemm_amx_block(a, A_LD, b, kpairs, chunks, in, ld_in, direct ? c : buf, direct ? ldc : NR, prefetch, prefetch_end);
    if (!direct) store_block(buf, nr, cb, ce, c, ldc, out, ldo);
}

/*
 * The AMX groups of one panel for one K chunk, 32 rows at a time, its
 * columns [cb, ce) of 0..NR. Meanwhile the next panel's chunk is brought
 * into L2, spread over the groups.
 */
static void panel_amx(const chunk_job *j, int64_t p, int clean, int64_t cb, int64_t ce, int next_panel)
{
    const gemm_panel_info *info = j->pb->info + j->kb * j->pb->npanels + p;
    const uint32_t *bchunk = panel_at(j->pb, j->K, p, j->kb);
    const char *next = (const char *)panel_at(j->pb, j->K, p + next_panel, j->kb);
    const int64_t groups = (j->rows + GEMM_AMX_ROWS - 1) / GEMM_AMX_ROWS, kpairs = j->nblk * 16;
    const int64_t next_bytes = next_panel ? kpairs * NR * (int64_t)sizeof(uint32_t) : 0;
    for (int64_t r0 = 0; r0 < j->rows; r0 += GEMM_AMX_ROWS) {
        int64_t nr = j->rows - r0 < GEMM_AMX_ROWS ? j->rows - r0 : GEMM_AMX_ROWS, from, to;
        const uint32_t *a =
            clean ? j->blk->rows + r0 * A_LD
                  : mask_rows(j->blk, r0, nr, j->nblk, info, j->pb->npanels, j->pair_lo, j->pair_hi, j->masked);
        share_of(next_bytes, groups, r0 / GEMM_AMX_ROWS, &from, &to);
        amx_group(&a, &bchunk, &kpairs, 1, nr, cb, ce, j->c + r0 * j->ldc + p * NR, j->ldc, j->overwrite,
                  j->out ? j->out + r0 * j->ldo + p * NR : NULL, j->ldo, next + from, next + to);
    }
}

/*
 * Runs the panels [p0, p1] x columns [n0, n1) of one K chunk for the packed
 * rows of the job's block. With out, the chunk must need no exact work: the
 * sums go rounded to out (at the block's first row), not to C. Returns
 * whether any panel leaves work to the exact path.
 */
static int run_panels(const chunk_job *j, int64_t p0, int64_t p1)
{
    int any_exact = 0;
    for (int64_t p = p0; p <= p1; p++) {
        int clean;
        any_exact |= panel_needs_exact(j->pb, j->blk, j->kb, j->nblk, p, j->pair_lo, j->pair_hi, &clean);
        int64_t cb, ce;
        panel_cols(p, j->n0, j->n1, &cb, &ce);
        if (j->amx) panel_amx(j, p, clean, cb, ce, p < p1);
        else panel_tiles(j, p, clean, cb, ce, p < p1);
    }
    return any_exact;
}

/* What one call multiplies, for run_blocks. */
typedef struct call_args {
    const gemm_b *b;
    const gemm_a_slab *a;
    int64_t rows, k0, klen, n0, n1;
    float *c;
    int64_t ldc;
    int overwrite;
    uint16_t *out;
    int64_t ldo;
} call_args;

/*
 * Whether the packed chunks of a row block (K-blocks from kb0, nblk each but
 * the last) leave any work to the exact path on panels [p0, p1].
 */
static int chunks_need_exact(const avx512_b *pb, const a_block *blks, int64_t chunks, int64_t kb0, int64_t klen,
                             int64_t p0, int64_t p1, int pair_lo, int pair_hi)
{
    for (int64_t ch = 0; ch < chunks; ch++) {
        int64_t nblk = chunk_len(klen, ch * KC) / 32;
        int clean;
        if (blks[ch].any_unfoldable) return 1;
        for (int64_t p = p0; p <= p1; p++)
            if (panel_needs_exact(pb, &blks[ch], kb0 + ch * KC_BLOCKS, nblk, p, pair_lo, pair_hi, &clean)) return 1;
    }
    return 0;
}

/*
 * AMX, a row block with all of K packed (one a_block per chunk) and no
 * exact work: each 32-row group of each panel runs all its chunks in the
 * tiles at once (amx_group) and writes C or out once. Chunk by chunk
 * through C would give the same bits (gemm_amx_block), with C's round
 * trips through memory.
 */
static void run_panels_all_k(const avx512_b *pb, const a_block *blks, int64_t chunks, int64_t kb0, int64_t klen,
                             int64_t rows, int64_t n0, int64_t n1, float *c, int64_t ldc, int overwrite,
                             uint16_t *out, int64_t ldo)
{
    const int64_t K = pb->exact.K, p0 = n0 / NR, p1 = (n1 - 1) / NR;
    const int64_t groups = (rows + GEMM_AMX_ROWS - 1) / GEMM_AMX_ROWS;
    const uint32_t *a[ALL_K_CHUNKS], *b[ALL_K_CHUNKS];
    int64_t kpairs[ALL_K_CHUNKS];
    for (int64_t ch = 0; ch < chunks; ch++) kpairs[ch] = chunk_len(klen, ch * KC) / 2;
    for (int64_t p = p0; p <= p1; p++) {
        int64_t cb, ce;
        panel_cols(p, n0, n1, &cb, &ce);
        for (int64_t ch = 0; ch < chunks; ch++) b[ch] = panel_at(pb, K, p, kb0 + ch * KC_BLOCKS);
        /* The next panel's part of K, into L2, spread over this panel's groups. */
        const char *next = (const char *)panel_at(pb, K, p + (p < p1), kb0);
        const int64_t next_bytes = p < p1 ? klen * NR * 2 : 0;
        for (int64_t r0 = 0; r0 < rows; r0 += GEMM_AMX_ROWS) {
            const int64_t nr = rows - r0 < GEMM_AMX_ROWS ? rows - r0 : GEMM_AMX_ROWS;
            int64_t from, to;
            share_of(next_bytes, groups, r0 / GEMM_AMX_ROWS, &from, &to);
            for (int64_t ch = 0; ch < chunks; ch++) a[ch] = blks[ch].rows + r0 * A_LD;
            amx_group(a, b, kpairs, (int)chunks, nr, cb, ce, c + r0 * ldc + p * NR, ldc, overwrite,
                      out ? out + r0 * ldo + p * NR : NULL, ldo, next + from, next + to);
        }
    }
}

/*
 * Loops: rows in blocks of equal size (whole units, at most the a_blocks'
 * capacity: MC, or MC_AMX_CHUNKS for AMX chunk by chunk); K in chunks of KC. With
 * one a_block, each chunk packs its A block, runs every panel of [n0, n1),
 * then adds the chunk's exact blocks; each panel's B chunk serves the
 * block's rows from L2. With one a_block per chunk (AMX), all of K is packed
 * first and, unless the exact path has work, run_panels_all_k runs it.
 */
static void run_blocks(const call_args *x, a_block *blks, int64_t packs, uint32_t *masked, int amx)
{
    const gemm_b *b = x->b;
    const gemm_a_slab *a = x->a;
    const avx512_b *pb = b->data;
    const fold_table *table = &pb->table[a->type];
    int pair_lo = gemm_fold_pair_lo(GEMM_FOLD_BF16, a->type, b->type);
    int pair_hi = gemm_fold_pair_hi(a->type, b->type);
    int64_t rows = x->rows, klen = x->klen, n0 = x->n0, n1 = x->n1, ldc = x->ldc, ldo = x->ldo;
    int64_t capacity = blks[0].capacity, p0 = n0 / NR, p1 = (n1 - 1) / NR;
    if (amx) gemm_amx_begin();
    gemm_exact_job job = {&pb->exact, pb->info, pb->npanels, NR, a,    table->value, pair_lo,
                          pair_hi,    x->k0 / 32, n0,       n1, x->c, ldc};
    /* Row blocks of equal size (in whole units), not full ones and a short last one: every block streams */
    /* all of the panels' B, and a block of a few rows reuses it little (1.04-1.07x at 416 and 992 rows). */
    const int64_t unit = row_unit(amx), units = (rows + unit - 1) / unit;
    const int64_t nblocks = (rows + capacity - 1) / capacity;
    for (int64_t block = 0, ic = 0, mcl = 0; ic < rows; block++, ic += mcl) {
        int64_t end = (block + 1) * units / nblocks * unit;
        mcl = (end < rows ? end : rows) - ic;
        if (packs > 1) {
            for (int64_t ch = 0; ch < packs; ch++)
                pack_a(a, table, ic, mcl, ch * KC_BLOCKS, chunk_len(klen, ch * KC) / 32, &blks[ch]);
            if (!chunks_need_exact(pb, blks, packs, x->k0 / 32, klen, p0, p1, pair_lo, pair_hi)) {
                run_panels_all_k(pb, blks, packs, x->k0 / 32, klen, mcl, n0, n1, x->c + ic * ldc, ldc, x->overwrite,
                                 x->out ? x->out + ic * ldo : NULL, ldo);
                continue;
            }
        }
        for (int64_t kc0 = 0; kc0 < klen; kc0 += KC) {
            int64_t nblk = chunk_len(klen, kc0) / 32, j0 = kc0 / 32, kb = x->k0 / 32 + j0;
            int last = kc0 + KC >= klen;
            a_block *blk = &blks[packs > 1 ? kc0 / KC : 0];
            if (packs == 1) pack_a(a, table, ic, mcl, j0, nblk, blk);
            int any_exact = blk->any_unfoldable;
            /* The last chunk rounds its sums straight to out, unless the exact path must add to them first. */
            int fuse_out = x->out && last && !any_exact, clean;
            for (int64_t p = p0; fuse_out && p <= p1; p++)
                fuse_out = !panel_needs_exact(pb, blk, kb, nblk, p, pair_lo, pair_hi, &clean);
            chunk_job cj = {pb,      blk,     mcl, b->K,   kb,           nblk, n0,
                            n1,      pair_lo, pair_hi, amx, masked, x->c + ic * ldc, ldc,
                            x->overwrite && kc0 == 0, fuse_out ? x->out + ic * ldo : NULL, ldo};
            any_exact |= run_panels(&cj, p0, p1);
            if (any_exact) gemm_exact_fixup(&job, ic, ic + mcl, j0, j0 + nblk, blk->state, KC_BLOCKS);
            if (x->out && last && !fuse_out)
                gemm_store_bf16(x->c + ic * ldc, ldc, mcl, n0, n1, x->out + ic * ldo, ldo);
        }
    }
    if (amx) gemm_amx_end();
}

/* Out of memory for the scratch: one unit of rows at a time, on the stack (the same bits, slower). */
static __attribute__((noinline)) void run_on_stack(const call_args *x, int amx)
{
    uint32_t rows[GEMM_AMX_ROWS * A_LD] __attribute__((aligned(64)));
    uint32_t masked[GEMM_AMX_ROWS * A_LD] __attribute__((aligned(64)));
    int16_t state[GEMM_AMX_ROWS * KC_BLOCKS];
    a_block blk = {.rows = rows, .state = state, .capacity = amx ? GEMM_AMX_ROWS : MR};
    run_blocks(x, &blk, 1, masked, amx);
}

static void run(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen, int64_t n0,
                int64_t n1, float *c, int64_t ldc, int overwrite, uint16_t *out, int64_t ldo)
{
    call_args x = {b, a, rows, k0, klen, n0, n1, c, ldc, overwrite, out, ldo};
    int amx = b->isa == GEMM_ISA_AMX;
    int64_t unit = row_unit(amx);
    /* AMX packs all of K at once when it is ALL_K_CHUNKS chunks. */
    const int64_t chunks = (klen + KC - 1) / KC;
    int64_t packs = amx && chunks == ALL_K_CHUNKS ? ALL_K_CHUNKS : 1;
    a_block blks[ALL_K_CHUNKS];
    int64_t mc = amx && packs == 1 && klen >= KC ? MC_AMX_CHUNKS : MC;
    int64_t capacity = (rows < mc ? rows : mc) + unit - 1;
    capacity -= capacity % unit;
    uint32_t *packed = scratch_get(0, (size_t)(packs * capacity * A_LD) * sizeof *packed);
    int16_t *state = scratch_get(1, (size_t)(packs * capacity * KC_BLOCKS) * sizeof *state);
    uint32_t *masked = amx ? scratch_get(2, GEMM_AMX_ROWS * A_LD * sizeof *masked) : NULL;
    if (!packed || !state || (amx && !masked)) {
        run_on_stack(&x, amx);
        return;
    }
    for (int64_t ch = 0; ch < packs; ch++)
        blks[ch] = (a_block){.rows = packed + ch * capacity * A_LD, .state = state + ch * capacity * KC_BLOCKS,
                             .capacity = capacity};
    run_blocks(&x, blks, packs, masked, amx);
}

static void avx512_accumulate(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen,
                              int64_t n0, int64_t n1, float *c, int64_t ldc)
{
    run(b, a, rows, k0, klen, n0, n1, c, ldc, 0, NULL, 0);
}

/* The first chunk writes C (+0.0f + its sums) instead of adding to it. */
static void avx512_multiply(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen,
                            int64_t n0, int64_t n1, float *c, int64_t ldc)
{
    run(b, a, rows, k0, klen, n0, n1, c, ldc, 1, NULL, 0);
}

/* The last chunk's sums go rounded to out where no exact work is left to add to them. */
static void avx512_run_store(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen,
                             int64_t n0, int64_t n1, float *c, int64_t ldc, int overwrite, uint16_t *out,
                             int64_t ldo)
{
    run(b, a, rows, k0, klen, n0, n1, c, ldc, overwrite, out, ldo);
}

static const gemm_kernel_ops AVX512_OPS = {gemm_avx512_prepare, gemm_avx512_release, avx512_accumulate, avx512_multiply,
                                           avx512_run_store};

const gemm_kernel_ops *gemm_avx512_ops_get(void) { return &AVX512_OPS; }
