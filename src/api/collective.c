/*
 * What every collective call of the API does first: take the communicator
 * for this thread, then agree with every rank on the call's words (which
 * call, on which op, with which arguments) before anything depends on
 * them. Ranks that make different calls, or the same call on different
 * ops or with different arguments, fail there, every one of them, with a
 * message naming both sides; nothing is read from a peer's memory first.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "common/error.h"

/* The arguments each call compares, by name, from API_WORD_ARGS on. */
static const char *const RUN_ARGS[] = {"m", NULL};
static const char *const ALLTOALL_ARGS[] = {"block_bytes", NULL};
/* (The creates' configs are compared as a hash: config_agree.c.) */

static const char *const *args_of(int64_t call)
{
    switch (call) {
    case API_ALLTOALL: return ALLTOALL_ARGS;
    case API_OP_RUN: return RUN_ARGS;
    default: return NULL;
    }
}

/* "a2amm_op_run on op 2" and the like, from a rank's words. */
static void describe_call(const int64_t *w, char *buf, size_t size)
{
    switch (w[API_WORD_CALL]) {
    case API_BARRIER: snprintf(buf, size, "a2amm_comm_barrier"); break;
    case API_ALLTOALL: snprintf(buf, size, "a2amm_comm_alltoall"); break;
    case API_OP_CREATE: snprintf(buf, size, "a2amm_op_create of op %lld", (long long)w[API_WORD_OP]); break;
    case API_OP_RUN: snprintf(buf, size, "a2amm_op_run on op %lld", (long long)w[API_WORD_OP]); break;
    case API_ALLTOALLV: snprintf(buf, size, "a2amm_comm_alltoallv"); break;
    case API_MOE_CREATE: snprintf(buf, size, "a2amm_moe_create of op %lld", (long long)w[API_WORD_OP]); break;
    case API_MOE_RUN: snprintf(buf, size, "a2amm_moe_run on op %lld", (long long)w[API_WORD_OP]); break;
    case API_MOE_DISPATCH: snprintf(buf, size, "a2amm_moe_dispatch on op %lld", (long long)w[API_WORD_OP]); break;
    case API_MOE_COMBINE: snprintf(buf, size, "a2amm_moe_combine on op %lld", (long long)w[API_WORD_OP]); break;
    default: snprintf(buf, size, "no call of a2amm (words %lld)", (long long)w[API_WORD_CALL]); break;
    }
}

int api_fail_all(comm_ctx *ctx, int rc, const a2amm_error *err)
{
    if (rc == A2AMM_E_PEER || comm_check_peers(ctx, NULL) != A2AMM_OK) return rc;
    return comm_fail(ctx, rc, "%s", err ? err->msg : a2amm_strerror(rc));
}

int api_refuse(a2amm_comm *comm, int rc, const a2amm_error *err)
{
    if (comm && comm->ctx) api_fail_all(comm->ctx, rc, err);
    return rc;
}

int api_enter(a2amm_comm *comm, const char *call, a2amm_error *err)
{
    int idle = 0;
    if (!atomic_compare_exchange_strong(&comm->in_call, &idle, 1))
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: rank %d: another thread is inside a collective call on this "
                          "communicator: collective calls on one communicator go one at a time", call,
                          comm_rank(comm->ctx));
    return A2AMM_OK;
}

void api_leave(a2amm_comm *comm) { atomic_store(&comm->in_call, 0); }

void api_comm_release(a2amm_comm *comm)
{
    free(comm->words);
    comm->words = NULL;
}

/* The first difference between my words and rank p's, as an error; 0 if none. */
static int compare(const int64_t *mine, const int64_t *theirs, int me, int p, const char *call, a2amm_error *err)
{
    if (mine[API_WORD_CALL] != theirs[API_WORD_CALL] || mine[API_WORD_OP] != theirs[API_WORD_OP]) {
        char a[80], b[80];
        describe_call(mine, a, sizeof a);
        describe_call(theirs, b, sizeof b);
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: rank %d is in %s, rank %d in %s: every rank must make the same "
                          "collective calls in the same order", call, me, a, p, b);
    }
    const char *const *names = args_of(mine[API_WORD_CALL]);
    for (int i = 0; names && names[i]; i++) {
        int64_t x = mine[API_WORD_ARGS + i], y = theirs[API_WORD_ARGS + i];
        if (x == y) continue;
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: rank %d has %s = %lld, rank %d has %lld: every rank must pass "
                          "the same", call, me, names[i], (long long)x, p, (long long)y);
    }
    return A2AMM_OK;
}

int api_agree(a2amm_comm *comm, int64_t words[COMM_AGREE_WORDS], double timeout_s, const char *call, size_t *top,
              a2amm_error *err)
{
    comm_ctx *ctx = comm->ctx;
    int me = comm_rank(ctx), R = comm_nranks(ctx);
    if (!comm->words && !(comm->words = malloc((size_t)R * COMM_AGREE_WORDS * sizeof *comm->words)))
        return api_fail_all(ctx, a2amm_fail(err, A2AMM_E_NOMEM, "%s: rank %d: out of memory", call, me), err);
    words[API_WORD_TOP] = (int64_t)comm_heap_mark(ctx);
    int rc = comm_check_peers(ctx, err); /* a failed communicator answers at once: nothing is started */
    if (rc) return rc;
    rc = comm_agree(ctx, words, comm->words, comm_deadline_after(timeout_s), err);
    if (rc) return api_fail_all(ctx, rc, err);
    size_t highest = 0;
    for (int p = 0; p < R; p++) {
        const int64_t *theirs = comm->words + (size_t)p * COMM_AGREE_WORDS;
        if ((size_t)theirs[API_WORD_TOP] > highest) highest = (size_t)theirs[API_WORD_TOP];
        if (p != me && (rc = compare(words, theirs, me, p, call, err))) return api_fail_all(ctx, rc, err);
    }
    if (top) *top = highest;
    return A2AMM_OK;
}
