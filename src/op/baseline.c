/*
 * The baseline a user writes today, timed beside the fused run: the whole
 * AllToAll, dequantize what arrived to fp32, OpenBLAS sgemm, round to bf16.
 * B is dequantized once (weights), like a user would keep fp32 weights.
 */
#include <cblas.h>
#include <stdlib.h>

#include "common/error.h"
#include "mx/mx.h"
#include "op/rank.h"

/* Dequantized fp32 value of code c under scale byte s (0xFF: NaN). */
static void dequant_table(a2amm_fp8_type t, float val[256], float scale[256])
{
    for (int i = 0; i < 256; i++) {
        val[i] = mx_fp8_to_f32((uint8_t)i, t);
        scale[i] = mx_e8m0_to_f32((uint8_t)i);
    }
}

int op_baseline_prepare(op_rank *rk, const uint8_t *b, const uint8_t *sb, a2amm_error *err)
{
    const a2amm_shape *s = rk->s;
    const a2amm_sizes *z = rk->z;
    rk->bl_x = malloc((size_t)(s->M * s->K) * sizeof(float));
    rk->bl_b = malloc((size_t)(s->N * s->K) * sizeof(float));
    rk->bl_c = malloc((size_t)(s->M * s->N) * sizeof(float));
    if (!rk->bl_x || !rk->bl_b || !rk->bl_c)
        return a2amm_fail(err, A2AMM_E_NOMEM, "rank %d: cannot allocate the fp32 baseline operands", rk->me);
    float val[256], scale[256];
    dequant_table(s->b_type, val, scale);
    for (int64_t n = 0; n < s->N; n++)
        for (int64_t k = 0; k < s->K; k++)
            rk->bl_b[n * s->K + k] = val[b[n * s->K + k]] * scale[sb[n * z->sk + k / 32]];
    openblas_set_num_threads(pool_threads(rk->pool));
    return A2AMM_OK;
}

void op_baseline_free(op_rank *rk)
{
    free(rk->bl_x);
    free(rk->bl_b);
    free(rk->bl_c);
    rk->bl_x = rk->bl_b = rk->bl_c = NULL;
}

int op_exec_baseline(op_rank *rk, a2amm_error *err)
{
    const a2amm_shape *s = rk->s;
    const a2amm_sizes *z = rk->z;
    int rc = op_exchange_all(rk, err);
    if (rc) return rc;
    comm_set_doing(rk->ctx, "baseline: dequantize and sgemm");
    float val[256], scale[256];
    dequant_table(s->a_type, val, scale);
    for (int r = 0; r < rk->R; r++) {
        /* X_j[i][r*ka + t]: my own block in place, the others from xbuf */
        const uint8_t *a = (r == rk->me ? rk->a : rk->xbuf) + (int64_t)r * s->M * z->ka;
        const uint8_t *sa = (r == rk->me ? rk->sa : rk->xbuf_s) + (int64_t)r * s->M * z->ska;
        for (int64_t i = 0; i < s->M; i++)
            for (int64_t t = 0; t < z->ka; t++)
                rk->bl_x[i * s->K + r * z->ka + t] = val[a[i * z->ka + t]] * scale[sa[i * z->ska + t / 32]];
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)s->M, (int)s->N, (int)s->K, 1.0f, rk->bl_x,
                (int)s->K, rk->bl_b, (int)s->K, 0.0f, rk->bl_c, (int)s->N);
    for (int64_t i = 0; i < s->M * s->N; i++) rk->out[i] = mx_f32_to_bf16(rk->bl_c[i]);
    return A2AMM_OK;
}
