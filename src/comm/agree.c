/*
 * Agreement: every rank's words of a collective call, with a barrier, on
 * memory that does not depend on the heap (the callers use it to agree,
 * among other things, where the next symmetric allocation goes, which
 * needs every rank's heap top first).
 *
 * On shm each rank has two sets of words in its slot of the world's header
 * and uses them in turn. Call n writes set n mod 2, then the barrier, then
 * reads every rank's set n mod 2. A rank writes that set again only at call
 * n + 2, after passing call n + 1's barrier, which every rank enters only
 * once it has read call n's words: one barrier per call is enough.
 */
#include "comm/comm_shm.h"

#include <string.h>

int comm_agree(comm_ctx *ctx, const int64_t *mine, int64_t *all, int64_t deadline_ns, a2amm_error *err)
{
    comm_progress(ctx);
    if (ctx->tp->agree) return ctx->tp->agree(ctx, mine, all, deadline_ns, err);
    return ctx->tp->allgather(ctx, mine, all, COMM_AGREE_WORDS * sizeof *mine, deadline_ns, err);
}

int comm_shm_agree(comm_ctx *ctx, const int64_t *mine, int64_t *all, int64_t deadline_ns, a2amm_error *err)
{
    const size_t bytes = COMM_AGREE_WORDS * sizeof *mine;
    int set = (int)(ctx->agreements++ % 2);
    memcpy(ctx->hdr->rank[ctx->rank].agree[set], mine, bytes);
    int rc = comm_barrier(ctx, deadline_ns, err); /* orders the writes before every reader's loads */
    for (int p = 0; !rc && p < ctx->nranks; p++)
        memcpy(all + (size_t)p * COMM_AGREE_WORDS, ctx->hdr->rank[p].agree[set], bytes);
    return rc;
}
