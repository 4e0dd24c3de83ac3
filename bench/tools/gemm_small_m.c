/*
 * The small-M path's rate on one thread (not a test: a probe in bench/tools,
 * which make builds and the suite does not run): gemm_multiply_store of M
 * rows against a B of N x K prepared for M rows (gemm_b_prepare_for: where
 * the level reads B in fp8 for so few rows, B is kept in fp8 only), the
 * best of 15 calls, beside a streaming read of as many bytes in the same
 * run. With a small N (B fits in L2, the default) it is the widening's own
 * rate; with --cold (a 256 MiB buffer written before every call) and a large
 * N it is the rate from memory; --dirty instead writes one byte a line
 * over 512 MiB, leaving dirty lines in every cache (the flush under which
 * the amx level's calls were bimodal, session 17), and prints every call.
 *
 *   make build/tools/gemm_small_m   (make all builds it too)
 *   build/tools/gemm_small_m LEVEL M N K [--cold|--dirty]   (e.g. amx 1 128 8192; avx512 1 3584 8192 --cold)
 *
 * B's codes are normal E4M3 values (no zero or subnormal code, as scaled
 * data nearly always is), scales 120-129; A's scales 125-129.
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gemm/gemm.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One pass of plain loads over n bytes (a multiple of 32); returns something of them so it is not elided. */
__attribute__((target("avx2"))) static long read_bytes(const char *p, size_t n)
{
    __m256i acc = _mm256_setzero_si256();
    for (size_t i = 0; i < n; i += 32) acc = _mm256_xor_si256(acc, _mm256_load_si256((const __m256i *)(p + i)));
    return _mm256_extract_epi64(acc, 0);
}

/* One byte written a line: the lines stay in the caches, dirty (memset's large stores bypass them). */
static void dirty_lines(char *p, size_t n, int v)
{
    for (size_t i = 0; i < n; i += 64) ((volatile char *)p)[i] = (char)v;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: gemm_small_m LEVEL M N K [--cold|--dirty]\n");
        return 2;
    }
    gemm_isa isa = GEMM_ISA_COUNT;
    for (int i = 0; i < GEMM_ISA_COUNT; i++)
        if (!strcmp(argv[1], gemm_isa_name((gemm_isa)i))) isa = (gemm_isa)i;
    const int64_t M = atoll(argv[2]), N = atoll(argv[3]), K = atoll(argv[4]);
    const int dirty = argc > 5 && !strcmp(argv[5], "--dirty");
    const int cold = dirty || (argc > 5 && !strcmp(argv[5], "--cold"));
    if (isa == GEMM_ISA_COUNT || !gemm_isa_supported(isa) || M < 1 || N < 1 || K < 32 || K % 32) {
        fprintf(stderr, "gemm_small_m: a level this CPU runs, M, N >= 1 and K a positive multiple of 32\n");
        return 2;
    }
    uint8_t *b = malloc((size_t)(N * K)), *sb = malloc((size_t)(N * K / 32));
    uint8_t *a = malloc((size_t)(M * K)), *sa = malloc((size_t)(M * K / 32));
    float *c = malloc((size_t)(M * N) * sizeof *c);
    uint16_t *out = malloc((size_t)(M * N) * sizeof *out);
    const size_t flush_bytes = (size_t)(dirty ? 512 : 256) << 20, read_len = (size_t)(N * K) / 32 * 32;
    char *flush = aligned_alloc(64, flush_bytes);
    if (!b || !sb || !a || !sa || !c || !out || !flush) return 1;
    srand(1);
    for (int64_t i = 0; i < N * K; i++) b[i] = (uint8_t)((8 + rand() % 112) | (rand() & 0x80));
    for (int64_t i = 0; i < N * K / 32; i++) sb[i] = (uint8_t)(120 + rand() % 10);
    for (int64_t i = 0; i < M * K; i++) a[i] = (uint8_t)((8 + rand() % 112) | (rand() & 0x80));
    for (int64_t i = 0; i < M * K / 32; i++) sa[i] = (uint8_t)(125 + rand() % 5);
    memset(flush, 1, flush_bytes);
    gemm_b *gb;
    a2amm_error err;
    if (gemm_b_prepare_for(NULL, isa, b, sb, N, K, K / 32, A2AMM_E4M3, M, &gb, &err)) {
        fprintf(stderr, "gemm_small_m: %s\n", err.msg);
        return 1;
    }
    gemm_a_slab slab = {a, sa, K, K / 32, A2AMM_E4M3};
    double best = 1e9, best_read = 1e9;
    long sink = 0;
    if (dirty) printf("calls (ms):");
    for (int rep = 0; rep < 15; rep++) {
        if (dirty) dirty_lines(flush, flush_bytes, rep);
        else if (cold) memset(flush, rep, flush_bytes);
        double t0 = now();
        gemm_multiply_store(gb, &slab, M, 0, K, 0, N, c, N, out, N);
        double t = now() - t0;
        best = t < best ? t : best;
        if (dirty) printf(" %.2f", t * 1e3);
        if (cold) memset(flush, rep + 1, flush_bytes);
        t0 = now();
        sink += read_bytes(cold ? flush : (const char *)flush + flush_bytes - read_len, read_len);
        t = now() - t0;
        best_read = t < best_read ? t : best_read;
    }
    if (dirty) printf("\n");
    const double fp8 = (double)(N * K + N * K / 32);
    printf("%s M=%lld N=%lld K=%lld%s: B prepared %lld bytes; call %.3f ms, %.1f GB/s of B in fp8; "
           "a read of as many bytes %.3f ms, %.1f GB/s; call / read %.2f (%ld)\n",
           argv[1], (long long)M, (long long)N, (long long)K, cold ? " cold" : "", (long long)gemm_b_bytes(gb),
           best * 1e3, fp8 / best / 1e9, best_read * 1e3, fp8 / best_read / 1e9, best_read / best, sink & 1);
    gemm_b_free(gb);
    return 0;
}
