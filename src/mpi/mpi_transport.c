/*
 * The MPI transport (liba2amm_mpi): comm's transport table and a tile
 * channel of its own (comm/channel.h) over two-sided MPI.
 * Tiles travel on one duplicate of the caller's communicator (tag 2 x slot
 * for the rows, 2 x slot + 1 for their scales; MPI keeps messages between
 * two ranks with one tag in order, so a slot's tiles match its receives in
 * turn), exchanges on a second, collectives on a third. Every wait is a
 * test loop with a deadline that backs off to short sleeps, so ranks that
 * share cores leave them to the compute threads.
 *
 * One tile at a time on the wire to each peer: a send waits in that peer's
 * queue until the one before it is complete (started by the next progress
 * call, wait or send). Several tiles in flight at once share the link and
 * all arrive near the end together, so the receiver has nothing to multiply
 * until then (seen in a trace over 1 Gbit/s: tile 0 of 4 came after 27 ms,
 * with the other three); one at a time, tile 0 comes first at the link's
 * full rate and the rest follow while it is multiplied.
 *
 * Failures are the caller's to act on: the duplicates return MPI's errors
 * (MPI_ERRORS_RETURN) instead of aborting, and a rank that fails the
 * communicator sends every other rank a notice on a fourth duplicate,
 * which their waits look for between tests (they end with A2AMM_E_PEER,
 * naming it). Nothing here prints or calls MPI_Abort.
 *
 * A rank that destroys its communicator tells the others too (a "left"
 * notice), and waits a little for theirs: a rank still in a call that needs
 * it then fails with A2AMM_E_PEER once a short grace has passed (the call
 * may be one the leaver completed: MPI finishes it in that time), not after
 * its whole timeout. Every notice carries the communicator's id, agreed at
 * creation, so that one arriving after its communicator is gone is never
 * taken for a later one's.
 */
#include "a2amm_mpi.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/api_internal.h"
#include "comm/channel.h"
#include "common/error.h"

/* A tile send not on the wire yet. */
typedef struct queued_send {
    int slot;
    const void *a, *sa;
    int abytes, sabytes;
} queued_send;

/* The sends to one peer: the one on the wire, and those waiting in order. */
typedef struct peer_sends {
    int active;      /* the slot whose send is on the wire, or -1 */
    queued_send *q;  /* a ring of qcap */
    int head, n, qcap;
} peer_sends;

/* A failure, or a rank's leaving, as one rank tells the others. */
typedef struct fail_notice {
    uint64_t comm_id; /* the communicator's (mpi_state.id) */
    int32_t rank, code;
    char reason[COMM_FAIL_CHARS];
} fail_notice;

#define TAG_FAILED 1
#define TAG_LEFT 2
#define NOTICE_PUSH_NS 1000000000LL /* how long a failing rank helps its notices out before returning */
#define LEFT_GRACE_NS 200000000LL   /* how long a wait goes on after a rank left, for a call it completed */
#define LEFT_DRAIN_NS 5000000000LL  /* how long a destroy waits for the other ranks' left notices */

typedef struct mpi_state {
    MPI_Comm tiles, exchange, coll, notices;
    uint64_t id;            /* the communicator's, the same on every rank */
    comm_ctx *ctx;          /* whose failure record a notice fills */
    int failed;             /* this rank failed, or heard of another's failure */
    int nleft, left_rank;   /* ranks that left (destroyed theirs), the first of them */
    int64_t left_at_ns;     /* when the first left notice came (0: none) */
    fail_notice sent;       /* the notice this rank sent (kept until its sends complete) */
    MPI_Request *sent_req;  /* [size] */
    int rank, size;
    int cap;                /* slots per peer in the request tables */
    MPI_Request *recv_req;  /* [size][cap][2] */
    MPI_Request *send_req;  /* [size][cap][2] */
    peer_sends *out;        /* [size] */
} mpi_state;

static MPI_Request *req_at(MPI_Request *t, const mpi_state *s, int peer, int slot)
{
    return t + ((size_t)peer * (size_t)s->cap + (size_t)slot) * 2;
}

/* Makes room for `slot` in both tables (requests are handles: they move by copy). */
static int ensure_slot(mpi_state *s, int slot, a2amm_error *err)
{
    if (slot < s->cap) return A2AMM_OK;
    int cap = s->cap ? s->cap : 4;
    while (cap <= slot) cap *= 2;
    size_t n = (size_t)s->size * (size_t)cap * 2;
    MPI_Request *r = malloc(n * sizeof *r), *q = malloc(n * sizeof *q);
    if (!r || !q) {
        free(r), free(q);
        return a2amm_fail(err, A2AMM_E_NOMEM, "mpi: out of memory for %d slots of requests", cap);
    }
    for (size_t i = 0; i < n; i++) r[i] = q[i] = MPI_REQUEST_NULL;
    for (int p = 0; p < s->size; p++)
        for (int k = 0; k < s->cap; k++)
            for (int h = 0; h < 2; h++) {
                r[((size_t)p * (size_t)cap + (size_t)k) * 2 + (size_t)h] = *(req_at(s->recv_req, s, p, k) + h);
                q[((size_t)p * (size_t)cap + (size_t)k) * 2 + (size_t)h] = *(req_at(s->send_req, s, p, k) + h);
            }
    free(s->recv_req), free(s->send_req);
    s->recv_req = r, s->send_req = q, s->cap = cap;
    return A2AMM_OK;
}

/* A wait's pause: spins first, then short sleeps that leave the core to the compute threads. */
static void back_off(long spins)
{
    if (spins > 200) {
        struct timespec pause = {0, 20000};
        nanosleep(&pause, NULL);
    }
}

static int too_big(size_t bytes, a2amm_error *err)
{
    return bytes > (size_t)INT_MAX
               ? a2amm_fail(err, A2AMM_E_INVAL, "mpi: a message of %zu bytes is over MPI's int count: use smaller "
                            "tiles", bytes)
               : A2AMM_OK;
}

/* Retires each peer's send on the wire once complete and starts the next in its queue. */
static int pump(mpi_state *s, a2amm_error *err)
{
    for (int d = 0; s->out && d < s->size; d++) {
        peer_sends *o = &s->out[d];
        for (;;) {
            if (o->active >= 0) {
                int done = 0;
                if (MPI_Testall(2, req_at(s->send_req, s, d, o->active), &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
                    return a2amm_fail(err, A2AMM_E_SYS, "mpi: a send to rank %d failed", d);
                if (!done) break;
                o->active = -1;
            }
            if (o->n == 0) break;
            queued_send q = o->q[o->head];
            o->head = (o->head + 1) % o->qcap, o->n--;
            MPI_Request *r = req_at(s->send_req, s, d, q.slot);
            if (MPI_Isend(q.a, q.abytes, MPI_BYTE, d, 2 * q.slot, s->tiles, &r[0]) != MPI_SUCCESS ||
                MPI_Isend(q.sa, q.sabytes, MPI_BYTE, d, 2 * q.slot + 1, s->tiles, &r[1]) != MPI_SUCCESS)
                return a2amm_fail(err, A2AMM_E_SYS, "mpi: MPI_Isend to rank %d failed", d);
            o->active = q.slot;
        }
    }
    return A2AMM_OK;
}

/* Whether dest's `slot` still has a send queued or on the wire. */
static int slot_sending(const mpi_state *s, int dest, int slot)
{
    if (!s->out) return 0;
    const peer_sends *o = &s->out[dest];
    if (o->active == slot) return 1;
    for (int i = 0; i < o->n; i++)
        if (o->q[(o->head + i) % o->qcap].slot == slot) return 1;
    return 0;
}

/* Whether any send is queued or on the wire. */
static int any_sending(const mpi_state *s)
{
    for (int d = 0; s->out && d < s->size; d++)
        if (s->out[d].active >= 0 || s->out[d].n) return 1;
    return 0;
}

/* Takes in the notices that have come (of this communicator: others are stale, and dropped). */
static void take_notices(mpi_state *s)
{
    int flag = 0;
    MPI_Status st;
    while (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, s->notices, &flag, &st) == MPI_SUCCESS && flag) {
        fail_notice n;
        memset(&n, 0, sizeof n);
        int read = MPI_Recv(&n, (int)sizeof n, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, s->notices, MPI_STATUS_IGNORE) ==
                   MPI_SUCCESS;
        if (read && n.comm_id != s->id) continue;
        if (st.MPI_TAG == TAG_LEFT) {
            if (!s->nleft++) s->left_rank = st.MPI_SOURCE, s->left_at_ns = comm_now_ns();
            continue;
        }
        if (!read) snprintf(n.reason, sizeof n.reason, "rank %d failed (its notice could not be read)", st.MPI_SOURCE);
        n.reason[sizeof n.reason - 1] = '\0';
        if (!s->failed) comm_peer_failed(s->ctx, (int)n.rank, (int)n.code, n.reason);
        s->failed = 1;
    }
}

/* Takes in the notices; returns whether the communicator failed: a rank failed, or one left a grace ago. */
static int heard_of_failure(mpi_state *s)
{
    take_notices(s);
    if (!s->failed && s->nleft && comm_now_ns() - s->left_at_ns > LEFT_GRACE_NS) {
        char reason[128];
        snprintf(reason, sizeof reason, "rank %d left the communicator (destroyed it) while this rank still needed it",
                 s->left_rank);
        comm_peer_failed(s->ctx, s->left_rank, A2AMM_E_PEER, reason);
        s->failed = 1;
    }
    return s->failed;
}

/* A wait that stops for the communicator's failure: A2AMM_E_PEER with the failure's message. */
static int stopped_by_failure(mpi_state *s, const char *what, a2amm_error *err)
{
    a2amm_error why = {0, ""};
    comm_check_peers(s->ctx, &why);
    return a2amm_fail(err, A2AMM_E_PEER, "mpi: stopped %s: %s", what, why.msg);
}

/* What a wait waits for: 1 once it holds, 0 not yet, -1 when MPI reports a failure. */
typedef int (*wait_test)(const mpi_state *s, const void *arg);

/* Tests until `holds` does or the deadline passes; this rank's queued tile sends go on meanwhile. */
static int wait_until(mpi_state *s, wait_test holds, const void *arg, int64_t deadline_ns, const char *what,
                      a2amm_error *err)
{
    for (long spins = 0;; spins++) {
        int rc = pump(s, err);
        if (rc) return rc;
        int h = holds(s, arg);
        if (h < 0) return a2amm_fail(err, A2AMM_E_SYS, "mpi: %s failed", what);
        if (h) return A2AMM_OK;
        if (heard_of_failure(s)) return stopped_by_failure(s, what, err);
        if (comm_now_ns() > deadline_ns) return a2amm_fail(err, A2AMM_E_TIMEOUT, "mpi: timed out %s", what);
        back_off(spins);
    }
}

typedef struct request_set {
    MPI_Request *req;
    int n;
    MPI_Status *status; /* where their statuses go once all are done (NULL: ignored) */
} request_set;

static int requests_done(const mpi_state *s, const void *arg)
{
    (void)s;
    const request_set *r = arg;
    int done = 0;
    return MPI_Testall(r->n, r->req, &done, r->status ? r->status : MPI_STATUSES_IGNORE) != MPI_SUCCESS ? -1 : done;
}

/* Waits until `n` requests are all complete. */
static int wait_all(mpi_state *s, MPI_Request *req, int n, int64_t deadline_ns, const char *what, a2amm_error *err)
{
    return wait_until(s, requests_done, &(request_set){req, n, NULL}, deadline_ns, what, err);
}

typedef struct slot_ref {
    int dest, slot;
} slot_ref;

static int slot_free(const mpi_state *s, const void *arg)
{
    const slot_ref *r = arg;
    return !slot_sending(s, r->dest, r->slot);
}

static int nothing_sending(const mpi_state *s, const void *arg)
{
    (void)arg;
    return !any_sending(s);
}

/* Appends to dest's queue, growing it (in order) when full. */
static int enqueue(mpi_state *s, int dest, queued_send q, a2amm_error *err)
{
    if (!s->out) { /* first use: nothing on the wire to anyone */
        if (!(s->out = calloc((size_t)s->size, sizeof *s->out)))
            return a2amm_fail(err, A2AMM_E_NOMEM, "mpi: out of memory for the send queues");
        for (int d = 0; d < s->size; d++) s->out[d].active = -1;
    }
    peer_sends *o = &s->out[dest];
    if (o->n == o->qcap) {
        int qcap = o->qcap ? o->qcap * 2 : 8;
        queued_send *nq = malloc((size_t)qcap * sizeof *nq);
        if (!nq) return a2amm_fail(err, A2AMM_E_NOMEM, "mpi: out of memory for the send queues");
        for (int i = 0; i < o->n; i++) nq[i] = o->q[(o->head + i) % o->qcap];
        free(o->q);
        o->q = nq, o->qcap = qcap, o->head = 0;
    }
    o->q[(o->head + o->n) % o->qcap] = q;
    o->n++;
    return A2AMM_OK;
}

static mpi_state *state_of(const comm_ctx *ctx) { return comm_transport_state(ctx); }

/* A tile's part as one message: its rows must lie contiguous (the op's do). */
static int contiguous(const comm_tile *tile, const comm_rows *part, size_t *bytes, a2amm_error *err)
{
    *bytes = (size_t)tile->rows * part->width;
    if (part->width && tile->rows > 1 && part->stride != part->width)
        return a2amm_fail(err, A2AMM_E_INVAL, "mpi: tile %lld's rows are %zu bytes apart, not contiguous (%zu bytes "
                          "each): this transport sends a part as one message", (long long)tile->t, part->stride,
                          part->width);
    return too_big(*bytes, err);
}

static int chan_send(comm_channel *ch, const comm_tile *tile, int64_t deadline_ns, a2amm_error *err)
{
    mpi_state *s = state_of(ch->ctx);
    int slot = tile->slot, dest = tile->peer;
    size_t abytes, sabytes;
    int rc = ensure_slot(s, slot, err);
    if (!rc) rc = contiguous(tile, &tile->from[0], &abytes, err);
    if (!rc) rc = contiguous(tile, &tile->from[1], &sabytes, err);
    if (rc) return rc;
    const void *a = tile->from[0].base, *sa = tile->from[1].base;
    /* flow control, as the ring's: the slot's previous send must be complete */
    char what[96];
    snprintf(what, sizeof what, "waiting for slot %d's previous send to rank %d", slot, dest);
    if ((rc = wait_until(s, slot_free, &(slot_ref){dest, slot}, deadline_ns, what, err)))
        return rc == A2AMM_E_TIMEOUT ? a2amm_fail(err, rc, "%s", what) : rc; /* the op says it timed out, and when */
    rc = enqueue(s, dest, (queued_send){slot, a, sa, (int)abytes, (int)sabytes}, err);
    return rc ? rc : pump(s, err);
}

static int chan_post(comm_channel *ch, const comm_tile *tile, a2amm_error *err)
{
    mpi_state *s = state_of(ch->ctx);
    int slot = tile->slot, src = tile->peer;
    size_t abytes, sabytes;
    int rc = ensure_slot(s, slot, err);
    if (!rc) rc = contiguous(tile, &tile->into[0], &abytes, err);
    if (!rc) rc = contiguous(tile, &tile->into[1], &sabytes, err);
    if (rc) return rc;
    MPI_Request *r = req_at(s->recv_req, s, src, slot);
    if (MPI_Irecv(tile->into[0].base, (int)abytes, MPI_BYTE, src, 2 * slot, s->tiles, &r[0]) != MPI_SUCCESS ||
        MPI_Irecv(tile->into[1].base, (int)sabytes, MPI_BYTE, src, 2 * slot + 1, s->tiles, &r[1]) != MPI_SUCCESS)
        return a2amm_fail(err, A2AMM_E_SYS, "mpi: MPI_Irecv from rank %d failed", src);
    return A2AMM_OK;
}

static int chan_wait(comm_channel *ch, const comm_tile *tile, int64_t deadline_ns, comm_rows at[COMM_TILE_PARTS],
                     a2amm_error *err)
{
    mpi_state *s = state_of(ch->ctx);
    int slot = tile->slot, src = tile->peer;
    if (slot >= s->cap) return a2amm_fail(err, A2AMM_E_INVAL, "mpi: no receive posted for slot %d", slot);
    char what[96];
    snprintf(what, sizeof what, "waiting for tile %lld (slot %d) from rank %d", (long long)tile->t, slot, src);
    int rc = wait_all(s, req_at(s->recv_req, s, src, slot), 2, deadline_ns, what, err);
    if (rc == A2AMM_E_TIMEOUT) return a2amm_fail(err, rc, "%s", what); /* the op says it timed out, and when */
    for (int p = 0; !rc && p < COMM_TILE_PARTS; p++) at[p] = tile->into[p];
    return rc;
}

static void chan_progress(comm_channel *ch)
{
    mpi_state *s = state_of(ch->ctx);
    int flag;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, s->tiles, &flag, MPI_STATUS_IGNORE); /* drives the engine */
    (void)pump(s, NULL); /* a failure shows again at the next send, wait or flush */
}

static int chan_flush(comm_channel *ch, int64_t deadline_ns, a2amm_error *err)
{
    /* every tile send goes through the queues: none queued or on the wire is all complete */
    return wait_until(state_of(ch->ctx), nothing_sending, NULL, deadline_ns, "completing the sends", err);
}

/* One message each way per pair: block p of send (out) to peer p, block p of recv (in) from it, of the
 * sizes both sides know; or, with got, of at most in.bytes[p], its size read off the message into got[p]
 * (a longer one: A2AMM_E_SIZE naming both ranks). This rank's own block is not moved. */
static int exchange_blocks(comm_ctx *ctx, const void *send, const comm_blocks *out, void *recv, const comm_blocks *in,
                           size_t *got, int64_t deadline_ns, a2amm_error *err)
{
    mpi_state *s = state_of(ctx);
    int rc = A2AMM_OK;
    for (int p = 0; !rc && p < s->size; p++) {
        rc = too_big(out->bytes[p], err);
        if (!rc) rc = too_big(in->bytes[p], err);
    }
    if (rc) return rc;
    MPI_Request *r = malloc((size_t)s->size * 2 * sizeof *r);
    MPI_Status *st = got ? malloc((size_t)s->size * 2 * sizeof *st) : NULL;
    if (!r || (got && !st)) {
        free(r), free(st);
        return a2amm_fail(err, A2AMM_E_NOMEM, "mpi: out of memory for the exchange");
    }
    int n = 0;
    for (int k = 1; k < s->size; k++) { /* requests 2(k-1) and 2(k-1)+1: the receive from k back, the send k on */
        int from = (s->rank + s->size - k) % s->size, to = (s->rank + k) % s->size;
        MPI_Irecv((char *)recv + in->offsets[from], (int)in->bytes[from], MPI_BYTE, from, 0, s->exchange, &r[n++]);
        MPI_Isend((const char *)send + out->offsets[to], (int)out->bytes[to], MPI_BYTE, to, 0, s->exchange, &r[n++]);
    }
    rc = wait_until(s, requests_done, &(request_set){r, n, st}, deadline_ns, "in the all-to-all exchange", err);
    for (int i = 0; !rc && got && i < n; i += 2) { /* what each receive took */
        const int from = (s->rank + s->size - (i / 2 + 1)) % s->size;
        int count = 0;
        if (st[i].MPI_ERROR == MPI_ERR_TRUNCATE || MPI_Get_count(&st[i], MPI_BYTE, &count) != MPI_SUCCESS)
            rc = a2amm_fail(err, A2AMM_E_SIZE, "mpi: rank %d sent rank %d more than the %zu bytes of room it has "
                            "for it", from, s->rank, in->bytes[from]);
        else
            got[from] = (size_t)count;
    }
    for (int i = 0; rc && i < n; i++) { /* a receive left behind must not land in recv after the call */
        if (r[i] == MPI_REQUEST_NULL) continue;
        if (i % 2 == 0) MPI_Cancel(&r[i]);
        MPI_Request_free(&r[i]);
    }
    free(r), free(st);
    return rc;
}

/* The even exchange: every block `bytes` long, block p at p * stride. */
static int tp_exchange(comm_ctx *ctx, const void *send, void *recv, size_t stride, size_t bytes, int64_t deadline_ns,
                       a2amm_error *err)
{
    int R = state_of(ctx)->size;
    size_t *sizes = malloc((size_t)R * 2 * sizeof *sizes);
    if (!sizes) return a2amm_fail(err, A2AMM_E_NOMEM, "mpi: out of memory for the exchange");
    for (int p = 0; p < R; p++) sizes[p] = bytes, sizes[R + p] = (size_t)p * stride;
    const comm_blocks blocks = {sizes, sizes + R};
    int rc = exchange_blocks(ctx, send, &blocks, recv, &blocks, NULL, deadline_ns, err);
    free(sizes);
    return rc;
}

static int chan_exchange(comm_channel *ch, const uint8_t *send, uint8_t *recv, size_t stride, size_t bytes,
                         int64_t deadline_ns, a2amm_error *err)
{
    return tp_exchange(ch->ctx, send, recv, stride, bytes, deadline_ns, err);
}

static int tp_allgather(comm_ctx *ctx, const void *mine, void *all, size_t bytes, int64_t deadline_ns,
                        a2amm_error *err)
{
    mpi_state *s = state_of(ctx);
    MPI_Request r;
    if (too_big(bytes, err)) return err ? err->code : A2AMM_E_INVAL;
    if (MPI_Iallgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, s->coll, &r) != MPI_SUCCESS)
        return a2amm_fail(err, A2AMM_E_SYS, "mpi: MPI_Iallgather failed");
    return wait_all(s, &r, 1, deadline_ns, "in an allgather", err);
}

static int tp_barrier(comm_ctx *ctx, int64_t deadline_ns, a2amm_error *err)
{
    mpi_state *s = state_of(ctx);
    MPI_Request r;
    if (MPI_Ibarrier(s->coll, &r) != MPI_SUCCESS) return a2amm_fail(err, A2AMM_E_SYS, "mpi: MPI_Ibarrier failed");
    return wait_all(s, &r, 1, deadline_ns, "at a barrier", err);
}

/* Tells every other rank, once, and helps the notices out for a while (their
 * waits then end within moments); the caller decides what happens next. */
static void tp_tell_failure(comm_ctx *ctx, int rank, int code, const char *reason)
{
    mpi_state *s = state_of(ctx);
    s->failed = 1;
    if (s->sent_req) return; /* told them already */
    if (!(s->sent_req = malloc((size_t)s->size * sizeof *s->sent_req))) return;
    s->sent = (fail_notice){.comm_id = s->id, .rank = rank, .code = code};
    snprintf(s->sent.reason, sizeof s->sent.reason, "%s", reason);
    for (int p = 0; p < s->size; p++) {
        s->sent_req[p] = MPI_REQUEST_NULL;
        if (p != s->rank)
            MPI_Isend(&s->sent, (int)sizeof s->sent, MPI_BYTE, p, TAG_FAILED, s->notices, &s->sent_req[p]);
    }
    int64_t end = comm_now_ns() + NOTICE_PUSH_NS;
    int done = 0;
    for (long spins = 0; !done && comm_now_ns() < end; spins++) {
        if (MPI_Testall(s->size, s->sent_req, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) break;
        if (!done) back_off(spins);
    }
}

static void tp_poll_failure(comm_ctx *ctx) { (void)heard_of_failure(state_of(ctx)); }

static const comm_channel_ops MPI_CHANNEL = {
    .name = "mpi", .per_tile = 1, .post = chan_post, .send = chan_send, .wait = chan_wait,
    .progress = chan_progress, .flush = chan_flush, .exchange = chan_exchange,
};

static const comm_transport MPI_TRANSPORT = {
    .name = "mpi", .peer_memory = 0, .barrier = tp_barrier, .allgather = tp_allgather, .exchange = tp_exchange,
    .exchangev = exchange_blocks,
    .tell_failure = tp_tell_failure, .poll_failure = tp_poll_failure, .channel = &MPI_CHANNEL,
};

/* Tells every other rank this one leaves, and waits (a while) for all of theirs: then no notice of this
 * communicator is in flight when it is freed, and a rank still in a call hears at once. */
static void say_left(mpi_state *s)
{
    if (s->size < 2) return;
    MPI_Request *req = malloc((size_t)s->size * sizeof *req);
    if (!req) return;
    fail_notice n = {.comm_id = s->id, .rank = s->rank, .code = 0};
    for (int p = 0; p < s->size; p++) {
        req[p] = MPI_REQUEST_NULL;
        if (p != s->rank) MPI_Isend(&n, (int)sizeof n, MPI_BYTE, p, TAG_LEFT, s->notices, &req[p]);
    }
    int64_t end = comm_now_ns() + LEFT_DRAIN_NS;
    int sent = 0;
    for (long spins = 0; comm_now_ns() < end; spins++) {
        if (!sent && MPI_Testall(s->size, req, &sent, MPI_STATUSES_IGNORE) != MPI_SUCCESS) break;
        take_notices(s);
        if (sent && s->nleft >= s->size - 1) break;
        back_off(spins);
    }
    for (int p = 0; p < s->size; p++)
        if (req[p] != MPI_REQUEST_NULL) MPI_Cancel(&req[p]), MPI_Request_free(&req[p]);
    free(req);
}

static void mpi_comm_destroy(a2amm_comm *comm)
{
    mpi_state *s = comm_transport_state(comm->ctx);
    if (s) say_left(s); /* (a failure notice it takes in goes to the record, still there) */
    comm_private_ctx_destroy(comm->ctx);
    if (s) {
        s->ctx = NULL, s->failed = 1; /* the record is gone: notices below are only taken in */
        for (int i = 0; s->cap && i < s->size * s->cap * 2; i++) {
            if (s->recv_req[i] != MPI_REQUEST_NULL) MPI_Cancel(&s->recv_req[i]), MPI_Request_free(&s->recv_req[i]);
            if (s->send_req[i] != MPI_REQUEST_NULL) MPI_Request_free(&s->send_req[i]);
        }
        for (int p = 0; s->sent_req && p < s->size; p++)
            if (s->sent_req[p] != MPI_REQUEST_NULL) MPI_Request_free(&s->sent_req[p]);
        (void)heard_of_failure(s); /* notices nobody waited for are taken in, not left behind */
        MPI_Comm_free(&s->tiles), MPI_Comm_free(&s->exchange), MPI_Comm_free(&s->coll);
        MPI_Comm_free(&s->notices);
        for (int d = 0; s->out && d < s->size; d++) free(s->out[d].q);
        free(s->out), free(s->recv_req), free(s->send_req), free(s->sent_req), free(s);
    }
    free(comm);
}

int a2amm_mpi_comm_create(MPI_Comm mpi_comm, size_t heap_bytes, a2amm_comm **out, a2amm_error *err)
{
    if (out) *out = NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!out || !inited)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_mpi_comm_create: %s", out ? "MPI is not initialized" : "comm is NULL");
    mpi_state *s = calloc(1, sizeof *s);
    a2amm_comm *comm = calloc(1, sizeof *comm);
    if (!s || !comm) {
        free(s), free(comm);
        return a2amm_fail(err, A2AMM_E_NOMEM, "a2amm_mpi_comm_create: out of memory");
    }
    MPI_Comm_rank(mpi_comm, &s->rank);
    MPI_Comm_size(mpi_comm, &s->size);
    MPI_Comm *dups[] = {&s->tiles, &s->exchange, &s->coll, &s->notices};
    for (size_t i = 0; i < sizeof dups / sizeof dups[0]; i++) {
        MPI_Comm_dup(mpi_comm, dups[i]);
        MPI_Comm_set_errhandler(*dups[i], MPI_ERRORS_RETURN); /* an MPI error is a status here, not an abort */
    }
    /* the communicator's id: rank 0's clock and process, so a notice of an earlier one is told apart */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    s->id = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^ ((uint64_t)getpid() << 40);
    int rc = MPI_Bcast(&s->id, 1, MPI_UINT64_T, 0, s->notices) == MPI_SUCCESS
                 ? A2AMM_OK
                 : a2amm_fail(err, A2AMM_E_SYS, "a2amm_mpi_comm_create: MPI_Bcast of the communicator's id failed");
    if (!rc)
        rc = comm_private_ctx_create(s->rank, s->size, heap_bytes ? heap_bytes : (size_t)1 << 30, &MPI_TRANSPORT, s,
                                     &comm->ctx, err);
    if (rc) {
        for (size_t i = 0; i < sizeof dups / sizeof dups[0]; i++) MPI_Comm_free(dups[i]);
        free(s), free(comm);
        return rc;
    }
    s->ctx = comm->ctx;
    comm->destroy = mpi_comm_destroy;
    *out = comm;
    return A2AMM_OK;
}
