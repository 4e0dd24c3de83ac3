/* The oneDNN baseline of `bench op` (see op_baseline.h). */
#include "bench/op_baseline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_peers.h"
#include "common/error.h"
#include "mx/mx.h"

typedef struct onednn_baseline {
    bench_onednn *o;
    int64_t M, N, K;
    float *x; /* bf16 matmul: A as dequantized, converted before each run; fp32: oneDNN's own A */
    int own_x;
    char what[160];
} onednn_baseline;

static void onednn_baseline_destroy(void *ctx)
{
    onednn_baseline *g = ctx;
    if (!g) return;
    bench_onednn_free(g->o);
    if (g->own_x) free(g->x);
    free(g);
}

static int onednn_baseline_create(const float *bt, int64_t M, int64_t N, int64_t K, int threads, void **ctx,
                                  float **x, const char **what, a2amm_error *err)
{
    onednn_baseline *g = calloc(1, sizeof *g);
    size_t mk = (size_t)(M * K), nk = (size_t)(N * K);
    float *af = calloc(mk, sizeof(float));
    uint16_t *a16 = calloc(mk, sizeof(uint16_t));
    uint16_t *bt16 = calloc(nk, sizeof(uint16_t));
    int rc = g && af && a16 && bt16 ? A2AMM_OK : a2amm_fail(err, A2AMM_E_NOMEM, "baseline: out of memory");
    if (!rc)
        for (size_t i = 0; i < nk; i++) bt16[i] = mx_f32_to_bf16(bt[i]);
    if (!rc) rc = bench_onednn_create(a16, bt16, af, bt, M, N, K, threads, &g->o, err);
    free(a16), free(bt16);
    if (rc) {
        free(af);
        onednn_baseline_destroy(g);
        return rc;
    }
    g->M = M, g->N = N, g->K = K;
    if (bench_onednn_is_f32(g->o)) { /* the rows are dequantized straight into oneDNN's A */
        free(af);
        g->x = bench_onednn_input(g->o);
    } else {
        g->x = af, g->own_x = 1;
    }
    snprintf(g->what, sizeof g->what, "oneDNN %s %s matmul, weights packed once (%s)%s", bench_onednn_version(),
             bench_onednn_is_f32(g->o) ? "fp32" : "bf16", bench_onednn_impl(g->o),
             bench_onednn_is_f32(g->o) ? "; no bf16 matmul for this CPU" : "");
    *ctx = g, *x = g->x, *what = g->what;
    return A2AMM_OK;
}

static int onednn_baseline_run(void *ctx, uint16_t *out, a2amm_error *err)
{
    onednn_baseline *g = ctx;
    size_t mk = (size_t)(g->M * g->K), mn = (size_t)(g->M * g->N);
    if (!bench_onednn_is_f32(g->o)) { /* what a user of the bf16 matmul does: round the rows to bf16 */
        uint16_t *a = bench_onednn_input(g->o);
        for (size_t i = 0; i < mk; i++) a[i] = mx_f32_to_bf16(g->x[i]);
    }
    int rc = bench_onednn_run(g->o, err);
    if (rc) return rc;
    const void *c = bench_onednn_result(g->o);
    if (bench_onednn_is_f32(g->o))
        for (size_t i = 0; i < mn; i++) out[i] = mx_f32_to_bf16(((const float *)c)[i]);
    else
        memcpy(out, c, mn * sizeof(uint16_t));
    return A2AMM_OK;
}

const run_baseline_gemm bench_onednn_baseline = {onednn_baseline_create, onednn_baseline_run, bench_onednn_idle,
                                                 onednn_baseline_destroy};
