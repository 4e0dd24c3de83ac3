/* One rank's state inside its process, and the executions the run times:
 * fused (direct or put path), unfused, and the matmul on data in place. */
#ifndef A2AMM_OP_RANK_H
#define A2AMM_OP_RANK_H

#include <stdint.h>

#include "comm/comm.h"
#include "common/pool.h"
#include "gemm/gemm.h"
#include "op/op.h"

/* Fault injection for the failure tests (A2AMM_FAULT_RANK=r and
 * A2AMM_FAULT=kill|exit|stall|error): rank r misbehaves at tile 1. */
/* Faults the failure tests inject (A2AMM_FAULT=kill|exit|stall|error at tile 1, stall-end after the last barrier). */
typedef enum op_fault { OP_FAULT_NONE, OP_FAULT_KILL, OP_FAULT_EXIT, OP_FAULT_STALL, OP_FAULT_ERROR, OP_FAULT_STALL_END } op_fault;

typedef struct op_rank {
    const a2amm_shape *s;
    const a2amm_sizes *z;
    const op_options *opt;
    comm_ctx *ctx;
    int me, R;
    int64_t m;                   /* rows of A per destination in this execution (<= m_max) */
    int64_t m_max;               /* rows per destination block in a, sa and xbuf (their stride) */
    int64_t ntiles, tm;          /* tiles of this execution, rows per tile */
    /* symmetric memory */
    uint8_t *a, *sa;             /* my A_r [R][m_max, ka] and SA_r: block j holds the rows for rank j */
    uint8_t *ring, *ring_s;      /* put path: [depth][R][tm] rows of ka / ska */
    uint64_t *arrived;           /* put path: [depth][R], set by the source */
    uint64_t *released;          /* put path: [R], set by each destination */
    uint8_t *xbuf, *xbuf_s;      /* unfused: [R][m_max] rows of ka / ska */
    /* local */
    gemm_b *b;
    pool *pool;
    float *c;                    /* [tm, N] accumulators */
    uint16_t *out;               /* [m, N] result */
    op_fault fault;
    int fault_done;
    /* the baseline (perf only): fp32 operands for OpenBLAS sgemm */
    float *bl_x, *bl_b, *bl_c;   /* [M, K], [N, K], [M, N] */
} op_rank;

/* Allocates the symmetric regions (same order on every rank) and the local
 * buffers; B is prepared separately. */
int op_rank_alloc(op_rank *rk, int need_ring, int need_xbuf, a2amm_error *err);
void op_rank_free(op_rank *rk);

/* Symmetric heap bytes one rank needs. */
size_t op_rank_heap_bytes(const a2amm_shape *s, const a2amm_sizes *z, const op_options *opt,
                          int need_ring, int need_xbuf);

/* The executions. The fused one numbers its tiles globally from `base`
 * (the tiles of every earlier fused execution on these buffers, the same on
 * every rank): a tile's ring slot and signal values follow from that
 * number, so signals only ever grow and a slot is reused in order across
 * executions of any m. Each returns A2AMM_OK or the error (already reported to
 * every rank through comm_fail when it started here). */
int op_exec_fused(op_rank *rk, uint64_t base, a2amm_error *err);
int op_exec_unfused(op_rank *rk, a2amm_error *err);
int op_exec_local(op_rank *rk, a2amm_error *err);

/* The baseline: B dequantized to fp32 once; then per run the whole exchange,
 * X_j dequantized to fp32 and OpenBLAS sgemm (baseline.c). */
int op_baseline_prepare(op_rank *rk, const uint8_t *b, const uint8_t *sb, a2amm_error *err);
int op_exec_baseline(op_rank *rk, a2amm_error *err);
void op_baseline_free(op_rank *rk);
/* The unfused exchange alone: every peer's rows for me into xbuf, then a barrier. */
int op_exchange_all(op_rank *rk, a2amm_error *err);

#endif
