/*
 * The MoE experts' activation on rows: a = bf16(silu(g) * u), silu as
 * mx_silu (mx/expf.h: plain fp32 operations in a fixed order), rounded to
 * nearest even; a NaN is the quiet NaN 0x7FC0 (a NaN's payload and sign
 * would otherwise depend on which operand an instruction passed on). The
 * vector levels take the portable level's operations lane by lane, no
 * fused multiply-add, so every level gives its bits (tests/test_swiglu.c).
 */
#ifndef A2AMM_OP_SWIGLU_H
#define A2AMM_OP_SWIGLU_H

#include <stdint.h>

#include "common/cpu.h"

/* a[i] for i < n as bf16 bits; on the best vector level (cpu_vector_best), or on a given one (usable on
 * this CPU). */
void swiglu_row(const float *g, const float *u, int64_t n, uint16_t *a);
void swiglu_row_at(cpu_vector_level level, const float *g, const float *u, int64_t n, uint16_t *a);

/* The same values as floats (each a bf16 value, exact): the MoE op's down projection takes them so. */
void swiglu_row_f32(const float *g, const float *u, int64_t n, float *a);

#endif
