/*
 * The AVX2 + FMA level, for CPUs without AVX-512 BF16: MXFP8 -> fp32
 * packing with the block scales folded in, and a 6 x 16 register-blocked
 * vfmadd231ps microkernel.
 *
 * Packed B (prepared once): panels of NR = 16 columns (the last one padded
 * with zeros), K rows deep; row k of panel p holds the 16 folded values
 * B[k][16p .. 16p + 15]. A block-panel the fold rule refuses (gemm_fold.h,
 * fp32 form) is packed as zeros and taken by the exact path.
 * Packed A (per call, per MC x KC block of the slab): row-major, A's block
 * scale folded in; a row block that cannot fold is packed as zeros.
 *
 * The order of work is the AVX-512 level's (see gemm_avx512.c): K in chunks
 * of KC from k0; per chunk, each (tile, panel) sums into zeroed fp32
 * accumulators (k ascending) and adds them to C once, then the chunk's
 * exact blocks are added, K-block ascending. Nothing depends on `rows`, on
 * the split of rows or columns, or on MC.
 *
 * Folding builds each value from its bits as a float times 2^120 (E4M3) or
 * 2^112 (E5M2), subnormal fp8 values passing through fp32 subnormals, then
 * times 2^(scale - 127): exact under the default MXCSR (no FTZ/DAZ), which
 * the whole library assumes.
 */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/hugemem.h"
#include "common/scratch.h"
#include "gemm/gemm_exact.h"
#include "gemm/gemm_internal.h"
#include "mx/mx.h"

#define AVX2_TARGET __attribute__((target("avx2,fma")))
#define AVX2_INLINE static inline __attribute__((always_inline)) AVX2_TARGET

enum {
    MR = 6,   /* rows of a microkernel tile */
    NR = 16,  /* columns of a panel (2 ymm of 8 fp32) */
    KC = 512, /* K per chunk: a panel's chunk of B (32 KB) stays in L1 */
    MC = 192, /* rows of A packed at once (384 KB, in L2) */
    KC_BLOCKS = KC / 32,
    TILE_FLOATS = KC * MR,
    A_PREFETCH_ROWS = 8,
    PREFETCH_K = 16 /* the microkernel prefetches one line of B every 16 k */
};

typedef struct avx2_b {
    float *packed;         /* npanels panels of K * NR fp32, 64-byte aligned */
    gemm_panel_info *info; /* [nkb][npanels] */
    int64_t npanels;
    gemm_exact_b exact;
    float value[2][256]; /* each code's value by a2amm_fp8_type, for the exact path */
} avx2_b;

/* ---- fp8 -> fp32 with the scale folded in ------------------------------- */

/*
 * The 32 codes at `codes` times 2^(scale - 127) into out[0..31]; zeros
 * unless the block folds (scale <= hi, no NaN/Inf). Returns the block's fold
 * state (see gemm_exact.h): the scale, GEMM_A_ZERO or GEMM_A_UNFOLDABLE.
 */
AVX2_INLINE int fold32(const uint8_t *codes, int scale, int hi, a2amm_fp8_type type, float *out)
{
    int shift = type == A2AMM_E4M3 ? 20 : 21; /* magnitude bits to fp32's exponent + mantissa */
    __m256 rebias = _mm256_set1_ps(type == A2AMM_E4M3 ? 0x1p120f : 0x1p112f);
    uint32_t scale_bits = scale > 0 ? (uint32_t)scale << 23 : 0x00400000u; /* 2^(scale - 127) */
    __m256 factor = _mm256_castsi256_ps(_mm256_set1_epi32((int)scale_bits));
    __m256i special = _mm256_set1_epi32((int)gemm_fold_special_bits(type));
    __m256i magnitude_mask = _mm256_set1_epi32(0x7F), any_special = _mm256_setzero_si256();
    __m256i any_nonzero = _mm256_setzero_si256();
    __m256 v[4];
    for (int q = 0; q < 4; q++) {
        __m256i code = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(codes + 8 * q)));
        __m256i magnitude = _mm256_and_si256(code, magnitude_mask);
        any_nonzero = _mm256_or_si256(any_nonzero, magnitude);
        any_special = _mm256_or_si256(
            any_special, _mm256_cmpeq_epi32(_mm256_and_si256(magnitude, special), special));
        __m256 x = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_sll_epi32(magnitude, _mm_cvtsi32_si128(shift))), rebias);
        x = _mm256_mul_ps(x, factor);
        __m256i sign = _mm256_slli_epi32(_mm256_srli_epi32(code, 7), 31);
        v[q] = _mm256_or_ps(x, _mm256_castsi256_ps(sign));
    }
    int ok = _mm256_testz_si256(any_special, any_special) && scale <= hi;
    __m256 keep = _mm256_castsi256_ps(_mm256_set1_epi32(-ok));
    for (int q = 0; q < 4; q++) _mm256_storeu_ps(out + 8 * q, _mm256_and_ps(v[q], keep));
    if (_mm256_testz_si256(any_nonzero, any_nonzero) && scale != MX_E8M0_NAN) return GEMM_A_ZERO;
    return ok ? scale : GEMM_A_UNFOLDABLE;
}

/* ---- Prepare: pack B ----------------------------------------------------- */

/*
 * Packs panels [p0, p1): per panel and K-block, the 16 columns' folded
 * values into a tile, then written out as 32 whole 64-byte rows of the
 * panel, in order (writing column by column touched a new line per value).
 */
AVX2_TARGET static void pack_panels(avx2_b *pb, const gemm_b *b, int64_t p0, int64_t p1)
{
    int64_t N = b->N, K = b->K, nkb = K / 32;
    int hi = gemm_fold_scale_hi(b->type);
    float tile[NR][32];
    for (int64_t p = p0; p < p1; p++) {
        float *panel = pb->packed + p * K * NR;
        int64_t n0 = p * NR, cols = N - n0 < NR ? N - n0 : NR;
        for (int64_t kb = 0; kb < nkb; kb++) {
            float *dst = panel + kb * 32 * NR;
            if (!pb->info[kb * pb->npanels + p].ok) { /* exact path: zeros */
                memset(dst, 0, 32 * NR * sizeof *dst);
                continue;
            }
            for (int c = 0; c < NR; c++) {
                if (c < cols)
                    fold32(pb->exact.codes + (n0 + c) * K + kb * 32, pb->exact.scales[(n0 + c) * nkb + kb], hi, b->type,
                           tile[c]);
                else
                    memset(tile[c], 0, sizeof tile[c]); /* the last panel's padding */
            }
            for (int t = 0; t < 32; t++)
                for (int c = 0; c < NR; c++) dst[t * NR + c] = tile[c][t];
        }
    }
}

typedef struct pack_job {
    avx2_b *pb;
    const gemm_b *b;
    int tasks;
} pack_job;

static void pack_task(void *arg, int task)
{
    const pack_job *j = arg;
    int64_t n = j->pb->npanels;
    pack_panels(j->pb, j->b, task * n / j->tasks, (task + 1) * n / j->tasks);
}

/* B packed, its panels shared among the pool's threads (the same bits however split). */
static void pack_b(avx2_b *pb, const gemm_b *b, pool *workers)
{
    int threads = workers ? pool_threads(workers) : 1;
    pack_job j = {pb, b, (int)(pb->npanels < threads ? pb->npanels : threads)};
    if (workers && j.tasks > 1) pool_run(workers, pack_task, &j, j.tasks);
    else pack_panels(pb, b, 0, pb->npanels);
}

static void avx2_release(gemm_b *b)
{
    avx2_b *pb = b->data;
    if (!pb) return;
    free(pb->packed);
    free(pb->info);
    gemm_exact_b_free(&pb->exact);
    free(pb);
    b->data = NULL;
}

static int avx2_prepare(gemm_b *b, const uint8_t *bq, const uint8_t *sb, int64_t ldsb, pool *workers, a2amm_error *err)
{
    int64_t N = b->N, K = b->K, npanels = (N + NR - 1) / NR;
    if (npanels > INT64_MAX / 4 / NR / K)
        return a2amm_fail(err, A2AMM_E_OVERFLOW, "gemm avx2: B of %lld x %lld is too large to pack",
                          (long long)N, (long long)K);
    avx2_b *pb = calloc(1, sizeof *pb);
    if (!pb) return a2amm_fail(err, A2AMM_E_NOMEM, "gemm avx2: out of memory");
    b->data = pb;
    pb->npanels = npanels;
    size_t packed_bytes = (size_t)(npanels * K * NR) * sizeof(float);
    pb->packed = hugemem_alloc(packed_bytes); /* 2 MB pages: a 117 MB B faults in 59 pages, not 29,000 */
    pb->info = malloc((size_t)(K / 32 * npanels) * sizeof *pb->info);
    if (!pb->packed || !pb->info || gemm_exact_b_init(&pb->exact, bq, sb, N, K, ldsb, b->type) != A2AMM_OK) {
        avx2_release(b);
        return a2amm_fail(err, A2AMM_E_NOMEM, "gemm avx2: cannot allocate %.1f MB for B",
                          (double)packed_bytes * 1.25 / 1e6);
    }
    for (int code = 0; code < 256; code++) {
        pb->value[A2AMM_E4M3][code] = mx_fp8_to_f32((uint8_t)code, A2AMM_E4M3);
        pb->value[A2AMM_E5M2][code] = mx_fp8_to_f32((uint8_t)code, A2AMM_E5M2);
    }
    gemm_panel_info_build(&pb->exact, NR, GEMM_FOLD_F32, b->type, pb->info);
    pack_b(pb, b, workers);
    return A2AMM_OK;
}

/* ---- Accumulate: pack A, run the tiles, fix up the exact blocks ---------- */

/* Rows x KC of the slab, packed, with their fold states. */
typedef struct a_block {
    float *rows;      /* [capacity][KC], 64-byte aligned */
    int16_t *state;   /* [capacity][KC_BLOCKS]: fold state of each (row, K-block), see gemm_exact.h */
    int64_t capacity; /* rows, a multiple of MR */
    int max_scale[KC_BLOCKS]; /* over the block's foldable nonzero rows (-1 if none) */
    int any_unfoldable;
} a_block;

/* Packs slab rows [i0, i0 + rows) x slab K-blocks [j0, j0 + nblk) into blk. */
AVX2_TARGET static void pack_a(const gemm_a_slab *a, int64_t i0, int64_t rows, int64_t j0, int64_t nblk,
                               a_block *blk)
{
    int hi = gemm_fold_scale_hi(a->type), any_unfoldable = 0;
    for (int64_t j = 0; j < nblk; j++) blk->max_scale[j] = -1;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *codes = a->a + (i0 + r) * a->lda + j0 * 32, *scales = a->sa + (i0 + r) * a->ldsa + j0;
        if (r + A_PREFETCH_ROWS < rows)
            for (int64_t off = 0; off < nblk * 32 + 63; off += 64)
                _mm_prefetch((const char *)(codes + A_PREFETCH_ROWS * a->lda + (off < nblk * 32 ? off : nblk * 32 - 1)),
                             _MM_HINT_T0);
        int16_t *state = blk->state + r * KC_BLOCKS;
        for (int64_t j = 0; j < nblk; j++) {
            int st = fold32(codes + j * 32, scales[j], hi, a->type, blk->rows + r * KC + j * 32);
            state[j] = (int16_t)st;
            any_unfoldable |= st == GEMM_A_UNFOLDABLE;
            blk->max_scale[j] = st > blk->max_scale[j] ? st : blk->max_scale[j];
        }
    }
    blk->any_unfoldable = any_unfoldable;
}

/* One microkernel call: a tile of packed A times a panel chunk of packed B. */
typedef struct tile_args {
    const float *a; /* [MR][KC]: row r's k at a[r * KC + k] */
    const float *b; /* [kc][NR], 64-byte aligned */
    int64_t kc;
    float *c;     /* C at the tile's first row and the panel's first column; or NULL: */
    float *spill; /* then the sums go to spill[MR][NR] instead */
    int64_t ldc;
    const char *prefetch, *prefetch_end; /* lines to prefetch, one per PREFETCH_K k */
} tile_args;

AVX2_INLINE void tile_kernel(const int rows, const tile_args *t)
{
    float *c = t->c, *spill = t->spill;
    const int64_t ldc = t->ldc, kc = t->kc;
    if (c)
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++) _mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);
    __m256 acc[MR][2];
#pragma GCC unroll 8
    for (int r = 0; r < rows; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    const float *a = t->a, *b = t->b;
    const char *prefetch = t->prefetch;
    for (int64_t k = 0; k < kc; k += PREFETCH_K) {
        if (prefetch < t->prefetch_end) {
            _mm_prefetch(prefetch, _MM_HINT_T0);
            prefetch += 64;
        }
#pragma GCC unroll 4
        for (int u = 0; u < PREFETCH_K; u++, a++, b += NR) {
            __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 8
            for (int r = 0; r < rows; r++) {
                __m256 av = _mm256_broadcast_ss(a + r * KC);
                acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
            }
        }
    }
    if (c) {
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++)
#pragma GCC unroll 2
            for (int g = 0; g < 2; g++) {
                float *p = c + r * ldc + 8 * g;
                _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), acc[r][g]));
            }
    } else {
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++)
#pragma GCC unroll 2
            for (int g = 0; g < 2; g++) _mm256_store_ps(spill + r * NR + 8 * g, acc[r][g]);
    }
}

#define DEFINE_TILE_KERNEL(R) \
    AVX2_TARGET static void tile_kernel_##R(const tile_args *t) { tile_kernel(R, t); }
DEFINE_TILE_KERNEL(1)
DEFINE_TILE_KERNEL(2)
DEFINE_TILE_KERNEL(3)
DEFINE_TILE_KERNEL(4)
DEFINE_TILE_KERNEL(5)
DEFINE_TILE_KERNEL(6)

static void (*const TILE_KERNELS[MR + 1])(const tile_args *) = {
    NULL, tile_kernel_1, tile_kernel_2, tile_kernel_3, tile_kernel_4, tile_kernel_5, tile_kernel_6};

/* A copy of tile t of blk with the (row, K-block) pairs that go exact on this panel zeroed. */
static const float *mask_tile(const a_block *blk, int64_t t, int64_t nr, int64_t nblk,
                              const gemm_panel_info *info, int64_t stride, int pair_hi, float *copy)
{
    memcpy(copy, blk->rows + t * TILE_FLOATS, (size_t)nr * KC * sizeof *copy);
    for (int64_t r = 0; r < nr; r++)
        for (int64_t j = 0; j < nblk; j++)
            if (gemm_exact_needed(blk->state[(t * MR + r) * KC_BLOCKS + j], info[j * stride], 0, pair_hi))
                memset(copy + r * KC + j * 32, 0, 32 * sizeof *copy);
    return copy;
}

/* Runs the panels [p0, p1] x columns [n0, n1) of one K chunk for the packed rows of blk. */
static void run_panels(const avx2_b *pb, const gemm_b *b, const a_block *blk, int64_t rows, int64_t kb,
                       int64_t nblk, int64_t p0, int64_t p1, int64_t n0, int64_t n1, int pair_hi, float *c,
                       int64_t ldc, int *any_exact)
{
    float masked[TILE_FLOATS] __attribute__((aligned(64)));
    float spill[MR * NR] __attribute__((aligned(64)));
    int64_t npanels = pb->npanels;
    for (int64_t p = p0; p <= p1; p++) {
        const gemm_panel_info *info = pb->info + kb * npanels + p;
        int clean = 1;
        for (int64_t j = 0; j < nblk; j++) {
            gemm_panel_info pi = info[j * npanels];
            if (!pi.ok)
                *any_exact = 1;
            else if (blk->max_scale[j] + pi.smax > pair_hi)
                clean = 0;
        }
        *any_exact |= !clean;
        int64_t cb = p * NR > n0 ? p * NR : n0, ce = (p + 1) * NR < n1 ? (p + 1) * NR : n1;
        int full = cb == p * NR && ce == (p + 1) * NR;
        tile_args ta = {NULL, pb->packed + (p * b->K + kb * 32) * NR, nblk * 32, NULL, spill, ldc, NULL, NULL};
        /* The next panel's chunk, spread over this panel's tiles. */
        const char *next = (const char *)(ta.b + (p < p1 ? b->K * NR : 0));
        const char *next_end = next + (p < p1 ? nblk * 32 * NR * sizeof(float) : 0);
        for (int64_t t = 0; t * MR < rows; t++) {
            int64_t r0 = t * MR, nr = rows - r0 < MR ? rows - r0 : MR, lines = nblk * 32 / PREFETCH_K;
            ta.prefetch = next + (t * lines * 64 < next_end - next ? t * lines * 64 : next_end - next);
            ta.prefetch_end = next_end;
            ta.a = clean ? blk->rows + t * TILE_FLOATS : mask_tile(blk, t, nr, nblk, info, npanels, pair_hi, masked);
            ta.c = full ? c + r0 * ldc + p * NR : NULL;
            TILE_KERNELS[nr](&ta);
            if (!full)
                for (int64_t r = 0; r < nr; r++)
                    for (int64_t n = cb; n < ce; n++) c[(r0 + r) * ldc + n] += spill[r * NR + n - p * NR];
        }
    }
}

/* Rows in blocks of MC; K in chunks of KC, each packing its A block and running every panel. */
static void avx2_accumulate(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen,
                            int64_t n0, int64_t n1, float *c, int64_t ldc)
{
    const avx2_b *pb = b->data;
    int pair_hi = gemm_fold_pair_hi(a->type, b->type);
    a_block blk;
    blk.capacity = (rows < MC ? rows : MC) + MR - 1;
    blk.capacity -= blk.capacity % MR;
    blk.rows = scratch_get(0, (size_t)(blk.capacity * KC) * sizeof *blk.rows);
    blk.state = scratch_get(1, (size_t)(blk.capacity * KC_BLOCKS) * sizeof *blk.state);
    /* Out of memory: one tile at a time, on the stack (the same bits, slower). */
    float tile_space[TILE_FLOATS] __attribute__((aligned(64)));
    int16_t state_space[MR * KC_BLOCKS];
    if (!blk.rows || !blk.state) {
        blk = (a_block){.rows = tile_space, .state = state_space, .capacity = MR};
    }
    int64_t mc = blk.capacity;
    gemm_exact_job job = {&pb->exact, pb->info, pb->npanels, NR, a,  pb->value[a->type], 0,
                          pair_hi,    k0 / 32,  n0,          n1, c, ldc};
    for (int64_t ic = 0; ic < rows; ic += mc) {
        int64_t mcl = rows - ic < mc ? rows - ic : mc;
        for (int64_t kc0 = 0; kc0 < klen; kc0 += KC) {
            int64_t nblk = (klen - kc0 < KC ? klen - kc0 : KC) / 32, j0 = kc0 / 32;
            pack_a(a, ic, mcl, j0, nblk, &blk);
            int any_exact = blk.any_unfoldable;
            run_panels(pb, b, &blk, mcl, k0 / 32 + j0, nblk, n0 / NR, (n1 - 1) / NR, n0, n1, pair_hi,
                       c + ic * ldc, ldc, &any_exact);
            if (any_exact) gemm_exact_fixup(&job, ic, ic + mcl, j0, j0 + nblk, blk.state, KC_BLOCKS);
        }
    }
}

static const gemm_kernel_ops AVX2_OPS = {avx2_prepare, avx2_release, avx2_accumulate, NULL, NULL};

const gemm_kernel_ops *gemm_avx2_ops_get(void) { return &AVX2_OPS; }
