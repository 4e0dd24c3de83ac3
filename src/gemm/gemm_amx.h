/*
 * The AMX level's microkernel (Intel AMX-BF16: TDPBF16PS on 16 x 16 fp32
 * tiles). It runs on the AVX-512 level's packed operands (gemm_avx512.c
 * packs, folds, masks and adds the sums to C); only the multiply differs.
 */
#ifndef A2AMM_GEMM_AMX_H
#define A2AMM_GEMM_AMX_H

#include <stdint.h>

/* Rows of A a block call multiplies: two tiles of 16. */
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
 * A 32 x 64 block of C through the tiles, over `chunks` pieces of K: the
 * tiles start from c_in[r][n] (row stride ldc_in floats; zero when c_in is
 * NULL), add chunk i's products (A rows a[i][r * lda ...], 32 of them, times
 * the panel chunk b[i], kpairs[i] K-pairs, a multiple of 16) 16 K-pairs per
 * TDPBF16PS, chunks and K-pairs ascending, and end in c_out[r][n] (row
 * stride ldc_out; it may be c_in). A block's value thus depends only on
 * c_in and the sequence of K-pairs, not on how they are cut into chunks or
 * calls. Meanwhile the lines [prefetch, prefetch_end) are brought into L2,
 * spread over the steps: tile loads that miss L2 wait for each line in turn.
 */
void gemm_amx_block(const uint32_t *const *a, int64_t lda, const uint32_t *const *b, const int64_t *kpairs,
                    int chunks, const float *c_in, int64_t ldc_in, float *c_out, int64_t ldc_out, const char *prefetch,
                    const char *prefetch_end);

#endif
