/* One rank's op state: its symmetric and local buffers, its channel, and
 * what it tells the caller's observer. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/hugemem.h"
#include "op/rank.h"

#define ALIGN 64

/* An event of this rank's current call, stamped now (the matmul's carry its columns). */
a2amm_event op_event(const op_rank *rk, a2amm_event_kind kind, int64_t tile, int64_t rows, int peer, int slot)
{
    int matmul = kind == A2AMM_EVENT_MATMUL_BEGIN || kind == A2AMM_EVENT_MATMUL_END || kind == A2AMM_EVENT_WORK;
    return (a2amm_event){.kind = kind, .rank = rk->me, .call = rk->call, .tile = tile, .tiles = rk->ntiles,
                         .rows = rows, .peer = peer, .slot = slot, .k = matmul ? rk->z->ka : 0,
                         .time_ns = comm_now_ns()};
}

void op_observe(const op_rank *rk, a2amm_event_kind kind, int64_t tile, int64_t rows, int peer, int slot,
                int64_t bytes, uint64_t signal)
{
    if (!rk->observer) return;
    a2amm_event ev = op_event(rk, kind, tile, rows, peer, slot);
    ev.bytes = bytes, ev.signal = signal;
    (void)rk->observer(rk->observer_arg, &ev);
}

/* The channel an op of these options asks for. */
static comm_channel_kind channel_kind(const op_options *opt)
{
    return opt->path == OP_PATH_PUT ? COMM_CHANNEL_PUT : COMM_CHANNEL_DIRECT;
}

size_t op_rank_heap_bytes(const op_shape *s, const op_sizes *z, const op_options *opt,
                          int need_ring, int need_xbuf)
{
    size_t tm = (size_t)(opt->tile_m < s->M ? opt->tile_m : s->M);
    size_t bytes = z->a_bytes + z->sa_bytes + 4 * ALIGN;
    if (need_ring) bytes += (size_t)opt->depth * (size_t)s->R * tm * (size_t)(z->ka + z->ska) + 2 * ALIGN;
    if (need_xbuf) bytes += z->a_bytes + z->sa_bytes + 2 * ALIGN;
    bytes += comm_channel_heap_bytes(channel_kind(opt), opt->depth, (int)s->R);
    return bytes + 4096;
}

/* Tells the observer of a signal the channel set at a peer. */
static void on_signal(void *arg, const comm_tile *tile, int slot, uint64_t value)
{
    const op_rank *rk = arg;
    int64_t i0 = tile->t * rk->tm;
    op_observe(rk, A2AMM_EVENT_SIGNAL, tile->t, rk->m - i0 < rk->tm ? rk->m - i0 : rk->tm, tile->peer, slot, 0,
               value);
}

int op_rank_alloc(op_rank *rk, int need_ring, int need_xbuf, a2amm_error *err)
{
    const op_shape *s = rk->s;
    const op_sizes *z = rk->z;
    size_t R = (size_t)s->R, tm = (size_t)rk->tm, depth = (size_t)rk->opt->depth;
    int rc = comm_alloc(rk->ctx, z->a_bytes, ALIGN, (void **)&rk->a, err);
    if (!rc) rc = comm_alloc(rk->ctx, z->sa_bytes, ALIGN, (void **)&rk->sa, err);
    if (!rc && need_ring) {
        rc = comm_alloc(rk->ctx, depth * R * tm * (size_t)z->ka, ALIGN, (void **)&rk->ring, err);
        if (!rc) rc = comm_alloc(rk->ctx, depth * R * tm * (size_t)z->ska, ALIGN, (void **)&rk->ring_s, err);
    }
    if (!rc && need_xbuf) {
        rc = comm_alloc(rk->ctx, z->a_bytes, ALIGN, (void **)&rk->xbuf, err);
        if (!rc) rc = comm_alloc(rk->ctx, z->sa_bytes, ALIGN, (void **)&rk->xbuf_s, err);
    }
    if (!rc) rc = comm_channel_open(rk->ctx, channel_kind(rk->opt), rk->opt->depth, &rk->chan, err);
    if (rc) return rc;
    rk->chan.on_signal = on_signal;
    rk->chan.on_signal_arg = rk;
    /* the output is the caller's buffer, given at each call */
    rk->c = hugemem_alloc(tm * (size_t)s->N * sizeof *rk->c);
    if (!rk->c)
        return a2amm_fail(err, A2AMM_E_NOMEM, "rank %d: cannot allocate %.1f MB of accumulators", rk->me,
                          (double)(tm * (size_t)s->N * 4) / 1e6);
    return A2AMM_OK;
}

void op_rank_free(op_rank *rk)
{
    gemm_b_free(rk->owned_b);
    pool_destroy(rk->pool);
    free(rk->c);
    free(rk->work);
    rk->work = NULL;
    rk->b = NULL, rk->owned_b = NULL, rk->pool = NULL, rk->c = NULL;
}
