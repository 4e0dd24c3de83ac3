/*
 * Where the amx level's time goes at a large shape (not a test: a probe in
 * bench/tools, which make builds and the suite does not run). One thread,
 * one block of rows as the driver packs it (K of two chunks: all of K in
 * each microkernel call), the same packed A and B in every line, from the
 * L2-fed step of `bench gemm`'s probe to the whole call, each line adding
 * one thing the real call does:
 *   1 the L2-fed step: bench gemm's probe loop (2 A + 2 B tile loads, four
 *     TDPBF16PS) walking this block's packed A and panel 0 of packed B
 *   2 the microkernel on panel 0 again and again (B stays in L2), C to a
 *     32 x 64 buffer in L1: the kernel's own structure (halves, C drained
 *     every 64 steps)
 *   3 the microkernel over every panel in the driver's order (B streams
 *     from L3 or memory, no software prefetch), C still in L1
 *   4 the same with the driver's prefetch of the next panel
 *   5 the same rounding the sums to bf16, as the last chunk does, into a
 *     32 x 64 buffer in L1
 *   6 the same into out (M x N bf16, its lines not in the cache)
 *   7 the same work by the level's panel kernel (kernel_block: every row
 *     tile per piece of B, the piece in L1), as the driver runs it
 *   8 the whole call: gemm_multiply_store (A packed from fp8 every call)
 * The ratio of each line to the one above is what that part costs (line 7:
 * what the panel kernel gains over the microkernel tile by tile). Rounds
 * interleave the lines (a shared host's phases hit them alike); best round.
 *
 *   build/tools/amx_parts [N K [rounds]]   (default 2048 2048 15; rows: the level's block, 192)
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_amx_step.h"
#include "gemm/gemm.h"
#include "gemm/gemm_amx.h"
#include "gemm/gemm_bf16_pack.h"
#include "gemm/gemm_internal.h"
#include "gemm/gemm_level.h"

enum { LINES = 8, MAX_ROUNDS = 100 };

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Line 1: bench gemm's probe step over this call's packed A and panel 0 of its packed B. */
__attribute__((target("amx-tile,amx-bf16"), noinline)) static void l2_steps(const char *a, int64_t a_ld, int64_t a_bytes,
                                                                          const char *b, int64_t b_bytes, int64_t steps)
{
    bench_amx_l2_steps(a, a_ld, a_bytes, b, BF16_NR * 4, b_bytes, steps);
}

static uint8_t code(void) { return (uint8_t)(8 + rand() % 112) | (uint8_t)(rand() & 0x80); } /* normal E4M3 */

int main(int argc, char **argv)
{
    const int64_t N = argc > 1 ? atoll(argv[1]) : 2048, K = argc > 2 ? atoll(argv[2]) : 2048;
    const int rounds = argc > 3 ? atoi(argv[3]) : 15;
    if (!gemm_isa_supported(GEMM_ISA_AMX)) {
        printf("amx_parts: the amx level does not run here (%s); nothing to measure\n",
               gemm_isa_why_not(GEMM_ISA_AMX));
        return 0;
    }
    const gemm_level *L = gemm_level_blocking(GEMM_ISA_AMX);
    const int64_t M = L->mc, chunks = K / L->kc;
    if (N < 128 || N % 64 || K % L->kc || chunks != L->all_k_chunks || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr,
                "amx_parts: expected N a multiple of 64 (at least 128), K = %d (the all-K path), rounds 1..%d; "
                "got N %lld, K %lld, rounds %d\n",
                L->kc * L->all_k_chunks, MAX_ROUNDS, (long long)N, (long long)K, rounds);
        return 2;
    }
    uint8_t *bq = malloc((size_t)(N * K)), *sb = malloc((size_t)(N * K / 32));
    uint8_t *aq = malloc((size_t)(M * K)), *sa = malloc((size_t)(M * K / 32));
    char *a = aligned_alloc(64, (size_t)(chunks * M * L->a_ld));
    float *c = aligned_alloc(64, (size_t)(M * N) * sizeof *c), cbuf[32 * 64] __attribute__((aligned(64)));
    uint16_t obuf[32 * 64] __attribute__((aligned(64)));
    float *cblock = aligned_alloc(64, (size_t)(M / 32 * 32 * 32) * sizeof(float));
    uint16_t *out = aligned_alloc(64, (size_t)(M * N) * sizeof *out);
    if (!bq || !sb || !aq || !sa || !a || !c || !out || !cblock) return fprintf(stderr, "amx_parts: out of memory\n"), 1;
    for (int64_t i = 0; i < N * K; i++) bq[i] = code();
    for (int64_t i = 0; i < N * K / 32; i++) sb[i] = (uint8_t)(124 + rand() % 6);
    for (int64_t i = 0; i < M * K; i++) aq[i] = code();
    for (int64_t i = 0; i < M * K / 32; i++) sa[i] = (uint8_t)(124 + rand() % 6);
    gemm_b *b;
    a2amm_error err;
    if (gemm_b_prepare(GEMM_ISA_AMX, bq, sb, N, K, K / 32, A2AMM_E4M3, &b, &err) != A2AMM_OK)
        return fprintf(stderr, "amx_parts: %s\n", err.msg), 1;
    int16_t state[GEMM_MAX_KC / 32];
    for (int64_t ch = 0; ch < chunks; ch++)
        for (int64_t r = 0; r < M; r++)
            L->pack_a_row(aq + r * K + ch * L->kc, sa + r * (K / 32) + ch * (L->kc / 32), L->kc / 32, A2AMM_E4M3,
                          a + (ch * M + r) * L->a_ld, state);
    const gemm_a_slab slab = {aq, sa, K, K / 32, A2AMM_E4M3};
    const char *packed = b->packed;
    const int64_t panels = N / 64, tiles = M / 32, panel_bytes = K / 32 * L->b_block;
    static const char *const names[LINES] = {
        "1 the L2-fed step (bench gemm's probe) on this A and B panel",
        "2 microkernel, one panel of B again and again, C in L1",
        "3 microkernel over every panel (B streams), C in L1",
        "4 + the driver's prefetch of the next panel",
        "5 + the sums rounded to bf16, into a buffer in L1",
        "6 the same into out (M x N)",
        "7 the same by the panel kernel (kernel_block)",
        "8 the whole call (gemm_multiply_store, A packed)"};
    double best[LINES] = {0};
    for (int r = 0; r < rounds; r++)
        for (int line = 0; line < LINES; line++) {
            double t0 = now();
            if (line == 7) {
                gemm_multiply_store(b, &slab, M, 0, K, 0, N, c, N, out, N);
            } else {
                L->begin();
                if (line == 0)
                    l2_steps(a, L->a_ld, chunks * M * L->a_ld, packed, panel_bytes, panels * tiles * K / 16);
                for (int64_t p = 0; line == 6 && p < panels; p++) {
                    const char *next = packed + (p + 1 < panels ? p + 1 : p) * panel_bytes;
                    gemm_tile t = {.chunks = (int)chunks, .rows = 32, .rows_used = 32, .b_type = A2AMM_E4M3,
                                   .b_panel = packed + p * panel_bytes, .b_nkb = K / 32, .c_buf = cblock};
                    for (int64_t ch = 0; ch < chunks; ch++) {
                        t.a[ch] = a + ch * M * L->a_ld;
                        t.b[ch] = packed + p * panel_bytes + ch * (L->kc / 32) * L->b_block;
                        t.b_kb[ch] = ch * (L->kc / 32);
                        t.k[ch] = L->kc;
                    }
                    if (p + 1 < panels) {
                        t.prefetch = next;
                        t.prefetch_end = next + panel_bytes;
                    }
                    t.out = out + p * 64;
                    t.ldo = N;
                    L->kernel_block(&t, (int)tiles);
                }
                for (int64_t p = 0; line > 0 && line < 6 && p < panels; p++)
                    for (int64_t i = 0; i < tiles; i++) {
                        const char *next = packed + (p + 1 < panels ? p + 1 : p) * panel_bytes;
                        const int64_t q = line == 1 ? 0 : p;
                        gemm_tile t = {.chunks = (int)chunks, .rows = 32, .rows_used = 32, .b_type = A2AMM_E4M3,
                                       .b_panel = packed + q * panel_bytes, .b_nkb = K / 32};
                        for (int64_t ch = 0; ch < chunks; ch++) {
                            t.a[ch] = a + (ch * M + i * 32) * L->a_ld;
                            t.b[ch] = packed + q * panel_bytes + ch * (L->kc / 32) * L->b_block;
                            t.b_kb[ch] = ch * (L->kc / 32);
                            t.k[ch] = L->kc;
                        }
                        t.c_out = cbuf;
                        t.ldc_out = 64;
                        if (line >= 3 && p + 1 < panels) {
                            t.prefetch = next + panel_bytes * i / tiles;
                            t.prefetch_end = next + panel_bytes * (i + 1) / tiles;
                        }
                        if (line >= 4) {
                            t.out = line == 4 ? obuf : out + i * 32 * N + p * 64;
                            t.ldo = line == 4 ? 64 : N;
                        }
                        L->kernel(&t);
                    }
                L->end();
            }
            double g = 2.0 * (double)M * (double)N * (double)K / (now() - t0) / 1e9;
            if (g > best[line]) best[line] = g;
        }
    printf("amx_parts: %lld rows (the level's block) x N %lld x K %lld, one thread, best of %d rounds\n",
           (long long)M, (long long)N, (long long)K, rounds);
    printf("%-62s %9s %12s\n", "", "GFLOP/s", "/ line above");
    for (int line = 0; line < LINES; line++)
        printf("%-62s %9.0f %12.2f\n", names[line], best[line], line ? best[line] / best[line - 1] : 1.0);
    printf("%-62s %9s %12.2f\n", "the whole call over the L2-fed step", "", best[LINES - 1] / best[0]);
    gemm_b_free(b);
    free(bq), free(sb), free(aq), free(sa), free(a), free(c), free(out), free(cblock);
    return 0;
}
