/* One rank's state inside its process, and its executions: fused (direct
 * or put path) and unfused (the whole exchange, then the matmul). */
#ifndef A2AMM_OP_RANK_H
#define A2AMM_OP_RANK_H

#include <stdint.h>

#include "comm/channel.h"
#include "comm/comm.h"
#include "common/shape.h"
#include "common/pool.h"
#include "gemm/gemm.h"
#include "op/op.h"

typedef struct op_rank {
    const op_shape *s;
    const op_sizes *z;
    const op_options *opt;
    comm_ctx *ctx;
    int me, R;
    int64_t m;                   /* rows of A per destination in this execution (<= m_max) */
    int64_t m_max;               /* rows per destination block in a, sa and xbuf (their stride) */
    int64_t ntiles, tm;          /* tiles of this execution, rows per tile */
    /* symmetric memory */
    uint8_t *a, *sa;             /* my A_r [R][m_max, ka] and SA_r: block j holds the rows for rank j */
    uint8_t *ring, *ring_s;      /* put path: [depth][R][tm] rows of ka / ska, where other ranks' rows land */
    uint8_t *xbuf, *xbuf_s;      /* unfused: [R][m_max] rows of ka / ska */
    comm_channel chan;           /* how the rows of a tile travel (direct, put, or the transport's own) */
    /* local */
    const gemm_b *b;             /* the weights in use: owned_b, or borrowed */
    gemm_b *owned_b;             /* weights set by a2amm_op_set_weights */
    pool *pool;
    float *c;                    /* [tm, N] accumulators */
    uint16_t *out;               /* [m, N] result: the caller's buffer, during a call */
    a2amm_observer_fn observer;  /* the caller's, or NULL */
    void *observer_arg;
    uint64_t call;               /* the current call's number */
    int64_t *work;               /* observed: [threads][3] who ran each piece of a matmul, when */
} op_rank;

/* Allocates the symmetric regions (same order on every rank) and the local
 * buffers; B is prepared separately. */
int op_rank_alloc(op_rank *rk, int need_ring, int need_xbuf, a2amm_error *err);
void op_rank_free(op_rank *rk);

/* Symmetric heap bytes one rank needs. */
size_t op_rank_heap_bytes(const op_shape *s, const op_sizes *z, const op_options *opt,
                          int need_ring, int need_xbuf);

/* An event of this rank's current call, stamped now (a matmul's carries its columns). */
a2amm_event op_event(const op_rank *rk, a2amm_event_kind kind, int64_t tile, int64_t rows, int peer, int slot);
/* Tells the caller's observer (if any) of an event of this rank (see a2amm_event). */
void op_observe(const op_rank *rk, a2amm_event_kind kind, int64_t tile, int64_t rows, int peer, int slot,
                int64_t bytes, uint64_t signal);

/* The executions. The fused one numbers its tiles globally from `base`
 * (the tiles of every earlier fused execution on these buffers, the same on
 * every rank): a tile's ring slot and signal values follow from that
 * number, so signals only ever grow and a slot is reused in order across
 * executions of any m. Each returns A2AMM_OK or the error (already reported to
 * every rank through comm_fail when it started here). */
int op_exec_fused(op_rank *rk, uint64_t base, a2amm_error *err);
int op_exec_unfused(op_rank *rk, a2amm_error *err);

#endif
