/*
 * Contexts over a message engine (liba2amm_mpi fills the ops): the same
 * comm_ctx, with a private header (its "doing" and failure record are this
 * rank's alone) and a private heap, so that the op's allocations, marks and
 * releases work unchanged; peers' memory is out of reach (heap.c refuses it).
 */
#include "comm/comm_shm.h"
#include "common/error.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int comm_msg_ctx_create(int rank, int nranks, size_t heap_bytes, const comm_msg_ops *ops, void *state,
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
    ctx->msg = ops;
    ctx->msg_state = state;
    *out = ctx;
    return A2AMM_OK;
}

void comm_msg_ctx_destroy(comm_ctx *ctx)
{
    if (!ctx) return;
    munmap(ctx->my_heap, ctx->heap_bytes);
    free(ctx->hdr);
    free(ctx);
}

const comm_msg_ops *comm_msg(const comm_ctx *ctx) { return ctx->msg; }
void *comm_msg_state(const comm_ctx *ctx) { return ctx->msg_state; }
