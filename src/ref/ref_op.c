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

/* Bt [n, K]: n columns of B (rows of B transposed, as stored) from b's. */
static void dequant_b(const op_shape *s, const op_sizes *z, const uint8_t *b,
                      const uint8_t *sb, int64_t n, const dequant_tables *t, double *bt)
{
    for (int64_t c = 0; c < n; c++)
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
    dequant_b(s, z, b, sb, s->N, t, bt);
    free(t);
    *x_out = x;
    *bt_out = bt;
    return A2AMM_OK;
}

/* The checks both ops share: the shape's rules, j a rank, dimensions dgemm takes. */
static int check_call(const op_shape *s, op_kind kind, op_sizes *z, int j, a2amm_error *err)
{
    if (s->M > INT_MAX || s->N > INT_MAX || s->K > INT_MAX)
        return a2amm_fail(err, A2AMM_E_OVERFLOW, "reference: M, N and K must each be below 2^31 for dgemm");
    if (s->kind != kind)
        return a2amm_fail(err, A2AMM_E_INVAL, "reference: the shape is of op %s, not %s", op_kind_name(s->kind),
                          op_kind_name(kind));
    int rc = op_shape_check(s, z, err);
    if (rc) return rc;
    if (j < 0 || j >= s->R)
        return a2amm_fail(err, A2AMM_E_INVAL, "rank %d is outside 0..%lld", j, (long long)s->R - 1);
    return A2AMM_OK;
}

/*
 * out [M, n] (row stride ldo) = x [M, K] times bt [n, K] transposed, in fp64 (dgemm), each value rounded
 * once to bf16; rows of x and columns of bt that hold a NaN or Inf recomputed by the scalar loop.
 */
static int multiply_round(const double *x, const double *bt, int64_t M, int64_t n, int64_t K, uint16_t *out,
                          int64_t ldo, a2amm_error *err)
{
    double *c = malloc((size_t)M * (size_t)n * sizeof *c);
    unsigned char *row_special = calloc((size_t)M, 1);
    unsigned char *col_special = calloc((size_t)n, 1);
    if (!c || !row_special || !col_special) {
        free(c), free(row_special), free(col_special);
        return a2amm_fail(err, A2AMM_E_NOMEM, "reference: cannot allocate the fp64 result");
    }
    int any_special = 0;
    for (int64_t i = 0; i < M; i++) any_special |= row_special[i] = (unsigned char)any_nonfinite(x + i * K, K);
    for (int64_t col = 0; col < n; col++)
        any_special |= col_special[col] = (unsigned char)any_nonfinite(bt + col * K, K);

    /* blasint is int in Debian's OpenBLAS: the dims were checked (check_call). */
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)n, (int)K, 1.0, x, (int)K, bt, (int)K, 0.0, c,
                (int)n);
    for (int64_t i = 0; i < M; i++)
        for (int64_t col = 0; col < n; col++) {
            double v = c[i * n + col];
            if (any_special && (row_special[i] || col_special[col])) v = dot_f64(x + i * K, bt + col * K, K);
            out[i * ldo + col] = mx_f64_to_bf16(v);
        }
    free(c), free(row_special), free(col_special);
    return A2AMM_OK;
}

int ref_op_rank(const op_shape *s, int j, const uint8_t *const *a, const uint8_t *const *sa,
                const uint8_t *b, const uint8_t *sb, uint16_t *out, a2amm_error *err)
{
    op_sizes z;
    double *x = NULL, *bt = NULL;
    int rc = check_call(s, OP_ALLTOALL_MATMUL, &z, j, err);
    if (!rc) rc = dequant_operands(s, &z, j, a, sa, b, sb, &x, &bt, err);
    if (!rc) rc = multiply_round(x, bt, s->M, s->N, s->K, out, s->N, err);
    free(x), free(bt);
    return rc;
}

int ref_op_golden(const op_shape *s, int j, const uint8_t *const *a, const uint8_t *const *sa,
                  const uint8_t *const *b, const uint8_t *const *sb, uint16_t *out, a2amm_error *err)
{
    if (!s) return a2amm_fail(err, A2AMM_E_INVAL, "reference: the shape is NULL");
    if (s->kind == OP_MATMUL_ALLTOALL) return ref_op_reverse_rank(s, j, a, sa, b, sb, out, err);
    if (j < 0 || j >= s->R)
        return a2amm_fail(err, A2AMM_E_INVAL, "rank %d is outside 0..%lld", j, (long long)s->R - 1);
    return ref_op_rank(s, j, a, sa, b[j], sb[j], out, err);
}

int ref_op_reverse_rank(const op_shape *s, int j, const uint8_t *const *x, const uint8_t *const *sx,
                        const uint8_t *const *b, const uint8_t *const *sb, uint16_t *out, a2amm_error *err)
{
    op_sizes z;
    int rc = check_call(s, OP_MATMUL_ALLTOALL, &z, j, err);
    if (rc) return rc;
    int64_t nb = s->N / s->R;
    double *xd = malloc((size_t)s->M * (size_t)s->K * sizeof *xd);
    double *bt = malloc((size_t)nb * (size_t)s->K * sizeof *bt);
    dequant_tables *t = malloc(sizeof *t);
    if (!xd || !bt || !t) rc = a2amm_fail(err, A2AMM_E_NOMEM, "reference: cannot allocate %.1f MB of fp64 operands",
                                          (double)(s->M + nb) * (double)s->K * 8 / 1e6);
    if (!rc) tables_init(t, s);
    /* rows i*M.. of the output: source i's X_i times column block j of its own B_i */
    for (int i = 0; !rc && i < s->R; i++) {
        for (int64_t row = 0; row < s->M; row++)
            for (int64_t k = 0; k < s->K; k++)
                xd[row * s->K + k] = t->a_val[x[i][row * s->K + k]] * t->scale[sx[i][row * z.ska + k / 32]];
        dequant_b(s, &z, b[i] + (size_t)(j * nb) * (size_t)s->K, sb[i] + (size_t)(j * nb) * (size_t)z.sk, nb, t,
                  bt);
        rc = multiply_round(xd, bt, s->M, nb, s->K, out + (size_t)i * (size_t)s->M * (size_t)nb, nb, err);
    }
    free(xd), free(bt), free(t);
    return rc;
}
