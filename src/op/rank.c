/* One rank's op state: its symmetric and local buffers, its channel, and
 * what it tells the caller's observer. */
#include <stdarg.h>
#include <stdio.h>
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

/* Tells the caller's observer that tile t begins; its non-zero answer stops the call. */
int op_observe_tile(op_rank *rk, int64_t t, int64_t rows, a2amm_error *err)
{
    if (!rk->observer) return A2AMM_OK;
    a2amm_event ev = op_event(rk, A2AMM_EVENT_TILE, t, rows, -1, -1);
    int rc = rk->observer(rk->observer_arg, &ev);
    if (!rc) return A2AMM_OK;
    char why[COMM_FAIL_CHARS] = ""; /* the observer may have failed the communicator itself, saying why */
    comm_failure(rk->ctx, NULL, why, sizeof why);
    a2amm_fail(err, rc < 0 ? rc : A2AMM_E_INVAL, "rank %d: the observer stopped the call at tile %lld%s%s", rk->me,
               (long long)t, why[0] ? ": " : "", why);
    return comm_fail(rk->ctx, err ? err->code : A2AMM_E_INVAL, "%s", err ? err->msg : "the observer stopped the call");
}

/* The channel's error, reported to every rank as this rank's failure:
 * "rank 1: sending tile 3 to rank 2 failed: <why>", or for a wait that ran
 * out, "rank 1: timed out after 60 s <the channel's waiting for ...> (sending
 * tile 3 to rank 2)". */
int op_failed(op_rank *rk, int rc, const a2amm_error *err, const char *fmt, ...)
{
    if (rc == A2AMM_E_PEER) return rc; /* another rank's failure, already reported */
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    const char *why = err ? err->msg : a2amm_strerror(rc);
    if (rc == A2AMM_E_TIMEOUT)
        return comm_fail(rk->ctx, rc, "rank %d: timed out after %g s %s (%s)", rk->me, rk->opt->timeout_s, why, what);
    return comm_fail(rk->ctx, rc, "rank %d: %s failed: %s", rk->me, what, why);
}

/* What an op of this shape and these options keeps in symmetric memory, in bytes. */
typedef struct op_layout {
    size_t ring, ring_s;      /* alltoall-matmul, fused put path: [depth][R][tm] rows of ka / ska */
    size_t xbuf, xbuf_s;      /* alltoall-matmul, unfused: every source's rows, as A's */
    size_t y, inbox;          /* matmul-alltoall: [R][m_max][N/R] bf16, this rank's results and what comes in */
    comm_channel_kind kind;   /* the channel */
    int depth;                /* its slots per sender */
} op_layout;

static op_layout layout_of(const op_shape *s, const op_sizes *z, const op_options *opt)
{
    op_layout l = {0};
    size_t R = (size_t)s->R, tm = (size_t)(opt->tile_m < s->M ? opt->tile_m : s->M);
    int put = opt->path == OP_PATH_PUT;
    if (s->kind == OP_MATMUL_ALLTOALL) {
        /* every tile of a call has its own place in the inbox: a slot per tile, no ring to wait on */
        l.y = l.inbox = (size_t)s->M * (size_t)s->N * 2;
        l.depth = (int)(((size_t)s->M + tm - 1) / tm);
        /* the direct path's rows are made during the call: the reader waits for each tile's signal */
        l.kind = put ? COMM_CHANNEL_PUT : opt->unfused ? COMM_CHANNEL_DIRECT : COMM_CHANNEL_READ;
        return l;
    }
    if (put && !opt->unfused) l.ring = (size_t)opt->depth * R * tm * (size_t)z->ka,
                              l.ring_s = (size_t)opt->depth * R * tm * (size_t)z->ska;
    if (opt->unfused) l.xbuf = z->a_bytes, l.xbuf_s = z->sa_bytes;
    l.kind = put ? COMM_CHANNEL_PUT : COMM_CHANNEL_DIRECT;
    l.depth = opt->depth;
    return l;
}

size_t op_rank_heap_bytes(const op_shape *s, const op_sizes *z, const op_options *opt)
{
    op_layout l = layout_of(s, z, opt);
    size_t bytes = z->a_bytes + z->sa_bytes + l.ring + l.ring_s + l.xbuf + l.xbuf_s + l.y + l.inbox + 8 * ALIGN;
    return bytes + comm_channel_heap_bytes(l.kind, l.depth, (int)s->R) + 4096;
}

/* Takes `bytes` of symmetric memory (none: NULL). */
static int take(op_rank *rk, size_t bytes, void **out, a2amm_error *err)
{
    *out = NULL;
    return bytes ? comm_alloc(rk->ctx, bytes, ALIGN, out, err) : A2AMM_OK;
}

/* Tells the observer of a signal the channel set at a peer. */
static void on_signal(void *arg, const comm_tile *tile, int slot, uint64_t value)
{
    const op_rank *rk = arg;
    int64_t i0 = tile->t * rk->tm;
    op_observe(rk, A2AMM_EVENT_SIGNAL, tile->t, rk->m - i0 < rk->tm ? rk->m - i0 : rk->tm, tile->peer, slot, 0,
               value);
}

int op_rank_alloc(op_rank *rk, a2amm_error *err)
{
    const op_shape *s = rk->s;
    const op_sizes *z = rk->z;
    op_layout l = layout_of(s, z, rk->opt);
    /* the same allocations in the same order on every rank: the same offsets */
    int rc = take(rk, z->a_bytes, (void **)&rk->a, err);
    if (!rc) rc = take(rk, z->sa_bytes, (void **)&rk->sa, err);
    if (!rc) rc = take(rk, l.ring, (void **)&rk->ring, err);
    if (!rc) rc = take(rk, l.ring_s, (void **)&rk->ring_s, err);
    if (!rc) rc = take(rk, l.xbuf, (void **)&rk->xbuf, err);
    if (!rc) rc = take(rk, l.xbuf_s, (void **)&rk->xbuf_s, err);
    if (!rc) rc = take(rk, l.y, (void **)&rk->y, err);
    if (!rc) rc = take(rk, l.inbox, (void **)&rk->inbox, err);
    if (!rc) rc = comm_channel_open(rk->ctx, l.kind, l.depth, &rk->chan, err);
    if (rc) return rc;
    rk->chan.on_signal = on_signal;
    rk->chan.on_signal_arg = rk;
    /* the output is the caller's buffer, given at each call */
    size_t tm = (size_t)rk->tm;
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
