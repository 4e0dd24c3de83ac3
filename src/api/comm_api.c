/* The public communicator: the embedded launcher over the shm transport. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

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
    a2amm_comm comm = {ctx};
    return la->fn(&comm, la->arg);
}

int a2amm_launch(int nranks, a2amm_rank_fn fn, void *arg, const a2amm_launch_options *options, a2amm_error *err)
{
    if (nranks < 1 || nranks > 1024)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_launch: nranks must be 1 to 1024 (got %d)", nranks);
    if (!fn) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_launch: fn is NULL");
    if (options && (options->timeout_s < 0 || options->stall_s < 0))
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_launch: timeout_s and stall_s must be 0 (none) or positive "
                          "(got %g and %g)", options->timeout_s, options->stall_s);
    size_t heap = options && options->heap_bytes ? options->heap_bytes : DEFAULT_HEAP_BYTES;
    comm_world *world = NULL;
    int rc = comm_world_create(nranks, heap, &world, err);
    if (rc) return rc;
    launch_arg la = {fn, arg};
    comm_launch_options lo = {options && options->timeout_s > 0 ? options->timeout_s : NO_LIMIT_S, 1.5,
                              options && options->stall_s > 0 ? options->stall_s : 0, options ? options->stop : NULL};
    comm_rank_outcome *outcomes = options && options->reports ? calloc((size_t)nranks, sizeof *outcomes) : NULL;
    rc = comm_launch(world, rank_trampoline, &la, &lo, outcomes, err);
    for (int r = 0; outcomes && r < nranks; r++) {
        const comm_rank_outcome *o = &outcomes[r];
        a2amm_rank_report *rep = &options->reports[r];
        *rep = (a2amm_rank_report){o->pid > 0, o->status, o->exit_code, o->term_signal, o->failed_first,
                                   o->killed_by_launcher, ""};
        snprintf(rep->doing, sizeof rep->doing, "%s", o->doing);
    }
    free(outcomes);
    comm_world_destroy(world);
    return rc;
}

int a2amm_comm_rank(const a2amm_comm *comm) { return comm ? comm_rank(comm->ctx) : -1; }
int a2amm_comm_size(const a2amm_comm *comm) { return comm ? comm_nranks(comm->ctx) : -1; }

int a2amm_comm_barrier(a2amm_comm *comm, double timeout_s, a2amm_error *err)
{
    if (!comm) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_comm_barrier: comm is NULL");
    if (!(timeout_s > 0))
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_comm_barrier: timeout_s must be positive (got %g)", timeout_s);
    return comm_barrier(comm->ctx, comm_deadline_after(timeout_s), err);
}

int a2amm_comm_fail(a2amm_comm *comm, int code, const char *message)
{
    if (!comm) return code;
    return comm_fail(comm->ctx, code < 0 ? code : A2AMM_E_INVAL, "rank %d: %s", comm_rank(comm->ctx),
                     message ? message : "failed");
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
