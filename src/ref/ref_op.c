/* The reference operator: fp64 dequantize, dgemm, one bf16 rounding. */
#include "ref/ref_op.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "common/error.h"
#include "mx/mx.h"

/* Exact fp64 values of the 256 codes of a type and of the 256 scale bytes:
 * their product is exact, so a table look-up is the same as mx_dequant. */
typedef struct dequant_tables {
    double a_val[256], b_val[256], scale[256];
} dequant_tables;

static void tables_init(dequant_tables *t, const op_shape *s)
{
    for (int i = 0; i < 256; i++) {
        t->a_val[i] = mx_fp8_to_f32((uint8_t)i, s->a_type);
        t->b_val[i] = mx_fp8_to_f32((uint8_t)i, s->b_type);
        t->scale[i] = mx_e8m0_to_f64((uint8_t)i);
    }
}

/* X_j [M, K]: the rows A_r sends to j, laid side by side by source rank. */
static void gather_x(const op_shape *s, const op_sizes *z, int j, const uint8_t *const *a,
                     const uint8_t *const *sa, const dequant_tables *t, double *x)
{
    for (int64_t i = 0; i < s->M; i++)
        for (int64_t r = 0; r < s->R; r++) {
            const uint8_t *arow = a[r] + (j * s->M + i) * z->ka;
            const uint8_t *srow = sa[r] + (j * s->M + i) * z->ska;
            double *xrow = x + i * s->K + r * z->ka;
            for (int64_t k = 0; k < z->ka; k++)
                xrow[k] = t->a_val[arow[k]] * t->scale[srow[k / 32]];
        }
}

/* Bt [N, K]: B transposed, as stored. */
static void dequant_b(const op_shape *s, const op_sizes *z, const uint8_t *b,
                      const uint8_t *sb, const dequant_tables *t, double *bt)
{
    for (int64_t c = 0; c < s->N; c++)
        for (int64_t k = 0; k < s->K; k++)
            bt[c * s->K + k] = t->b_val[b[c * s->K + k]] * t->scale[sb[c * z->sk + k / 32]];
}

static double dot_f64(const double *x, const double *y, int64_t n)
{
    double acc = 0.0;
    for (int64_t k = 0; k < n; k++) acc += x[k] * y[k];
    return acc;
}

static int any_nonfinite(const double *v, int64_t n)
{
    for (int64_t k = 0; k < n; k++)
        if (!isfinite(v[k])) return 1;
    return 0;
}

/* Dequantizes X and Bt; on success the caller frees both. */
static int dequant_operands(const op_shape *s, op_sizes *z, int j, const uint8_t *const *a,
                            const uint8_t *const *sa, const uint8_t *b, const uint8_t *sb,
                            double **x_out, double **bt_out, a2amm_error *err)
{
    int rc = op_shape_check(s, z, err);
    if (rc) return rc;
    if (j < 0 || j >= s->R)
        return a2amm_fail(err, A2AMM_E_INVAL, "rank %d is outside 0..%lld", j, (long long)s->R - 1);
    double *x = malloc((size_t)s->M * (size_t)s->K * sizeof *x);
    double *bt = malloc((size_t)s->N * (size_t)s->K * sizeof *bt);
    dequant_tables *t = malloc(sizeof *t);
    if (!x || !bt || !t) {
        free(x), free(bt), free(t);
        return a2amm_fail(err, A2AMM_E_NOMEM, "reference: cannot allocate %.1f MB of fp64 operands",
                          (double)(s->M + s->N) * (double)s->K * 8 / 1e6);
    }
    tables_init(t, s);
    gather_x(s, z, j, a, sa, t, x);
    dequant_b(s, z, b, sb, t, bt);
    free(t);
    *x_out = x;
    *bt_out = bt;
    return A2AMM_OK;
}

int ref_op_rank(const op_shape *s, int j, const uint8_t *const *a, const uint8_t *const *sa,
                const uint8_t *b, const uint8_t *sb, uint16_t *out, a2amm_error *err)
{
    op_sizes z;
    double *x = NULL, *bt = NULL;
    if (s->M > INT_MAX || s->N > INT_MAX || s->K > INT_MAX)
        return a2amm_fail(err, A2AMM_E_OVERFLOW, "reference: M, N and K must each be below 2^31 for dgemm");
    int rc = dequant_operands(s, &z, j, a, sa, b, sb, &x, &bt, err);
    if (rc) return rc;
    double *c = malloc((size_t)s->M * (size_t)s->N * sizeof *c);
    unsigned char *row_special = calloc((size_t)s->M, 1);
    unsigned char *col_special = calloc((size_t)s->N, 1);
    if (!c || !row_special || !col_special) {
        free(x), free(bt), free(c), free(row_special), free(col_special);
        return a2amm_fail(err, A2AMM_E_NOMEM, "reference: cannot allocate the fp64 result");
    }
    int any_special = 0;
    for (int64_t i = 0; i < s->M; i++)
        any_special |= row_special[i] = (unsigned char)any_nonfinite(x + i * s->K, s->K);
    for (int64_t n = 0; n < s->N; n++)
        any_special |= col_special[n] = (unsigned char)any_nonfinite(bt + n * s->K, s->K);

    /* blasint is int in Debian's OpenBLAS: the dims were checked above. */
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)s->M, (int)s->N, (int)s->K, 1.0, x,
                (int)s->K, bt, (int)s->K, 0.0, c, (int)s->N);
    for (int64_t i = 0; i < s->M; i++)
        for (int64_t n = 0; n < s->N; n++) {
            double v = c[i * s->N + n];
            if (any_special && (row_special[i] || col_special[n]))
                v = dot_f64(x + i * s->K, bt + n * s->K, s->K);
            out[i * s->N + n] = mx_f64_to_bf16(v);
        }
    free(x), free(bt), free(c), free(row_special), free(col_special);
    return A2AMM_OK;
}
