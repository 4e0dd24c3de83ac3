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
    uint16_t *y;                 /* matmul-alltoall: [R][m_max][N/R] this rank's result, block j for rank j */
    uint16_t *inbox;             /* matmul-alltoall: [R][m_max][N/R] the blocks from every rank (put, messages) */
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

/* Allocates the symmetric regions its kind and options need (same order on
 * every rank), opens its channel, and makes the local buffers; B is
 * prepared separately. */
int op_rank_alloc(op_rank *rk, a2amm_error *err);
void op_rank_free(op_rank *rk);

/* Symmetric heap bytes one rank needs. */
size_t op_rank_heap_bytes(const op_shape *s, const op_sizes *z, const op_options *opt);

/* An event of this rank's current call, stamped now (a matmul's carries its columns). */
a2amm_event op_event(const op_rank *rk, a2amm_event_kind kind, int64_t tile, int64_t rows, int peer, int slot);
/* Tells the caller's observer that tile t begins; its non-zero answer
 * stops the call (failing the communicator, this rank named). */
int op_observe_tile(op_rank *rk, int64_t t, int64_t rows, a2amm_error *err);
/* A channel's error, reported to every rank as this rank's failure:
 * "rank 1: <what> failed: <why>", or for a wait that ran out "rank 1: timed
 * out after 60 s <the channel's waiting for ...> (<what>)". A2AMM_E_PEER
 * (another rank's failure, already reported) is returned as it is. */
int op_failed(op_rank *rk, int rc, const a2amm_error *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
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
/* matmul-alltoall's (exec_reverse.c): the same contract. */
int op_exec_reverse_fused(op_rank *rk, uint64_t base, a2amm_error *err);
int op_exec_reverse_unfused(op_rank *rk, a2amm_error *err);

/* ---- multiply.c: the matmul of one tile, split over the rank's threads ---- */
/*
 * C[rows, n0:n1] = (first) or += the slab's rows times B over K range
 * [k0, k0 + klen); with out, the rows' bf16 values are written at out (row
 * stride ldo, column n at out[n]) and C is left unspecified. Between slices
 * of rows a channel that needs it is given progress; an observer gets the
 * pieces each thread ran (WORK events of tile t, peer).
 */
void op_multiply(op_rank *rk, const gemm_a_slab *slab, int64_t rows, int64_t k0, int64_t klen, int64_t n0,
                 int64_t n1, int first, uint16_t *out, int64_t ldo, int64_t t, int peer);

#endif
