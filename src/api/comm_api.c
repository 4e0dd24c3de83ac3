/* The public communicator: the embedded launcher over the shm transport. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "common/error.h"

#define DEFAULT_HEAP_BYTES ((size_t)1 << 30)
#define NO_LIMIT_S 1e9 /* about 31 years: the caller's function may take as long as it likes */

typedef struct launch_arg {
    a2amm_rank_fn fn;
    void *arg;
} launch_arg;

static int rank_trampoline(comm_ctx *ctx, void *p)
{
    const launch_arg *la = p;
    a2amm_comm comm = {.ctx = ctx};
    int rc = la->fn(&comm, la->arg);
    api_comm_release(&comm);
    return rc;
}

int a2amm_launch(int nranks, a2amm_rank_fn fn, void *arg, const a2amm_launch_options *given, a2amm_error *err)
{
    if (nranks < 1 || nranks > 1024)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_launch: nranks must be 1 to 1024 (got %d)", nranks);
    if (!fn) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_launch: fn is NULL");
    a2amm_launch_options o = A2AMM_LAUNCH_OPTIONS_INIT; /* NULL: every default */
    if (given) {
        int rc = api_read_sized(given, &o, sizeof o, sizeof o, "a2amm_launch", "options", err);
        if (rc) return rc;
    }
    if (!(o.timeout_s >= 0) || !(o.stall_s >= 0)) /* NaN too */
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_launch: timeout_s and stall_s must be 0 (none) or positive "
                          "(got %g and %g)", o.timeout_s, o.stall_s);
    size_t heap = o.heap_bytes ? o.heap_bytes : DEFAULT_HEAP_BYTES;
    comm_world *world = NULL;
    int rc = comm_world_create(nranks, heap, &world, err);
    if (rc) return rc;
    launch_arg la = {fn, arg};
    comm_launch_options lo = {o.timeout_s > 0 ? o.timeout_s : NO_LIMIT_S, 1.5, o.stall_s > 0 ? o.stall_s : 0, o.stop};
    comm_rank_outcome *outcomes = o.reports ? calloc((size_t)nranks, sizeof *outcomes) : NULL;
    rc = comm_launch(world, rank_trampoline, &la, &lo, outcomes, err);
    for (int r = 0; outcomes && r < nranks; r++) {
        const comm_rank_outcome *out = &outcomes[r];
        a2amm_rank_report *rep = &o.reports[r];
        *rep = (a2amm_rank_report){out->pid > 0, out->status, out->exit_code, out->term_signal, out->failed_first,
                                   out->killed_by_launcher, ""};
        snprintf(rep->doing, sizeof rep->doing, "%s", out->doing);
    }
    free(outcomes);
    comm_world_destroy(world);
    return rc;
}

static int call_allgather(void *arg, const void *mine, void *all, size_t bytes)
{
    const a2amm_bootstrap *bs = arg;
    return bs->allgather(bs->arg, mine, all, bytes);
}

static int call_barrier(void *arg)
{
    const a2amm_bootstrap *bs = arg;
    return bs->barrier(bs->arg);
}

int a2amm_comm_create(const a2amm_bootstrap *bs, size_t heap_bytes, a2amm_comm **out, a2amm_error *err)
{
    if (out) *out = NULL;
    if (!bs || !out || !bs->allgather || !bs->barrier)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_comm_create: bootstrap (with allgather and barrier) and comm "
                          "must not be NULL");
    if (bs->size < 1 || bs->size > 1024 || bs->rank < 0 || bs->rank >= bs->size)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_comm_create: rank %d of size %d: expected 0 <= rank < size <= "
                          "1024", bs->rank, bs->size);
    a2amm_comm *comm = calloc(1, sizeof *comm);
    if (!comm) return a2amm_fail(err, A2AMM_E_NOMEM, "a2amm_comm_create: out of memory");
    comm_bootstrap_fns fns = {(void *)bs, call_allgather, call_barrier};
    int rc = comm_world_join(bs->rank, bs->size, heap_bytes ? heap_bytes : DEFAULT_HEAP_BYTES, &fns, &comm->joined,
                             &comm->ctx, err);
    if (rc) {
        free(comm);
        return rc;
    }
    *out = comm;
    return A2AMM_OK;
}

void a2amm_comm_destroy(a2amm_comm *comm)
{
    if (comm && comm->destroy) {
        api_comm_release(comm);
        comm->destroy(comm);
        return;
    }
    if (!comm || !comm->joined) return; /* a launcher's communicator ends with its rank function */
    comm_world_leave(comm->joined, comm->ctx);
    api_comm_release(comm);
    free(comm);
}

const char *a2amm_comm_doing(const a2amm_comm *comm) { return comm ? comm_doing(comm->ctx) : ""; }

int a2amm_comm_rank(const a2amm_comm *comm) { return comm ? comm_rank(comm->ctx) : -1; }
int a2amm_comm_size(const a2amm_comm *comm) { return comm ? comm_nranks(comm->ctx) : -1; }

int a2amm_comm_barrier(a2amm_comm *comm, double timeout_s, a2amm_error *err)
{
    if (!comm) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_comm_barrier: comm is NULL");
    if (!(timeout_s > 0))
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_comm_barrier: timeout_s must be positive (got %g)", timeout_s);
    int rc = api_enter(comm, "a2amm_comm_barrier", err);
    if (rc) return rc;
    int64_t words[COMM_AGREE_WORDS] = {API_BARRIER};
    /* what the caller said it is doing stays: a wait adds "blocked on" the barrier */
    rc = api_agree(comm, words, timeout_s, "a2amm_comm_barrier", NULL, err); /* the agreement is a barrier */
    api_leave(comm);
    return rc;
}

int a2amm_comm_fail(a2amm_comm *comm, int code, const char *message)
{
    if (!comm) return code;
    return comm_fail(comm->ctx, code < 0 ? code : A2AMM_E_INVAL, "rank %d: %s", comm_rank(comm->ctx),
                     message ? message : "failed");
}

int a2amm_comm_status(a2amm_comm *comm, a2amm_error *err)
{
    if (!comm) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_comm_status: comm is NULL");
    int code = A2AMM_OK;
    char reason[COMM_FAIL_CHARS];
    if (!comm_failure(comm->ctx, &code, reason, sizeof reason)) {
        a2amm_error_clear(err);
        return A2AMM_OK;
    }
    return a2amm_fail(err, code < 0 ? code : A2AMM_E_PEER, "%s", reason);
}

void a2amm_comm_say(a2amm_comm *comm, const char *fmt, ...)
{
    if (!comm || !fmt) return;
    char text[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    comm_set_doing(comm->ctx, "%s", text);
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
    int me = comm_rank(ctx), R = comm_nranks(ctx);
    size_t total = block_bytes * (size_t)R;
    int rc = A2AMM_OK;
    if (grow) {
        comm_heap_raise(ctx, top);
        comm->stage_start = comm_heap_mark(ctx);
        rc = comm_alloc(ctx, total, 64, &comm->stage, err);
        comm->stage_end = comm_heap_mark(ctx);
        if (rc) return rc;
        comm->stage_bytes = total;
        memcpy(comm->stage, send, total);
        comm_set_doing(ctx, "a2amm_comm_alltoall: waiting for every rank's blocks");
        rc = comm_barrier(ctx, comm_deadline_after(timeout_s), err);
    }
    const uint8_t *stage = comm->stage;
    for (int k = 0; !rc && block_bytes && k < R; k++) {
        int src = (me + k) % R;
        uint8_t *dst = (uint8_t *)recv + (size_t)src * block_bytes;
        if (src == me) memcpy(dst, stage + (size_t)me * block_bytes, block_bytes);
        else rc = comm_get(ctx, dst, stage + (size_t)me * block_bytes, block_bytes, src, err);
    }
    comm_set_doing(ctx, "a2amm_comm_alltoall: waiting for every rank to finish reading");
    if (!rc) rc = comm_barrier(ctx, comm_deadline_after(timeout_s), err); /* nobody reads the stage any more */
    return rc;
}

int a2amm_comm_alltoall(a2amm_comm *comm, const void *send, void *recv, size_t block_bytes, double timeout_s,
                        a2amm_error *err)
{
    if (!comm || (block_bytes && (!send || !recv)))
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_comm_alltoall: comm, send and recv must not be NULL");
    if (!(timeout_s > 0))
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_comm_alltoall: timeout_s must be positive (got %g)", timeout_s);
    comm_ctx *ctx = comm->ctx;
    int me = comm_rank(ctx), R = comm_nranks(ctx);
    size_t total = block_bytes * (size_t)R;
    if (total / (size_t)R != block_bytes)
        return a2amm_fail(err, A2AMM_E_OVERFLOW, "a2amm_comm_alltoall: %d blocks of %zu bytes overflow", R, block_bytes);
    int rc = api_enter(comm, "a2amm_comm_alltoall", err);
    if (rc) return rc;
    /* a transport with an exchange of its own moves the blocks straight from send into recv; shm
     * stages them through symmetric memory */
    const comm_transport *tp = comm_transport_of(ctx);
    int staged = !tp->exchange;
    /* the stage too small (the same on every rank that passes the same sizes): given back first, so
     * that the agreement finds where a new one fits on every rank */
    int grow = staged && comm->stage_bytes < total;
    if (grow) {
        comm_heap_release_range(ctx, comm->stage_start, comm->stage_end);
        comm->stage = NULL, comm->stage_bytes = 0;
    } else if (staged && total) {
        memcpy(comm->stage, send, total);
    }
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
