/* What the public communicator wraps: the transport's per-rank context. */
#ifndef A2AMM_API_INTERNAL_H
#define A2AMM_API_INTERNAL_H

#include "a2amm.h"
#include "comm/comm.h"

struct a2amm_comm {
    comm_ctx *ctx;
    /* a2amm_comm_alltoall's staging blocks in symmetric memory, kept for the next call */
    void *stage;
    size_t stage_bytes, stage_start, stage_end;
    comm_world *joined; /* made by a2amm_comm_create: this rank's view of the world */
    void (*destroy)(a2amm_comm *comm); /* made by another transport's library: how it ends */
};

/* Prepared weights (matmul_api.c), which ops may borrow (op_api.c). */
typedef struct gemm_b gemm_b;
struct a2amm_weights {
    gemm_b *b;
    int64_t n, k;
    a2amm_fp8_type b_type;
};

#endif
