/*
 * The shm transport's insides, shared by the files of src/comm only: the
 * layout of the shared mapping (header, per-rank slots, heaps), the handles,
 * and the doorbell, failure-record and waiting helpers.
 */
#ifndef A2AMM_COMM_SHM_H
#define A2AMM_COMM_SHM_H

#include "comm/comm.h"

#include <pthread.h>
#include <stdatomic.h>

#define COMM_HEAP_ALIGN 4096 /* every heap starts on a page */

/* A rank's lifecycle as its process reports it in its slot: RETURNED from
 * its function (a launched rank), LEFT the world (comm_world_leave). */
enum { COMM_PHASE_NOT_STARTED, COMM_PHASE_RUNNING, COMM_PHASE_RETURNED, COMM_PHASE_LEFT };

/* The failure record's state: the first to move it off NONE writes it. */
enum { COMM_FAIL_NONE, COMM_FAIL_WRITING, COMM_FAIL_PUBLISHED };

/* One rank's shared slot. The doorbell's line is written by every peer. */
struct comm_rank_slot {
    _Alignas(64) _Atomic uint32_t doorbell; /* bumped on every signal update */
    _Atomic uint32_t sleepers;              /* waiters in FUTEX_WAIT on it */
    _Atomic int32_t pid;
    _Atomic int32_t phase;                  /* COMM_PHASE_* */
    _Atomic uint64_t barriers_entered;
    _Atomic int64_t progress_ns;            /* comm_now_ns() of its last sign of life */
    _Atomic int32_t end_status;             /* RETURNED: what its function returned */
    _Alignas(64) char doing[COMM_DOING_CHARS];   /* set by comm_set_doing */
    char waiting[COMM_DOING_CHARS];              /* set by a sleeping wait */
    int64_t agree[2][COMM_AGREE_WORDS];          /* comm_agree's words, its calls in turn */
};

/* The start of the shared mapping; the heaps follow at heaps_offset. */
struct comm_world_header {
    int32_t nranks;
    uint64_t heap_bytes;
    uint64_t heaps_offset;
    _Alignas(64) _Atomic uint32_t fail_state; /* COMM_FAIL_* */
    int32_t fail_rank;                        /* -1: none (the launcher) */
    int32_t fail_code;
    char fail_reason[COMM_FAIL_CHARS];
    _Alignas(64) _Atomic uint64_t barrier_arrivals; /* all ranks, all barriers */
    _Atomic uint32_t ended; /* ranks that returned or left: a wait not yet satisfied then never will be */
    struct comm_rank_slot rank[];
};

/* The launcher's handle (children get a copy through fork). */
struct comm_world {
    struct comm_world_header *hdr;
    size_t map_bytes;
    char *heaps; /* rank r's heap is heaps + r * hdr->heap_bytes */
    int launched;
    /* a world joined through a bootstrap (join.c): this rank, and its watcher of the peers */
    int joined_rank;
    int watching;
    pthread_t watcher;
    _Atomic int stop_watching;
};

/* comm_world_create, keeping the memfd open in *fd_out for others to map (join.c). */
int comm_world_create_fd(int nranks, size_t heap_bytes, comm_world **out, int *fd_out, a2amm_error *err);

#define COMM_FREED_MAX 64

/* One rank's view; lives in that rank's process. */
struct comm_ctx {
    struct comm_world_header *hdr;
    int rank, nranks;
    char *heaps;
    size_t heap_bytes;
    char *my_heap;
    size_t heap_used;
    /* ranges given back below the top, returned once everything above them is */
    size_t freed_lo[COMM_FREED_MAX], freed_hi[COMM_FREED_MAX];
    int nfreed;
    uint64_t barriers_done;
    uint64_t agreements; /* comm_agree calls so far: which set of words is next */
    a2amm_error last_error; /* the last failure a comm call reported */
    /* its transport (shm's own, or another engine's) and that transport's state */
    const comm_transport *tp;
    void *tp_state;
};

/* The shm transport's table (transport.c): what world contexts use. */
extern const comm_transport comm_shm_transport;
/* Its barrier and agreement (barrier.c, agree.c). */
int comm_shm_barrier(comm_ctx *ctx, int64_t deadline_ns, a2amm_error *err);
int comm_shm_agree(comm_ctx *ctx, const int64_t *mine, int64_t *all, int64_t deadline_ns, a2amm_error *err);

void comm_ctx_init(comm_ctx *ctx, comm_world *world, int rank);

/*
 * pe's copy of [sym, sym + bytes), or NULL with err (and ctx->last_error)
 * filled, naming `op`, if that is not a symmetric range or pe is not a rank.
 */
char *comm_peer_range(comm_ctx *ctx, const void *sym, size_t bytes, int pe, const char *op,
                      a2amm_error *err);

/* Bumps pe's doorbell and wakes its sleepers. */
void comm_ring_doorbell(struct comm_world_header *hdr, int pe);
void comm_ring_all_doorbells(struct comm_world_header *hdr);

/* Records the world's failure, caused by `rank` (-1: by none, as for the
 * safety limit), unless one is recorded already (the first is kept), and
 * wakes every rank. */
void comm_mark_failed(struct comm_world_header *hdr, int rank, int code, const char *reason);
/* Non-zero once the world is marked failed; copies its rank, code and
 * reason to the pointers that are not NULL. */
int comm_world_failed(const struct comm_world_header *hdr, int *rank, int *code,
                      char *reason, size_t reason_size);
/* "<doing>; blocked on <waiting>", or the part there is; never empty. */
void comm_describe_rank(const struct comm_world_header *hdr, int rank, char *buf, size_t size);
/* A rank ends (its function returned `status`, or it left: phase): every
 * wait not yet satisfied hears of it (comm_wait_word). */
void comm_rank_ended(struct comm_world_header *hdr, int rank, int phase, int status);
/* Copies a shared text (which a dying writer may have left unterminated). */
void comm_copy_shared_text(char *dest, size_t size, const char *shared, size_t shared_size);
/* Appends to buf at *used like snprintf (buf[0] must be set), never past
 * buf[size - 1]; advances *used. */
void comm_append(char *buf, size_t size, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Fills err and ctx->last_error with code and a message; returns code. */
int comm_report(comm_ctx *ctx, a2amm_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/*
 * Waits until *word CMP value, sleeping on this rank's doorbell. Returns
 * A2AMM_OK, A2AMM_E_TIMEOUT or A2AMM_E_PEER with a message naming `what`.
 */
int comm_wait_word(comm_ctx *ctx, _Atomic uint64_t *word, comm_cmp cmp, uint64_t value,
                   int64_t deadline_ns, uint64_t *seen, const char *what, a2amm_error *err);

#endif
