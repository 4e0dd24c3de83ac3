/* The public single-rank MXFP8 matmul with prepared weights, over gemm/. */
#include <stdlib.h>

#include "a2amm.h"
#include "common/error.h"
#include "common/pool.h"
#include "gemm/gemm.h"

#include "api/api_internal.h"

int a2amm_weights_create(const uint8_t *b, const uint8_t *sb, int64_t n, int64_t k, int64_t ldsb,
                         a2amm_fp8_type b_type, int threads, a2amm_weights **out, a2amm_error *err)
{
    if (out) *out = NULL;
    if (!b || !sb || !out) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_weights_create: a NULL argument");
    if (b_type != A2AMM_E4M3 && b_type != A2AMM_E5M2)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_weights_create: b_type must be A2AMM_E4M3 or A2AMM_E5M2");
    if (threads < 0 || threads > 1024)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_weights_create: threads must be 0 (every core) to 1024 (got %d)",
                          threads);
    gemm_isa isa;
    int rc = gemm_isa_select(&isa, err);
    if (rc) return rc;
    a2amm_weights *w = calloc(1, sizeof *w);
    if (!w) return a2amm_fail(err, A2AMM_E_NOMEM, "a2amm_weights_create: out of memory");
    *w = (a2amm_weights){NULL, n, k, b_type};
    pool *workers = NULL;
    rc = pool_create(threads ? threads : pool_cpu_count(), &workers, err);
    if (!rc) rc = gemm_b_prepare_on(workers, isa, b, sb, n, k, ldsb, b_type, &w->b, err);
    pool_destroy(workers);
    if (rc) {
        free(w);
        return rc;
    }
    *out = w;
    return A2AMM_OK;
}

void a2amm_weights_destroy(a2amm_weights *w)
{
    if (!w) return;
    gemm_b_free(w->b);
    free(w);
}

typedef struct matmul_job {
    const a2amm_weights *w;
    gemm_a_slab slab;
    int64_t m;
    int threads;
    float *c;      /* the fp32 sums */
    int64_t ldc;
    uint16_t *out; /* rounded to bf16 here, or NULL: the sums are the result */
    int64_t ldo;
} matmul_job;

static void matmul_task(void *arg, int task)
{
    const matmul_job *j = arg;
    gemm_split p = gemm_split_task(j->m, j->w->n, j->w->k, j->threads, task);
    gemm_a_slab slab = j->slab;
    slab.a += p.r0 * slab.lda;
    slab.sa += p.r0 * slab.ldsa;
    if (j->out)
        gemm_multiply_store(j->w->b, &slab, p.r1 - p.r0, 0, j->w->k, p.n0, p.n1, j->c + p.r0 * j->ldc, j->ldc,
                            j->out + p.r0 * j->ldo, j->ldo);
    else
        gemm_multiply(j->w->b, &slab, p.r1 - p.r0, 0, j->w->k, p.n0, p.n1, j->c + p.r0 * j->ldc, j->ldc);
}

/* a2amm_matmul (out) or a2amm_matmul_f32 (c, ldc; out NULL): the checks, then the job over a pool. */
static int matmul(const char *call, const a2amm_weights *w, const uint8_t *a, int64_t lda, const uint8_t *sa,
                  int64_t ldsa, int64_t m, a2amm_fp8_type a_type, float *c, int64_t ldc, uint16_t *out, int64_t ldo,
                  int threads, a2amm_error *err)
{
    const char *result = out ? "ldo" : "ldc";
    const int64_t ld = out ? ldo : ldc;
    if (!w || !a || !sa || (!out && !c)) return a2amm_fail(err, A2AMM_E_INVAL, "%s: a NULL argument", call);
    if (m < 0 || lda < w->k || ldsa < w->k / 32 || ld < w->n)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: m must not be negative, lda >= k = %lld, ldsa >= k/32 = %lld, %s "
                          ">= n = %lld (got m %lld, lda %lld, ldsa %lld, %s %lld)", call, (long long)w->k,
                          (long long)(w->k / 32), result, (long long)w->n, (long long)m, (long long)lda,
                          (long long)ldsa, result, (long long)ld);
    if (a_type != A2AMM_E4M3 && a_type != A2AMM_E5M2)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: a_type must be A2AMM_E4M3 or A2AMM_E5M2", call);
    if (threads < 0 || threads > 1024) return a2amm_fail(err, A2AMM_E_INVAL, "%s: threads must be 0 to 1024", call);
    if (m == 0) return A2AMM_OK;
    if (threads == 0) threads = pool_cpu_count();
    pool *workers = NULL;
    float *sums = out ? malloc((size_t)m * (size_t)w->n * sizeof *sums) : c;
    int rc = sums ? pool_create(threads, &workers, err) : a2amm_fail(err, A2AMM_E_NOMEM, "%s: out of memory", call);
    if (!rc) {
        matmul_job j = {w, {a, sa, lda, ldsa, a_type}, m, threads, sums, out ? w->n : ldc, out, ldo};
        pool_run(workers, matmul_task, &j, gemm_split_count(m, w->n, w->k, threads));
    }
    pool_destroy(workers);
    if (out) free(sums);
    return rc;
}

int a2amm_matmul(const a2amm_weights *w, const uint8_t *a, int64_t lda, const uint8_t *sa, int64_t ldsa, int64_t m,
                 a2amm_fp8_type a_type, uint16_t *out, int64_t ldo, int threads, a2amm_error *err)
{
    if (!out) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_matmul: a NULL argument");
    return matmul("a2amm_matmul", w, a, lda, sa, ldsa, m, a_type, NULL, 0, out, ldo, threads, err);
}

int a2amm_matmul_f32(const a2amm_weights *w, const uint8_t *a, int64_t lda, const uint8_t *sa, int64_t ldsa,
                     int64_t m, a2amm_fp8_type a_type, float *c, int64_t ldc, int threads, a2amm_error *err)
{
    return matmul("a2amm_matmul_f32", w, a, lda, sa, ldsa, m, a_type, c, ldc, NULL, 0, threads, err);
}
