/* The command's baseline matmul (run --baseline): OpenBLAS sgemm on fp32, to bf16. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "cli/run_rank.h"
#include "common/error.h"

/* fp32 to bf16, rounded to nearest even (NaN stays NaN). */
static uint16_t bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* The command's baseline matmul: OpenBLAS sgemm on fp32, rounded to bf16. */
typedef struct sgemm_baseline {
    int64_t M, N, K;
    float *x, *bt, *c;
} sgemm_baseline;

static void sgemm_destroy(void *ctx)
{
    sgemm_baseline *g = ctx;
    if (g) free(g->x), free(g->bt), free(g->c);
    free(g);
}

static int sgemm_create(const float *bt, int64_t M, int64_t N, int64_t K, int threads, void **ctx, float **x,
                        const char **what, a2amm_error *err)
{
    sgemm_baseline *g = calloc(1, sizeof *g);
    if (g) *g = (sgemm_baseline){M, N, K, malloc((size_t)(M * K) * sizeof(float)),
                                 malloc((size_t)(N * K) * sizeof(float)), malloc((size_t)(M * N) * sizeof(float))};
    if (!g || !g->x || !g->bt || !g->c) {
        sgemm_destroy(g);
        return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the baseline's fp32 operands");
    }
    memcpy(g->bt, bt, (size_t)(N * K) * sizeof(float));
    openblas_set_num_threads(threads);
    *ctx = g, *x = g->x, *what = "OpenBLAS sgemm on fp32 (weights dequantized once)";
    return A2AMM_OK;
}

static int sgemm_run(void *ctx, uint16_t *out, a2amm_error *err)
{
    (void)err;
    sgemm_baseline *g = ctx;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)g->M, (int)g->N, (int)g->K, 1.0f, g->x, (int)g->K,
                g->bt, (int)g->K, 0.0f, g->c, (int)g->N);
    for (int64_t i = 0; i < g->M * g->N; i++) out[i] = bf16_of(g->c[i]);
    return A2AMM_OK;
}

const run_baseline_gemm run_sgemm_baseline = {sgemm_create, sgemm_run, NULL, sgemm_destroy};

