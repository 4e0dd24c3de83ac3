/*
 * The MoE op's down projection, y = a x W2 (docs/op-contract.md, "The MoE
 * op"): a's rows are bf16 values (held as floats), W2 an expert's [H, I]
 * fp8 codes with a scale per 32 of I. Per output column c and 32-block b of
 * I: the block's products a_i * W2[c][i] in fp32 (a multiply, then an add:
 * the same rounding where a product underflows), summed i ascending from
 * +0; then acc = float((double)acc + (double)sum * 2^(scale - 127)), blocks
 * ascending from +0. A NaN result is stored as +qNaN (0x7FC00000), so the
 * bits never depend on which NaN an instruction propagated.
 *
 * W2 is kept packed for it (prepared once, the same bytes as the codes and
 * scales): panels of 16 output columns; per panel a 16-byte head (which of
 * its columns hold a NaN code: such a column is NaN in every row), then per
 * 32-block, the 16 columns' scale bytes and the block's 32 rows of the 16
 * columns' codes (row t: W2[16p .. 16p + 15][32b + t]), so a vector of 16
 * columns is one 16-byte load; then a tail of 16 bytes a 128 blocks, bit b
 * set where block b's codes are all normal (the avx2 level widens those by
 * integers, 1.2-1.4x the fp16 way). Every level reads that layout. The portable
 * and avx2 levels keep each column's order above, so they give the same
 * bits (tests/test_moe_down.c). The avx512 level sums each block's K-pairs
 * with VDPBF16PS (moe_down_pairs.c: odd product, then even, each rounded;
 * moe_down_portable_pairs is its portable twin, bit for bit), the amx level
 * with one TDPBF16PS (moe_down_amx.c: AMX's order, within the contract's
 * tolerance), each except rows whose values dot products would flush
 * (those take the rule above): as a2amm_matmul's levels, their bits are
 * their own. The vector levels widen the codes in registers for every group
 * of rows (amx: a panel at a time for all of them): a decode call reads
 * W2's fp8 bytes once and never a stored widened copy.
 */
#ifndef A2AMM_OP_MOE_DOWN_H
#define A2AMM_OP_MOE_DOWN_H

#include <stddef.h>
#include <stdint.h>

#include "a2amm.h"
#include "gemm/gemm.h"

enum { MOE_DOWN_NR = 16 /* columns of a panel */ };

/* Bytes of a packed W2 of [H, I] (H and I multiples of 32). */
size_t moe_down_bytes(int64_t H, int64_t I);

/* W2's codes [H][I] of b_type (row stride ldw) and scales [H][I/32] (row stride lds) into packed. */
void moe_down_pack(int64_t H, int64_t I, a2amm_fp8_type b_type, const uint8_t *w2, int64_t ldw, const uint8_t *s2,
                   int64_t lds, uint8_t *packed);

/* ys[i][c] for c < H and i < n, from a [n][I] (row stride I) and a packed W2 of b_type. 0, or -1 when out
 * of memory (the amx level's buffers; the others never fail). */
typedef int moe_down_fn(int64_t H, int64_t I, a2amm_fp8_type b_type, const float *a, int64_t n,
                         const uint8_t *packed, float *const *ys);

moe_down_fn moe_down_portable; /* the reference twin: plain C, any CPU */
moe_down_fn moe_down_avx2;     /* AVX2 + FMA CPUs only */
moe_down_fn moe_down_avx512;   /* the avx512 level's CPUs only (AVX-512 BF16 and VBMI): moe_down_pairs.c */

/* The avx512 level's portable twin: its order (K-pairs) in plain C, any CPU. */
moe_down_fn moe_down_portable_pairs;
/* (Whether this CPU's VDPBF16PS sums in that order: gemm_bf16_dot_order_holds, gemm/gemm_bf16_order.h;
 * where not, the avx512 level does not run, and moe_down_avx512 takes the sequential rule for every row.) */
/* The sequential rule alone on AVX-512F: the rows the K-pairs cannot take (moe_down_avx512's, the amx
 * level's). */
moe_down_fn moe_down_sequential_avx512;
moe_down_fn moe_down_amx;      /* AMX-BF16 CPUs whose kernel grants the tiles only (gemm_amx_usable) */

/* The level that goes with a kernel level (which the CPU's features chose): portable for ref, avx2 for
 * avx2, avx512 for avx512, amx for amx. */
moe_down_fn *moe_down_for(gemm_isa isa);

#endif
