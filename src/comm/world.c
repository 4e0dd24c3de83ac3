/*
 * The shm world: creating and destroying the shared mapping, a rank's view
 * of it, the per-rank "what I am doing" text, and the world's failure record.
 */
#include "comm/comm_shm.h"
#include "common/error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

int64_t comm_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t comm_deadline_after(double seconds)
{
    if (!(seconds > 0))
        return comm_now_ns();
    if (seconds > 1e9)
        return INT64_MAX;
    return comm_now_ns() + (int64_t)(seconds * 1e9);
}

static size_t round_up(size_t n, size_t align) { return (n + align - 1) / align * align; }

int comm_world_create(int nranks, size_t heap_bytes, comm_world **out, a2amm_error *err)
{
    return comm_world_create_fd(nranks, heap_bytes, out, NULL, err);
}

int comm_world_create_fd(int nranks, size_t heap_bytes, comm_world **out, int *fd_out, a2amm_error *err)
{
    *out = NULL;
    if (fd_out) *fd_out = -1;
    if (nranks < 1 || nranks > COMM_MAX_RANKS)
        return a2amm_fail(err, A2AMM_E_INVAL, "comm: %d ranks asked for, expected 1..%d",
                          nranks, COMM_MAX_RANKS);
    if (heap_bytes == 0 || heap_bytes > ((size_t)1 << 46))
        return a2amm_fail(err, A2AMM_E_INVAL,
                          "comm: symmetric heap of %zu bytes asked for, expected 1..2^46",
                          heap_bytes);
    heap_bytes = round_up(heap_bytes, COMM_HEAP_ALIGN);
    size_t header_bytes = round_up(sizeof(struct comm_world_header) +
                                       (size_t)nranks * sizeof(struct comm_rank_slot),
                                   COMM_HEAP_ALIGN);
    size_t map_bytes = header_bytes + (size_t)nranks * heap_bytes; /* < 2^57: no overflow */

    comm_world *world = calloc(1, sizeof *world);
    if (!world)
        return a2amm_fail(err, A2AMM_E_NOMEM, "comm: out of memory for the world handle");
    int fd = memfd_create("a2amm-world", MFD_CLOEXEC);
    if (fd < 0) {
        free(world);
        return a2amm_fail(err, A2AMM_E_SYS, "comm: memfd_create failed: %s", strerror(errno));
    }
    if (ftruncate(fd, (off_t)map_bytes) != 0) {
        int e = errno;
        close(fd);
        free(world);
        return a2amm_fail(err, A2AMM_E_SYS, "comm: sizing the world's memfd to %zu bytes failed: %s",
                          map_bytes, strerror(e));
    }
    void *map = mmap(NULL, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    int map_errno = errno;
    if (fd_out && map != MAP_FAILED) *fd_out = fd;
    else close(fd);
    if (map == MAP_FAILED) {
        free(world);
        return a2amm_fail(err, A2AMM_E_SYS, "comm: mapping the world (%zu bytes) failed: %s",
                          map_bytes, strerror(map_errno));
    }
    world->hdr = map;
    world->map_bytes = map_bytes;
    world->heaps = (char *)map + header_bytes;
    world->hdr->nranks = nranks;
    world->hdr->heap_bytes = heap_bytes;
    world->hdr->heaps_offset = header_bytes;
    /* The memfd's pages start zeroed: the rest of the header is ready. */
    *out = world;
    return A2AMM_OK;
}

void comm_world_destroy(comm_world *world)
{
    if (!world)
        return;
    munmap(world->hdr, world->map_bytes);
    free(world);
}

int comm_world_nranks(const comm_world *world) { return world->hdr->nranks; }

void comm_ctx_init(comm_ctx *ctx, comm_world *world, int rank)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->hdr = world->hdr;
    ctx->rank = rank;
    ctx->nranks = world->hdr->nranks;
    ctx->heaps = world->heaps;
    ctx->heap_bytes = world->hdr->heap_bytes;
    ctx->my_heap = world->heaps + (size_t)rank * ctx->heap_bytes;
    ctx->tp = &comm_shm_transport;
}

int comm_rank(const comm_ctx *ctx) { return ctx->rank; }
int comm_nranks(const comm_ctx *ctx) { return ctx->nranks; }

void comm_copy_shared_text(char *dest, size_t size, const char *shared, size_t shared_size)
{
    if (size == 0)
        return;
    size_t n = strnlen(shared, shared_size < size - 1 ? shared_size : size - 1);
    memcpy(dest, shared, n);
    dest[n] = '\0';
}

void comm_append(char *buf, size_t size, size_t *used, const char *fmt, ...)
{
    if (*used + 1 >= size)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *used, size - *used, fmt, ap);
    va_end(ap);
    if (n > 0)
        *used += (size_t)n < size - *used ? (size_t)n : size - *used - 1;
}

void comm_set_doing(comm_ctx *ctx, const char *fmt, ...)
{
    char text[COMM_DOING_CHARS];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    memcpy(ctx->hdr->rank[ctx->rank].doing, text, strlen(text) + 1);
    comm_progress(ctx);
}

const char *comm_doing(const comm_ctx *ctx) { return ctx->hdr->rank[ctx->rank].doing; }

void comm_progress(comm_ctx *ctx)
{
    atomic_store_explicit(&ctx->hdr->rank[ctx->rank].progress_ns, comm_now_ns(), memory_order_relaxed);
}

void comm_describe_rank(const struct comm_world_header *hdr, int rank, char *buf, size_t size)
{
    char doing[COMM_DOING_CHARS], waiting[COMM_DOING_CHARS];
    comm_copy_shared_text(doing, sizeof doing, hdr->rank[rank].doing, COMM_DOING_CHARS);
    comm_copy_shared_text(waiting, sizeof waiting, hdr->rank[rank].waiting, COMM_DOING_CHARS);
    if (doing[0] && waiting[0])
        snprintf(buf, size, "%s; blocked on %s", doing, waiting);
    else if (waiting[0])
        snprintf(buf, size, "blocked on %s", waiting);
    else
        snprintf(buf, size, "%s", doing[0] ? doing : "(no activity recorded)");
}

void comm_mark_failed(struct comm_world_header *hdr, int rank, int code, const char *reason)
{
    uint32_t expected = COMM_FAIL_NONE;
    if (atomic_compare_exchange_strong(&hdr->fail_state, &expected, COMM_FAIL_WRITING)) {
        hdr->fail_rank = rank;
        hdr->fail_code = code;
        comm_copy_shared_text(hdr->fail_reason, sizeof hdr->fail_reason, reason, SIZE_MAX);
        atomic_store_explicit(&hdr->fail_state, COMM_FAIL_PUBLISHED, memory_order_release);
    }
    comm_ring_all_doorbells(hdr);
}

int comm_world_failed(const struct comm_world_header *hdr, int *rank, int *code,
                      char *reason, size_t reason_size)
{
    uint32_t state = atomic_load_explicit(&hdr->fail_state, memory_order_acquire);
    if (state == COMM_FAIL_NONE)
        return 0;
    /* The winner writes a few hundred bytes; wait for them a little. */
    for (int i = 0; state == COMM_FAIL_WRITING && i < 1000; i++) {
        struct timespec pause = {0, 10000};
        nanosleep(&pause, NULL);
        state = atomic_load_explicit(&hdr->fail_state, memory_order_acquire);
    }
    int published = state == COMM_FAIL_PUBLISHED;
    if (rank)
        *rank = published ? hdr->fail_rank : -1;
    if (code)
        *code = published ? hdr->fail_code : A2AMM_E_PEER;
    if (reason && reason_size) {
        if (published)
            comm_copy_shared_text(reason, reason_size, hdr->fail_reason, sizeof hdr->fail_reason);
        else
            snprintf(reason, reason_size, "a rank failed but died before saying why");
    }
    return 1;
}

int comm_report(comm_ctx *ctx, a2amm_error *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->last_error.msg, sizeof ctx->last_error.msg, fmt, ap);
    va_end(ap);
    ctx->last_error.code = code;
    return a2amm_fail(err, code, "%s", ctx->last_error.msg); /* this thread's last failure too */
}

int comm_fail(comm_ctx *ctx, int code, const char *fmt, ...)
{
    char text[COMM_FAIL_CHARS], prefix[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    int prefix_len = snprintf(prefix, sizeof prefix, "rank %d:", ctx->rank);
    char reason[COMM_FAIL_CHARS + 32];
    if (strncmp(text, prefix, (size_t)prefix_len) == 0)
        snprintf(reason, sizeof reason, "%s", text);
    else
        snprintf(reason, sizeof reason, "%s %s", prefix, text);
    /* a transport without a shared record tells the others, once: not again for a failure it heard of */
    int first = !comm_world_failed(ctx->hdr, NULL, NULL, NULL, 0);
    comm_mark_failed(ctx->hdr, ctx->rank, code, reason);
    if (ctx->tp->tell_failure && first) ctx->tp->tell_failure(ctx, ctx->rank, code, reason);
    return code;
}

int comm_failure(comm_ctx *ctx, int *code, char *reason, size_t reason_size)
{
    if (ctx->tp->poll_failure) ctx->tp->poll_failure(ctx);
    return comm_world_failed(ctx->hdr, NULL, code, reason, reason_size);
}

void comm_peer_failed(comm_ctx *ctx, int rank, int code, const char *reason)
{
    comm_mark_failed(ctx->hdr, rank, code, reason);
}

void comm_rank_ended(struct comm_world_header *hdr, int rank, int phase, int status)
{
    atomic_store(&hdr->rank[rank].end_status, status);
    atomic_store(&hdr->rank[rank].phase, phase);
    atomic_fetch_add(&hdr->ended, 1); /* seq_cst, after everything this rank did */
    comm_ring_all_doorbells(hdr);
}

int comm_check_peers(comm_ctx *ctx, a2amm_error *err)
{
    char reason[COMM_FAIL_CHARS];
    if (!comm_failure(ctx, NULL, reason, sizeof reason))
        return A2AMM_OK;
    return comm_report(ctx, err, A2AMM_E_PEER, "rank %d: stopped because the run failed: %s",
                       ctx->rank, reason);
}
