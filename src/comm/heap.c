/*
 * The symmetric heap of the shm transport: the bump allocator, translating a
 * symmetric address to a peer's copy, put, get, fence and quiet.
 */
#include "comm/comm_shm.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int comm_alloc(comm_ctx *ctx, size_t bytes, size_t align, void **out, a2amm_error *err)
{
    *out = NULL;
    if (align == 0)
        align = 64;
    if ((align & (align - 1)) != 0 || align > COMM_HEAP_ALIGN)
        return comm_report(ctx, err, A2AMM_E_INVAL,
                           "rank %d: symmetric allocation aligned to %zu asked for, expected a "
                           "power of two up to %d", ctx->rank, align, COMM_HEAP_ALIGN);
    size_t start = (ctx->heap_used + align - 1) & ~(align - 1);
    if (start > ctx->heap_bytes || bytes > ctx->heap_bytes - start)
        return comm_report(ctx, err, A2AMM_E_NOMEM,
                           "rank %d: symmetric heap full: %zu bytes asked for at offset %zu, "
                           "heap is %zu bytes (the communicator's heap_bytes: make it larger; "
                           "a2amm_op_heap_bytes, in Python Op.heap_bytes, says what an op needs)",
                           ctx->rank, bytes, start, ctx->heap_bytes);
    ctx->heap_used = start + bytes;
    *out = ctx->my_heap + start;
    return A2AMM_OK;
}

size_t comm_sym_offset(const comm_ctx *ctx, const void *sym)
{
    const char *p = sym;
    if (p < ctx->my_heap || p >= ctx->my_heap + ctx->heap_bytes)
        return SIZE_MAX;
    return (size_t)(p - ctx->my_heap);
}

void *comm_ptr(const comm_ctx *ctx, const void *sym, int pe)
{
    size_t offset = comm_sym_offset(ctx, sym);
    if (!ctx->tp->peer_memory) return pe == ctx->rank ? (void *)sym : NULL;
    if (offset == SIZE_MAX || pe < 0 || pe >= ctx->nranks)
        return NULL;
    return ctx->heaps + (size_t)pe * ctx->heap_bytes + offset;
}

char *comm_peer_range(comm_ctx *ctx, const void *sym, size_t bytes, int pe, const char *op,
                        a2amm_error *err)
{
    size_t offset = comm_sym_offset(ctx, sym);
    if (!ctx->tp->peer_memory) {
        comm_report(ctx, err, A2AMM_E_INVAL, "rank %d: %s to pe %d: the %s transport moves messages and has no "
                    "access to peers' memory", ctx->rank, op, pe, ctx->tp->name);
        return NULL;
    }
    if (pe < 0 || pe >= ctx->nranks) {
        comm_report(ctx, err, A2AMM_E_INVAL, "rank %d: %s to pe %d, expected 0..%d", ctx->rank,
                    op, pe, ctx->nranks - 1);
        return NULL;
    }
    if (offset == SIZE_MAX || bytes > ctx->heap_bytes - offset) {
        comm_report(ctx, err, A2AMM_E_INVAL,
                    "rank %d: %s of %zu bytes on pe %d at %p: not inside the symmetric heap "
                    "(%zu bytes)", ctx->rank, op, bytes, pe, sym, ctx->heap_bytes);
        return NULL;
    }
    return ctx->heaps + (size_t)pe * ctx->heap_bytes + offset;
}

int comm_put(comm_ctx *ctx, void *dest_sym, const void *src, size_t bytes, int pe, a2amm_error *err)
{
    char *dest = comm_peer_range(ctx, dest_sym, bytes, pe, "put", err);
    if (!dest)
        return ctx->last_error.code;
    memcpy(dest, src, bytes);
    return A2AMM_OK;
}

int comm_get(comm_ctx *ctx, void *dest, const void *src_sym, size_t bytes, int pe, a2amm_error *err)
{
    const char *src = comm_peer_range(ctx, src_sym, bytes, pe, "get", err);
    if (!src)
        return ctx->last_error.code;
    memcpy(dest, src, bytes);
    return A2AMM_OK;
}

/* Stores here are plain stores to shared memory: ordering is all they need. */
void comm_fence(comm_ctx *ctx)
{
    (void)ctx;
    atomic_thread_fence(memory_order_release);
}

void comm_quiet(comm_ctx *ctx)
{
    (void)ctx;
    atomic_thread_fence(memory_order_seq_cst);
}

size_t comm_heap_mark(const comm_ctx *ctx) { return ctx->heap_used; }

size_t comm_heap_size(const comm_ctx *ctx) { return ctx->heap_bytes; }

void comm_heap_raise(comm_ctx *ctx, size_t top)
{
    if (top > ctx->heap_bytes) top = ctx->heap_bytes; /* the next allocation says the heap is full */
    if (top <= ctx->heap_used)
        return;
    /* the gap is a hole (already zero: given back, or never used); one that ends here grows instead */
    int i = 0;
    while (i < ctx->nfreed && ctx->freed_hi[i] != ctx->heap_used) i++;
    if (i < ctx->nfreed) {
        ctx->freed_hi[i] = top;
    } else if (ctx->nfreed < COMM_FREED_MAX) {
        ctx->freed_lo[ctx->nfreed] = ctx->heap_used;
        ctx->freed_hi[ctx->nfreed++] = top;
    }
    ctx->heap_used = top;
}

static void release_top(comm_ctx *ctx, size_t mark);

void comm_heap_release_range(comm_ctx *ctx, size_t start, size_t end)
{
    if (start >= end || end > ctx->heap_used)
        return;
    if (end < ctx->heap_used) {
        /* something above is still in use: remember the hole (or, with no room, keep it) */
        if (ctx->nfreed < COMM_FREED_MAX) {
            ctx->freed_lo[ctx->nfreed] = start;
            ctx->freed_hi[ctx->nfreed++] = end;
        }
        return;
    }
    release_top(ctx, start);
    /* holes now at the top go too, and what they uncover */
    for (int again = 1; again;) {
        again = 0;
        for (int i = 0; i < ctx->nfreed; i++)
            if (ctx->freed_hi[i] >= ctx->heap_used) {
                size_t lo = ctx->freed_lo[i];
                ctx->freed_lo[i] = ctx->freed_lo[--ctx->nfreed];
                ctx->freed_hi[i] = ctx->freed_hi[ctx->nfreed];
                if (lo < ctx->heap_used) release_top(ctx, lo);
                again = 1;
                break;
            }
    }
}

void comm_heap_release(comm_ctx *ctx, size_t mark)
{
    if (mark >= ctx->heap_used)
        return;
    release_top(ctx, mark);
    for (int i = 0; i < ctx->nfreed; i++) /* holes above the mark are gone with it */
        if (ctx->freed_lo[i] >= mark) {
            ctx->freed_lo[i] = ctx->freed_lo[--ctx->nfreed];
            ctx->freed_hi[i--] = ctx->freed_hi[ctx->nfreed];
        }
}

static void release_top(comm_ctx *ctx, size_t mark)
{
    /* zero again what is given back, so that comm_alloc stays zero-filled:
     * whole pages are returned to the memfd (read back as zeros), the edges cleared */
    char *lo = ctx->my_heap + mark, *hi = ctx->my_heap + ctx->heap_used;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *plo = (char *)(((uintptr_t)lo + page - 1) & ~(uintptr_t)(page - 1));
    char *phi = (char *)((uintptr_t)hi & ~(uintptr_t)(page - 1));
    if (plo < phi && madvise(plo, (size_t)(phi - plo), ctx->tp->peer_memory ? MADV_REMOVE : MADV_DONTNEED) == 0) {
        memset(lo, 0, (size_t)(plo - lo));
        memset(phi, 0, (size_t)(hi - phi));
    } else {
        memset(lo, 0, (size_t)(hi - lo));
    }
    ctx->heap_used = mark;
}
