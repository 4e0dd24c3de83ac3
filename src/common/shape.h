/*
 * The operator's problem shape and the sizes of its buffers: the rules of
 * the contract (docs/op-contract.md), for the library's own checks and for
 * the harness, whose seed layout stores the same arrays as files. Not part
 * of the public header: a program sizes its buffers from its own config
 * (a2amm_op_input gives the op's strides).
 */
#ifndef A2AMM_COMMON_SHAPE_H
#define A2AMM_COMMON_SHAPE_H

#include <stddef.h>
#include <stdint.h>

#include "a2amm.h"

/* Which operator: the seed's AllToAll then matmul, or the reverse. */
typedef enum op_kind {
    OP_ALLTOALL_MATMUL = 0, /* out_r [M, N] = (rank j's row block r, for every j, side by side along K) x B_r */
    OP_MATMUL_ALLTOALL = 1  /* Y_j = X_j x B_j [M, N]; out_r [R*M, N/R] = column block r of every Y_j, stacked */
} op_kind;

/* "alltoall-matmul" / "matmul-alltoall"; and back (A2AMM_E_INVAL for anything else). These and
 * op_shape_check read the op-kind table (op/op_kind.c). */
const char *op_kind_name(op_kind kind);
int op_kind_parse(const char *s, op_kind *out);

/*
 * The shape in the seed's command-line order M K N R, and the operator.
 * B_r is stored transposed [N, K] fp8 with scales [N, sk] in both; sk =
 * 2*ceil(K/64) (scale rows padded to an even count, as the seed's are).
 *   alltoall-matmul: rank r holds A_r [R*M, ka] fp8 with scales [R*M, ska],
 *     ka = K/R, ska = 2*ceil(ka/64), and writes out_r [M, N] bf16.
 *   matmul-alltoall: rank r holds X_r [M, K] (ka = K, ska = sk) and writes
 *     out_r [R*M, N/R] bf16.
 */
typedef struct op_shape {
    int64_t M, K, N, R;
    a2amm_fp8_type a_type, b_type;
    op_kind kind;
} op_shape;

/* Sizes derived from a checked shape, in elements (= bytes for fp8/E8M0). */
typedef struct op_sizes {
    int64_t ka;        /* A's row: K / R (alltoall-matmul) or K */
    int64_t ska;       /* scale bytes per A row: 2*ceil(ka/64) */
    int64_t sk;        /* scale bytes per B row: 2*ceil(K/64) */
    int64_t a_blocks;  /* A's blocks of M rows: R (one per destination) or 1 */
    int64_t a_rows;    /* A's rows: a_blocks*M */
    int64_t out_rows;  /* the output's rows: M or R*M */
    int64_t out_cols;  /* its columns: N or N/R */
    size_t a_bytes;    /* A_r: a_rows*ka */
    size_t sa_bytes;   /* its scales: a_rows*ska */
    size_t b_bytes;    /* B_r: N*K */
    size_t sb_bytes;   /* its scales: N*sk */
    size_t out_bytes;  /* out_r: out_rows*out_cols*2 (= M*N*2) */
} op_sizes;

/*
 * Checks the contract's rules (M, K, N, R >= 1; alltoall-matmul: K
 * divisible by R, K/R a multiple of 32; matmul-alltoall: K a multiple of
 * 32, N divisible by R; no size overflows) and fills *sizes (may be NULL).
 * A NULL shape is A2AMM_E_INVAL.
 */
int op_shape_check(const op_shape *shape, op_sizes *sizes, a2amm_error *err);

#endif
