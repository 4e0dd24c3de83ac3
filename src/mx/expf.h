/*
 * The exp and SiLU of the MoE op's activation (docs/op-contract.md, "The
 * MoE op"): one function for every kernel level, plain fp32 arithmetic in a
 * fixed order (no library call, no fused multiply-add: -std=c11 contracts
 * none), so a is the same bits on every CPU. Within 2 ulp of the C
 * library's expf (tests/test_mx.c checks it over the floats).
 */
#ifndef A2AMM_MX_EXPF_H
#define A2AMM_MX_EXPF_H

/* e^x: NaN for NaN, +Inf above ln(FLT_MAX), 0 below the smallest subnormal's half, subnormal between. */
float mx_expf(float x);
/* silu(g) = g / (1 + e^-g), in fp32 as written (NaN for -Inf, as g * sigmoid(g) gives). */
float mx_silu(float g);

#endif
