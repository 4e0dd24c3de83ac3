/*
 * moe_down_probe: the MoE op's down projection alone, every level this CPU
 * runs, one thread, for docs/performance.md:
 *
 *   build/tools/moe_down_probe H I N [ITERS] [--uniform-codes] [--cold]
 *
 * y = a x W2 for N rows (a: bf16 values, W2: [H, I] E4M3, floats uniform in
 * [-1, 1] MX-quantized as real weights are, whose blocks hold normal codes;
 * with --uniform-codes, codes drawn uniformly, a zero or subnormal code in
 * nearly every block, and scales near 1), W2 packed once; each level's best of ITERS calls (avx512-seq:
 * the sequential rule on AVX-512, which the avx512 level keeps for rows its
 * K-pairs cannot take), and beside it
 * in the same run a read of W2's packed bytes once (the floor for few rows):
 * GB/s of W2 and the ratio call / read. W2 is in cache (it fits L3 at the
 * models' shapes) unless --cold writes a 256 MiB buffer before every call and
 * every read: then both come from memory, as a MoE step's experts do.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "a2amm.h"
#include "common/cpu.h"
#include "common/hugemem.h"
#include "gemm/gemm.h"
#include "op/moe_down.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t read_all(const uint8_t *p, size_t n)
{
    const uint64_t *w = (const uint64_t *)p;
    uint64_t s = 0;
    for (size_t i = 0; i < n / 8; i += 8) s += w[i] ^ w[i + 1] ^ w[i + 2] ^ w[i + 3] ^ w[i + 4] ^ w[i + 5] ^ w[i + 6] ^ w[i + 7];
    return s;
}

/* Reads and writes every line of buf: W2 leaves the caches (a plain memset of this size streams past them
 * with non-temporal stores and evicts nothing). */
static uint64_t evict(char *buf, size_t n)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i += 64) s += (uint8_t)buf[i];
    return s;
}

int main(int argc, char **argv)
{
    int uniform_codes = 0, cold = 0;
    while (argc > 1 && !strncmp(argv[argc - 1], "--", 2)) {
        const char *flag = argv[--argc];
        if (!strcmp(flag, "--uniform-codes")) uniform_codes = 1;
        else if (!strcmp(flag, "--cold")) cold = 1;
        else return fprintf(stderr, "moe_down_probe: unknown option %s\n", flag), 2;
    }
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: moe_down_probe H I N [ITERS] [--uniform-codes] [--cold]   (H, I multiples of 32; N rows >= 1)\n");
        return 2;
    }
    const int64_t H = atoll(argv[1]), I = atoll(argv[2]), n = atoll(argv[3]);
    const int iters = argc > 4 ? atoi(argv[4]) : 10;
    if (H < 32 || I < 32 || H % 32 || I % 32 || n < 1 || iters < 1) {
        fprintf(stderr, "moe_down_probe: H and I must be multiples of 32, N and ITERS at least 1\n");
        return 2;
    }
    uint8_t *w2 = malloc((size_t)(H * I)), *s2 = malloc((size_t)(H * I / 32));
    uint8_t *packed = hugemem_alloc(moe_down_bytes(H, I)); /* on 2 MB pages, as the op's */
    float *a = malloc(sizeof *a * (size_t)(n * I)), *y = malloc(sizeof *y * (size_t)(n * H));
    float **ys = malloc(sizeof *ys * (size_t)n);
    const size_t flush_bytes = cold ? (size_t)256 << 20 : 0;
    char *flush = cold ? malloc(flush_bytes) : NULL;
    if (!w2 || !s2 || !packed || !a || !y || !ys || (cold && !flush)) return fprintf(stderr, "moe_down_probe: out of memory\n"), 1;
    if (cold) memset(flush, 1, flush_bytes); /* pages of its own (calloc's untouched pages all read one zero page) */
    uint64_t seed = 88172645463325252ull;
    float *values = uniform_codes ? NULL : malloc(sizeof *values * (size_t)(H * I));
    for (int64_t i = 0; i < H * I; i++) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        if (values) values[i] = (float)((double)(seed >> 11) / 4503599627370496.0 - 1.0);
        else w2[i] = (uint8_t)(seed & 0xF7); /* no NaN code */
    }
    for (int64_t i = 0; i < H * I / 32; i++) s2[i] = (uint8_t)(120 + i % 8);
    a2amm_error err;
    if (values && a2amm_mx_quantize_f32(values, H, I, I, A2AMM_E4M3, A2AMM_SCALE_FLOOR, w2, I, s2, I / 32, &err))
        return fprintf(stderr, "moe_down_probe: %s\n", err.msg), 1;
    free(values);
    for (int64_t i = 0; i < n * I; i++) a[i] = (float)((i % 13) - 6) / 8.0f;
    for (int64_t i = 0; i < n; i++) ys[i] = y + i * H;
    moe_down_pack(H, I, A2AMM_E4M3, w2, I, s2, I / 32, packed);
    const size_t bytes = moe_down_bytes(H, I);
    static const struct {
        const char *name;
        moe_down_fn *fn;
        gemm_isa isa; /* the kernel level it needs */
    } levels[] = {{"portable", moe_down_portable, GEMM_ISA_REF},
                  {"avx2", moe_down_avx2, GEMM_ISA_AVX2},
                  {"avx512-seq", moe_down_sequential_avx512, GEMM_ISA_AVX512}, /* the sequential rule on AVX-512 */
                  {"avx512", moe_down_avx512, GEMM_ISA_AVX512},
                  {"amx", moe_down_amx, GEMM_ISA_AMX}};
    printf("moe_down_probe H=%lld I=%lld N=%lld: W2 %.2f MB packed (%s), %s, one thread, best of %d\n", (long long)H,
           (long long)I, (long long)n, (double)bytes / 1e6, uniform_codes ? "codes drawn uniformly" : "uniform floats MX-quantized",
           cold ? "from memory" : "in cache", iters);
    uint64_t sink = 0;
    for (size_t l = 0; l < sizeof levels / sizeof *levels; l++) {
        if (!gemm_isa_supported(levels[l].isa)) {
            printf("  %-10s not run: this CPU lacks it\n", levels[l].name);
            continue;
        }
        double best = 1e30, best_read = 1e30;
        for (int it = 0; it < iters; it++) {
            if (cold) sink += evict(flush, flush_bytes);
            double t0 = now_s();
            sink += read_all(packed, bytes);
            double t1 = now_s();
            if (cold) sink += evict(flush, flush_bytes);
            double t2 = now_s();
            levels[l].fn(H, I, A2AMM_E4M3, a, n, packed, ys);
            double t3 = now_s();
            if (t1 - t0 < best_read) best_read = t1 - t0;
            if (t3 - t2 < best) best = t3 - t2;
        }
        printf("  %-10s %8.3f ms  %6.2f GB/s of W2   read %.3f ms (%.2f GB/s)   call / read %.2f\n", levels[l].name,
               best * 1e3, (double)bytes / best / 1e9, best_read * 1e3, (double)bytes / best_read / 1e9,
               best / best_read);
    }
    printf("(sink %llu)\n", (unsigned long long)(sink & 1) + (unsigned long long)(y[0] != y[0]));
    free(w2), free(s2), free(packed), free(a), free(y), free(ys), free(flush);
    return 0;
}
