/*
 * A tile channel: how the rows of one tile travel from the rank that holds
 * them to the rank that uses them, whatever carries them. An op's pipeline
 * asks its channel, per tile and peer, to post the receive, send, wait,
 * release, and to progress and flush; it never asks which transport or
 * path it is on. Four channels exist:
 *   - direct (shm): nothing moves; a wait points into the sender's heap
 *     (the rows are there when the call starts);
 *   - read (shm): nothing moves either, but the rows are made during the
 *     call: the sender signals each tile once it is in its heap, and the
 *     receiver waits for that signal, then reads them there;
 *   - put (shm): the sender puts the rows into the receiver's slot and sets
 *     its signal; the receiver releases the slot once it is done with it;
 *   - the MPI transport's own (liba2amm_mpi): a posted receive per slot, a
 *     send straight from the rows, progress driven by the waiting rank.
 * A third transport (UCX, a GPU's) plugs in as the MPI one does: a
 * comm_transport with its own comm_channel_ops (docs/design.md).
 *
 * Rows come in up to two parts (an op's fp8 codes and their scales; a part
 * of width 0 is absent), each `rows` rows of `width` bytes at a stride.
 * Every wait ends at its deadline or when the world fails.
 */
#ifndef A2AMM_COMM_CHANNEL_H
#define A2AMM_COMM_CHANNEL_H

#include "comm/comm.h"

#define COMM_TILE_PARTS 2

/* `rows` rows of `width` bytes, row i at base + i * stride. */
typedef struct comm_rows {
    uint8_t *base;
    size_t stride, width;
} comm_rows;

/* One tile between this rank and one peer. */
typedef struct comm_tile {
    uint64_t g;    /* its number over every call of the op: signals carry g + 1, so they only grow */
    int64_t t;     /* its number in this call (for messages) */
    int slot;      /* g mod depth: its slot of the receiver's ring */
    int peer;      /* the sender (post, wait, release) or the receiver (send) */
    int64_t rows;
    comm_rows from[COMM_TILE_PARTS]; /* where the rows lie at the sender: symmetric (the same address on every rank) */
    comm_rows into[COMM_TILE_PARTS]; /* where they land at the receiver: symmetric (its slot) */
} comm_tile;

/* A channel over which one op moves its tiles; made collectively (every
 * rank, the same order: it may take symmetric memory). */
typedef struct comm_channel {
    const struct comm_channel_ops *ops;
    comm_ctx *ctx;
    int depth;                  /* slots per sender in a receiver's ring */
    uint64_t *arrived;          /* put: [depth][nranks] signals, set by the sender */
    uint64_t *released;         /* put: [nranks] signals, set by each receiver */
    /* told of every signal set at a peer (slot -1: a release), for an observer */
    void (*on_signal)(void *arg, const comm_tile *tile, int slot, uint64_t value);
    void *on_signal_arg;
} comm_channel;

/* The kinds an op asks for; a transport without peer memory has one kind only (its own). */
typedef enum comm_channel_kind { COMM_CHANNEL_DIRECT, COMM_CHANNEL_READ, COMM_CHANNEL_PUT } comm_channel_kind;

typedef struct comm_channel_ops {
    const char *name;
    /* each tile is waited for, as it comes during the call (into a slot, or signalled in the sender's
     * heap); 0: every tile is there when the call starts */
    int per_tile;
    /* takes what the channel needs (collective); NULL: nothing */
    int (*open)(comm_channel *ch, a2amm_error *err);
    /* readies the receive of `tile` from tile->peer into tile->into (NULL: nothing to post) */
    int (*post)(comm_channel *ch, const comm_tile *tile, a2amm_error *err);
    /* sends `tile` to tile->peer; first waits until that slot of the peer is free (NULL: nothing moves) */
    int (*send)(comm_channel *ch, const comm_tile *tile, int64_t deadline_ns, a2amm_error *err);
    /* waits until `tile` from tile->peer is here; at[p] is where its part p can be read in this process */
    int (*wait)(comm_channel *ch, const comm_tile *tile, int64_t deadline_ns, comm_rows at[COMM_TILE_PARTS],
                a2amm_error *err);
    /* this rank is done with `tile` from tile->peer: its slot may take the next (NULL: nothing) */
    int (*release)(comm_channel *ch, const comm_tile *tile, a2amm_error *err);
    /* drives the transport a little, between pieces of computation (NULL: it moves data by itself) */
    void (*progress)(comm_channel *ch);
    /* waits until every send of this rank is complete (NULL: a send is complete when it returns) */
    int (*flush)(comm_channel *ch, int64_t deadline_ns, a2amm_error *err);
    /* all of it at once (an unfused exchange): block p of `send` (at p * stride, `bytes` long) goes
     * to peer p as block `me` of its `recv` (both symmetric: the same addresses on every rank); this
     * rank's own block is not moved. The caller's barrier follows. */
    int (*exchange)(comm_channel *ch, const uint8_t *send, uint8_t *recv, size_t stride, size_t bytes,
                    int64_t deadline_ns, a2amm_error *err);
} comm_channel_ops;

/*
 * Makes the channel of `kind` over ctx's transport (collective): the
 * transport's own where it has one (a kind it cannot do is an error), else
 * shm's direct, read or put with `depth` slots per sender.
 */
int comm_channel_open(comm_ctx *ctx, comm_channel_kind kind, int depth, comm_channel *ch, a2amm_error *err);

/* The symmetric bytes comm_channel_open takes for `kind` on nranks ranks. */
size_t comm_channel_heap_bytes(comm_channel_kind kind, int depth, int nranks);

#endif
