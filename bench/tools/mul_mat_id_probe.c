/*
 * mul_mat_id_probe: the MoE experts' one matmul as llama.cpp's ggml measures
 * it (test-backend-ops perf -o MUL_MAT_ID): E expert matrices [M, K]
 * (MXFP8 E4M3 here, q8_0 there), N tokens each using `used` distinct random
 * experts; each hit expert multiplies the rows of the tokens routed to it,
 * by the public API (a2amm_weights per expert, a2amm_matmul), on THREADS
 * threads (ggml's test runs on cores / 2). Prints the median of ITERS
 * passes over the hit experts, for docs/performance.md beside ggml's:
 *
 * The weights and activations are ggml's test data: floats uniform in
 * [-1, 1], here MXFP8-quantized (FLOOR scales), so nearly no code is zero
 * or subnormal, as in real weights (codes drawn uniformly from every code
 * put a zero or subnormal in nearly every 64-code group: the widening's
 * slow path, half the speed: docs/performance.md, "How a2amm is measured").
 *
 *   build/tools/mul_mat_id_probe E USED M K N [ITERS] [THREADS]
 *   e.g. build/tools/mul_mat_id_probe 128 8 768 2048 8     (Qwen3-30B-A3B's experts, 8 tokens)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "a2amm.h"

static uint64_t next(uint64_t *s)
{
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

/* rows x cols floats uniform in [-1, 1], quantized to E4M3 codes and scales (row strides cols, cols / 32). */
static int uniform_mx(uint64_t *s, int64_t rows, int64_t cols, float *tmp, uint8_t *codes, uint8_t *scales,
                      a2amm_error *err)
{
    for (int64_t i = 0; i < rows * cols; i++) tmp[i] = (float)((double)(next(s) >> 11) / 4503599627370496.0 - 1.0);
    return a2amm_mx_quantize_f32(tmp, rows, cols, cols, A2AMM_E4M3, A2AMM_SCALE_FLOOR, codes, cols, scales, cols / 32,
                                 err);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: mul_mat_id_probe E USED M K N [ITERS] [THREADS]\n");
        return 2;
    }
    const int E = atoi(argv[1]), used = atoi(argv[2]), iters = argc > 6 ? atoi(argv[6]) : 20;
    const int threads = argc > 7 ? atoi(argv[7]) : 1;
    const int64_t M = atoll(argv[3]), K = atoll(argv[4]), N = atoll(argv[5]);
    if (E < 1 || used < 1 || used > E || M < 1 || K < 32 || K % 32 || N < 1 || iters < 1 || iters > 1000) {
        fprintf(stderr, "mul_mat_id_probe: E >= USED >= 1, M >= 1, K a multiple of 32, N >= 1, ITERS 1-1000\n");
        return 2;
    }
    uint64_t s = 0x9E3779B97F4A7C15ull;
    uint8_t *b = malloc((size_t)(M * K)), *sb = malloc((size_t)(M * K / 32));
    a2amm_weights **w = calloc((size_t)E, sizeof *w);
    int64_t *rows = calloc((size_t)E, sizeof *rows);
    float *tmp = malloc(sizeof *tmp * (size_t)(M * K));
    a2amm_error err = {0, ""};
    if (!b || !sb || !w || !rows || !tmp) return 1;
    for (int e = 0; e < E; e++) {
        if (uniform_mx(&s, M, K, tmp, b, sb, &err) || a2amm_weights_create(b, sb, M, K, K / 32, A2AMM_E4M3, threads, &w[e], &err)) {
            fprintf(stderr, "mul_mat_id_probe: %s\n", err.msg);
            return 1;
        }
    }
    for (int64_t t = 0; t < N; t++) { /* each token's `used` distinct experts */
        int *pick = calloc((size_t)E, sizeof *pick);
        for (int j = 0; j < used;) {
            int e = (int)(next(&s) % (uint64_t)E);
            if (!pick[e]) pick[e] = 1, rows[e]++, j++;
        }
        free(pick);
    }
    int64_t most = 1, hit = 0;
    for (int e = 0; e < E; e++) most = rows[e] > most ? rows[e] : most, hit += rows[e] > 0;
    uint8_t *a = malloc((size_t)(most * K)), *sa = malloc((size_t)(most * K / 32));
    uint16_t *out = malloc(sizeof *out * (size_t)(most * M));
    float *xf = malloc(sizeof *xf * (size_t)(most * K));
    if (!a || !sa || !out || !xf || uniform_mx(&s, most, K, xf, a, sa, &err)) {
        fprintf(stderr, "mul_mat_id_probe: %s\n", err.msg[0] ? err.msg : "out of memory");
        return 1;
    }
    free(xf);
    double *t = malloc(sizeof *t * (size_t)iters);
    for (int it = -1; it < iters; it++) {
        double t0 = now_s();
        for (int e = 0; e < E; e++)
            if (rows[e] && a2amm_matmul(w[e], a, K, sa, K / 32, rows[e], A2AMM_E4M3, out, M, threads, &err)) {
                fprintf(stderr, "mul_mat_id_probe: %s\n", err.msg);
                return 1;
            }
        if (it >= 0) t[it] = now_s() - t0;
    }
    qsort(t, (size_t)iters, sizeof *t, cmp);
    const char *kernel = "?";
    a2amm_kernel(&kernel, NULL);
    printf("mul_mat_id_probe: E=%d used=%d M=%lld K=%lld N=%lld: %lld experts hit (at most %lld rows), %d thread%s, "
           "kernel %s: median %.3f ms (min %.3f), %.1f GB/s of the hit experts' fp8 codes\n", E, used, (long long)M,
           (long long)K, (long long)N, (long long)hit, (long long)most, threads, threads == 1 ? "" : "s", kernel,
           t[iters / 2] * 1e3, t[0] * 1e3, (double)hit * (double)(M * K) * 1.03125 / t[iters / 2] / 1e9);
    for (int e = 0; e < E; e++) a2amm_weights_destroy(w[e]);
    free(b), free(sb), free(tmp), free(w), free(rows), free(a), free(sa), free(out), free(t);
    return 0;
}
