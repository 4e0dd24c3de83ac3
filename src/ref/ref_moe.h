/*
 * The MoE op's reference (docs/op-contract.md, "The MoE op"): every rank's
 * out in fp64 from the formulas with no rounding at all, and for each value
 * the contract's tolerance (its P and Q sums), for gen's golden and verify's
 * check. Experts one at a time over every rank's tokens routed to them, each
 * product a dgemm (OpenBLAS, fp64). Shares nothing with the op but the mx
 * decoders, so it can judge it.
 */
#ifndef A2AMM_REF_REF_MOE_H
#define A2AMM_REF_REF_MOE_H

#include "a2amm.h"
#include "io/moe_io.h"

/*
 * data[r]: every rank's inputs (rank o's arrays hold experts o*E/R ..).
 * ref[r], bound[r]: [T_r, H] each, written. A reference value that is not
 * finite (NaN or Inf codes or scales in the data) has bound 0: the output
 * must be the same kind of value.
 */
int ref_moe(const moe_io_shape *s, const moe_io_rank *data, double *const *ref, double *const *bound,
            a2amm_error *err);

/* Whether an output value (bf16 bits) meets the reference within the bound (see above). */
int ref_moe_close(uint16_t got, double ref, double bound);

#endif
