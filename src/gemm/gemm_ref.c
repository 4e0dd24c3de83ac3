/*
 * The portable reference level: no microkernel, so the driver sends every
 * 32-block of K through the exact path (gemm_exact.c): the exact fp8
 * products summed in fp32 (t ascending), then times the two block scales
 * 2^(sa + sb - 254) added into C with one rounding (computed in double, so
 * no scale overflows or underflows on its own). Exact for every scale; the
 * fast levels use the same code for the blocks they cannot fold, so those
 * blocks match this level bit for bit.
 */
#include "gemm/gemm_level.h"

const gemm_level gemm_ref_level = {.isa = GEMM_ISA_REF};
