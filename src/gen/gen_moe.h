/*
 * Input generation for the MoE op (a2amm gen --op moe): every rank's tokens,
 * routing and experts, deterministic (the same options give the same bytes on
 * every machine: integer RNG, plain arithmetic, no libm on the path). Expert
 * e's weights depend on e and the seed only, not on R.
 */
#ifndef A2AMM_GEN_MOE_H
#define A2AMM_GEN_MOE_H

#include "gen/gen.h"
#include "io/moe_io.h"

/* Fills rank r's arrays (moe_io_rank_alloc'd for the shape): x and the experts' weights quantized from
 * opt->dist values (normal or uniform; the weights scaled by 1/sqrt(fan-in)) with opt->scale_mode, the
 * routing by `route` (moe_io.h), weights softmax over the chosen experts' logits (they sum to 1; 0 in an
 * unused slot). A2AMM_E_NOMEM when its few rows of scratch cannot be allocated. */
int gen_moe_rank(const moe_io_shape *s, moe_io_route route, const gen_options *opt, int r, moe_io_rank *d,
                 a2amm_error *err);

/* e^x for x <= 0 in plain arithmetic (a Taylor series on x/64, squared six times): the same bits on every
 * machine, within 1e-9 relative of exp for x >= -40. */
double gen_exp_neg(double x);

#endif
