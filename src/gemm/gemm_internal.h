/* What the gemm dispatcher and the per-ISA kernels share: the prepared-B
 * handle and each level's entry points. */
#ifndef A2AMM_GEMM_INTERNAL_H
#define A2AMM_GEMM_INTERNAL_H

#include "gemm/gemm.h"

struct gemm_b {
    gemm_isa isa;
    int64_t N, K;
    a2amm_fp8_type type;
    void *data; /* the level's own packed form */
};

/* One ISA level's implementation. prepare fills b->data. */
typedef struct gemm_kernel_ops {
    /* workers: a pool to spread the work over, or NULL */
    int (*prepare)(gemm_b *b, const uint8_t *bq, const uint8_t *sb, int64_t ldsb, pool *workers, a2amm_error *err);
    void (*release)(gemm_b *b);
    void (*accumulate)(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen,
                       int64_t n0, int64_t n1, float *c, int64_t ldc);
    /* C = 0, then accumulate, in one pass (the same bits); NULL: the dispatcher zeroes C and accumulates. */
    void (*multiply)(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen,
                     int64_t n0, int64_t n1, float *c, int64_t ldc);
    /* C = 0 (if overwrite) then accumulate, then out = bf16(C) over the region, C left unspecified;
     * NULL: the dispatcher runs the two and gemm_store_bf16. */
    void (*run_store)(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen,
                      int64_t n0, int64_t n1, float *c, int64_t ldc, int overwrite, uint16_t *out, int64_t ldo);
} gemm_kernel_ops;

extern const gemm_kernel_ops gemm_ref_ops;
/* NULL where this build has no kernel for the level. */
const gemm_kernel_ops *gemm_avx2_ops_get(void);
const gemm_kernel_ops *gemm_avx512_ops_get(void);

#endif
