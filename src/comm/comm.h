/*
 * comm: symmetric memory between the ranks of one run, in the OpenSHMEM
 * vocabulary (symmetric allocation, put, get, put-with-signal, 64-bit
 * signals with wait-until, barrier, fence, quiet), so that a transport over
 * Open MPI's OpenSHMEM can sit behind the same calls later.
 *
 * The transport here is `shm`: a launcher forks one process per rank over a
 * "world", one memfd-backed shared mapping made before the fork that holds
 * every rank's symmetric heap, a doorbell per rank, and the run's failure
 * record. Nothing is ever created in /dev/shm.
 *
 * Symmetric addresses are, as in OpenSHMEM, pointers into the calling rank's
 * own heap (what comm_alloc returned, plus an offset); the peer's copy of the
 * same object is named by the same pointer and a pe number.
 *
 * Every wait takes a deadline (absolute CLOCK_MONOTONIC nanoseconds, see
 * comm_deadline_after) and ends with A2AMM_E_TIMEOUT when it passes, or with
 * A2AMM_E_PEER as soon as any rank of the world has failed. Every wait is
 * part of a call every rank makes, so a wait not yet satisfied when another
 * rank has ended (its function returned, or it left a joined world) can
 * never be: it fails the world at once, naming that rank. Waiting ranks
 * sleep on a futex, so there may be more ranks than cores.
 *
 * Errors are returned with a message (via the `a2amm_error *`, which may be
 * NULL) that names this rank, what it waited for and what it saw.
 *
 * A comm_ctx is used by one thread at a time.
 */
#ifndef A2AMM_COMM_H
#define A2AMM_COMM_H

#include "a2amm.h"

#include <stddef.h>
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>

#define COMM_MAX_RANKS 1024
#define COMM_DOING_CHARS 160 /* longest "what I am doing" text, with its NUL */
#define COMM_FAIL_CHARS 900  /* longest failure reason, with its NUL */

typedef struct comm_world comm_world; /* the shared mapping; the launcher's */
typedef struct comm_ctx comm_ctx;     /* one rank's view, inside its process */

/* ---- Time ---------------------------------------------------------------- */
/* Now, in CLOCK_MONOTONIC nanoseconds (the same clock in every process). */
int64_t comm_now_ns(void);
/* The deadline `seconds` from now (a negative or NaN value means now). */
int64_t comm_deadline_after(double seconds);

/* ---- The world (made and destroyed by the launcher's process) ------------ */
/*
 * Maps a world for `nranks` ranks (1..COMM_MAX_RANKS), each with a symmetric
 * heap of `heap_bytes` (rounded up to a page; pages cost memory only once
 * touched). Must be called before comm_launch, which forks the ranks.
 */
int comm_world_create(int nranks, size_t heap_bytes, comm_world **out, a2amm_error *err);
/* Unmaps the world and frees the handle (NULL is allowed). */
void comm_world_destroy(comm_world *world);

/*
 * A world made by processes another engine started on this machine, rank
 * `rank` of `nranks`: rank 0 makes it, every rank maps it (through
 * /proc/<rank 0's pid>/fd: nothing is named in /dev/shm), using the
 * caller's allgather and barrier (each returns 0 on success). A watcher
 * thread fails the world, naming the rank, when a peer's process dies
 * before leaving. *ctx is this rank's context; comm_world_leave ends both.
 */
typedef struct comm_bootstrap_fns {
    void *arg;
    int (*allgather)(void *arg, const void *mine, void *all, size_t bytes);
    int (*barrier)(void *arg);
} comm_bootstrap_fns;
int comm_world_join(int rank, int nranks, size_t heap_bytes, const comm_bootstrap_fns *bs, comm_world **world,
                    comm_ctx **ctx, a2amm_error *err);
void comm_world_leave(comm_world *world, comm_ctx *ctx);
int comm_world_nranks(const comm_world *world);

/* ---- A rank's identity and status ---------------------------------------- */
int comm_rank(const comm_ctx *ctx);
int comm_nranks(const comm_ctx *ctx);
/*
 * Records what this rank is doing now ("waiting for tile 3 slot 2 from rank
 * 1"), printf-style. It appears in timeout and failure messages, and in the
 * launcher's report when this rank dies. Cheap enough to call per tile.
 */
void comm_set_doing(comm_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A sign of life for the launcher's stall watch (comm_set_doing and every
 * wait give one too): call it in long work that sets nothing else. */
void comm_progress(comm_ctx *ctx);
/* This rank's "doing" text (its slot's; valid while the context lives). */
const char *comm_doing(const comm_ctx *ctx);
/*
 * Marks the world failed because of this rank, with `code` and a printf-style
 * reason, and wakes every waiting rank (their waits return A2AMM_E_PEER).
 * The first failure of a world is the one kept. The reason is prefixed with
 * "rank N: " unless it already starts so. Returns `code`.
 */
int comm_fail(comm_ctx *ctx, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A2AMM_OK, or A2AMM_E_PEER with the failure's message if the world failed:
 * for long computations between waits. On a message transport it first
 * looks for a failure another rank reported. */
int comm_check_peers(comm_ctx *ctx, a2amm_error *err);
/* Non-zero once the world has failed (on a message transport, after looking
 * for another rank's notice); code and reason (may be NULL) get the first
 * failure's status and message. */
int comm_failure(comm_ctx *ctx, int *code, char *reason, size_t reason_size);
/* Records a failure another rank reported (a message transport's notice):
 * waits end with A2AMM_E_PEER as for a failure of the world; nothing is sent. */
void comm_peer_failed(comm_ctx *ctx, int rank, int code, const char *reason);

/* ---- Agreement: the words of a collective call ----------------------------- */
#define COMM_AGREE_WORDS 16
/*
 * Every rank's COMM_AGREE_WORDS words from `mine` into all
 * [nranks][COMM_AGREE_WORDS], in rank order; also a barrier. It needs no
 * symmetric memory (shm: two sets of words per rank in the world's header,
 * used in turn, so one barrier suffices; message transports: an allgather),
 * so ranks whose heaps differ can still agree where to allocate. Every rank
 * must call it as the same step of the same collective call.
 */
int comm_agree(comm_ctx *ctx, const int64_t *mine, int64_t *all, int64_t deadline_ns, a2amm_error *err);

/* ---- Symmetric memory ---------------------------------------------------- */
/*
 * Allocates `bytes` (zero-filled) in this rank's symmetric heap, aligned to
 * `align` (a power of two up to 4096; 0 means 64), at the heap's top. Every
 * rank must make the same allocations from the same top; the same call then
 * gives every rank the same offset (ranks whose tops differ first agree on
 * the highest, comm_agree, and comm_heap_raise to it). A2AMM_E_NOMEM when
 * the heap is full. Freed by comm_heap_release(_range).
 */
int comm_alloc(comm_ctx *ctx, size_t bytes, size_t align, void **out, a2amm_error *err);
/* Moves the heap's top up to `top` (no change if it is there already): what
 * lies between is a hole, returned with what is above it. */
void comm_heap_raise(comm_ctx *ctx, size_t top);
/*
 * The heap's top, and giving back everything allocated since a mark (zeroed
 * again): every rank must release in the same order, and only memory no
 * rank uses any more (after a collective call that ended on every rank).
 */
size_t comm_heap_mark(const comm_ctx *ctx);
/* The heap's size: the most any rank's top may reach (the same on every rank). */
size_t comm_heap_size(const comm_ctx *ctx);
void comm_heap_release(comm_ctx *ctx, size_t mark);
/* Gives back [start, end) of the heap (marks taken before and after its
 * allocations) in any order: memory below the top is returned once
 * everything above it has been. Same rules as comm_heap_release. */
void comm_heap_release_range(comm_ctx *ctx, size_t start, size_t end);
/* Offset of a symmetric address in the heap, or SIZE_MAX if it is not one. */
size_t comm_sym_offset(const comm_ctx *ctx, const void *sym);
/*
 * A pointer through which this process can load and store pe's copy of the
 * symmetric object at `sym`, or NULL where the transport has none (never for
 * shm; callers must still handle NULL and fall back to put / get).
 */
void *comm_ptr(const comm_ctx *ctx, const void *sym, int pe);

/* Copies `bytes` from local memory `src` into pe's copy of `dest_sym`. */
int comm_put(comm_ctx *ctx, void *dest_sym, const void *src, size_t bytes, int pe, a2amm_error *err);
/* Copies `bytes` from pe's copy of `src_sym` into local memory `dest`. */
int comm_get(comm_ctx *ctx, void *dest, const void *src_sym, size_t bytes, int pe, a2amm_error *err);
/* Orders this rank's earlier puts to each pe before its later ones. */
void comm_fence(comm_ctx *ctx);
/* Completes all of this rank's earlier puts and signal updates. */
void comm_quiet(comm_ctx *ctx);

/* ---- Signals: 64-bit words in the symmetric heap -------------------------- */
typedef enum comm_signal_op { COMM_SIGNAL_SET, COMM_SIGNAL_ADD } comm_signal_op;
typedef enum comm_cmp {
    COMM_CMP_EQ, COMM_CMP_NE, COMM_CMP_GT, COMM_CMP_GE, COMM_CMP_LT, COMM_CMP_LE
} comm_cmp;

/* "==", "!=", ">", ">=", "<", "<=". */
const char *comm_cmp_name(comm_cmp cmp);

/*
 * Puts `bytes` into pe's `dest_sym`, then updates pe's signal `sig_sym` by
 * `op` with `value`, release-ordered: whoever sees the new signal value sees
 * all the data.
 */
int comm_put_signal(comm_ctx *ctx, void *dest_sym, const void *src, size_t bytes,
                    uint64_t *sig_sym, uint64_t value, comm_signal_op op, int pe,
                    a2amm_error *err);
/* Sets / adds to pe's signal `sig_sym` (release-ordered) and wakes pe. */
int comm_signal_set(comm_ctx *ctx, uint64_t *sig_sym, uint64_t value, int pe, a2amm_error *err);
int comm_signal_add(comm_ctx *ctx, uint64_t *sig_sym, uint64_t value, int pe, a2amm_error *err);
/* This rank's signal `sig_sym` now (acquire-ordered). */
uint64_t comm_signal_fetch(const comm_ctx *ctx, const uint64_t *sig_sym);
/*
 * Waits until this rank's signal `sig_sym` compares to `value` as `cmp` says
 * (signal CMP value). A2AMM_OK, A2AMM_E_TIMEOUT when `deadline_ns` passes,
 * A2AMM_E_PEER when the world fails. `seen` (may be NULL) gets the last value
 * read.
 */
int comm_signal_wait_until(comm_ctx *ctx, uint64_t *sig_sym, comm_cmp cmp, uint64_t value,
                           int64_t deadline_ns, uint64_t *seen, a2amm_error *err);

/* Waits for every rank to arrive; implies comm_quiet. Same error rules. */
int comm_barrier(comm_ctx *ctx, int64_t deadline_ns, a2amm_error *err);
/* Every rank's `bytes` from mine into all [nranks][bytes], in rank order. */
int comm_allgather(comm_ctx *ctx, const void *mine, void *all, size_t bytes, int64_t deadline_ns, a2amm_error *err);

/* ---- Transports ------------------------------------------------------------
 * What a transport does its own way; every comm call goes through this
 * table, none asks which transport it is on. The shm transport (this
 * folder) fills it for processes that map each other's heaps. Another
 * engine's library (liba2amm_mpi) fills it for ranks that only exchange
 * messages: their contexts have a private heap and no peer memory, so
 * comm_ptr returns NULL and puts, gets and signals are refused there; rows
 * travel through the transport's own tile channel (comm/channel.h). A
 * failure is sent to every other rank as a notice that their waits look
 * for (they end with A2AMM_E_PEER); nothing is printed and nothing aborted:
 * that is the caller's choice. NULL entries take the default said.
 */
struct comm_channel_ops;
/* Blocks of a buffer, one per rank: bytes[p] bytes at offsets[p]. */
typedef struct comm_blocks {
    const size_t *bytes, *offsets;
} comm_blocks;
typedef struct comm_transport {
    const char *name;  /* "shm", "mpi" */
    int peer_memory;   /* ranks load and store each other's symmetric heaps */
    int (*barrier)(comm_ctx *ctx, int64_t deadline_ns, a2amm_error *err);
    /* every rank's `bytes` from mine into all [nranks][bytes], in rank order */
    int (*allgather)(comm_ctx *ctx, const void *mine, void *all, size_t bytes, int64_t deadline_ns, a2amm_error *err);
    /* comm_agree's words (NULL: through allgather) */
    int (*agree)(comm_ctx *ctx, const int64_t *mine, int64_t *all, int64_t deadline_ns, a2amm_error *err);
    /* block p of send (at p * stride, `bytes` long) goes to peer p, whose block
     * `me` of recv it becomes; this rank's own block is not moved (NULL: the
     * caller stages through symmetric memory) */
    int (*exchange)(comm_ctx *ctx, const void *send, void *recv, size_t stride, size_t bytes, int64_t deadline_ns,
                    a2amm_error *err);
    /* the uneven exchange: block p of send (out) goes to peer p, whose block `me` of recv (in) it
     * becomes, in.bytes[me] long there (every rank knows what it receives); or, with got, at most
     * in.bytes[me] long there, the size travelling with it into got[me]; this rank's own block is not
     * moved (NULL: the caller stages through symmetric memory) */
    int (*exchangev)(comm_ctx *ctx, const void *send, const comm_blocks *out, void *recv, const comm_blocks *in,
                     size_t *got, int64_t deadline_ns, a2amm_error *err);
    /* tells every other rank this communicator failed (NULL: the failure record is shared) */
    void (*tell_failure)(comm_ctx *ctx, int rank, int code, const char *reason);
    /* takes in another rank's failure notice into the record (comm_peer_failed); never waits (NULL: none) */
    void (*poll_failure)(comm_ctx *ctx);
    /* how tiles of rows travel (NULL: the shm channels, direct and put) */
    const struct comm_channel_ops *channel;
} comm_transport;

/* A context over a transport without peer memory: rank of nranks, a
 * private heap of heap_bytes, the transport's own state. */
int comm_private_ctx_create(int rank, int nranks, size_t heap_bytes, const comm_transport *tp, void *state,
                            comm_ctx **out, a2amm_error *err);
void comm_private_ctx_destroy(comm_ctx *ctx);
/* The context's transport, and the state its library keeps in it (NULL on shm). */
const comm_transport *comm_transport_of(const comm_ctx *ctx);
void *comm_transport_state(const comm_ctx *ctx);

/* ---- The launcher ------------------------------------------------------- */
/* The body of a rank. Returns A2AMM_OK or a negative A2AMM_E_* status. */
typedef int (*comm_rank_fn)(comm_ctx *ctx, void *arg);

typedef struct comm_launch_options {
    double timeout_s; /* the whole run's safety limit; <= 0 means 600 s */
    double grace_s;   /* after a failure, how long the others get to leave
                         before they are killed; <= 0 means 1.5 s */
    double stall_s;   /* a rank process that shows no sign of life (comm_progress,
                         comm_set_doing, entering a wait, returning) for this
                         long has stalled (stopped, stuck): the world fails
                         naming it; <= 0: no such watch */
    const volatile sig_atomic_t *stop; /* NULL, or a flag (set by the caller's
                         signal handler) that fails the world when non-zero:
                         A2AMM_E_INTERRUPTED, the ranks stopped as for any failure */
} comm_launch_options;

/* How one rank ended. */
typedef struct comm_rank_outcome {
    pid_t pid;
    int status;             /* what its rank function returned, or
                               A2AMM_E_PEER if it died, was killed or
                               exited without returning */
    int exit_code;          /* its exit code, -1 if killed by a signal */
    int term_signal;        /* the signal that killed it, or 0 */
    int killed_by_launcher; /* 1 if it outlived the grace (or timeout) */
    int failed_first;       /* 1 for the rank whose failure ended the run */
    char doing[COMM_DOING_CHARS]; /* what it said it was doing last */
} comm_rank_outcome;

/*
 * Forks one process per rank of `world`; each runs rank_fn(ctx, arg) and
 * exits with its result (it never returns into the caller). The caller
 * supervises: when a rank fails (returns an error, exits, crashes or is
 * killed), the world is marked failed naming it and what it was doing, the
 * other ranks' waits end, and after the grace period any rank still alive is
 * killed. Every child is reaped before returning. A world runs once.
 * Children die with the calling thread (PR_SET_PDEATHSIG): call this from a
 * thread that lives until it returns.
 *
 * Returns A2AMM_OK if every rank returned A2AMM_OK; otherwise the first
 * failure's status (A2AMM_E_PEER for a rank that died, A2AMM_E_TIMEOUT for
 * the safety limit) with its message in `err`. `outcomes` (nranks entries,
 * may be NULL) gets how each rank ended.
 */
int comm_launch(comm_world *world, comm_rank_fn rank_fn, void *arg,
                const comm_launch_options *options, comm_rank_outcome *outcomes,
                a2amm_error *err);

#endif
