/*
 * The amx level (Intel AMX-BF16: TDPBF16PS on 16 x 16 fp32 tiles), on the
 * bf16 values of gemm_bf16_pack.h (which the avx512 level shares), B packed
 * in pieces: each panel's K in pieces of 512 whose 32 left and 32 right
 * columns are each contiguous (32 KB).
 *
 * The step: a 32 x 32 half of a 32 x 64 block of C in 2 x 2 tiles of
 * 16 x 16 fp32 (tmm0-3) fed by two A tiles (tmm4-5: 16 rows x 16 K-pairs)
 * and two B tiles (tmm6-7: 16 K-pairs x 16 columns): four loads per four
 * TDPBF16PS, the most reuse eight tile registers allow. A tile is 16 packed
 * A rows' dwords of 16 K-pairs (row stride BF16_A_LD * 4), a B tile 16
 * K-pair rows of a piece's half (row stride 128 bytes).
 *
 * Two loops over the step, the same steps for every element of C in the
 * same order, so the same bits:
 * - amx_block, one row tile (the microkernel): each half over all of the
 *   call's K, C carried in the tiles. Its operands come from L2, whose line
 *   rate a tile load per TDPBF16PS needs whole.
 * - amx_panel, every row tile of a block over one panel (the driver's
 *   kernel_block): per half and piece of B, each row tile in turn, so the
 *   piece (32 KB) stays in L1 and only A streams from L2 (by TILELOADDT1,
 *   which does not push the piece out); each tile's C goes through a buffer
 *   between pieces. 1.1-1.2x amx_block tile by tile over a block, 1.0-1.18x
 *   on whole calls (docs/performance.md, "Large shapes, `amx`").
 * The driver uses amx_panel for whole tiles of whole panels whose rows it
 * does not mask, amx_block for the rest.
 *
 * The tiles start from C (or zero) and carry on over the chunks, so a
 * block's value depends only on the sequence of K-pairs, not on how they
 * are cut into chunks, pieces or calls: the context lets the driver pass
 * all of K in one call where it is two chunks (a panel's B over both, 256
 * KB, and the block's A, 2 x 192 rows, then share L2), and go chunk by
 * chunk through C otherwise, in blocks of 384 rows (A one chunk deep, 811
 * KB; each panel's B chunk serves twice the rows). Tile loads that miss L2
 * wait line by line, so each call brings the next panel's B into L2.
 * TDPBF16PS flushes subnormals like vdpbf16ps; the fold rule already keeps
 * every product and sum normal.
 */
#include "gemm/gemm_amx.h"

#include <immintrin.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/cpu.h"
#include "gemm/gemm_bf16_pack.h"
#include "gemm/gemm_bf16_round.h"
#include "gemm/gemm_bf16_widen.h"
#include "gemm/gemm_level.h"

#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16")))
/* the epilogue's bf16 rounding is AVX-512's, which every AMX CPU has (the level needs it) */
#define AMX_AVX512_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw")))
/* the small-M path widens B with the avx512 level's instructions */
#define AMX_WIDEN_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16,avx512vbmi")))

/* Row tiles amx_panel takes through a piece of B before the next piece (see there). */
enum { AMX_PANEL_TILES = 4 };

/* Linux's arch_prctl request for the tile data state (asm/prctl.h, not in every libc's headers). */
enum { ARCH_REQ_XCOMP_PERM_ = 0x1023, XFEATURE_XTILEDATA_ = 18 };

static pthread_once_t grant_once = PTHREAD_ONCE_INIT;
static int granted;

static void request_tiles(void)
{
#if defined(__x86_64__) && defined(SYS_arch_prctl)
    granted = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM_, XFEATURE_XTILEDATA_) == 0;
#endif
}

int gemm_amx_usable(void)
{
    if (!cpu_has(CPU_AMX_TILE) || !cpu_has(CPU_AMX_BF16)) return 0;
    pthread_once(&grant_once, request_tiles);
    return granted;
}

static const char *amx_why_not(void)
{
    return gemm_amx_usable() ? NULL : "the OS does not grant the AMX tile state (arch_prctl refused)";
}

typedef gemm_amx_config tile_config;

/* Palette 1: tiles 0-7 of 16 rows of 64 bytes (a global: see gemm_amx_config). */
static const tile_config CONFIG __attribute__((aligned(64))) = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

/*
 * The small-M path's configurations, one for each count of rows r = 1..16:
 * C (tmm0-3) and A (tmm4) r rows, B (tmm5-7) 16 K-pair rows. A tile row's
 * dot products do not depend on the tile's other rows, so r rows give the
 * bits of 16; TDPBF16PS does r/16 of the work and the A tile load reads r
 * rows, not 16 rows 16 KB apart.
 */
#define SMALL_CONFIG(r)                                                                                       \
    {.palette = 1, .colsb = {64, 64, 64, 64, 64, 64, 64, 64}, .rows = {r, r, r, r, r, 16, 16, 16}}
static const tile_config SMALL_CONFIGS[16] __attribute__((aligned(64))) = {
    SMALL_CONFIG(1),  SMALL_CONFIG(2),  SMALL_CONFIG(3),  SMALL_CONFIG(4),  SMALL_CONFIG(5),  SMALL_CONFIG(6),
    SMALL_CONFIG(7),  SMALL_CONFIG(8),  SMALL_CONFIG(9),  SMALL_CONFIG(10), SMALL_CONFIG(11), SMALL_CONFIG(12),
    SMALL_CONFIG(13), SMALL_CONFIG(14), SMALL_CONFIG(15), SMALL_CONFIG(16)};

AMX_TARGET void gemm_amx_begin(void) { _tile_loadconfig(&CONFIG); }

AMX_TARGET void gemm_amx_end(void) { _tile_release(); }

/* A 32 x 32 part of C at c (row stride ld floats) into tmm0-3 (2 x 2 tiles); zeros where c is NULL. */
AMX_TARGET static inline __attribute__((always_inline)) void c_tiles_load_at(const float *c, int64_t ld)
{
    if (c) {
        _tile_loadd(0, c, ld * 4);
        _tile_loadd(1, c + 16, ld * 4);
        _tile_loadd(2, c + 16 * ld, ld * 4);
        _tile_loadd(3, c + 16 * ld + 16, ld * 4);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
}

/* Half h (columns 32h..) of a 32 x 64 block of C into tmm0-3: from c_in, or zeros. */
AMX_TARGET static inline __attribute__((always_inline)) void c_tiles_load(const gemm_tile *t, int h)
{
    c_tiles_load_at(t->c_in ? t->c_in + 32 * h : NULL, t->ldc_in);
}

/* tmm0-3 to half h of a 32 x 64 block of C at c_out (row stride ldc_out floats). */
AMX_TARGET static inline __attribute__((always_inline)) void c_tiles_store(float *c_out, int64_t ldc_out, int h)
{
    float *co = c_out + 32 * h;
    _tile_stored(0, co, ldc_out * 4);
    _tile_stored(1, co + 16, ldc_out * 4);
    _tile_stored(2, co + 16 * ldc_out, ldc_out * 4);
    _tile_stored(3, co + 16 * ldc_out + 16, ldc_out * 4);
}

/* Lines of the next call's B to bring into L2 at each of a call's steps (blocks): all of them over `passes`. */
static inline int64_t prefetch_per_step(const gemm_tile *t, int passes)
{
    int64_t steps = 0;
    for (int i = 0; i < t->chunks; i++) steps += t->k[i] / 32;
    const int64_t lines = (t->prefetch_end - t->prefetch + 63) / 64;
    return steps ? (lines + passes * steps - 1) / (passes * steps) : 0;
}

/* The step of 2 x 2 tiles: A's two tiles at a0, a1 (by the hint: TILELOADDT1, not kept), B's at b (half-rows). */
#define AMX_STEP(a0, a1, b, stream)                                                                          \
    do {                                                                                                     \
        if (stream) _tile_stream_loadd(4, a0, BF16_A_LD * 4);                                                 \
        else _tile_loadd(4, a0, BF16_A_LD * 4);                                                               \
        _tile_loadd(6, b, BF16_NR * 2);                                                                       \
        _tile_loadd(7, (b) + 16, BF16_NR * 2);                                                                \
        if (stream) _tile_stream_loadd(5, a1, BF16_A_LD * 4);                                                 \
        else _tile_loadd(5, a1, BF16_A_LD * 4);                                                               \
        _tile_dpbf16ps(0, 4, 6);                                                                              \
        _tile_dpbf16ps(1, 4, 7);                                                                              \
        _tile_dpbf16ps(2, 5, 6);                                                                              \
        _tile_dpbf16ps(3, 5, 7);                                                                              \
    } while (0)

/* The 32 x 64 block, from c_in (or zero) over the chunks, to c_out (row strides in floats); B in pieces. */
AMX_TARGET static void amx_block(const gemm_tile *t, float *c_out, int64_t ldc_out)
{
    const char *prefetch = t->prefetch, *prefetch_end = t->prefetch_end;
    const int64_t per_step = prefetch_per_step(t, 2); /* the range spread over both halves' steps */
    for (int h = 0; h < 2; h++) {
        c_tiles_load(t, h);
        for (int i = 0; i < t->chunks; i++) {
            const uint32_t *a0 = t->a[i], *a1 = (const uint32_t *)t->a[i] + 16 * BF16_A_LD;
            const int64_t nblk = t->k[i] / 32;
            for (int64_t j = 0; j < nblk; j++) {
                for (int64_t l = 0; l < per_step && prefetch < prefetch_end; l++, prefetch += 64)
                    _mm_prefetch(prefetch, _MM_HINT_T1);
                const uint32_t *b = bf16_piece_at(t->b_panel, t->b_nkb, t->b_kb[i] + j, h);
                AMX_STEP(a0 + 16 * j, a1 + 16 * j, b, 0);
            }
        }
        c_tiles_store(c_out, ldc_out, h);
    }
}

/* amx_panel's row tiles [g0, g1) through every piece, both halves; the prefetch goes on from *prefetch. */
AMX_AVX512_TARGET static inline __attribute__((always_inline)) void
amx_panel_tiles(const gemm_tile *t, int g0, int g1, const char **prefetch, int64_t per_step)
{
    for (int h = 0; h < 2; h++) {
        int first = 1;
        for (int i = 0; i < t->chunks; i++) {
            const int64_t nblk = t->k[i] / 32;
            for (int64_t j0 = 0, j1; j0 < nblk; j0 = j1, first = 0) {
                /* the chunk's blocks [j0, j1): one piece of B */
                const int64_t kb0 = t->b_kb[i] + j0;
                j1 = j0 + (BF16_PIECE_BLOCKS - kb0 % BF16_PIECE_BLOCKS);
                if (j1 > nblk) j1 = nblk;
                const int last = i == t->chunks - 1 && j1 == nblk;
                const uint32_t *b = bf16_piece_at(t->b_panel, t->b_nkb, kb0, h);
                for (int g = g0; g < g1; g++) {
                    float *cb = t->c_buf + (g - g0) * 32 * 32;
                    if (!first) c_tiles_load_at(cb, 32);
                    else c_tiles_load_at(t->c_in ? t->c_in + g * 32 * t->ldc_in + 32 * h : NULL, t->ldc_in);
                    const uint32_t *a0 = (const uint32_t *)t->a[i] + g * 32 * BF16_A_LD, *a1 = a0 + 16 * BF16_A_LD;
                    for (int64_t j = j0; j < j1; j++) {
                        for (int64_t l = 0; l < per_step && *prefetch < t->prefetch_end; l++, *prefetch += 64)
                            _mm_prefetch(*prefetch, _MM_HINT_T1);
                        AMX_STEP(a0 + 16 * j, a1 + 16 * j, b + (j - j0) * 16 * (BF16_NR / 2), 1);
                    }
                    if (last && !t->out) {
                        c_tiles_store(t->c_out + g * 32 * t->ldc_out, t->ldc_out, h);
                        continue;
                    }
                    c_tiles_store(cb, 32, 0);
                    if (last) /* rounded to bf16 */
                        for (int r = 0; r < 32; r++)
#pragma GCC unroll 2
                            for (int q = 0; q < 2; q++)
                                _mm256_storeu_si256((__m256i *)(t->out + (g * 32 + r) * t->ldo + 32 * h + 16 * q),
                                                    gemm_bf16_round16(_mm512_load_ps(cb + r * 32 + 16 * q)));
                }
            }
        }
    }
}

/*
 * amx_block over `tiles` row tiles of one panel (gemm_level.kernel_block),
 * the loop the operands' caches want: AMX_PANEL_TILES row tiles at a time,
 * and for each half of the panel and each piece of B's K in it (16
 * K-blocks of 32 columns, 32 KB, contiguous in B packed in pieces), each of
 * those tiles in turn multiplies that piece, so the piece stays in L1 while
 * A streams past from L2 by TILELOADDT1 (which does not keep A's lines in
 * L1, where they would push the piece out). Each tile's C goes through
 * c_buf between pieces (stored and loaded as fp32: exact), so every element
 * takes the same TDPBF16PS steps in the same order as amx_block's: the same
 * bits. Four tiles: their C (16 KB) and the piece fill L1; six or more ran
 * slower where C also comes and goes through memory between chunks (K of
 * three chunks or more), three no faster (docs/performance.md, "Large
 * shapes, `amx`").
 */
AMX_AVX512_TARGET static void amx_panel(const gemm_tile *t, int tiles)
{
    const int64_t per_step = prefetch_per_step(t, 2 * tiles); /* over both halves of every tile */
    const char *prefetch = t->prefetch;
    for (int g0 = 0; g0 < tiles; g0 += AMX_PANEL_TILES)
        amx_panel_tiles(t, g0, g0 + AMX_PANEL_TILES < tiles ? g0 + AMX_PANEL_TILES : tiles, &prefetch, per_step);
}

/*
 * Block j of chunk i of a tile's B in fp8, halves [h0, h0 + halves) of its
 * 64 columns (32 each), widened into wide (16 K-pairs, rows of 32 * halves
 * dwords); returns where the tile loads find it (zeros for a block the fold
 * rule refuses, as packed B holds it). A pass that starts at the first half
 * brings the next block's lines into L1; a second pass finds them in L2 (a
 * chunk of a panel is 66 KB).
 */
AMX_WIDEN_TARGET static inline __attribute__((always_inline)) const uint32_t *
widen_block(const gemm_tile *t, int i, int64_t j, int h0, int halves, const widen_consts *w, uint32_t *wide)
{
    static const uint32_t zeros[16 * 64] __attribute__((aligned(64)));
    if ((t->b_refused[i] >> j) & 1) return zeros;
    const uint8_t *blk = (const uint8_t *)t->b[i] + j * BF16_B8_BLOCK;
    const int special = (t->b_special[i] >> j) & 1;
    __m512i offset[4], biased[4];
    for (int g = 0; g < 2 * halves; g++) {
        offset[g] = widen_offsets(blk + 16 * (2 * h0 + g));
        biased[g] = _mm512_add_epi16(offset[g], w->bias);
    }
#pragma GCC unroll 4
    for (int kp = 0; kp < 16; kp++) {
        const uint8_t *codes = blk + 64 + kp * 128;
        if (h0 == 0) {
            _mm_prefetch((const char *)codes + BF16_B8_BLOCK, _MM_HINT_T0);
            _mm_prefetch((const char *)codes + BF16_B8_BLOCK + 64, _MM_HINT_T0);
        }
        for (int h = 0; h < halves; h++) {
            __m512bh v[2];
            widen64(codes + 64 * (h0 + h), offset + 2 * h, biased + 2 * h, w, special, v);
            _mm512_store_si512(wide + (kp * halves + h) * 32, (__m512i)v[0]);
            _mm512_store_si512(wide + (kp * halves + h) * 32 + 16, (__m512i)v[1]);
        }
    }
    return wide;
}

/* The block after block j of chunk i, widened as widen_block does; NULL after the last. */
#define WIDEN_NEXT(t, i, j, nblk, h0, halves, w, wide)                                                       \
    ((j) + 1 < (nblk)        ? widen_block(t, i, (j) + 1, h0, halves, w, wide)                               \
     : (i) + 1 < (t)->chunks ? widen_block(t, (i) + 1, 0, h0, halves, w, wide)                               \
                             : NULL)

/*
 * amx_block on B in fp8 (the small-M path): the tiles take the same steps
 * in the same order as amx_block's on packed B, each block of B widened
 * (widen_block) one step ahead of its tile loads, so that they never wait
 * for the stores that made it and the tiles multiply while the next block
 * is widened: the same bits. The tiles do 32 rows whatever the call's are.
 */
AMX_WIDEN_TARGET static inline __attribute__((always_inline)) void
amx_block8_of(const gemm_tile *t, float *c_out, int64_t ldc_out, const a2amm_fp8_type type)
{
    const int64_t a_stride = BF16_A_LD * 4;
    const widen_consts w = widen_consts_of(type);
    uint32_t buf[2][16 * 32] __attribute__((aligned(64)));
    const char *prefetch = t->prefetch;
    const int64_t per_step = prefetch_per_step(t, 2);
    for (int h = 0; h < 2; h++) {
        c_tiles_load(t, h);
        int64_t n = 0;
        const uint32_t *b = widen_block(t, 0, 0, h, 1, &w, buf[0]);
        for (int i = 0; i < t->chunks; i++) {
            const uint32_t *a0 = t->a[i], *a1 = (const uint32_t *)t->a[i] + 16 * BF16_A_LD;
            const int64_t nblk = t->k[i] / 32;
            for (int64_t j = 0; j < nblk; j++, n++) {
                for (int64_t l = 0; l < per_step && prefetch < t->prefetch_end; l++, prefetch += 64)
                    _mm_prefetch(prefetch, _MM_HINT_T1);
                const uint32_t *next = WIDEN_NEXT(t, i, j, nblk, h, 1, &w, buf[(n + 1) & 1]);
                _tile_loadd(4, a0 + 16 * j, a_stride);
                _tile_loadd(6, b, 128);
                _tile_loadd(7, b + 16, 128);
                _tile_loadd(5, a1 + 16 * j, a_stride);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
                b = next;
            }
        }
        c_tiles_store(c_out, ldc_out, h);
    }
}

/*
 * amx_block8 for a call that needs 16 rows or fewer (rows_used): one A
 * tile, the block's four B tiles (all 64 columns widened in one pass, 4 KB)
 * and four C tiles: half the tile work of 32 rows, and B read once. Each
 * element of C takes the same steps as in amx_block (a tile row's dot
 * products do not depend on the tile's other rows): the same bits. Rows
 * 16-31 of C are left as they are.
 */
AMX_WIDEN_TARGET static inline __attribute__((always_inline)) void
amx_block8_half_of(const gemm_tile *t, float *c_out, int64_t ldc_out, const a2amm_fp8_type type)
{
    const int64_t a_stride = BF16_A_LD * 4, in_stride = t->ldc_in * 4, out_stride = ldc_out * 4;
    const widen_consts w = widen_consts_of(type);
    uint32_t buf[2][16 * 64] __attribute__((aligned(64)));
    const char *prefetch = t->prefetch;
    const int64_t per_step = prefetch_per_step(t, 1);
    _tile_loadconfig(&SMALL_CONFIGS[t->rows_used - 1]);
    if (t->c_in) {
        _tile_loadd(0, t->c_in, in_stride);
        _tile_loadd(1, t->c_in + 16, in_stride);
        _tile_loadd(2, t->c_in + 32, in_stride);
        _tile_loadd(3, t->c_in + 48, in_stride);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    int64_t n = 0;
    const uint32_t *b = widen_block(t, 0, 0, 0, 2, &w, buf[0]);
    for (int i = 0; i < t->chunks; i++) {
        const uint32_t *a0 = t->a[i];
        const int64_t nblk = t->k[i] / 32;
        for (int64_t j = 0; j < nblk; j++, n++) {
            for (int64_t l = 0; l < per_step && prefetch < t->prefetch_end; l++, prefetch += 64)
                _mm_prefetch(prefetch, _MM_HINT_T1);
            const uint32_t *next = WIDEN_NEXT(t, i, j, nblk, 0, 2, &w, buf[(n + 1) & 1]);
            _tile_loadd(4, a0 + 16 * j, a_stride);
            _tile_loadd(5, b, 256);
            _tile_loadd(6, b + 16, 256);
            _tile_loadd(7, b + 32, 256);
            _tile_dpbf16ps(0, 4, 5);
            _tile_dpbf16ps(1, 4, 6);
            _tile_dpbf16ps(2, 4, 7);
            _tile_loadd(5, b + 48, 256);
            _tile_dpbf16ps(3, 4, 5);
            b = next;
        }
    }
    _tile_stored(0, c_out, out_stride);
    _tile_stored(1, c_out + 16, out_stride);
    _tile_stored(2, c_out + 32, out_stride);
    _tile_stored(3, c_out + 48, out_stride);
    _tile_loadconfig(&CONFIG); /* the other kernels' tiles */
}

/*
 * The small-M blocks, a copy for each type of B: the type a constant, so
 * the widening's shifts take an immediate (a shift by a register is two
 * uops on Intel, where an immediate's is one), as the avx512 level's.
 */
AMX_WIDEN_TARGET static void amx_block8(const gemm_tile *t, float *c_out, int64_t ldc_out)
{
    if (t->b_type == A2AMM_E5M2) amx_block8_of(t, c_out, ldc_out, A2AMM_E5M2);
    else amx_block8_of(t, c_out, ldc_out, A2AMM_E4M3);
}

AMX_WIDEN_TARGET static void amx_block8_half(const gemm_tile *t, float *c_out, int64_t ldc_out)
{
    if (t->b_type == A2AMM_E5M2) amx_block8_half_of(t, c_out, ldc_out, A2AMM_E5M2);
    else amx_block8_half_of(t, c_out, ldc_out, A2AMM_E4M3);
}

/* Whole 32-row tiles only (the context says so): to C straight, or through a buffer rounded to out. */
AMX_AVX512_TARGET static inline __attribute__((always_inline)) void
amx_tile(const gemm_tile *t, void (*block)(const gemm_tile *, float *, int64_t))
{
    if (!t->out) {
        block(t, t->c_out, t->ldc_out);
        return;
    }
    float buf[GEMM_AMX_ROWS * BF16_NR] __attribute__((aligned(64)));
    block(t, buf, BF16_NR);
    for (int r = 0; r < GEMM_AMX_ROWS; r++)
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++)
            _mm256_storeu_si256((__m256i *)(t->out + r * t->ldo + 16 * g),
                                gemm_bf16_round16(_mm512_load_ps(buf + r * BF16_NR + 16 * g)));
}

AMX_AVX512_TARGET static void amx_kernel(const gemm_tile *t) { amx_tile(t, amx_block); }

AMX_AVX512_TARGET static void amx_kernel8(const gemm_tile *t)
{
    amx_tile(t, t->rows_used <= GEMM_AMX_ROWS / 2 ? amx_block8_half : amx_block8);
}

static const cpu_feature NEEDS[] = {CPU_AVX512F,  CPU_AVX512BW, CPU_AVX512BF16,
                                    CPU_AVX512VBMI, CPU_AMX_TILE, CPU_AMX_BF16};

const gemm_level gemm_amx_level = {
    .isa = GEMM_ISA_AMX,
    .needs = NEEDS,
    .nneeds = (int)(sizeof NEEDS / sizeof NEEDS[0]),
    .why_not = amx_why_not,
    .kernel = amx_kernel,
    .kernel_block = amx_panel,
    .format = GEMM_FOLD_BF16,
    .nr = BF16_NR,
    .kc = BF16_KC,
    .mr = GEMM_AMX_ROWS,
    .full_rows = 1,
    .mc = 192,       /* x 2 chunks where all of K is packed: 811 KB of A beside a panel's 256 KB of B */
    .mc_deep = 384,  /* chunk by chunk: A one chunk deep, 811 KB (see above) */
    .all_k_chunks = 2,
    .prefetch_k = 0, /* the next panel split evenly over the calls, spread over their steps */
    .a_ld = BF16_A_LD * 4,
    .a_block = 64,
    .b_block = BF16_B_BLOCK,
    .pack_b = gemm_bf16_pack_b_pieces,
    .pack_a_row = gemm_bf16_pack_a_row,
    .begin = gemm_amx_begin,
    .end = gemm_amx_end,
    .small_m = GEMM_AMX_ROWS, /* one tile: B widened once a call; more tiles would widen it again each */
    .kernel8 = amx_kernel8,
    .b8_block = BF16_B8_BLOCK,
    .pack_b8 = gemm_bf16_pack_b8,
    .b8_block_codes = gemm_bf16_b8_block_codes,
};
