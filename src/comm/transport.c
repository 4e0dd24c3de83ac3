/*
 * Transports: the shm transport's table, the calls that go through a
 * context's table, and contexts over another engine's transport (liba2amm_mpi
 * fills its table): the same comm_ctx, with a private header (its "doing"
 * and failure record are this rank's alone) and a private heap, so that the
 * op's allocations, marks and releases work unchanged; peers' memory is out
 * of reach (heap.c refuses it).
 */
#include "comm/comm_shm.h"
#include "common/error.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* shm: through a symmetric block of the heap, between two barriers */
static int shm_allgather(comm_ctx *ctx, const void *mine, void *all, size_t bytes, int64_t deadline_ns,
                         a2amm_error *err)
{
    size_t mark = comm_heap_mark(ctx);
    char *sym = NULL;
    int rc = comm_alloc(ctx, bytes ? bytes : 1, 64, (void **)&sym, err);
    if (!rc) {
        memcpy(sym, mine, bytes);
        rc = comm_barrier(ctx, deadline_ns, err);
    }
    for (int p = 0; !rc && p < ctx->nranks; p++) memcpy((char *)all + (size_t)p * bytes, comm_ptr(ctx, sym, p), bytes);
    if (!rc) rc = comm_barrier(ctx, deadline_ns, err);
    comm_heap_release(ctx, mark);
    return rc;
}

const comm_transport comm_shm_transport = {
    .name = "shm",
    .peer_memory = 1,
    .barrier = comm_shm_barrier,
    .allgather = shm_allgather,
    .agree = comm_shm_agree,
    /* exchange: staged through symmetric memory; failures: the shared record; channel: shm's (channel_shm.c) */
};

int comm_allgather(comm_ctx *ctx, const void *mine, void *all, size_t bytes, int64_t deadline_ns, a2amm_error *err)
{
    comm_progress(ctx);
    return ctx->tp->allgather(ctx, mine, all, bytes, deadline_ns, err);
}

const comm_transport *comm_transport_of(const comm_ctx *ctx) { return ctx->tp; }
void *comm_transport_state(const comm_ctx *ctx) { return ctx->tp_state; }

int comm_private_ctx_create(int rank, int nranks, size_t heap_bytes, const comm_transport *tp, void *state,
                            comm_ctx **out, a2amm_error *err)
{
    *out = NULL;
    if (nranks < 1 || nranks > COMM_MAX_RANKS || rank < 0 || rank >= nranks)
        return a2amm_fail(err, A2AMM_E_INVAL, "comm: rank %d of %d, expected 0 <= rank < ranks <= %d", rank, nranks,
                          COMM_MAX_RANKS);
    heap_bytes = (heap_bytes + COMM_HEAP_ALIGN - 1) / COMM_HEAP_ALIGN * COMM_HEAP_ALIGN;
    comm_ctx *ctx = calloc(1, sizeof *ctx);
    struct comm_world_header *hdr =
        calloc(1, sizeof *hdr + (size_t)nranks * sizeof(struct comm_rank_slot));
    void *heap = mmap(NULL, heap_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (!ctx || !hdr || heap == MAP_FAILED) {
        free(ctx), free(hdr);
        if (heap != MAP_FAILED) munmap(heap, heap_bytes);
        return a2amm_fail(err, A2AMM_E_NOMEM, "comm: cannot reserve a heap of %zu bytes", heap_bytes);
    }
    hdr->nranks = nranks;
    hdr->heap_bytes = heap_bytes;
    ctx->hdr = hdr;
    ctx->rank = rank;
    ctx->nranks = nranks;
    ctx->heaps = heap;
    ctx->heap_bytes = heap_bytes;
    ctx->my_heap = heap;
    ctx->tp = tp;
    ctx->tp_state = state;
    *out = ctx;
    return A2AMM_OK;
}

void comm_private_ctx_destroy(comm_ctx *ctx)
{
    if (!ctx) return;
    munmap(ctx->my_heap, ctx->heap_bytes);
    free(ctx->hdr);
    free(ctx);
}
