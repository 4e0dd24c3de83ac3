/*
 * The barrier of the shm transport: one shared arrival counter that only
 * grows; barrier n is complete when it reaches n * nranks. The last rank to
 * arrive rings every doorbell; the others sleep in comm_wait_word.
 */
#include "comm/comm_shm.h"

#include <stdio.h>

int comm_barrier(comm_ctx *ctx, int64_t deadline_ns, a2amm_error *err)
{
    comm_quiet(ctx);
    comm_progress(ctx);
    return ctx->tp->barrier(ctx, deadline_ns, err);
}

int comm_shm_barrier(comm_ctx *ctx, int64_t deadline_ns, a2amm_error *err)
{
    struct comm_world_header *hdr = ctx->hdr;
    uint64_t number = ++ctx->barriers_done;
    uint64_t target = number * (uint64_t)ctx->nranks;
    atomic_store(&hdr->rank[ctx->rank].barriers_entered, number);
    if (atomic_fetch_add(&hdr->barrier_arrivals, 1) + 1 == target) {
        comm_ring_all_doorbells(hdr);
        return A2AMM_OK;
    }
    char what[64];
    snprintf(what, sizeof what, "the arrival count of barrier %llu", (unsigned long long)number);
    int64_t start = comm_now_ns();
    uint64_t seen;
    int status = comm_wait_word(ctx, &hdr->barrier_arrivals, COMM_CMP_GE, target, deadline_ns,
                                &seen, what, err);
    if (status != A2AMM_E_TIMEOUT)
        return status;

    /* Name the ranks that have not arrived and what they are doing. */
    char missing[700];
    size_t used = 0;
    missing[0] = '\0';
    for (int r = 0; r < ctx->nranks; r++) {
        if (atomic_load(&hdr->rank[r].barriers_entered) >= number)
            continue;
        char doing[2 * COMM_DOING_CHARS + 32];
        comm_describe_rank(hdr, r, doing, sizeof doing);
        comm_append(missing, sizeof missing, &used, "%srank %d (%s)", used ? "; " : "", r, doing);
    }
    return comm_report(ctx, err, status,
                       "rank %d: barrier %llu timed out with %llu of %d ranks arrived "
                       "(waited %.3f s); not arrived: %s", ctx->rank, (unsigned long long)number,
                       (unsigned long long)(seen - (number - 1) * (uint64_t)ctx->nranks),
                       ctx->nranks, (double)(comm_now_ns() - start) / 1e9,
                       missing[0] ? missing : "(none: they arrived just now)");
}
