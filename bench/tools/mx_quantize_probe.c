/*
 * The MX quantizer's levels side by side (not a test: a probe in
 * bench/tools, which make builds and the suite does not run): ROWS x COLS
 * Gaussian-like float32 values (a model's activations) quantized to E4M3
 * by every level this CPU runs, both scale modes, rounds interleaved (a
 * shared host's phases hit them alike), the best round of each; and whether
 * each level gave the portable level's bytes.
 *
 *   build/tools/mx_quantize_probe [ROWS COLS [ROUNDS]]   (default 16 2048 200: 16 tokens of 2048)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mx/mx.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    const long rows = argc > 1 ? atol(argv[1]) : 16, cols = argc > 2 ? atol(argv[2]) : 2048;
    const int rounds = argc > 3 ? atoi(argv[3]) : 200;
    if (argc > 4 || rows < 1 || cols < 1 || rounds < 1) {
        fprintf(stderr, "usage: mx_quantize_probe [ROWS COLS [ROUNDS]]\n");
        return 2;
    }
    const size_t n = (size_t)(rows * cols), nb = (size_t)(rows * ((cols + 31) / 32));
    float *x = malloc(n * sizeof *x);
    uint16_t *h = malloc(n * sizeof *h); /* x's bf16 halves: the bf16 entry's input */
    uint8_t *codes[3], *scales[3];
    for (int l = 0; l < 3; l++) codes[l] = malloc(n), scales[l] = malloc(nb);
    srand(1);
    for (size_t i = 0; i < n; i++) { /* the sum of three uniforms: near enough a Gaussian */
        double u = 0;
        for (int j = 0; j < 3; j++) u += rand() / (double)RAND_MAX - 0.5;
        x[i] = (float)(u * 2.0);
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof bits);
        h[i] = (uint16_t)(bits >> 16);
    }
    printf("mx_quantize_probe: %ld x %ld float32 to E4M3, best of %d rounds\n", rows, cols, rounds);
    for (int m = 0; m < 3; m++) { /* FLOOR, RCEIL, then RCEIL on bf16 input */
        const mx_scale_mode mode = m ? MX_SCALE_RCEIL : MX_SCALE_FLOOR;
        const int bf16 = m == 2;
        double best[3] = {1e9, 1e9, 1e9};
        for (int r = 0; r < rounds; r++)
            for (int l = 0; l < 3; l++) {
                if (!mx_quantize_level_usable((mx_quantize_level)l)) continue;
                const double t0 = now();
                for (long i = 0; i < rows; i++)
                    if (bf16)
                        mx_quantize_row_bf16_at((mx_quantize_level)l, h + i * cols, (size_t)cols, A2AMM_E4M3, mode,
                                                codes[l] + i * cols, scales[l] + i * ((cols + 31) / 32));
                    else
                        mx_quantize_row_at((mx_quantize_level)l, x + i * cols, (size_t)cols, A2AMM_E4M3, mode,
                                           codes[l] + i * cols, scales[l] + i * ((cols + 31) / 32));
                const double t = now() - t0;
                if (t < best[l]) best[l] = t;
            }
        for (int l = 0; l < 3; l++) {
            if (!mx_quantize_level_usable((mx_quantize_level)l)) {
                printf("  %-5s %-4s %-8s  (this CPU lacks it)\n", mx_scale_mode_name(mode), bf16 ? "bf16" : "f32",
                       mx_quantize_level_name((mx_quantize_level)l));
                continue;
            }
            const int same = !memcmp(codes[l], codes[0], n) && !memcmp(scales[l], scales[0], nb);
            printf("  %-5s %-4s %-8s %9.1f us  %5.2f ns a value  %5.2fx the portable level  %s\n",
                   mx_scale_mode_name(mode), bf16 ? "bf16" : "f32",
                   mx_quantize_level_name((mx_quantize_level)l), best[l] * 1e6, best[l] * 1e9 / (double)n,
                   best[0] / best[l], same ? "same bytes" : "DIFFERENT BYTES");
        }
    }
    for (int l = 0; l < 3; l++) free(codes[l]), free(scales[l]);
    free(x), free(h);
    return 0;
}
