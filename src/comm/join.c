/*
 * Joining a world from processes another engine started (an MPI job, a
 * framework's workers): rank 0 makes the shared mapping, the others map the
 * same memfd through /proc/<pid>/fd/<fd>, all through the caller's
 * allgather and barrier. No launcher watches these processes, so each rank
 * runs a watcher thread that fails the world when a peer's process is gone
 * before it left.
 */
#include "comm/comm_shm.h"
#include "common/error.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define WATCH_NS 20000000 /* how often a rank looks at its peers' processes */

/* What each rank tells the others at the join. */
typedef struct join_word {
    int32_t pid;
    int32_t fd;   /* rank 0: the memfd, open until every rank mapped it */
    int32_t status;
    int32_t rank; /* the rank this process claims */
    uint64_t map_bytes;
    uint64_t heap_bytes;
    uint64_t magic; /* JOIN_MAGIC: a place nobody wrote is not taken for a rank's */
} join_word;

#define JOIN_MAGIC 0x61326d6d6a6f696eull /* "a2mmjoin" */

static int two_claim(a2amm_error *err, int rank, int pid1, int pid2)
{
    return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_comm_create: two processes claim rank %d (pids %d and %d): each "
                      "rank of the bootstrap must be claimed by one process", rank, pid1, pid2);
}

/* Each rank's place in the allgather holds one process that claims that
 * rank, and this process sits in its own: 0, or the error naming who claims what. */
static int check_claims(const join_word *all, int rank, int nranks, a2amm_error *err)
{
    if (all[rank].magic == JOIN_MAGIC && all[rank].pid != (int32_t)getpid())
        return two_claim(err, rank, (int)getpid(), all[rank].pid);
    for (int r = 0; r < nranks; r++) {
        if (all[r].magic != JOIN_MAGIC)
            return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_comm_create: no process claimed rank %d of %d (its place in "
                              "the bootstrap's allgather is empty: two processes may claim one rank)", r, nranks);
        int x = all[r].rank;
        if (x == r) continue;
        if (x >= 0 && x < nranks && all[x].magic == JOIN_MAGIC && all[x].rank == x)
            return two_claim(err, x, all[x].pid, all[r].pid);
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_comm_create: the process in rank %d's place of the bootstrap's "
                          "allgather (pid %d) claims rank %d", r, (int)all[r].pid, x);
    }
    return A2AMM_OK;
}

/* Whether pid is a live process: gone, or a zombie its parent has not reaped yet, is dead. */
static int pid_alive(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return errno != ENOENT;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')'); /* the state follows the command name, which may hold anything */
    return !(paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'));
}

#define WATCH_PER_TICK 32 /* peers looked at per tick, round robin */

static void *watch_peers(void *arg)
{
    comm_world *w = arg;
    struct comm_world_header *hdr = w->hdr;
    int next = 0;
    while (!atomic_load(&w->stop_watching)) {
        for (int i = 0; i < WATCH_PER_TICK && i < hdr->nranks && !comm_world_failed(hdr, NULL, NULL, NULL, 0); i++) {
            int r = next;
            next = (next + 1) % hdr->nranks;
            if (r == w->joined_rank || atomic_load(&hdr->rank[r].phase) != COMM_PHASE_RUNNING) continue;
            pid_t pid = atomic_load(&hdr->rank[r].pid);
            if (pid > 0 && !pid_alive(pid)) {
                char doing[2 * COMM_DOING_CHARS + 32], reason[COMM_FAIL_CHARS];
                comm_describe_rank(hdr, r, doing, sizeof doing);
                snprintf(reason, sizeof reason, "rank %d (pid %d) died while %s", r, (int)pid, doing);
                comm_mark_failed(hdr, r, A2AMM_E_PEER, reason);
            }
        }
        struct timespec pause = {0, WATCH_NS};
        nanosleep(&pause, NULL);
    }
    return NULL;
}

/* Every rank's status after a step: the first failure's rank, or -1. */
static int first_failed(const join_word *all, int nranks)
{
    for (int r = 0; r < nranks; r++)
        if (all[r].status) return r;
    return -1;
}

int comm_world_join(int rank, int nranks, size_t heap_bytes, const comm_bootstrap_fns *bs, comm_world **out,
                    comm_ctx **ctx_out, a2amm_error *err)
{
    *out = NULL;
    *ctx_out = NULL;
    if (rank < 0 || nranks < 1 || rank >= nranks || nranks > COMM_MAX_RANKS)
        return a2amm_fail(err, A2AMM_E_INVAL, "comm: rank %d of %d ranks, expected 0 <= rank < ranks <= %d", rank,
                          nranks, COMM_MAX_RANKS);
    join_word *all = calloc((size_t)nranks, sizeof *all);
    comm_ctx *ctx = calloc(1, sizeof *ctx);
    if (!all || !ctx) {
        free(all), free(ctx);
        return a2amm_fail(err, A2AMM_E_NOMEM, "comm: out of memory joining the world");
    }
    comm_world *world = NULL;
    join_word me = {.pid = (int32_t)getpid(), .fd = -1, .rank = rank, .heap_bytes = heap_bytes, .magic = JOIN_MAGIC};
    a2amm_error why = {0, ""};
    if (rank == 0) {
        int fd = -1;
        me.status = comm_world_create_fd(nranks, heap_bytes, &world, &fd, &why);
        me.fd = fd;
        if (world) me.map_bytes = world->map_bytes;
    }
    int rc = A2AMM_OK;
    if (bs->allgather(bs->arg, &me, all, sizeof me) != 0)
        rc = a2amm_fail(err, A2AMM_E_PEER, "comm: rank %d: the bootstrap's allgather failed", rank);
    else
        rc = check_claims(all, rank, nranks, err);
    if (!rc && all[0].status)
        rc = a2amm_fail(err, rank ? A2AMM_E_PEER : me.status, "comm: rank 0 could not make the world%s%s",
                        rank ? "" : ": ", rank ? "" : why.msg);
    for (int r = 0; !rc && r < nranks; r++)
        if (all[r].heap_bytes != heap_bytes)
            rc = a2amm_fail(err, A2AMM_E_INVAL, "comm: rank %d asks for a heap of %llu bytes, rank %d for %llu: "
                            "every rank must ask for the same", rank, (unsigned long long)heap_bytes, r,
                            (unsigned long long)all[r].heap_bytes);
    if (!rc && rank != 0) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)all[0].pid, (int)all[0].fd);
        int fd = open(path, O_RDWR | O_CLOEXEC);
        void *map = fd < 0 ? MAP_FAILED
                           : mmap(NULL, all[0].map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
        int e = errno;
        if (fd >= 0) close(fd);
        world = map == MAP_FAILED ? NULL : calloc(1, sizeof *world);
        if (!world) {
            if (map != MAP_FAILED) munmap(map, all[0].map_bytes);
            rc = a2amm_fail(err, A2AMM_E_SYS, "comm: rank %d cannot map rank 0's world through %s: %s (the ranks "
                            "must run on one machine, as one user)", rank, path, strerror(e));
        } else {
            world->hdr = map;
            world->map_bytes = all[0].map_bytes;
            world->heaps = (char *)map + world->hdr->heaps_offset;
        }
    }
    /* everybody mapped (or says why not): rank 0's memfd may close */
    me.status = rc;
    if (bs->allgather(bs->arg, &me, all, sizeof me) != 0 && !rc)
        rc = a2amm_fail(err, A2AMM_E_PEER, "comm: rank %d: the bootstrap's allgather failed", rank);
    int bad = first_failed(all, nranks);
    if (!rc && bad >= 0)
        rc = a2amm_fail(err, A2AMM_E_PEER, "comm: rank %d could not join the world (status %d)", bad, all[bad].status);
    if (rank == 0 && me.fd >= 0) close(me.fd);
    free(all);
    if (rc) {
        if (world) comm_world_destroy(world);
        free(ctx);
        return rc;
    }
    world->joined_rank = rank;
    struct comm_rank_slot *slot = &world->hdr->rank[rank];
    atomic_store(&slot->pid, (int32_t)getpid());
    atomic_store(&slot->phase, COMM_PHASE_RUNNING);
    comm_ctx_init(ctx, world, rank);
    comm_progress(ctx);
    /* every pid is published before anyone watches */
    if (bs->barrier(bs->arg) != 0) {
        comm_world_destroy(world);
        free(ctx);
        return a2amm_fail(err, A2AMM_E_PEER, "comm: rank %d: the bootstrap's barrier failed", rank);
    }
    if (pthread_create(&world->watcher, NULL, watch_peers, world) == 0) world->watching = 1;
    *out = world;
    *ctx_out = ctx;
    return A2AMM_OK;
}

void comm_world_leave(comm_world *world, comm_ctx *ctx)
{
    if (!world) return;
    if (world->watching) {
        atomic_store(&world->stop_watching, 1);
        pthread_join(world->watcher, NULL);
    }
    comm_rank_ended(world->hdr, world->joined_rank, COMM_PHASE_LEFT, A2AMM_OK);
    comm_world_destroy(world);
    free(ctx);
}
