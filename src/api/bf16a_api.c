/*
 * The public matmul of a bf16 A by MXFP8 weights: the MoE op's down
 * projection (op/moe_down.h) over weights of the caller's, so that experts
 * a caller computes with the public calls (a2amm_matmul_f32, a2amm_swiglu,
 * this) give the op's bits.
 */
#include <stdlib.h>
#include <string.h>

#include "a2amm.h"
#include "common/error.h"
#include "common/hugemem.h"
#include "common/pool.h"
#include "gemm/gemm.h"
#include "mx/mx.h"
#include "op/moe_down.h"

struct a2amm_bf16a_weights {
    int64_t n, k;
    a2amm_fp8_type type;
    moe_down_fn *down; /* the level a2amm_weights_create would pick */
    uint8_t *packed;   /* moe_down_pack's layout */
};

int a2amm_bf16a_weights_create(const uint8_t *b, const uint8_t *sb, int64_t n, int64_t k, int64_t ldsb,
                               a2amm_fp8_type b_type, a2amm_bf16a_weights **out, a2amm_error *err)
{
    static const char call[] = "a2amm_bf16a_weights_create";
    if (out) *out = NULL;
    if (!b || !sb || !out) return a2amm_fail(err, A2AMM_E_INVAL, "%s: a NULL argument", call);
    if (n <= 0 || k <= 0 || n % 32 || k % 32 || ldsb < k / 32)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: n and k must be positive multiples of 32 and ldsb >= k/32 (got n "
                          "%lld, k %lld, ldsb %lld)", call, (long long)n, (long long)k, (long long)ldsb);
    if (b_type != A2AMM_E4M3 && b_type != A2AMM_E5M2)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: b_type must be A2AMM_E4M3 or A2AMM_E5M2", call);
    gemm_isa isa;
    int rc = gemm_isa_select(&isa, err);
    if (rc) return rc;
    a2amm_bf16a_weights *w = calloc(1, sizeof *w);
    if (w) w->packed = hugemem_alloc(moe_down_bytes(n, k)); /* streamed each call: 2 MB pages */
    if (!w || !w->packed) {
        free(w);
        return a2amm_fail(err, A2AMM_E_NOMEM, "%s: out of memory for %lld x %lld weights", call, (long long)n,
                          (long long)k);
    }
    w->n = n, w->k = k, w->type = b_type, w->down = moe_down_for(isa);
    moe_down_pack(n, k, b_type, b, k, sb, ldsb, w->packed);
    *out = w;
    return A2AMM_OK;
}

void a2amm_bf16a_weights_destroy(a2amm_bf16a_weights *w)
{
    if (!w) return;
    free(w->packed);
    free(w);
}

typedef struct bf16a_job {
    const a2amm_bf16a_weights *w;
    const uint16_t *a;
    int64_t lda;
    float *y;
    int64_t ldy;
    float *af;  /* room for a's values as floats, rows k apart */
    float **ys; /* room for a pointer a row of y */
    int64_t m;
    int tasks;
    _Atomic int failed; /* a task's down projection ran out of memory */
} bf16a_job;

/* A slice of the rows, widened to floats (exact) by the task itself: a row's outputs do not depend on the
 * others it is computed with (every level gives the portable level's bits, row by row), so any split gives
 * the same bits. */
static void bf16a_task(void *arg, int task)
{
    bf16a_job *j = arg;
    const int64_t r0 = j->m * task / j->tasks, r1 = j->m * (task + 1) / j->tasks, k = j->w->k;
    for (int64_t i = r0; i < r1; i++) {
        for (int64_t c = 0; c < k; c++) { /* bf16 bits to their float: exact, inline (a call a value cost more) */
            const uint32_t w = (uint32_t)j->a[i * j->lda + c] << 16;
            memcpy(&j->af[i * k + c], &w, sizeof w);
        }
        j->ys[i] = j->y + i * j->ldy;
    }
    if (r1 > r0 && j->w->down(j->w->n, k, j->w->type, j->af + r0 * k, r1 - r0, j->w->packed, j->ys + r0) != 0)
        j->failed = 1;
}

int a2amm_matmul_bf16a(const a2amm_bf16a_weights *w, const uint16_t *a, int64_t lda, int64_t m, float *y,
                       int64_t ldy, int threads, a2amm_error *err)
{
    static const char call[] = "a2amm_matmul_bf16a";
    if (!w || !a || !y) return a2amm_fail(err, A2AMM_E_INVAL, "%s: a NULL argument", call);
    if (m < 0 || lda < w->k || ldy < w->n)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: m must not be negative, lda >= k = %lld and ldy >= n = %lld (got "
                          "m %lld, lda %lld, ldy %lld)", call, (long long)w->k, (long long)w->n, (long long)m,
                          (long long)lda, (long long)ldy);
    if (threads < 0 || threads > 1024)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: threads must be 0 (every core) to 1024 (got %d)", call, threads);
    if (m == 0) return A2AMM_OK;
    if (threads == 0) threads = pool_cpu_count();
    /* the down projection takes a's values as floats, rows k apart, and a pointer a row of y */
    float *af = malloc(sizeof *af * (size_t)(m * w->k));
    float **ys = malloc(sizeof *ys * (size_t)m);
    pool *workers = NULL;
    int rc = af && ys ? pool_create(threads, &workers, err)
                      : a2amm_fail(err, A2AMM_E_NOMEM, "%s: out of memory for %lld rows", call, (long long)m);
    if (!rc) {
        bf16a_job j = {w, a, lda, y, ldy, af, ys, m, (int)(m < threads ? m : threads), 0};
        pool_run(workers, bf16a_task, &j, j.tasks);
        if (j.failed) rc = a2amm_fail(err, A2AMM_E_NOMEM, "%s: out of memory for %lld rows", call, (long long)m);
    }
    pool_destroy(workers);
    free(af), free(ys);
    return rc;
}
