/*
 * MX number formats (OCP MX v1.0, OFP8): fp8 E4M3 and E5M2, the E8M0 block
 * scale, bf16, and block quantization along a row in blocks of 32.
 * Pure functions: no allocation, no global state. Every conversion rounds to
 * nearest, ties to even, computed from the bits (never through log2).
 */
#ifndef A2AMM_MX_H
#define A2AMM_MX_H

#include <stdint.h>
#include <stddef.h>

#include "a2amm.h"

#define MX_BLOCK 32 /* elements sharing one E8M0 scale */

/* The code of one fp8 format's canonical NaN (E4M3 S.1111.111, E5M2 S.11111.11). */
#define MX_FP8_NAN 0x7F
#define MX_E8M0_NAN 0xFF

/* Exact value of an fp8 code (NaN for NaN codes, +-Inf for E5M2 Inf). */
float mx_fp8_to_f32(uint8_t code, a2amm_fp8_type type);
/* The format's largest finite value: 448 (E4M3) or 57344 (E5M2). */
float mx_fp8_max(a2amm_fp8_type type);
/* The format's emax, the exponent of its largest power of two: 8 or 15. */
int mx_fp8_emax(a2amm_fp8_type type);

/*
 * Encodes x to fp8, round-to-nearest-even. Saturating: out-of-range values
 * (and infinities) become +-max. Non-saturating: they become NaN (E4M3, which
 * has no Inf) or +-Inf (E5M2). NaN always becomes NaN.
 */
uint8_t mx_f64_to_fp8(double x, a2amm_fp8_type type, int saturate);
uint8_t mx_f32_to_fp8(float x, a2amm_fp8_type type, int saturate);
/* mx_f32_to_fp8(x, type, 1) in a few integer steps (the quantizer's inner loop). */
uint8_t mx_f32_to_fp8_sat(float x, a2amm_fp8_type type);

/* E8M0 scale: 2^(b-127) for b in 0..254 (0x00 is 2^-127, not zero); 0xFF is NaN. */
double mx_e8m0_to_f64(uint8_t b);
float mx_e8m0_to_f32(uint8_t b);
/*
 * A plain cast of a positive value to the nearest power of two as E8M0
 * (ties between 2^e and 2^(e+1), at 1.5*2^e, go up). Saturates to 0xFE and
 * 0x00; NaN, Inf, zero and negative values give 0xFF (E8M0 has no sign or
 * zero). This is not a scale algorithm: see mx_block_scale.
 */
uint8_t mx_f32_to_e8m0(float x);

/* bf16 <-> float. Encoding rounds to nearest even, keeps subnormals and
 * gives +-Inf on overflow; NaN stays NaN (quiet). */
float mx_bf16_to_f32(uint16_t h);
uint16_t mx_f32_to_bf16(float x);
/* Rounds a double straight to bf16 (one rounding, no double rounding via float). */
uint16_t mx_f64_to_bf16(double x);

/* ---- Block quantization ---------------------------------------------- */
typedef enum mx_scale_mode {
    MX_SCALE_FLOOR = 0, /* OCP: clamp(E(amax) - 127 - emax, -127, 127) + 127 */
    MX_SCALE_RCEIL = 1  /* NVIDIA/torchao: ceil of exponent of amax/max */
} mx_scale_mode;

/* "floor" / "rceil". */
const char *mx_scale_mode_name(mx_scale_mode m);
int mx_scale_mode_parse(const char *s, mx_scale_mode *out);

/*
 * The shared scale byte for a block of n values: 0xFF when any is NaN or
 * Inf, 0x00 when all are zero, else per the mode.
 */
uint8_t mx_block_scale(const float *x, size_t n, a2amm_fp8_type type, mx_scale_mode mode);

/*
 * Quantizes one block of n <= 32 values: writes the scale byte and n codes
 * (saturating RNE of x / 2^(scale-127)). A 0xFF block gets NaN codes.
 */
void mx_quantize_block(const float *x, size_t n, a2amm_fp8_type type, mx_scale_mode mode,
                       uint8_t *codes, uint8_t *scale);

/*
 * The scale byte of a block whose largest magnitude has the bits amax_bits
 * (|x| as bits: 0x7F800000 or more for Inf and NaN): mx_block_scale's
 * second half, which the vector levels share.
 */
uint8_t mx_scale_of_amax(uint32_t amax_bits, a2amm_fp8_type type, mx_scale_mode mode);

/* 2^(127 - scale) as a float: what a block's values are multiplied by before their rounding to fp8. */
float mx_scale_inverse(uint8_t scale);

/*
 * Quantizes a row of len values in blocks of 32 (a last partial block is
 * allowed): codes[len], scales[ceil(len/32)]. The fastest level this CPU
 * runs (mx_quantize_level_best); every level gives the same bytes.
 */
void mx_quantize_row(const float *x, size_t len, a2amm_fp8_type type, mx_scale_mode mode,
                     uint8_t *codes, uint8_t *scales);

/* The quantizer's levels: mx_quantize_block block by block, or 16 (avx512) or 8 (avx2) values a step. */
typedef enum mx_quantize_level { MX_QUANTIZE_PORTABLE, MX_QUANTIZE_AVX2, MX_QUANTIZE_AVX512 } mx_quantize_level; /* cpu_vector_level's */

/* Whether this CPU runs the level (as cpu_has says: A2AMM_CPU_HIDE counts); the best one it runs. */
int mx_quantize_level_usable(mx_quantize_level level);
mx_quantize_level mx_quantize_level_best(void);
const char *mx_quantize_level_name(mx_quantize_level level);

/* mx_quantize_row on a given level (usable on this CPU); the portable level is mx_quantize_block's loop. */
void mx_quantize_row_at(mx_quantize_level level, const float *x, size_t len, a2amm_fp8_type type,
                        mx_scale_mode mode, uint8_t *codes, uint8_t *scales);
void mx_quantize_row_portable(const float *x, size_t len, a2amm_fp8_type type, mx_scale_mode mode,
                              uint8_t *codes, uint8_t *scales);
/* The same of a row of bf16 values (bits), each widened exactly: the bytes of its floats' row. */
void mx_quantize_row_bf16(const uint16_t *x, size_t len, a2amm_fp8_type type, mx_scale_mode mode,
                          uint8_t *codes, uint8_t *scales);
void mx_quantize_row_bf16_at(mx_quantize_level level, const uint16_t *x, size_t len, a2amm_fp8_type type,
                             mx_scale_mode mode, uint8_t *codes, uint8_t *scales);

/* Dequantized value of one element: fp8 value * 2^(scale-127), in double
 * (exact: the product always fits). NaN when the scale is 0xFF. */
double mx_dequant(uint8_t code, uint8_t scale, a2amm_fp8_type type);

#endif
