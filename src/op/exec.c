/*
 * The executions of one rank: the fused pipeline over tiles of M (each
 * source's rows of a tile made visible by the op's channel, comm/channel.h:
 * read where they lie, or put or sent into a ring of slots), and the unfused
 * AllToAll-then-matmul. Neither names a transport.
 */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "op/rank.h"

/*
 * C[rows, :] += rows of source `src` (a, sa with row strides ka / ska);
 * C[rows, :] = them for the tile's first source (k == 0). After the last
 * (k == R - 1) the tile's rows of the output, from row i0, hold bf16(C).
 */
static void multiply_source(op_rank *rk, int k, int src, const uint8_t *a, const uint8_t *sa, int64_t i0,
                            int64_t t, int64_t rows)
{
    gemm_a_slab slab = {a, sa, rk->z->ka, rk->z->ska, rk->s->a_type};
    int64_t N = rk->s->N;
    op_multiply(rk, &slab, rows, src * rk->z->ka, rk->z->ka, 0, N, k == 0, k == rk->R - 1 ? rk->out + i0 * N : NULL, N,
                t, src);
}

/* The rows of rank `src`'s A that go to `dst`, starting at tile row i0. */
static const uint8_t *rows_of(const op_rank *rk, const uint8_t *a_base, int dst, int64_t i0, int64_t width)
{
    return a_base + ((int64_t)dst * rk->m_max + i0) * width;
}

/* The bytes of `rows` rows of codes and scales. */
static int64_t row_bytes(const op_rank *rk, int64_t rows) { return rows * (rk->z->ka + rk->z->ska); }

/* ---- The fused pipeline, over the op's channel --------------------------- */

/* The rows of tile t between this rank and `peer`: from the sender's A (its
 * block for the receiver), into the receiver's slot for the sender. `send`:
 * this rank sends them (peer receives), else this rank receives them. */
static comm_tile tile_with(const op_rank *rk, uint64_t g, int64_t t, int peer, int send)
{
    const op_sizes *z = rk->z;
    int64_t i0 = t * rk->tm, rows = rk->m - i0 < rk->tm ? rk->m - i0 : rk->tm;
    int slot = (int)(g % (uint64_t)rk->opt->depth);
    int src = send ? rk->me : peer, dst = send ? peer : rk->me;
    comm_tile tl = {.g = g, .t = t, .slot = slot, .peer = peer, .rows = rows};
    tl.from[0] = (comm_rows){(uint8_t *)rows_of(rk, rk->a, dst, i0, z->ka), (size_t)z->ka, (size_t)z->ka};
    tl.from[1] = (comm_rows){(uint8_t *)rows_of(rk, rk->sa, dst, i0, z->ska), (size_t)z->ska, (size_t)z->ska};
    if (rk->ring) {
        size_t off = ((size_t)slot * (size_t)rk->R + (size_t)src) * (size_t)rk->tm;
        tl.into[0] = (comm_rows){rk->ring + off * (size_t)z->ka, (size_t)z->ka, (size_t)z->ka};
        tl.into[1] = (comm_rows){rk->ring_s + off * (size_t)z->ska, (size_t)z->ska, (size_t)z->ska};
    }
    return tl;
}

/* Readies the receives of tile t from every other rank (a channel that posts them). */
static int post_tile(op_rank *rk, uint64_t g, int64_t t, a2amm_error *err)
{
    const comm_channel *ch = &rk->chan;
    for (int k = 1; ch->ops->post && k < rk->R; k++) {
        int src = (rk->me + rk->R - k) % rk->R;
        comm_tile tl = tile_with(rk, g, t, src, 0);
        int rc = ch->ops->post(&rk->chan, &tl, err);
        if (rc) return op_failed(rk, rc, err, "posting the receive of tile %lld from rank %d", (long long)t, src);
    }
    return A2AMM_OK;
}

/* Sends tile t to every other rank (a channel that moves rows). */
static int send_tile(op_rank *rk, uint64_t g, int64_t t, a2amm_error *err)
{
    const comm_channel *ch = &rk->chan;
    for (int k = 1; ch->ops->send && k < rk->R; k++) {
        int d = (rk->me + k) % rk->R;
        comm_tile tl = tile_with(rk, g, t, d, 1);
        comm_set_doing(rk->ctx, "sending tile %lld to rank %d (slot %d)", (long long)t, d, tl.slot);
        op_observe(rk, A2AMM_EVENT_SEND_BEGIN, t, tl.rows, d, tl.slot, row_bytes(rk, tl.rows), 0);
        int rc = ch->ops->send(&rk->chan, &tl, comm_deadline_after(rk->opt->timeout_s), err);
        if (rc) return op_failed(rk, rc, err, "sending tile %lld to rank %d", (long long)t, d);
        op_observe(rk, A2AMM_EVENT_SEND_END, t, tl.rows, d, tl.slot, row_bytes(rk, tl.rows), 0);
    }
    return A2AMM_OK;
}

/* The rows of tile t from `src`, once they are here: where this process reads them. */
static int wait_tile(op_rank *rk, uint64_t g, int64_t t, int src, const uint8_t **a, const uint8_t **sa,
                     a2amm_error *err)
{
    const comm_channel *ch = &rk->chan;
    comm_tile tl = tile_with(rk, g, t, src, 0);
    comm_rows at[COMM_TILE_PARTS];
    if (ch->ops->per_tile) {
        comm_set_doing(rk->ctx, "tile %lld/%lld: waiting for rows from rank %d (slot %d)", (long long)t,
                       (long long)rk->ntiles, src, tl.slot);
        op_observe(rk, A2AMM_EVENT_WAIT_BEGIN, t, tl.rows, src, tl.slot, 0, g + 1);
    }
    int rc = ch->ops->wait(&rk->chan, &tl, comm_deadline_after(rk->opt->timeout_s), at, err);
    if (rc) return op_failed(rk, rc, err, "waiting for tile %lld from rank %d", (long long)t, src);
    if (ch->ops->per_tile) op_observe(rk, A2AMM_EVENT_WAIT_END, t, tl.rows, src, tl.slot, row_bytes(rk, tl.rows), g + 1);
    *a = at[0].base, *sa = at[1].base;
    return A2AMM_OK;
}

/* This rank is done with tile t: each sender may reuse its slot. */
static int release_tile(op_rank *rk, uint64_t g, int64_t t, a2amm_error *err)
{
    const comm_channel *ch = &rk->chan;
    for (int k = 1; ch->ops->release && k < rk->R; k++) {
        int src = (rk->me + k) % rk->R;
        comm_tile tl = tile_with(rk, g, t, src, 0);
        int rc = ch->ops->release(&rk->chan, &tl, err);
        if (rc) return op_failed(rk, rc, err, "releasing tile %lld of rank %d", (long long)t, src);
    }
    return A2AMM_OK;
}

int op_exec_fused(op_rank *rk, uint64_t base, a2amm_error *err)
{
    const op_sizes *z = rk->z;
    const comm_channel *ch = &rk->chan;
    int depth = rk->opt->depth;
    int64_t prefill = rk->ntiles < depth ? rk->ntiles : depth;
    /* every receive of the first `depth` tiles posted before any send */
    for (int64_t t = 0; t < prefill; t++) {
        int rc = post_tile(rk, base + (uint64_t)t, t, err);
        if (rc) return rc;
    }
    for (int64_t t = 0; t < prefill; t++) {
        int rc = send_tile(rk, base + (uint64_t)t, t, err);
        if (rc) return rc;
    }
    for (int64_t t = 0; t < rk->ntiles; t++) {
        uint64_t g = base + (uint64_t)t;
        int64_t i0 = t * rk->tm, rows = rk->m - i0 < rk->tm ? rk->m - i0 : rk->tm;
        int slot = ch->ops->per_tile ? (int)(g % (uint64_t)depth) : -1;
        int frc = op_observe_tile(rk, t, rows, err);
        if (!frc) frc = comm_check_peers(rk->ctx, err); /* stop between tiles once any rank failed */
        if (frc) return frc;
        for (int k = 0; k < rk->R; k++) {
            int src = (rk->me + k) % rk->R;
            const uint8_t *a = rows_of(rk, rk->a, rk->me, i0, z->ka), *sa = rows_of(rk, rk->sa, rk->me, i0, z->ska);
            if (src != rk->me) {
                int rc = wait_tile(rk, g, t, src, &a, &sa, err);
                if (rc) return rc;
            }
            comm_set_doing(rk->ctx, "tile %lld/%lld: multiplying the rows of rank %d", (long long)t,
                           (long long)rk->ntiles, src);
            op_observe(rk, A2AMM_EVENT_MATMUL_BEGIN, t, rows, src, src != rk->me ? slot : -1, 0, 0);
            multiply_source(rk, k, src, a, sa, i0, t, rows);
            op_observe(rk, A2AMM_EVENT_MATMUL_END, t, rows, src, src != rk->me ? slot : -1, 0, 0);
        }
        op_observe(rk, A2AMM_EVENT_TILE_END, t, rows, -1, -1, 0, 0);
        /* the slots of tile t are free again: the senders may put tile t + depth there */
        int rc = release_tile(rk, g, t, err);
        if (!rc && t + depth < rk->ntiles) rc = post_tile(rk, g + (uint64_t)depth, t + depth, err);
        if (!rc && t + depth < rk->ntiles) rc = send_tile(rk, g + (uint64_t)depth, t + depth, err);
        if (rc) return rc;
    }
    if (ch->ops->flush) { /* every send complete: the caller may overwrite A once the call returns */
        comm_set_doing(rk->ctx, "fused run: completing the sends");
        int rc = ch->ops->flush(&rk->chan, comm_deadline_after(rk->opt->timeout_s), err);
        if (rc) return op_failed(rk, rc, err, "completing the sends");
    }
    comm_set_doing(rk->ctx, "fused run done");
    return A2AMM_OK;
}

/* The matmul of the unfused execution, on every source's rows in place. */
static int exec_local(op_rank *rk, a2amm_error *err)
{
    const op_sizes *z = rk->z;
    for (int64_t t = 0; t < rk->ntiles; t++) {
        int64_t i0 = t * rk->tm, rows = rk->m - i0 < rk->tm ? rk->m - i0 : rk->tm;
        int rc = op_observe_tile(rk, t, rows, err);
        if (!rc) rc = comm_check_peers(rk->ctx, err);
        if (rc) return rc;
        for (int k = 0; k < rk->R; k++) {
            int src = (rk->me + k) % rk->R;
            /* my own rows are block `me` of my A; the others' are block `src` of xbuf */
            const uint8_t *abase = src == rk->me ? rk->a : rk->xbuf;
            const uint8_t *sbase = src == rk->me ? rk->sa : rk->xbuf_s;
            op_observe(rk, A2AMM_EVENT_MATMUL_BEGIN, t, rows, src, -1, 0, 0);
            multiply_source(rk, k, src, rows_of(rk, abase, src, i0, z->ka), rows_of(rk, sbase, src, i0, z->ska), i0,
                            t, rows);
            op_observe(rk, A2AMM_EVENT_MATMUL_END, t, rows, src, -1, 0, 0);
        }
        op_observe(rk, A2AMM_EVENT_TILE_END, t, rows, -1, -1, 0, 0);
    }
    return A2AMM_OK;
}

/* The unfused exchange: every peer's rows for me into xbuf, then a barrier. */
static int exchange_all(op_rank *rk, a2amm_error *err)
{
    const op_sizes *z = rk->z;
    /* blocks are m_max rows apart; this execution moves the first m rows of each */
    size_t blk = (size_t)(rk->m_max * z->ka), blk_s = (size_t)(rk->m_max * z->ska);
    size_t len = (size_t)(rk->m * z->ka), len_s = (size_t)(rk->m * z->ska);
    comm_set_doing(rk->ctx, "unfused: all-to-all exchange");
    int64_t deadline = comm_deadline_after(rk->opt->timeout_s);
    int rc = rk->chan.ops->exchange(&rk->chan, rk->a, rk->xbuf, blk, len, deadline, err);
    if (!rc) rc = rk->chan.ops->exchange(&rk->chan, rk->sa, rk->xbuf_s, blk_s, len_s, deadline, err);
    if (rc) return op_failed(rk, rc, err, "the unfused exchange");
    comm_set_doing(rk->ctx, "unfused: barrier after the exchange");
    return comm_barrier(rk->ctx, comm_deadline_after(rk->opt->timeout_s), err);
}

int op_exec_unfused(op_rank *rk, a2amm_error *err)
{
    int64_t received = (int64_t)(rk->R - 1) * row_bytes(rk, rk->m);
    op_observe(rk, A2AMM_EVENT_EXCHANGE_BEGIN, -1, rk->m, -1, -1, received, 0);
    int rc = exchange_all(rk, err);
    if (rc) return rc;
    op_observe(rk, A2AMM_EVENT_EXCHANGE_END, -1, rk->m, -1, -1, received, 0);
    comm_set_doing(rk->ctx, "unfused: matmul");
    rc = exec_local(rk, err);
    comm_set_doing(rk->ctx, "unfused run done");
    return rc;
}
