/*
 * The bf16 packing the avx512 and amx levels share (gemm_bf16_pack.c): the
 * operands both microkernels read, with the block scales folded in.
 *
 * Packed B (prepared once): panels of NR = 64 columns (the last one padded
 * with zeros), each K/2 K-pairs deep; K-pair kp of panel p holds 64 dwords,
 * dword c = (bf16 B[2kp][64p + c], bf16 B[2kp + 1][64p + c]). A 32-block of
 * a panel is 16 K-pairs: 4 KB. An AMX B tile is 16 K-pairs x 16 columns of
 * a panel (row stride 256 bytes).
 * The amx level packs the same dwords in pieces (gemm_bf16_pack_b_pieces):
 * a panel's K in pieces of 16 K-blocks (512 of K; the last may be shorter),
 * each piece its 32 left columns' K-pair rows (128 bytes each, 32 KB for a
 * whole piece) then its 32 right columns', so that a piece of one half is
 * contiguous: it stays in L1 while every row tile of a block multiplies it
 * (bf16_piece_at finds a block). A panel and its pieces start where the
 * panel and that K-block start in the layout above.
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
 *
 * B in fp8 (the small-M path; prepared once, and the exact path's copy of B
 * where the level reads it): the same panels and K-pairs, a byte a value.
 * A 32-block of a panel is BF16_B8_BLOCK bytes: the 64 columns' scale bytes,
 * then 16 K-pairs of 128 bytes, each two halves of 32 columns whose 64 codes
 * (B[2kp][c], B[2kp + 1][c]) lie as 32 words whose low bytes are the first
 * 16 columns' K-pair words and whose high bytes the second 16's (see
 * gemm_bf16_pack_b8); columns past N are zeros.
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
    BF16_B_BLOCK = 16 * BF16_NR * 4, /* bytes of a 32-block of a panel */
    BF16_B8_BLOCK = 64 + 16 * BF16_NR * 2 /* the same in fp8, its scales first */
};

/* gemm_level.pack_b and .pack_a_row of the bf16 layout above; pack_b in pieces for amx. */
void gemm_bf16_pack_b(const gemm_b *b, const uint8_t *bq, int64_t p0, int64_t p1);
void gemm_bf16_pack_b_pieces(const gemm_b *b, const uint8_t *bq, int64_t p0, int64_t p1);

enum { BF16_PIECE_BLOCKS = 16 }; /* K-blocks of a piece of B packed in pieces */

/*
 * In B packed in pieces, panel at `panel` with nkb K-blocks in all: K-block
 * kb's 16 K-pair rows of half h (columns 32h..32h+31), 128 bytes apart.
 */
static inline const uint32_t *bf16_piece_at(const void *panel, int64_t nkb, int64_t kb, int h)
{
    const int64_t piece = kb / BF16_PIECE_BLOCKS, first = piece * BF16_PIECE_BLOCKS;
    const int64_t blocks = nkb - first < BF16_PIECE_BLOCKS ? nkb - first : BF16_PIECE_BLOCKS;
    return (const uint32_t *)panel + first * 16 * BF16_NR + (h * blocks + kb - first) * 16 * (BF16_NR / 2);
}
void gemm_bf16_pack_a_row(const uint8_t *codes, const uint8_t *scales, int64_t nblk, a2amm_fp8_type type, void *row,
                          int16_t *state);
/* gemm_level.pack_b8: B in fp8 in the panels' order, into b->exact.codes; and its block_codes. */
void gemm_bf16_pack_b8(const gemm_b *b, const uint8_t *bq, int64_t p0, int64_t p1);
uint8_t gemm_bf16_b8_block_codes(const gemm_exact_b *eb, int64_t n, int64_t kb, uint8_t out[32]);
/* The conversion's tables for a type: 128 low bytes, then 128 high bytes of each magnitude's bf16. */
const uint8_t *gemm_bf16_lut(a2amm_fp8_type type);

#endif
