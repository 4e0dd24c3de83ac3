/*
 * The shm transport's tile channels (comm/channel.h):
 *   direct: nothing moves; a wait points into the sender's heap.
 *   read: nothing moves; the sender sets arrived[slot][sender] = g + 1 at
 *     the receiver once tile g is in its own heap, and the receiver, having
 *     seen it, reads the rows there (slots and releases as put's).
 *   put: the sender puts the rows into the receiver's slot, then sets
 *     arrived[slot][sender] = g + 1 there (release-ordered: whoever sees the
 *     signal sees the rows). The receiver, done with the tile, sets
 *     released[receiver] = g + 1 at the sender, which writes tile g into a
 *     slot only once the receiver has released tile g - depth.
 * And comm_channel_open, which picks the transport's own channel where it
 * has one. A wait that runs out says what it waited for ("waiting for ...")
 * and what it saw; the op adds who and how long.
 */
#include "comm/channel.h"


#include "common/error.h"

#define SIGNAL_ALIGN 64

static void tell_signal(comm_channel *ch, const comm_tile *tile, int slot, uint64_t value)
{
    if (ch->on_signal) ch->on_signal(ch->on_signal_arg, tile, slot, value);
}

/* ---- direct ----------------------------------------------------------------- */

static int direct_wait(comm_channel *ch, const comm_tile *tile, int64_t deadline_ns, comm_rows at[COMM_TILE_PARTS],
                       a2amm_error *err)
{
    (void)deadline_ns;
    for (int p = 0; p < COMM_TILE_PARTS; p++) {
        at[p] = tile->from[p];
        if (!tile->from[p].width) continue;
        at[p].base = comm_ptr(ch->ctx, tile->from[p].base, tile->peer);
        if (!at[p].base)
            return a2amm_fail(err, A2AMM_E_INVAL, "rank %d: rank %d's rows are not in symmetric memory",
                              comm_rank(ch->ctx), tile->peer);
    }
    return A2AMM_OK;
}

/* Unfused, every pair's block at once: the reader gets peer p's block for it into its block p
 * (get), or the owner puts its block for p into p's block `me` (put). */
static int exchange_blocks(comm_channel *ch, const uint8_t *send, uint8_t *recv, size_t stride, size_t bytes, int get,
                           a2amm_error *err)
{
    int me = comm_rank(ch->ctx), R = comm_nranks(ch->ctx);
    for (int k = 1; k < R; k++) {
        int peer = (me + k) % R;
        int rc = get ? comm_get(ch->ctx, recv + (size_t)peer * stride, send + (size_t)me * stride, bytes, peer, err)
                     : comm_put(ch->ctx, recv + (size_t)me * stride, send + (size_t)peer * stride, bytes, peer, err);
        if (rc) return rc;
    }
    return A2AMM_OK;
}

static int direct_exchange(comm_channel *ch, const uint8_t *send, uint8_t *recv, size_t stride, size_t bytes,
                           int64_t deadline_ns, a2amm_error *err)
{
    (void)deadline_ns;
    return exchange_blocks(ch, send, recv, stride, bytes, 1, err);
}

static const comm_channel_ops DIRECT = {
    .name = "direct", .per_tile = 0, .wait = direct_wait, .exchange = direct_exchange,
};

/* ---- put -------------------------------------------------------------------- */

static int signals_open(comm_channel *ch, a2amm_error *err)
{
    size_t R = (size_t)comm_nranks(ch->ctx), depth = (size_t)ch->depth;
    int rc = comm_alloc(ch->ctx, depth * R * 8, SIGNAL_ALIGN, (void **)&ch->arrived, err);
    if (!rc) rc = comm_alloc(ch->ctx, R * 8, SIGNAL_ALIGN, (void **)&ch->released, err);
    return rc;
}

/* Puts the rows of one part into the receiver's slot (rows at once where both are contiguous). */
static int put_rows(comm_channel *ch, const comm_tile *tile, int p, a2amm_error *err)
{
    const comm_rows *from = &tile->from[p], *to = &tile->into[p];
    if (!from->width) return A2AMM_OK;
    if (from->stride == from->width && to->stride == from->width)
        return comm_put(ch->ctx, to->base, from->base, (size_t)tile->rows * from->width, tile->peer, err);
    for (int64_t i = 0; i < tile->rows; i++) {
        int rc = comm_put(ch->ctx, to->base + (size_t)i * to->stride, from->base + (size_t)i * from->stride,
                          from->width, tile->peer, err);
        if (rc) return rc;
    }
    return A2AMM_OK;
}

/* Waits until the receiver has released the slot's previous tile (g - depth) from this rank. */
static int slot_free(comm_channel *ch, const comm_tile *tile, int64_t deadline_ns, a2amm_error *err)
{
    if (tile->g < (uint64_t)ch->depth) return A2AMM_OK;
    comm_ctx *ctx = ch->ctx;
    int d = tile->peer;
    uint64_t need = tile->g - (uint64_t)ch->depth + 1, seen = 0;
    comm_set_doing(ctx, "sending tile %lld to rank %d: waiting for slot %d to be released (signal >= %llu)",
                   (long long)tile->t, d, tile->slot, (unsigned long long)need);
    int rc = comm_signal_wait_until(ctx, &ch->released[d], COMM_CMP_GE, need, deadline_ns, &seen, err);
    if (rc == A2AMM_E_TIMEOUT)
        return a2amm_fail(err, rc, "waiting for rank %d to release slot %d (tile %lld): released signal >= %llu, "
                          "last seen %llu", d, tile->slot, (long long)tile->t - ch->depth, (unsigned long long)need,
                          (unsigned long long)seen);
    return rc;
}

/* Tells the receiver tile g is there: arrived[slot][me] = g + 1 at it, release-ordered
 * (comm_signal_set orders every earlier store and put of this rank before it). */
static int signal_arrived(comm_channel *ch, const comm_tile *tile, a2amm_error *err)
{
    comm_ctx *ctx = ch->ctx;
    int me = comm_rank(ctx);
    int rc = comm_signal_set(ctx, &ch->arrived[(size_t)tile->slot * (size_t)comm_nranks(ctx) + (size_t)me],
                             tile->g + 1, tile->peer, err);
    if (!rc) tell_signal(ch, tile, tile->slot, tile->g + 1);
    return rc;
}

static int put_send(comm_channel *ch, const comm_tile *tile, int64_t deadline_ns, a2amm_error *err)
{
    int rc = slot_free(ch, tile, deadline_ns, err);
    if (!rc) rc = put_rows(ch, tile, 0, err);
    if (!rc) rc = put_rows(ch, tile, 1, err);
    return rc ? rc : signal_arrived(ch, tile, err);
}

/* The rows are in this rank's own heap already: only the signal goes. */
static int read_send(comm_channel *ch, const comm_tile *tile, int64_t deadline_ns, a2amm_error *err)
{
    int rc = slot_free(ch, tile, deadline_ns, err);
    return rc ? rc : signal_arrived(ch, tile, err);
}

/* Waits until the sender's signal says tile g is there. */
static int wait_arrived(comm_channel *ch, const comm_tile *tile, int64_t deadline_ns, a2amm_error *err)
{
    comm_ctx *ctx = ch->ctx;
    uint64_t seen = 0;
    int rc = comm_signal_wait_until(ctx, &ch->arrived[(size_t)tile->slot * (size_t)comm_nranks(ctx) + (size_t)tile->peer],
                                    COMM_CMP_GE, tile->g + 1, deadline_ns, &seen, err);
    if (rc == A2AMM_E_TIMEOUT)
        return a2amm_fail(err, rc, "waiting for tile %lld from rank %d: slot %d signal >= %llu, last seen %llu",
                          (long long)tile->t, tile->peer, tile->slot, (unsigned long long)(tile->g + 1),
                          (unsigned long long)seen);
    return rc;
}

static int put_wait(comm_channel *ch, const comm_tile *tile, int64_t deadline_ns, comm_rows at[COMM_TILE_PARTS],
                    a2amm_error *err)
{
    int rc = wait_arrived(ch, tile, deadline_ns, err);
    for (int p = 0; !rc && p < COMM_TILE_PARTS; p++) at[p] = tile->into[p];
    return rc;
}

static int read_wait(comm_channel *ch, const comm_tile *tile, int64_t deadline_ns, comm_rows at[COMM_TILE_PARTS],
                     a2amm_error *err)
{
    int rc = wait_arrived(ch, tile, deadline_ns, err);
    return rc ? rc : direct_wait(ch, tile, deadline_ns, at, err);
}

/* This rank is done with tile g from the sender: released[me] = g + 1 at it. */
static int release_slot(comm_channel *ch, const comm_tile *tile, a2amm_error *err)
{
    int me = comm_rank(ch->ctx);
    int rc = comm_signal_set(ch->ctx, &ch->released[me], tile->g + 1, tile->peer, err);
    if (!rc) tell_signal(ch, tile, -1, tile->g + 1);
    return rc;
}

static int put_exchange(comm_channel *ch, const uint8_t *send, uint8_t *recv, size_t stride, size_t bytes,
                        int64_t deadline_ns, a2amm_error *err)
{
    (void)deadline_ns;
    return exchange_blocks(ch, send, recv, stride, bytes, 0, err);
}

static const comm_channel_ops PUT = {
    .name = "put", .per_tile = 1, .open = signals_open, .send = put_send, .wait = put_wait,
    .release = release_slot, .exchange = put_exchange,
};

/* read: signalled as put's, read where they lie as direct's (its unfused exchange is direct's) */
static const comm_channel_ops READ = {
    .name = "read", .per_tile = 1, .open = signals_open, .send = read_send, .wait = read_wait,
    .release = release_slot, .exchange = direct_exchange,
};

/* ---- choosing ------------------------------------------------------------- */

size_t comm_channel_heap_bytes(comm_channel_kind kind, int depth, int nranks)
{
    if (kind == COMM_CHANNEL_DIRECT) return 0;
    return ((size_t)depth + 1) * (size_t)nranks * 8 + 2 * SIGNAL_ALIGN;
}

int comm_channel_open(comm_ctx *ctx, comm_channel_kind kind, int depth, comm_channel *ch, a2amm_error *err)
{
    const comm_transport *tp = comm_transport_of(ctx);
    *ch = (comm_channel){.ctx = ctx, .depth = depth};
    if (tp->channel) {
        if (kind != COMM_CHANNEL_PUT && !tp->peer_memory)
            return a2amm_fail(err, A2AMM_E_INVAL, "rank %d: the %s transport cannot read another rank's memory: the "
                              "direct path needs shared memory (use the put path)", comm_rank(ctx), tp->name);
        ch->ops = tp->channel;
    } else {
        ch->ops = kind == COMM_CHANNEL_PUT ? &PUT : kind == COMM_CHANNEL_READ ? &READ : &DIRECT;
    }
    return ch->ops->open ? ch->ops->open(ch, err) : A2AMM_OK;
}
