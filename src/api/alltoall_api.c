/*
 * The public AllToAlls: the even one (a2amm_comm_alltoall, every block the
 * same size) and the uneven one (a2amm_comm_alltoallv, a size per pair).
 * A transport with an exchange of its own (MPI) moves the blocks straight
 * from send into recv; on shm they are staged through symmetric memory (the
 * communicator's stage, kept for the calls after) and each rank reads its
 * blocks from every peer's stage, between two barriers.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "common/error.h"

/* The stage too small for `total` bytes (the same on every rank that passes the same sizes): given back,
 * so that the next allocation finds where a new one fits on every rank. Whether it was. top (may be
 * NULL): the highest heap top every rank agreed with the stage still there; where the stage ended it,
 * it lies at the stage's start once the stage is given back (the same on every rank: the stage was the
 * top-most allocation of each), and the new one takes its place. */
static int stage_give_back_if_small(a2amm_comm *comm, size_t total, size_t *top)
{
    if (comm->stage_bytes >= total) return 0;
    if (top && comm->stage && comm->stage_end == *top) *top = comm->stage_start;
    comm_heap_release_range(comm->ctx, comm->stage_start, comm->stage_end);
    comm->stage = NULL, comm->stage_bytes = 0;
    return 1;
}

/* Which query says what the stage of `call` needs, for the message of a full heap. */
static const char *stage_query(const char *call)
{
    if (!strncmp(call, "a2amm_moe", 9)) return "a2amm_moe_heap_bytes says what a MoE op needs";
    return "an AllToAll's stage is size times its largest block, kept for the calls after";
}

/* A new stage of `total` bytes above `top` (the highest heap top of every rank: the same offset everywhere).
 * `call` names it in the message of a full heap. */
static int stage_make(a2amm_comm *comm, size_t total, size_t top, const char *call, a2amm_error *err)
{
    comm_ctx *ctx = comm->ctx;
    comm_heap_raise(ctx, top);
    comm->stage_start = comm_heap_mark(ctx);
    int rc = comm_alloc(ctx, total, 64, &comm->stage, err);
    comm->stage_end = comm_heap_mark(ctx);
    if (!rc) comm->stage_bytes = total;
    if (rc == A2AMM_E_NOMEM) {
        size_t size = comm_heap_size(ctx), at = (comm->stage_start + 63) & ~(size_t)63;
        rc = a2amm_fail(err, rc, "%s: rank %d: symmetric heap full: the communicator's stage needs %zu bytes, %zu are "
                        "free above offset %zu of the heap's %zu (the communicator's heap_bytes: make it larger; %s)",
                        call, comm_rank(ctx), total, at < size ? size - at : 0, at, size, stage_query(call));
    }
    return rc;
}

int api_stage_reserve(a2amm_comm *comm, size_t total, size_t top, const char *call, a2amm_error *err)
{
    return stage_give_back_if_small(comm, total, &top) ? stage_make(comm, total, top, call, err) : A2AMM_OK;
}

/* Each rank's block from every peer's stage: rank src's block for this rank lies at offset
 * me * slot_bytes of src's stage, bytes_from(src) long, and lands at recv_at(src). Then a barrier:
 * nobody reads a stage any more. */
typedef struct stage_reads {
    size_t slot_bytes;
    uint8_t *recv;
    const size_t *recv_offsets; /* NULL: src * slot_bytes */
    const size_t *bytes;        /* NULL: slot_bytes from every rank */
} stage_reads;

static int stage_read_all(a2amm_comm *comm, const stage_reads *q, const char *call, double timeout_s,
                          a2amm_error *err)
{
    comm_ctx *ctx = comm->ctx;
    int me = comm_rank(ctx), R = comm_nranks(ctx), rc = A2AMM_OK;
    const uint8_t *mine = (const uint8_t *)comm->stage + (size_t)me * q->slot_bytes;
    for (int k = 0; !rc && k < R; k++) {
        int src = (me + k) % R;
        size_t n = q->bytes ? q->bytes[src] : q->slot_bytes;
        if (n == 0) continue;
        uint8_t *dst = q->recv + (q->recv_offsets ? q->recv_offsets[src] : (size_t)src * q->slot_bytes);
        if (src == me) memcpy(dst, mine, n);
        else rc = comm_get(ctx, dst, mine, n, src, err);
    }
    comm_set_doing(ctx, "%s: waiting for every rank to finish reading", call);
    if (!rc) rc = comm_barrier(ctx, comm_deadline_after(timeout_s), err);
    return rc;
}

/* The shm AllToAll once every rank passed the same block_bytes: send staged in
 * symmetric memory (placed where it is free on every rank, kept for the
 * calls after), each rank then gets its block from every peer. `grow`: the
 * stage was too small and was given back before the agreement (top: the
 * highest heap top it found); else send is in the stage already. */
static int alltoall_shm(a2amm_comm *comm, const void *send, void *recv, size_t block_bytes, int grow, size_t top,
                        double timeout_s, a2amm_error *err)
{
    comm_ctx *ctx = comm->ctx;
    size_t total = block_bytes * (size_t)comm_nranks(ctx);
    int rc = A2AMM_OK;
    if (grow) {
        rc = stage_make(comm, total, top, "a2amm_comm_alltoall", err);
        if (rc) return rc;
        memcpy(comm->stage, send, total);
        comm_set_doing(ctx, "a2amm_comm_alltoall: waiting for every rank's blocks");
        rc = comm_barrier(ctx, comm_deadline_after(timeout_s), err);
    }
    stage_reads q = {block_bytes, recv, NULL, NULL};
    return rc ? rc : stage_read_all(comm, &q, "a2amm_comm_alltoall", timeout_s, err);
}

/* The even AllToAll's arguments of one rank (comm not NULL). */
static int check_args(const a2amm_comm *comm, const void *send, const void *recv, size_t block_bytes,
                      double timeout_s, a2amm_error *err)
{
    int R = comm_nranks(comm->ctx);
    if (block_bytes && (!send || !recv))
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_comm_alltoall: %s must not be NULL with block_bytes %zu",
                          !send ? "send" : "recv", block_bytes);
    if (!(timeout_s > 0))
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_comm_alltoall: timeout_s must be positive (got %g)", timeout_s);
    if (block_bytes * (size_t)R / (size_t)R != block_bytes)
        return a2amm_fail(err, A2AMM_E_OVERFLOW, "a2amm_comm_alltoall: %d blocks of %zu bytes overflow", R, block_bytes);
    return A2AMM_OK;
}

int a2amm_comm_alltoall(a2amm_comm *comm, const void *send, void *recv, size_t block_bytes, double timeout_s,
                        a2amm_error *err)
{
    a2amm_error own = {0, ""}; /* the reason the others hear, where the caller takes none */
    if (!err) err = &own;
    if (!comm) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_comm_alltoall: comm, send and recv must not be NULL");
    int rc = api_enter(comm, "a2amm_comm_alltoall", err);
    if (rc) return rc;
    rc = check_args(comm, send, recv, block_bytes, timeout_s, err);
    if (rc) { /* the others, in this call, hear why at once */
        api_refuse(comm, rc, err);
        api_leave(comm);
        return rc;
    }
    comm_ctx *ctx = comm->ctx;
    int me = comm_rank(ctx), R = comm_nranks(ctx);
    size_t total = block_bytes * (size_t)R;
    const comm_transport *tp = comm_transport_of(ctx);
    int staged = !tp->exchange;
    int grow = staged && stage_give_back_if_small(comm, total, NULL);
    if (staged && !grow && total) memcpy(comm->stage, send, total);
    /* every rank's block size agreed before a byte moves: a difference is an error on every rank */
    int64_t words[COMM_AGREE_WORDS] = {API_ALLTOALL, 0, (int64_t)block_bytes};
    size_t top = 0;
    comm_set_doing(ctx, "a2amm_comm_alltoall: waiting for every rank");
    rc = api_agree(comm, words, timeout_s, "a2amm_comm_alltoall", &top, err);
    if (!rc && !staged && block_bytes) {
        memcpy((uint8_t *)recv + (size_t)me * block_bytes, (const uint8_t *)send + (size_t)me * block_bytes, block_bytes);
        comm_set_doing(ctx, "a2amm_comm_alltoall: exchanging");
        rc = tp->exchange(ctx, send, recv, block_bytes, block_bytes, comm_deadline_after(timeout_s), err);
    } else if (!rc && staged) {
        rc = alltoall_shm(comm, send, recv, block_bytes, grow, top, timeout_s, err);
    }
    if (rc) api_fail_all(ctx, rc, err);
    else comm_set_doing(ctx, "a2amm_comm_alltoall: done");
    api_leave(comm);
    return rc;
}

/* ---- the uneven AllToAll ------------------------------------------------------- */

/* The sizes every rank told: sizes[i * 2R + j] is what rank i sends to rank j, sizes[i * 2R + R + j]
 * the room rank i has for rank j's block (-1: its recv is NULL, room for nothing). The first block over
 * its room, as an error (the same on every rank: every rank checks every pair); 0 if none. */
static int check_rooms(const int64_t *sizes, int R, a2amm_error *err)
{
    for (int i = 0; i < R; i++)
        for (int j = 0; j < R; j++) {
            int64_t sent = sizes[(size_t)i * 2 * R + j], room = sizes[(size_t)j * 2 * R + R + i];
            if (room < 0 && sent > 0)
                return a2amm_fail(err, A2AMM_E_SIZE, "a2amm_comm_alltoallv: rank %d sends %lld bytes to rank %d, "
                                  "whose recv is NULL (room for nothing): nothing was moved", i, (long long)sent, j);
            if (sent > room && room >= 0)
                return a2amm_fail(err, A2AMM_E_SIZE, "a2amm_comm_alltoallv: rank %d sends %lld bytes to rank %d, "
                                  "which has room for %lld from it (recv_room[%d]): nothing was moved", i,
                                  (long long)sent, j, (long long)room, i);
        }
    return A2AMM_OK;
}

/* The arguments of one rank (comm not NULL), checked before anything is collective. recv may be NULL:
 * it has room for nothing then (a block sent to it is refused on every rank, as one over its room). */
static int check_v_args(const a2amm_comm *comm, const void *send, const size_t *send_bytes, const size_t *send_offsets,
                        const void *recv, const size_t *recv_room, const size_t *recv_offsets, const size_t *recv_bytes,
                        double timeout_s, a2amm_error *err)
{
    const char *null = !send_bytes ? "send_bytes" : !send_offsets ? "send_offsets" : !recv_room ? "recv_room"
                       : !recv_offsets ? "recv_offsets" : !recv_bytes ? "recv_bytes" : NULL;
    if (null)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_comm_alltoallv: comm and the six size arrays must not be NULL "
                          "(%s is)", null);
    if (!(timeout_s > 0))
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_comm_alltoallv: timeout_s must be positive (got %g)", timeout_s);
    int R = comm_nranks(comm->ctx);
    for (int p = 0; p < R; p++) {
        if (send_bytes[p] && !send)
            return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_comm_alltoallv: send is NULL with bytes for rank %d", p);
        /* a NULL recv has room for nothing, whatever recv_room says: its blocks are not checked */
        if (send_offsets[p] > SIZE_MAX - send_bytes[p] || send_bytes[p] > INT64_MAX ||
            (recv && (recv_offsets[p] > SIZE_MAX - recv_room[p] || recv_room[p] > INT64_MAX)))
            return a2amm_fail(err, A2AMM_E_OVERFLOW, "a2amm_comm_alltoallv: the block of rank %d overflows (send "
                              "%zu bytes at %zu, room %zu at %zu)", p, send_bytes[p], send_offsets[p], recv_room[p],
                              recv_offsets[p]);
    }
    return A2AMM_OK;
}

/* shm: every block into a slot of the stage (a slot as large as the largest block of the call), then each
 * rank reads its blocks from every peer's stage. */
static int exchangev_shm(a2amm_comm *comm, const void *send, const comm_blocks *out, void *recv, const comm_blocks *in,
                         size_t slot, size_t top, const char *call, double timeout_s, a2amm_error *err)
{
    comm_ctx *ctx = comm->ctx;
    int R = comm_nranks(ctx);
    size_t total = slot * (size_t)R;
    if (slot && total / (size_t)R != slot)
        return a2amm_fail(err, A2AMM_E_OVERFLOW, "%s: %d slots of %zu bytes overflow", call, R, slot);
    int rc = stage_give_back_if_small(comm, total, &top) ? stage_make(comm, total, top, call, err) : A2AMM_OK;
    for (int p = 0; !rc && p < R; p++)
        if (out->bytes[p])
            memcpy((uint8_t *)comm->stage + (size_t)p * slot, (const uint8_t *)send + out->offsets[p], out->bytes[p]);
    comm_set_doing(ctx, "%s: waiting for every rank's blocks", call);
    if (!rc) rc = comm_barrier(ctx, comm_deadline_after(timeout_s), err);
    stage_reads q = {slot, recv, in->offsets, in->bytes};
    return rc ? rc : stage_read_all(comm, &q, call, timeout_s, err);
}

int api_exchangev(a2amm_comm *comm, const void *send, const comm_blocks *out, void *recv, const comm_blocks *in,
                  size_t slot, size_t top, const char *call, double timeout_s, a2amm_error *err)
{
    comm_ctx *ctx = comm->ctx;
    const comm_transport *tp = comm_transport_of(ctx);
    if (!tp->exchangev) return exchangev_shm(comm, send, out, recv, in, slot, top, call, timeout_s, err);
    int me = comm_rank(ctx);
    if (out->bytes[me])
        memcpy((uint8_t *)recv + in->offsets[me], (const uint8_t *)send + out->offsets[me], out->bytes[me]);
    comm_set_doing(ctx, "%s: exchanging", call);
    return tp->exchangev(ctx, send, out, recv, in, NULL, comm_deadline_after(timeout_s), err);
}

/* shm: each block behind its size (8 bytes) in a cell of the stage, cells of the slot plus that; each rank
 * reads the size of its block from every peer's cell, then as many bytes. */
static int exchange_counted_shm(a2amm_comm *comm, const void *send, const comm_blocks *out, void *recv,
                                const comm_blocks *in, size_t *got, size_t slot, size_t top, const char *call,
                                double timeout_s, a2amm_error *err)
{
    comm_ctx *ctx = comm->ctx;
    int me = comm_rank(ctx), R = comm_nranks(ctx);
    size_t cell = (slot + 8 + 63) & ~(size_t)63, total = cell * (size_t)R;
    if (cell < slot || total / (size_t)R != cell)
        return a2amm_fail(err, A2AMM_E_OVERFLOW, "%s: %d slots of %zu bytes overflow", call, R, slot);
    int rc = stage_give_back_if_small(comm, total, &top) ? stage_make(comm, total, top, call, err) : A2AMM_OK;
    uint8_t *stage = comm->stage;
    for (int p = 0; !rc && p < R; p++) {
        if (out->bytes[p] > slot)
            return a2amm_fail(err, A2AMM_E_SIZE, "%s: rank %d sends %zu bytes to rank %d, over the %zu a rank may "
                              "send another", call, me, out->bytes[p], p, slot);
        uint64_t n = out->bytes[p];
        memcpy(stage + (size_t)p * cell, &n, sizeof n);
        if (n) memcpy(stage + (size_t)p * cell + 8, (const uint8_t *)send + out->offsets[p], (size_t)n);
    }
    comm_set_doing(ctx, "%s: waiting for every rank's blocks", call);
    if (!rc) rc = comm_barrier(ctx, comm_deadline_after(timeout_s), err);
    const uint8_t *mine = stage + (size_t)me * cell; /* where every peer put my block, in its own stage */
    for (int k = 0; !rc && k < R; k++) {
        int src = (me + k) % R;
        uint64_t n = 0;
        if (src == me) memcpy(&n, mine, sizeof n);
        else rc = comm_get(ctx, &n, mine, sizeof n, src, err);
        if (!rc && n > in->bytes[src])
            rc = a2amm_fail(err, A2AMM_E_SIZE, "%s: rank %d sent rank %d %llu bytes, over its room of %zu for it",
                            call, src, me, (unsigned long long)n, in->bytes[src]);
        if (!rc) got[src] = (size_t)n;
        if (!rc && n) {
            uint8_t *dst = (uint8_t *)recv + in->offsets[src];
            if (src == me) memcpy(dst, mine + 8, (size_t)n);
            else rc = comm_get(ctx, dst, mine + 8, (size_t)n, src, err);
        }
    }
    comm_set_doing(ctx, "%s: waiting for every rank to finish reading", call);
    if (!rc) rc = comm_barrier(ctx, comm_deadline_after(timeout_s), err);
    return rc;
}

int api_exchange_counted(a2amm_comm *comm, const void *send, const comm_blocks *out, void *recv, const comm_blocks *in,
                         size_t *got, size_t slot, size_t top, const char *call, double timeout_s, a2amm_error *err)
{
    comm_ctx *ctx = comm->ctx;
    const comm_transport *tp = comm_transport_of(ctx);
    if (!tp->exchangev) return exchange_counted_shm(comm, send, out, recv, in, got, slot, top, call, timeout_s, err);
    int me = comm_rank(ctx);
    if (out->bytes[me] > in->bytes[me])
        return a2amm_fail(err, A2AMM_E_SIZE, "%s: rank %d keeps %zu bytes, over its room of %zu", call, me,
                          out->bytes[me], in->bytes[me]);
    if (out->bytes[me])
        memcpy((uint8_t *)recv + in->offsets[me], (const uint8_t *)send + out->offsets[me], out->bytes[me]);
    got[me] = out->bytes[me];
    comm_set_doing(ctx, "%s: exchanging", call);
    return tp->exchangev(ctx, send, out, recv, in, got, comm_deadline_after(timeout_s), err);
}

int a2amm_comm_alltoallv(a2amm_comm *comm, const void *send, const size_t *send_bytes, const size_t *send_offsets,
                         void *recv, const size_t *recv_room, const size_t *recv_offsets, size_t *recv_bytes,
                         double timeout_s, a2amm_error *err)
{
    a2amm_error own = {0, ""}; /* the reason the others hear, where the caller takes none */
    if (!err) err = &own;
    if (!comm) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_comm_alltoallv: comm and the six size arrays must not be NULL");
    int rc = api_enter(comm, "a2amm_comm_alltoallv", err);
    if (rc) return rc;
    comm_ctx *ctx = comm->ctx;
    int me = comm_rank(ctx), R = comm_nranks(ctx);
    int64_t *sizes = NULL, *mine = NULL;
    size_t *zeros = NULL; /* the offsets of a NULL send or recv: every block there is empty */
    rc = check_v_args(comm, send, send_bytes, send_offsets, recv, recv_room, recv_offsets, recv_bytes, timeout_s, err);
    if (!rc) {
        sizes = malloc((size_t)R * 4 * R * sizeof *sizes), zeros = calloc((size_t)R, sizeof *zeros);
        mine = sizes ? sizes + (size_t)2 * R * R : NULL;
        if (!sizes || !zeros)
            rc = a2amm_fail(err, A2AMM_E_NOMEM, "a2amm_comm_alltoallv: out of memory for %d x %d sizes", R, R);
    }
    if (rc) { /* the others, in this call, hear why at once */
        free(sizes), free(zeros);
        api_refuse(comm, rc, err);
        api_leave(comm);
        return rc;
    }
    /* the call agreed first (every rank in it), then every rank's sizes to every rank: each rank checks
     * every pair, so that a block over its room fails the call on every rank before a byte moves (and
     * only the call: each rank finds it alone, and the communicator stays usable) */
    int64_t words[COMM_AGREE_WORDS] = {API_ALLTOALLV};
    size_t top = 0;
    comm_set_doing(ctx, "a2amm_comm_alltoallv: waiting for every rank");
    rc = api_agree(comm, words, timeout_s, "a2amm_comm_alltoallv", &top, err);
    for (int p = 0; p < R; p++) mine[p] = (int64_t)send_bytes[p], mine[R + p] = recv ? (int64_t)recv_room[p] : -1;
    if (!rc) rc = comm_allgather(ctx, mine, sizes, (size_t)2 * R * sizeof *mine, comm_deadline_after(timeout_s), err);
    int alike = 0; /* a verdict every rank reaches alone: nothing to tell, and the communicator goes on */
    if (!rc) alike = (rc = check_rooms(sizes, R, err)) != 0;
    for (int p = 0; !rc && p < R; p++) recv_bytes[p] = (size_t)sizes[(size_t)p * 2 * R + me];
    size_t slot = 0; /* the largest block of the call */
    for (int i = 0; !rc && i < R; i++)
        for (int j = 0; j < R; j++)
            if ((size_t)sizes[(size_t)i * 2 * R + j] > slot) slot = (size_t)sizes[(size_t)i * 2 * R + j];
    static uint8_t nothing; /* a NULL send or recv holds only empty blocks: no address is made from NULL */
    const comm_blocks out = {send_bytes, send ? send_offsets : zeros}, in = {recv_bytes, recv ? recv_offsets : zeros};
    if (!rc)
        rc = api_exchangev(comm, send ? send : &nothing, &out, recv ? recv : &nothing, &in, slot, top,
                           "a2amm_comm_alltoallv", timeout_s, err);
    free(sizes), free(zeros);
    if (rc && !alike) api_fail_all(ctx, rc, err);
    else comm_set_doing(ctx, "a2amm_comm_alltoallv: %s", rc ? "refused" : "done");
    api_leave(comm);
    return rc;
}
