/*
 * The reference operator: every rank's output computed in one process,
 * exactly as the contract says. Dequantize to fp64 (exact), multiply with
 * OpenBLAS dgemm (fp64 accumulation), round once to bf16 (nearest even).
 * Rows or columns that hold a NaN or Inf are recomputed by a scalar fp64
 * loop so IEEE special values propagate exactly as the contract says,
 * whatever the BLAS does with them. Shares nothing with the fast kernels but
 * the mx decoders, so it can judge them.
 */
#ifndef A2AMM_REF_OP_H
#define A2AMM_REF_OP_H

#include <stdint.h>

#include "a2amm.h"
#include "common/shape.h"

/*
 * alltoall-matmul (shape->kind): computes out_j [M, N] bf16 for destination
 * rank j.
 * a[r], sa[r]: A_r and SA_r of every source rank r < R.
 * b, sb: rank j's own B (transposed, [N, K]) and SB.
 */
int ref_op_rank(const op_shape *shape, int j, const uint8_t *const *a, const uint8_t *const *sa,
                const uint8_t *b, const uint8_t *sb, uint16_t *out, a2amm_error *err);

/*
 * matmul-alltoall (shape->kind): computes out_j [R*M, N/R] bf16 for
 * destination rank j: rows i*M .. (i+1)*M are X_i x B_i's columns
 * j*N/R .. (j+1)*N/R (every source i's own X and B).
 * x[i], sx[i]: X_i [M, K] and its scales [M, 2*ceil(K/64)] of every rank i < R.
 * b[i], sb[i]: every rank's B_i (transposed, [N, K]) and SB_i.
 * Specials as ref_op_rank: rows and columns with a NaN or Inf by the scalar loop.
 */
int ref_op_reverse_rank(const op_shape *shape, int j, const uint8_t *const *x, const uint8_t *const *sx,
                        const uint8_t *const *b, const uint8_t *const *sb, uint16_t *out, a2amm_error *err);

/* The golden of destination rank j for the shape's kind (ref_op_rank or ref_op_reverse_rank): a, sa, b, sb
 * every rank's input and weights. */
int ref_op_golden(const op_shape *shape, int j, const uint8_t *const *a, const uint8_t *const *sa,
                  const uint8_t *const *b, const uint8_t *const *sb, uint16_t *out, a2amm_error *err);

#endif
