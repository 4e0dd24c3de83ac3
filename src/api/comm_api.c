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
    a2amm_error own = {0, ""}; /* the reason the others hear, where the caller takes none */
    if (!err) err = &own;
    if (!comm) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_comm_barrier: comm is NULL");
    int rc = api_enter(comm, "a2amm_comm_barrier", err);
    if (rc) return rc;
    if (!(timeout_s > 0)) { /* the others, in this call, hear why at once */
        rc = api_refuse(comm, a2amm_fail(err, A2AMM_E_INVAL, "a2amm_comm_barrier: timeout_s must be positive (got %g)",
                                         timeout_s), err);
        api_leave(comm);
        return rc;
    }
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
