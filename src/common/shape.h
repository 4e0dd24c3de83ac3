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

/*
 * The shape in the seed's command-line order M K N R. Rank r holds A_r
 * [R*M, ka] fp8 with scales [R*M, ska], and B_r stored transposed [N, K]
 * fp8 with scales [N, sk]; ka = K/R; ska = 2*ceil(ka/64); sk =
 * 2*ceil(K/64) (scale rows padded to an even count, as the seed's are).
 * Every rank writes out_r [M, N] bf16.
 */
typedef struct op_shape {
    int64_t M, K, N, R;
    a2amm_fp8_type a_type, b_type;
} op_shape;

/* Sizes derived from a checked shape, in elements (= bytes for fp8/E8M0). */
typedef struct op_sizes {
    int64_t ka;        /* K / R */
    int64_t ska;       /* scale bytes per A row: 2*ceil(ka/64) */
    int64_t sk;        /* scale bytes per B row: 2*ceil(K/64) */
    size_t a_bytes;    /* A_r: R*M*ka */
    size_t sa_bytes;   /* its scales: R*M*ska */
    size_t b_bytes;    /* B_r: N*K */
    size_t sb_bytes;   /* its scales: N*sk */
    size_t out_bytes;  /* out_r: M*N*2 */
} op_sizes;

/*
 * Checks the contract's rules (M, K, N, R >= 1; K divisible by R; K/R a
 * multiple of 32; no size overflows) and fills *sizes (may be NULL). A NULL
 * shape is A2AMM_E_INVAL.
 */
int op_shape_check(const op_shape *shape, op_sizes *sizes, a2amm_error *err);

#endif
