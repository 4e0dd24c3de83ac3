/*
 * How fast AMX multiplies depending on where its tiles come from (not a
 * test: a probe in bench/tools, which make builds and the suite does not
 * run). One core, the AMX microkernel's inner step (2 x 2 accumulator tiles, two A and two B tile loads per four
 * TDPBF16PS) over operands sized to live in L1, L2 or L3, against the same
 * step without loads. Rounds interleave the variants; each variant's figure
 * is its best round and the median over rounds of its speed over the
 * no-load loop of the same round (the host drifts between phases).
 *
 *   make build/tools/bench_amx_feed   (make all builds it too)
 *   build/tools/bench_amx_feed [rounds]   (default 30)
 *
 * The layouts are a2amm's: packed A rows 2112 bytes apart (a tile is 16 of
 * them), B's K-pair rows 256 bytes (a whole panel) or 128 (a half-panel
 * stored on its own). The last variants are the loop a structure with B's
 * piece in L1 would run: a 32 KB piece (512 K x 32 columns) over 8 groups
 * of A rows, 16 steps each, C carried in the tiles, or stored and reloaded
 * (from L1) at every group, as it must be when K comes in pieces.
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "gemm/gemm_amx.h"

#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16"), noinline))

enum { STEPS = 1 << 19, MAX_ROUNDS = 200, A_ROW = 2112, BUF_BYTES = 64 << 20 };

/* Where a variant's operands are: bytes cycled through, and B's row stride. */
typedef struct variant {
    const char *name;
    int loads;
    int a_stream; /* A's tiles with TILELOADDT1 (a hint not to keep them) */
    long a_span;  /* bytes of each A row walked before the next group */
    long a_bytes; /* groups of 32 rows cycled through */
    long b_bytes, b_stride;
    int piece; /* 0: the walk above; 1: the piece loop, C in the tiles; 2: C stored and reloaded per group */
} variant;

static char *buf_a, *buf_b;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/*
 * STEPS steps: A walks 64 bytes along its rows, a_span of them, then to
 * the next 32-row group; B walks down its K-pair rows, 16 a step; both wrap at their size.
 */
AMX_TARGET static void run_steps(const variant *v)
{
    long ka = 0, ga = 0, kb = 0;
    const long a_group = 32L * A_ROW, b_step = 16 * v->b_stride;
    for (long s = 0; s < STEPS; s++) {
        if (v->loads) {
            const char *a = buf_a + ga + ka, *b = buf_b + kb;
            if (v->a_stream) _tile_stream_loadd(4, a, A_ROW);
            else _tile_loadd(4, a, A_ROW);
            _tile_loadd(6, b, v->b_stride);
            _tile_loadd(7, b + 64, v->b_stride);
            if (v->a_stream) _tile_stream_loadd(5, a + 16 * A_ROW, A_ROW);
            else _tile_loadd(5, a + 16 * A_ROW, A_ROW);
            ka += 64;
            if (ka >= v->a_span) {
                ka = 0;
                ga = ga + 2 * a_group > v->a_bytes ? 0 : ga + a_group;
            }
            kb = kb + 2 * b_step > v->b_bytes ? 0 : kb + b_step;
        }
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
}

/* STEPS steps of the piece loop: 8 groups of A rows 1088 bytes apart, each 16 steps over B's 32 KB piece. */
AMX_TARGET static void run_piece(const variant *v)
{
    static float c_block[256 * 32] __attribute__((aligned(64))); /* the 8 groups' C, 32 KB */
    enum { ROW = 1088, GROUPS = 8, PIECE_STEPS = 16 };
    for (long s = 0; s < STEPS;)
        for (int g = 0; g < GROUPS; g++, s += PIECE_STEPS) {
            const char *a0 = buf_a + (long)g * 32 * ROW, *a1 = a0 + 16 * ROW;
            for (int kp = 0; kp < PIECE_STEPS; kp++) {
                _tile_stream_loadd(4, a0 + kp * 64, ROW);
                _tile_loadd(6, buf_b + kp * 2048, 128);
                _tile_loadd(7, buf_b + kp * 2048 + 64, 128);
                _tile_stream_loadd(5, a1 + kp * 64, ROW);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            if (v->piece == 2) {
                float *c = c_block + g * 32 * 32;
                _tile_stored(0, c, 128);
                _tile_stored(1, c + 16, 128);
                _tile_stored(2, c + 16 * 32, 128);
                _tile_stored(3, c + 16 * 32 + 16, 128);
                float *next = c_block + (g + 1) % GROUPS * 32 * 32;
                _tile_loadd(0, next, 128);
                _tile_loadd(1, next + 16, 128);
                _tile_loadd(2, next + 16 * 32, 128);
                _tile_loadd(3, next + 16 * 32 + 16, 128);
            }
        }
}

/* The kernel's tile configuration (gemm_amx_begin), operand tiles loaded once, accumulators zeroed. */
AMX_TARGET static void tiles_begin(void)
{
    gemm_amx_begin();
    _tile_loadd(4, buf_a, 64);
    _tile_loadd(5, buf_a, 64);
    _tile_loadd(6, buf_b, 64);
    _tile_loadd(7, buf_b, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static char *buffer(void)
{
    char *p = aligned_alloc(2 << 20, BUF_BYTES);
    if (!p) return NULL;
    madvise(p, BUF_BYTES, MADV_HUGEPAGE);
    memset(p, 0, BUF_BYTES); /* zeros: bf16 +0, no subnormal or NaN slow paths */
    return p;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 30;
    if (rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "bench_amx_feed: rounds must be 1..%d, got '%s'\n", MAX_ROUNDS, argv[1]);
        return 2;
    }
    if (!gemm_amx_usable()) {
        printf("bench_amx_feed: no AMX-BF16 here (or the OS does not grant the tiles); nothing to measure\n");
        return 0;
    }
    buf_a = buffer();
    buf_b = buffer();
    if (!buf_a || !buf_b) {
        fprintf(stderr, "bench_amx_feed: cannot allocate 2 x %d MB\n", BUF_BYTES >> 20);
        return 1;
    }
    const variant v[] = {
        {"no loads", 0, 0, 0, 0, 0, 256, 0},
        {"A 8 KB (L1), B 16 KB (L1), 128 B rows", 1, 0, 256, 32 * A_ROW, 16 << 10, 128, 0},
        {"A 800 KB (L2), B 16 KB (L1), 128 B rows", 1, 0, A_ROW - 64, 800 << 10, 16 << 10, 128, 0},
        {"A 800 KB (L2), B 32 KB (L1), 128 B rows", 1, 0, A_ROW - 64, 800 << 10, 32 << 10, 128, 0},
        {"the same, A by TILELOADDT1", 1, 1, A_ROW - 64, 800 << 10, 32 << 10, 128, 0},
        {"A 800 KB (L2), B 24 KB (L1), 128 B rows", 1, 0, A_ROW - 64, 800 << 10, 24 << 10, 128, 0},
        {"A 800 KB (L2), B 16 KB (L1), 256 B rows", 1, 0, A_ROW - 64, 800 << 10, 16 << 10, 256, 0},
        {"A 800 KB (L2), B 256 KB (L2), 256 B rows", 1, 0, A_ROW - 64, 800 << 10, 256 << 10, 256, 0},
        {"A 800 KB (L2), B 16 MB (L3), 256 B rows", 1, 0, A_ROW - 64, 800 << 10, 16 << 20, 256, 0},
        {"A 16 MB (L3), B 16 MB (L3), 256 B rows", 1, 0, A_ROW - 64, 16 << 20, 16 << 20, 256, 0},
        {"piece loop: A 272 KB (L2), B 32 KB (L1)", 1, 1, 0, 0, 0, 0, 1},
        {"the same, C stored and reloaded per group", 1, 1, 0, 0, 0, 0, 2},
    };
    enum { NV = sizeof v / sizeof v[0] };
    static double gflops[NV][MAX_ROUNDS], ratio[NV][MAX_ROUNDS];
    const double flop = 2.0 * STEPS * 4 * 16 * 16 * 32;
    tiles_begin();
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < NV; i++) {
            double t0 = now();
            if (v[i].piece) run_piece(&v[i]);
            else run_steps(&v[i]);
            gflops[i][r] = flop / (now() - t0) / 1e9;
            ratio[i][r] = gflops[i][r] / gflops[0][r];
        }
    gemm_amx_end();
    double best0 = 0;
    for (int r = 0; r < rounds; r++) best0 = gflops[0][r] > best0 ? gflops[0][r] : best0;
    printf("%-44s %10s %10s %14s\n", "tiles from", "best GF/s", "/ best", "median paired");
    for (int i = 0; i < NV; i++) {
        double best = 0;
        for (int r = 0; r < rounds; r++) best = gflops[i][r] > best ? gflops[i][r] : best;
        qsort(ratio[i], (size_t)rounds, sizeof(double), cmp_double);
        printf("%-44s %10.0f %10.2f %14.2f\n", v[i].name, best, best / best0, ratio[i][rounds / 2]);
    }
    free(buf_a);
    free(buf_b);
    return 0;
}
