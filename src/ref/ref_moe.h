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

/* The least magnitude bf16 rounds to Inf, (2 - 2^-8) 2^127 (fp32 overflows above it, to the same Inf). */
#define REF_MOE_OMEGA 0x1.ffp127

/*
 * data[r]: every rank's inputs (rank o's arrays hold experts o*E/R ..).
 * ref[r], bound[r], reach[r]: [T_r, H] each, written: the value, the
 * contract's bound on |out - ref|, and how large in magnitude any fp32 or
 * bf16 step of the op may get there (the overflow rule: an Inf of ref's sign
 * is the op's answer where reach >= REF_MOE_OMEGA). A reference value that
 * is not finite (NaN or Inf codes or scales in the data) has bound and reach
 * 0: the output must be the same kind of value.
 */
int ref_moe(const moe_io_shape *s, const moe_io_rank *data, double *const *ref, double *const *bound,
            double *const *reach, a2amm_error *err);

/* Whether an output value (bf16 bits) meets the contract (see above): within the bound of ref, or the Inf
 * the overflow rule allows; NaN only where ref is NaN, an infinite ref only by itself. */
int ref_moe_close(uint16_t got, double ref, double bound, double reach);

/* Whether got is an Inf that the overflow rule allows (ref finite and nonzero, of got's sign, and reach at
 * REF_MOE_OMEGA or beyond). */
int ref_moe_overflow_allowed(uint16_t got, double ref, double reach);

#endif
