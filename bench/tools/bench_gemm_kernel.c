/*
 * A benchmark of the gemm kernels, single-threaded (not a test: a probe in
 * bench/tools, which make builds and the suite does not run): GFLOP/s of
 * gemm_accumulate with B prepared, for each supported ISA level, against the
 * machine's peak measured in the same run by a probe (24 independent vdpbf16ps / 12 ymm vfmadd231ps
 * accumulators). Each repetition runs the probe briefly, then the GEMM, and
 * the ratio of the two is taken per repetition: shared machines drift by
 * several percent over seconds, and a ratio from one moment does not.
 *
 *   make build/tools/bench_gemm_kernel   (make all builds it too)
 *   build/tools/bench_gemm_kernel [M N K [reps [huge]]]   (default 2048 2048 2048 15)
 *
 * `huge` puts the fp32 C on transparent huge pages (madvise): C's rows are
 * far apart, and with 4 KB pages each microkernel tile touches 6 of them.
 * Prints per level: median GFLOP/s (min..max), median fraction of the peak
 * probe, and the time of gemm_b_prepare. The A and B values are E4M3 with
 * ordinary scales, so every block takes the fast path.
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "common/cpu.h"
#include "gemm/gemm.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}


/* 24 independent vdpbf16ps chains: 24 * 32 * 2 flops per iteration. */
__attribute__((target("avx512f,avx512bw,avx512bf16"), noinline)) static double probe_bf16(long iters)
{
    __m512 acc[24];
    for (int i = 0; i < 24; i++) acc[i] = _mm512_set1_ps((float)i);
    __m512bh x = (__m512bh)_mm512_set1_epi32(0x3F803F80), y = (__m512bh)_mm512_set1_epi32(0x00010001);
    double t0 = now();
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
        __asm__ volatile("" : "+v"(x));
    }
    double t = now() - t0;
    __m512 s = acc[0];
    for (int i = 1; i < 24; i++) s = _mm512_add_ps(s, acc[i]);
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    return (double)iters * 24 * 64 / t / 1e9;
}

/* 24 independent zmm FMA chains: 24 * 16 * 2 flops per iteration. */
__attribute__((target("avx512f"), noinline)) static double probe_fma512(long iters)
{
    __m512 acc[24];
    for (int i = 0; i < 24; i++) acc[i] = _mm512_set1_ps((float)i);
    __m512 x = _mm512_set1_ps(1.0f), y = _mm512_set1_ps(1e-9f);
    double t0 = now();
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++) acc[i] = _mm512_fmadd_ps(x, y, acc[i]);
        __asm__ volatile("" : "+v"(x));
    }
    double t = now() - t0;
    __m512 s = acc[0];
    for (int i = 1; i < 24; i++) s = _mm512_add_ps(s, acc[i]);
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    return (double)iters * 24 * 32 / t / 1e9;
}

/* 12 independent ymm FMA chains (AVX2 has 16 registers). */
__attribute__((target("avx2,fma"), noinline)) static double probe_fma256(long iters)
{
    __m256 acc[12];
    for (int i = 0; i < 12; i++) acc[i] = _mm256_set1_ps((float)i);
    __m256 x = _mm256_set1_ps(1.0f), y = _mm256_set1_ps(1e-9f);
    double t0 = now();
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) acc[i] = _mm256_fmadd_ps(x, y, acc[i]);
        __asm__ volatile("" : "+x"(x));
    }
    double t = now() - t0;
    float out[8];
    __m256 s = acc[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, acc[i]);
    _mm256_storeu_ps(out, s);
    volatile float sink = out[0];
    (void)sink;
    return (double)iters * 12 * 16 / t / 1e9;
}

typedef double (*probe_fn)(long iters);

int main(int argc, char **argv)
{
    int64_t M = 2048, N = 2048, K = 2048;
    int reps = 15, huge = 0;
    if (argc >= 4) {
        M = atoll(argv[1]);
        N = atoll(argv[2]);
        K = atoll(argv[3]);
    }
    if (argc >= 5) reps = atoi(argv[4]);
    if (argc >= 6) huge = strcmp(argv[5], "huge") == 0;
    if (M < 1 || N < 1 || K < 32 || K % 32 || reps < 1) {
        fprintf(stderr, "usage: %s [M N K [reps [huge]]]  (K a multiple of 32)\n", argv[0]);
        return 2;
    }
    uint8_t *a = malloc((size_t)(M * K)), *sa = malloc((size_t)(M * K / 32));
    uint8_t *b = malloc((size_t)(N * K)), *sb = malloc((size_t)(N * K / 32));
    size_t c_bytes = ((size_t)(M * N) * sizeof(float) + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
    float *c = aligned_alloc(2u << 20, c_bytes);
    if (!a || !sa || !b || !sb || !c) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    if (huge) madvise(c, c_bytes, MADV_HUGEPAGE);
    memset(c, 0, c_bytes);
    uint64_t x = 88172645463325252ull;
    for (int64_t i = 0; i < M * K; i++) a[i] = (uint8_t)((x = x * 6364136223846793005ull + 1) >> 56) & 0xF7;
    for (int64_t i = 0; i < N * K; i++) b[i] = (uint8_t)((x = x * 6364136223846793005ull + 1) >> 56) & 0xF7;
    for (int64_t i = 0; i < M * K / 32; i++) sa[i] = (uint8_t)(120 + i % 8);
    for (int64_t i = 0; i < N * K / 32; i++) sb[i] = (uint8_t)(124 + i % 6);

    int have_avx2 = cpu_has(CPU_AVX2) && cpu_has(CPU_FMA);
    int have_bf16 = gemm_isa_supported(GEMM_ISA_AVX512);
    printf("peak probe (1 core, GFLOP/s): vdpbf16ps %.1f, zmm FMA %.1f, ymm FMA %.1f\n",
           have_bf16 ? probe_bf16(20000000L) : 0, have_bf16 ? probe_fma512(20000000L) : 0,
           have_avx2 ? probe_fma256(20000000L) : 0);
    printf("gemm M=%lld N=%lld K=%lld, 1 thread, B prepared, C on %s pages, %d reps\n", (long long)M,
           (long long)N, (long long)K, huge ? "huge" : "normal", reps);

    double flops = 2.0 * (double)M * (double)N * (double)K;
    double *gflops = malloc((size_t)reps * sizeof *gflops), *ratio = malloc((size_t)reps * sizeof *ratio);
    for (int isa = GEMM_ISA_COUNT - 1; isa >= 0; isa--) {
        if (!gemm_isa_supported((gemm_isa)isa)) continue;
        if (isa == GEMM_ISA_REF && flops > 2e9) continue; /* minutes */
        probe_fn probe = isa == GEMM_ISA_AVX512 ? probe_bf16 : isa == GEMM_ISA_AVX2 ? probe_fma256 : NULL;
        gemm_b *gb;
        a2amm_error err;
        double t0 = now();
        if (gemm_b_prepare((gemm_isa)isa, b, sb, N, K, K / 32, A2AMM_E4M3, &gb, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        double t_prep = now() - t0;
        gemm_a_slab slab = {a, sa, K, K / 32, A2AMM_E4M3};
        gemm_accumulate(gb, &slab, M, 0, K, 0, N, c, N); /* warm-up */
        for (int r = 0; r < reps; r++) {
            double peak = probe ? probe(2000000L) : 0;
            t0 = now();
            gemm_accumulate(gb, &slab, M, 0, K, 0, N, c, N);
            gflops[r] = flops / (now() - t0) / 1e9;
            ratio[r] = peak > 0 ? gflops[r] / peak : 0;
        }
        qsort(gflops, (size_t)reps, sizeof *gflops, cmp_double);
        qsort(ratio, (size_t)reps, sizeof *ratio, cmp_double);
        printf("%-7s %6.1f GFLOP/s (%.1f..%.1f)  ", gemm_isa_name((gemm_isa)isa), gflops[reps / 2], gflops[0],
               gflops[reps - 1]);
        if (probe) printf("%5.1f%% of peak (median of per-rep ratios)", 100 * ratio[reps / 2]);
        else printf("(no probe here for this level: `a2amm bench gemm` probes AMX)");
        printf("  prepare %.1f ms\n", 1e3 * t_prep);
        gemm_b_free(gb);
    }
    free(gflops);
    free(ratio);
    free(a);
    free(sa);
    free(b);
    free(sb);
    free(c);
    return 0;
}
