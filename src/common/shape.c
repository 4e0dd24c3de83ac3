/* The contract's shape rules and the sizes that follow from a shape (common/shape.h); the fp8 type names. */
#include "common/error.h"
#include "common/shape.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

const char *a2amm_fp8_type_name(a2amm_fp8_type t)
{
    return t == A2AMM_E4M3 ? "e4m3" : t == A2AMM_E5M2 ? "e5m2" : "(not an fp8 type)";
}

int a2amm_fp8_type_parse(const char *s, a2amm_fp8_type *out, a2amm_error *err)
{
    if (!s || !out) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_fp8_type_parse: s and out must not be NULL");
    if (strcasecmp(s, "e4m3") == 0) { *out = A2AMM_E4M3; return A2AMM_OK; }
    if (strcasecmp(s, "e5m2") == 0) { *out = A2AMM_E5M2; return A2AMM_OK; }
    return a2amm_fail(err, A2AMM_E_INVAL, "'%s' is not an fp8 type: expected e4m3 or e5m2", s);
}

/* a*b into *out unless it exceeds limit; returns 0 on overflow. */
static int mul_within(uint64_t a, uint64_t b, uint64_t limit, uint64_t *out)
{
    if (a != 0 && b > limit / a) return 0;
    *out = a * b;
    return 1;
}

const char *op_kind_name(op_kind kind)
{
    return kind == OP_ALLTOALL_MATMUL ? "alltoall-matmul" : kind == OP_MATMUL_ALLTOALL ? "matmul-alltoall" : "(not an op)";
}

int op_kind_parse(const char *s, op_kind *out)
{
    for (int k = OP_ALLTOALL_MATMUL; s && k <= OP_MATMUL_ALLTOALL; k++)
        if (!strcmp(s, op_kind_name((op_kind)k))) {
            *out = (op_kind)k;
            return A2AMM_OK;
        }
    return A2AMM_E_INVAL;
}

int op_shape_check(const op_shape *s, op_sizes *sizes, a2amm_error *err)
{
    if (!s) return a2amm_fail(err, A2AMM_E_INVAL, "op_shape_check: shape is NULL");
    if (s->M < 1 || s->K < 1 || s->N < 1 || s->R < 1)
        return a2amm_fail(err, A2AMM_E_INVAL,
                          "M, K, N and R must all be at least 1 (got M=%lld K=%lld N=%lld R=%lld)",
                          (long long)s->M, (long long)s->K, (long long)s->N, (long long)s->R);
    if (s->kind != OP_ALLTOALL_MATMUL && s->kind != OP_MATMUL_ALLTOALL)
        return a2amm_fail(err, A2AMM_E_INVAL, "the op must be alltoall-matmul or matmul-alltoall");
    int reverse = s->kind == OP_MATMUL_ALLTOALL;
    if (!reverse && s->K % s->R != 0)
        return a2amm_fail(err, A2AMM_E_INVAL,
                          "K must be divisible by R (got K=%lld, R=%lld, K %% R = %lld)",
                          (long long)s->K, (long long)s->R, (long long)(s->K % s->R));
    if (reverse && s->N % s->R != 0)
        return a2amm_fail(err, A2AMM_E_INVAL,
                          "N must be divisible by R for matmul-alltoall: column block r of each result goes to rank "
                          "r (got N=%lld, R=%lld, N %% R = %lld)",
                          (long long)s->N, (long long)s->R, (long long)(s->N % s->R));
    int64_t ka = reverse ? s->K : s->K / s->R;
    if (ka % 32 != 0)
        return reverse ? a2amm_fail(err, A2AMM_E_INVAL, "K must be a multiple of 32 (whole MX blocks); got K = %lld",
                                    (long long)s->K)
                       : a2amm_fail(err, A2AMM_E_INVAL,
                                    "K / R must be a multiple of 32 (whole MX blocks per rank); got K / R = %lld / "
                                    "%lld = %lld",
                                    (long long)s->K, (long long)s->R, (long long)ka);
    if ((unsigned)s->a_type > A2AMM_E5M2 || (unsigned)s->b_type > A2AMM_E5M2)
        return a2amm_fail(err, A2AMM_E_INVAL, "element types must be e4m3 or e5m2");

    /* Every size below is checked against a limit that leaves room for
     * offsets and index arithmetic in int64 and size_t. */
    const uint64_t limit = (uint64_t)INT64_MAX / 8;
    uint64_t ska = 2 * (((uint64_t)ka + 63) / 64);
    uint64_t sk = 2 * (((uint64_t)s->K + 63) / 64);
    uint64_t rows, a, sa, b, sb, mn, out;
    if (!mul_within((uint64_t)(reverse ? 1 : s->R), (uint64_t)s->M, limit, &rows) ||
        !mul_within(rows, (uint64_t)ka, limit, &a) ||
        !mul_within(rows, ska, limit, &sa) ||
        !mul_within((uint64_t)s->N, (uint64_t)s->K, limit, &b) ||
        !mul_within((uint64_t)s->N, sk, limit, &sb) ||
        !mul_within((uint64_t)s->M, (uint64_t)s->N, limit, &mn) ||
        !mul_within(mn, 2, limit, &out) ||
        a > SIZE_MAX || b > SIZE_MAX || out > SIZE_MAX)
        return a2amm_fail(err, A2AMM_E_OVERFLOW,
                          "shape M=%lld K=%lld N=%lld R=%lld is too large: its buffer sizes overflow",
                          (long long)s->M, (long long)s->K, (long long)s->N, (long long)s->R);
    if (sizes) {
        sizes->ka = ka;
        sizes->ska = (int64_t)ska;
        sizes->sk = (int64_t)sk;
        sizes->a_rows = (int64_t)rows;
        sizes->out_rows = reverse ? s->R * s->M : s->M;
        sizes->out_cols = reverse ? s->N / s->R : s->N;
        sizes->a_bytes = (size_t)a;
        sizes->sa_bytes = (size_t)sa;
        sizes->b_bytes = (size_t)b;
        sizes->sb_bytes = (size_t)sb;
        sizes->out_bytes = (size_t)out;
    }
    return A2AMM_OK;
}
