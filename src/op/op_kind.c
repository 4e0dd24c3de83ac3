/* The op-kind table (op/op_kind.h) and what reads only it: the kinds' names, the contract's shape rules and the
 * sizes that follow from a shape (common/shape.h), and the public geometry query. */
#include "op/op_kind.h"

#include <stdint.h>
#include <string.h>

#include "op/rank.h"

/* alltoall-matmul: rank r's A_r holds R blocks of K/R columns, one for each destination. */
static int forward_rules(const op_shape *s, int64_t *ka, a2amm_error *err)
{
    if (s->K % s->R != 0)
        return a2amm_fail(err, A2AMM_E_INVAL, "K must be divisible by R (got K=%lld, R=%lld, K %% R = %lld)",
                          (long long)s->K, (long long)s->R, (long long)(s->K % s->R));
    *ka = s->K / s->R;
    if (*ka % 32 != 0)
        return a2amm_fail(err, A2AMM_E_INVAL,
                          "K / R must be a multiple of 32 (whole MX blocks per rank); got K / R = %lld / %lld = %lld",
                          (long long)s->K, (long long)s->R, (long long)*ka);
    return A2AMM_OK;
}

/* matmul-alltoall: X_r [M, K]; column block j of its product goes to rank j. */
static int reverse_rules(const op_shape *s, int64_t *ka, a2amm_error *err)
{
    if (s->N % s->R != 0)
        return a2amm_fail(err, A2AMM_E_INVAL,
                          "N must be divisible by R for matmul-alltoall: column block r of each result goes to rank "
                          "r (got N=%lld, R=%lld, N %% R = %lld)",
                          (long long)s->N, (long long)s->R, (long long)(s->N % s->R));
    *ka = s->K;
    if (*ka % 32 != 0)
        return a2amm_fail(err, A2AMM_E_INVAL, "K must be a multiple of 32 (whole MX blocks); got K = %lld",
                          (long long)s->K);
    return A2AMM_OK;
}

static const op_kind_row ROWS[] = {
    {.kind = OP_ALLTOALL_MATMUL, .api_kind = A2AMM_OP_ALLTOALL_MATMUL, .name = "alltoall-matmul",
     .rules = forward_rules, .a_blocks_per_rank = 1, .out_blocks_per_rank = 0, .out_cols_split = 0,
     .matmul_first = 0, .matmul_peer_key = "source", .matmul_arrow = "<-", .exec_fused = op_exec_fused,
     .exec_unfused = op_exec_unfused},
    {.kind = OP_MATMUL_ALLTOALL, .api_kind = A2AMM_OP_MATMUL_ALLTOALL, .name = "matmul-alltoall",
     .rules = reverse_rules, .a_blocks_per_rank = 0, .out_blocks_per_rank = 1, .out_cols_split = 1,
     .matmul_first = 1, .matmul_peer_key = "to", .matmul_arrow = "->", .exec_fused = op_exec_reverse_fused,
     .exec_unfused = op_exec_reverse_unfused},
};
enum { KINDS = sizeof ROWS / sizeof *ROWS };

const op_kind_row *op_kind_row_at(int i) { return i >= 0 && i < KINDS ? &ROWS[i] : NULL; }

const op_kind_row *op_kind_row_of(op_kind kind)
{
    for (int i = 0; i < KINDS; i++)
        if (ROWS[i].kind == kind) return &ROWS[i];
    return NULL;
}

const op_kind_row *op_kind_row_of_api(a2amm_op_kind kind)
{
    for (int i = 0; i < KINDS; i++)
        if (ROWS[i].api_kind == kind) return &ROWS[i];
    return NULL;
}

const char *op_kind_name(op_kind kind)
{
    const op_kind_row *k = op_kind_row_of(kind);
    return k ? k->name : "(not an op)";
}

int op_kind_parse(const char *s, op_kind *out)
{
    for (int i = 0; s && i < KINDS; i++)
        if (!strcmp(s, ROWS[i].name)) {
            *out = ROWS[i].kind;
            return A2AMM_OK;
        }
    return A2AMM_E_INVAL;
}

/* a*b into *out unless it exceeds limit; returns 0 on overflow. */
static int mul_within(uint64_t a, uint64_t b, uint64_t limit, uint64_t *out)
{
    if (a != 0 && b > limit / a) return 0;
    *out = a * b;
    return 1;
}

int op_shape_check(const op_shape *s, op_sizes *sizes, a2amm_error *err)
{
    if (!s) return a2amm_fail(err, A2AMM_E_INVAL, "op_shape_check: shape is NULL");
    if (s->M < 1 || s->K < 1 || s->N < 1 || s->R < 1)
        return a2amm_fail(err, A2AMM_E_INVAL,
                          "M, K, N and R must all be at least 1 (got M=%lld K=%lld N=%lld R=%lld)",
                          (long long)s->M, (long long)s->K, (long long)s->N, (long long)s->R);
    const op_kind_row *k = op_kind_row_of(s->kind);
    if (!k) return a2amm_fail(err, A2AMM_E_INVAL, "the op must be alltoall-matmul or matmul-alltoall");
    int64_t ka = 0;
    int rc = k->rules(s, &ka, err);
    if (rc) return rc;
    if ((unsigned)s->a_type > A2AMM_E5M2 || (unsigned)s->b_type > A2AMM_E5M2)
        return a2amm_fail(err, A2AMM_E_INVAL, "element types must be e4m3 or e5m2");

    /* Every size below is checked against a limit that leaves room for
     * offsets and index arithmetic in int64 and size_t. */
    const uint64_t limit = (uint64_t)INT64_MAX / 8;
    uint64_t ska = 2 * (((uint64_t)ka + 63) / 64);
    uint64_t sk = 2 * (((uint64_t)s->K + 63) / 64);
    uint64_t rows, a, sa, b, sb, mn, out;
    if (!mul_within((uint64_t)(k->a_blocks_per_rank ? s->R : 1), (uint64_t)s->M, limit, &rows) ||
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
        sizes->a_blocks = k->a_blocks_per_rank ? s->R : 1;
        sizes->a_rows = (int64_t)rows;
        sizes->out_rows = k->out_blocks_per_rank ? s->R * s->M : s->M;
        sizes->out_cols = k->out_cols_split ? s->N / s->R : s->N;
        sizes->a_bytes = (size_t)a;
        sizes->sa_bytes = (size_t)sa;
        sizes->b_bytes = (size_t)b;
        sizes->sb_bytes = (size_t)sb;
        sizes->out_bytes = (size_t)out;
    }
    return A2AMM_OK;
}
