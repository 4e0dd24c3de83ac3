/*
 * matmul-alltoall inside one rank: Y_r = X_r x B_r, column block j of Y_r
 * to rank j; this rank's output [R*m, N/R] holds the blocks of every rank,
 * stacked by source. Tile by tile of X's rows, the rank computes the block
 * for each other rank in turn (from the next rank round to the one before)
 * and hands it to its channel, which moves it (or, on the read path,
 * signals it) while the next block is computed; its own block goes straight
 * into the output, last. Its tiles done, it waits for every other rank's
 * blocks and puts them in the output. Each value is one gemm over all of K
 * from K's start: the same bits as a2amm_matmul of X_r by B_r, whatever the
 * tile, threads, path, schedule or transport.
 */
#include <string.h>

#include "op/rank.h"

static int64_t rows_in_tile(const op_rank *rk, int64_t t)
{
    int64_t i0 = t * rk->tm;
    return rk->m - i0 < rk->tm ? rk->m - i0 : rk->tm;
}

/* Tile t's rows of the block from `src` to `dst`: in src's y[dst], landing in dst's inbox[src] (both
 * symmetric, so the same addresses name them on either rank). `send`: this rank sends to peer. */
static comm_tile block_tile(const op_rank *rk, uint64_t g, int64_t t, int peer, int send)
{
    int64_t nb = rk->s->N / rk->R, i0 = t * rk->tm;
    int src = send ? rk->me : peer, dst = send ? peer : rk->me;
    size_t w = (size_t)nb * sizeof(uint16_t);
    comm_tile tl = {.g = g, .t = t, .slot = (int)(g % (uint64_t)rk->chan.depth), .peer = peer,
                    .rows = rows_in_tile(rk, t)};
    tl.from[0] = (comm_rows){(uint8_t *)(rk->y + ((size_t)dst * (size_t)rk->m_max + (size_t)i0) * (size_t)nb), w, w};
    tl.into[0] = (comm_rows){(uint8_t *)(rk->inbox + ((size_t)src * (size_t)rk->m_max + (size_t)i0) * (size_t)nb), w, w};
    return tl;
}

/* The block for `dst` of tile t's rows (i0, rows): over all of K, columns dst*nb.., into `block`
 * ([rows, nb], row stride nb); the gemm names columns absolutely, so it is given the block less them. */
static void multiply_block(op_rank *rk, int64_t t, int dst, uint16_t *block)
{
    int64_t nb = rk->s->N / rk->R, i0 = t * rk->tm, rows = rows_in_tile(rk, t), n0 = (int64_t)dst * nb;
    gemm_a_slab slab = {rk->a + i0 * rk->z->ka, rk->sa + i0 * rk->z->ska, rk->z->ka, rk->z->ska, rk->s->a_type};
    comm_set_doing(rk->ctx, "tile %lld/%lld: multiplying the block for rank %d", (long long)t, (long long)rk->ntiles,
                   dst);
    op_observe(rk, A2AMM_EVENT_MATMUL_BEGIN, t, rows, dst, -1, 0, 0);
    op_multiply(rk, &slab, rows, 0, rk->s->K, n0, n0 + nb, 1, block - n0, nb, t, dst);
    op_observe(rk, A2AMM_EVENT_MATMUL_END, t, rows, dst, -1, 0, 0);
}

/* Where this rank's own block of tile t goes: the output, rows me*m + i0. */
static uint16_t *own_rows(const op_rank *rk, int64_t t)
{
    int64_t nb = rk->s->N / rk->R;
    return rk->out + ((size_t)rk->me * (size_t)rk->m + (size_t)(t * rk->tm)) * (size_t)nb;
}

/* Copies `rows` rows of one block (nb bf16 values each, at a stride) into the output's rows of src. */
static void copy_rows(const op_rank *rk, const comm_rows *at, int src, int64_t i0, int64_t rows)
{
    int64_t nb = rk->s->N / rk->R;
    uint16_t *to = rk->out + ((size_t)src * (size_t)rk->m + (size_t)i0) * (size_t)nb;
    for (int64_t i = 0; i < rows; i++)
        memcpy(to + i * nb, at->base + (size_t)i * at->stride, (size_t)nb * sizeof(uint16_t));
}

/* Waits for tile t's block from src, puts it in the output, and frees its place. */
static int receive_block(op_rank *rk, uint64_t g, int64_t t, int src, a2amm_error *err)
{
    const comm_channel *ch = &rk->chan;
    comm_tile tl = block_tile(rk, g, t, src, 0);
    int64_t bytes = tl.rows * (int64_t)tl.into[0].width;
    comm_set_doing(rk->ctx, "tile %lld/%lld: waiting for the block from rank %d", (long long)t, (long long)rk->ntiles,
                   src);
    op_observe(rk, A2AMM_EVENT_WAIT_BEGIN, t, tl.rows, src, tl.slot, 0, g + 1);
    comm_rows at[COMM_TILE_PARTS];
    int rc = ch->ops->wait(&rk->chan, &tl, comm_deadline_after(rk->opt->timeout_s), at, err);
    if (rc) return op_failed(rk, rc, err, "waiting for tile %lld from rank %d", (long long)t, src);
    op_observe(rk, A2AMM_EVENT_WAIT_END, t, tl.rows, src, tl.slot, bytes, g + 1);
    copy_rows(rk, &at[0], src, t * rk->tm, tl.rows);
    rc = ch->ops->release ? ch->ops->release(&rk->chan, &tl, err) : A2AMM_OK;
    return rc ? op_failed(rk, rc, err, "releasing tile %lld of rank %d", (long long)t, src) : A2AMM_OK;
}

int op_exec_reverse_fused(op_rank *rk, uint64_t base, a2amm_error *err)
{
    const comm_channel *ch = &rk->chan;
    int R = rk->R, me = rk->me;
    /* every block's place is its own for the whole call: every receive posted up front */
    for (int64_t t = 0; ch->ops->post && t < rk->ntiles; t++)
        for (int k = 1; k < R; k++) {
            int src = (me + R - k) % R;
            comm_tile tl = block_tile(rk, base + (uint64_t)t, t, src, 0);
            int rc = ch->ops->post(&rk->chan, &tl, err);
            if (rc) return op_failed(rk, rc, err, "posting the receive of tile %lld from rank %d", (long long)t, src);
        }
    for (int64_t t = 0; t < rk->ntiles; t++) {
        uint64_t g = base + (uint64_t)t;
        int64_t rows = rows_in_tile(rk, t);
        int rc = op_observe_tile(rk, t, rows, err);
        if (!rc) rc = comm_check_peers(rk->ctx, err); /* stop between tiles once any rank failed */
        if (rc) return rc;
        for (int k = 1; k <= R; k++) {
            int dst = (me + k) % R; /* the others first, so their blocks travel while the rest is computed */
            if (dst == me) {
                multiply_block(rk, t, me, own_rows(rk, t));
                continue;
            }
            comm_tile tl = block_tile(rk, g, t, dst, 1);
            multiply_block(rk, t, dst, (uint16_t *)tl.from[0].base);
            int64_t bytes = rows * (int64_t)tl.from[0].width;
            comm_set_doing(rk->ctx, "sending tile %lld to rank %d", (long long)t, dst);
            op_observe(rk, A2AMM_EVENT_SEND_BEGIN, t, rows, dst, tl.slot, bytes, 0);
            rc = ch->ops->send ? ch->ops->send(&rk->chan, &tl, comm_deadline_after(rk->opt->timeout_s), err) : 0;
            if (rc) return op_failed(rk, rc, err, "sending tile %lld to rank %d", (long long)t, dst);
            op_observe(rk, A2AMM_EVENT_SEND_END, t, rows, dst, tl.slot, bytes, 0);
        }
        op_observe(rk, A2AMM_EVENT_TILE_END, t, rows, -1, -1, 0, 0);
    }
    /* every other rank's blocks, in the order they were sent to this rank */
    for (int64_t t = 0; t < rk->ntiles; t++)
        for (int k = 1; k < R; k++) {
            int rc = receive_block(rk, base + (uint64_t)t, t, (me + R - k) % R, err);
            if (rc) return rc;
        }
    if (ch->ops->flush) { /* every send complete: y may be written again once the call returns */
        comm_set_doing(rk->ctx, "fused run: completing the sends");
        int rc = ch->ops->flush(&rk->chan, comm_deadline_after(rk->opt->timeout_s), err);
        if (rc) return op_failed(rk, rc, err, "completing the sends");
    }
    comm_set_doing(rk->ctx, "fused run done");
    return A2AMM_OK;
}

int op_exec_reverse_unfused(op_rank *rk, a2amm_error *err)
{
    int R = rk->R, me = rk->me;
    int64_t nb = rk->s->N / R;
    for (int64_t t = 0; t < rk->ntiles; t++) {
        int64_t rows = rows_in_tile(rk, t);
        int rc = op_observe_tile(rk, t, rows, err);
        if (!rc) rc = comm_check_peers(rk->ctx, err);
        if (rc) return rc;
        for (int k = 1; k <= R; k++) {
            int dst = (me + k) % R;
            uint16_t *block = dst == me ? own_rows(rk, t)
                                        : rk->y + ((size_t)dst * (size_t)rk->m_max + (size_t)(t * rk->tm)) * (size_t)nb;
            multiply_block(rk, t, dst, block);
        }
        op_observe(rk, A2AMM_EVENT_TILE_END, t, rows, -1, -1, 0, 0);
    }
    /* every rank's blocks made (the direct path reads them where they are), then the whole AllToAll of
     * them, y's block p to p's inbox block me, and a barrier */
    comm_set_doing(rk->ctx, "unfused: barrier before the exchange");
    int rc = comm_barrier(rk->ctx, comm_deadline_after(rk->opt->timeout_s), err);
    if (rc) return rc;
    size_t stride = (size_t)rk->m_max * (size_t)nb * sizeof(uint16_t), bytes = (size_t)rk->m * (size_t)nb * sizeof(uint16_t);
    int64_t received = (int64_t)(R - 1) * (int64_t)bytes;
    op_observe(rk, A2AMM_EVENT_EXCHANGE_BEGIN, -1, rk->m, -1, -1, received, 0);
    comm_set_doing(rk->ctx, "unfused: all-to-all exchange");
    rc = rk->chan.ops->exchange(&rk->chan, (const uint8_t *)rk->y, (uint8_t *)rk->inbox, stride, bytes,
                                    comm_deadline_after(rk->opt->timeout_s), err);
    if (rc) return op_failed(rk, rc, err, "the unfused exchange");
    comm_set_doing(rk->ctx, "unfused: barrier after the exchange");
    rc = comm_barrier(rk->ctx, comm_deadline_after(rk->opt->timeout_s), err);
    if (rc) return rc;
    op_observe(rk, A2AMM_EVENT_EXCHANGE_END, -1, rk->m, -1, -1, received, 0);
    for (int src = 0; src < R; src++) {
        if (src == me) continue;
        comm_rows at = {(uint8_t *)(rk->inbox + (size_t)src * (size_t)rk->m_max * (size_t)nb), (size_t)nb * 2,
                        (size_t)nb * 2};
        copy_rows(rk, &at, src, 0, rk->m);
    }
    comm_set_doing(rk->ctx, "unfused run done");
    return A2AMM_OK;
}
