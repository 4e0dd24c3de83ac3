/*
 * The AMX level's microkernel (Intel AMX-BF16: TDPBF16PS on 16 x 16 fp32
 * tiles). It runs on the AVX-512 level's packed operands (gemm_avx512.c
 * packs, folds, masks and adds the sums to C); only the multiply differs.
 */
#ifndef A2AMM_GEMM_AMX_H
#define A2AMM_GEMM_AMX_H

#include <stdint.h>

/* Rows of A a group call multiplies: two tiles of 16. */
enum { GEMM_AMX_ROWS = 32 };

/*
 * Whether this CPU has AMX-BF16 and the kernel lets this process use its
 * tile registers (Linux asks for them once, arch_prctl ARCH_REQ_XCOMP_PERM;
 * forked children inherit the grant).
 */
int gemm_amx_usable(void);

/* Loads the tile configuration on the calling thread; gemm_amx_end releases the tiles. */
void gemm_amx_begin(void);
void gemm_amx_end(void);

/*
 * sums[r][c] = sum over kpairs K-pairs (a multiple of 16) of A row r times B
 * column c, for r < 32, c < 64, in fp32 from zero, K-pairs ascending, 16 at
 * a time per TDPBF16PS. a: 32 rows of K-pair dwords, row r at a + r * lda;
 * b: one panel chunk, 64 dwords a K-pair; sums: [32][64], 64-byte aligned.
 * Meanwhile the lines [prefetch, prefetch_end) are brought into L2, spread
 * over the steps: tile loads that miss L2 wait for each line in turn.
 */
void gemm_amx_group(const uint32_t *a, int64_t lda, const uint32_t *b, int64_t kpairs, float *sums,
                    const char *prefetch, const char *prefetch_end);

#endif
