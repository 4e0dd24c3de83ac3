/*
 * The bf16 packing the avx512 and amx levels share (gemm_bf16_pack.c): the
 * operands both microkernels read, with the block scales folded in.
 *
 * Packed B (prepared once): panels of NR = 64 columns (the last one padded
 * with zeros), each K/2 K-pairs deep; K-pair kp of panel p holds 64 dwords,
 * dword c = (bf16 B[2kp][64p + c], bf16 B[2kp + 1][64p + c]). A 32-block of
 * a panel is 16 K-pairs: 4 KB. An AMX B tile is 16 K-pairs x 16 columns of
 * a panel (row stride 256 bytes).
 * Packed A (per call, per block of rows and chunk of KC = 1024 of K): rows
 * of A_LD dwords, row r's K-pair kp at dword kp (A[r][2kp], A[r][2kp + 1]).
 * Rows are padded to A_LD = 528 dwords (2112 bytes), not 512: an AMX A tile
 * is 16 consecutive rows, and 2 KB apart they would fall in two L1
 * sets (tile loads ran 4x slower).
 * Conversion: vpermi2b looks the low and the high byte of each bf16 up in
 * two 128-entry tables (by magnitude); the scale is an add to the exponent
 * field of the nonzero values; no per-element branch anywhere. A block the
 * fold rule refuses (gemm_fold.h, bf16 form) is packed as zeros and taken by
 * the exact path.
 */
#ifndef A2AMM_GEMM_BF16_PACK_H
#define A2AMM_GEMM_BF16_PACK_H

#include <stdint.h>

#include "gemm/gemm_internal.h"

#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16,avx512vbmi")))
#define AVX512_INLINE static inline __attribute__((always_inline)) AVX512_TARGET

enum {
    BF16_NR = 64,                  /* columns of a panel (4 zmm of 16 fp32) */
    BF16_KC = 1024,                /* K of a chunk: a panel's chunk of B is 128 KB */
    BF16_A_LD = BF16_KC / 2 + 16,  /* dwords from one packed A row to the next */
    BF16_B_BLOCK = 16 * BF16_NR * 4 /* bytes of a 32-block of a panel */
};

/* gemm_level.pack_b and .pack_a_row of the bf16 layout above. */
void gemm_bf16_pack_b(const gemm_b *b, int64_t p0, int64_t p1);
void gemm_bf16_pack_a_row(const uint8_t *codes, const uint8_t *scales, int64_t nblk, a2amm_fp8_type type, void *row,
                          int16_t *state);

#endif
