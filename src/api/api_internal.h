/* What the public communicator wraps (the transport's per-rank context),
 * and the steps every collective call of the API shares (collective.c). */
#ifndef A2AMM_API_INTERNAL_H
#define A2AMM_API_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>

#include "a2amm.h"
#include "comm/comm.h"

struct a2amm_comm {
    comm_ctx *ctx;
    /* a2amm_comm_alltoall's staging blocks in symmetric memory, kept for the next call */
    void *stage;
    size_t stage_bytes, stage_start, stage_end;
    comm_world *joined; /* made by a2amm_comm_create: this rank's view of the world */
    void (*destroy)(a2amm_comm *comm); /* made by another transport's library: how it ends */
    int64_t ops_made;   /* ops created on it: each op's number, the same on every rank */
    _Atomic int in_call; /* a thread is inside a collective call on it */
    int64_t *words;     /* [size][COMM_AGREE_WORDS]: every rank's words of the current call */
};

/* Prepared weights (matmul_api.c), which ops may borrow (op_api.c). */
typedef struct gemm_b gemm_b;
struct a2amm_weights {
    gemm_b *b;
    int64_t n, k;
    a2amm_fp8_type b_type;
};

/* ---- alltoall_api.c: moving blocks of sizes every rank knows -------------- */
/*
 * Inside a collective call (after its agreement, whose top it takes): block p of send (out) goes to rank
 * p, block me of rank p's send lands as block p of recv (in; in.bytes[p] is what p sends, known here).
 * On shm through the communicator's stage in R slots of `slot` bytes (the largest block of the call:
 * every rank passes the same), grown above top when too small; over a transport with its own exchange,
 * straight. `call` names it in messages. Returns the error of this rank (the caller fails the others).
 */
int api_exchangev(a2amm_comm *comm, const void *send, const comm_blocks *out, void *recv, const comm_blocks *in,
                  size_t slot, size_t top, const char *call, double timeout_s, a2amm_error *err);
/*
 * As api_exchangev, but each block's size travels with it (no collective first): in.bytes[p] is the room
 * for rank p's block, got[p] what came (p = this rank included). slot: the most any rank sends another
 * (every rank passes the same). A block over slot or its room: A2AMM_E_SIZE naming both ranks.
 */
int api_exchange_counted(a2amm_comm *comm, const void *send, const comm_blocks *out, void *recv, const comm_blocks *in,
                         size_t *got, size_t slot, size_t top, const char *call, double timeout_s, a2amm_error *err);

/*
 * Inside a collective call on shm (after its agreement, whose top it takes): the communicator's stage made
 * at least `total` bytes (given back and made again above top where smaller), so that the calls after
 * find it; the same on every rank. A heap too small: A2AMM_E_NOMEM naming the bytes needed and free, and
 * the query that says what `call` needs.
 */
int api_stage_reserve(a2amm_comm *comm, size_t total, size_t top, const char *call, a2amm_error *err);

/* ---- collective.c: what every collective call does first ------------------ */

/* The collective calls, as their words name them. */
typedef enum api_call {
    API_BARRIER = 1, API_ALLTOALL, API_OP_CREATE, API_OP_RUN, API_ALLTOALLV, API_MOE_CREATE, API_MOE_RUN,
    API_MOE_DISPATCH, API_MOE_COMBINE
} api_call;

/* A call's words: which call, on which op (its number; 0: none), its
 * arguments that every rank must pass alike, and this rank's heap top
 * (not compared: the agreement gives the highest). */
enum { API_WORD_CALL, API_WORD_OP, API_WORD_ARGS, API_WORD_TOP = COMM_AGREE_WORDS - 1 };
#define API_MAX_ARGS (API_WORD_TOP - API_WORD_ARGS)

/*
 * Takes the communicator for one collective call on this thread: A2AMM_E_INVAL
 * (nothing else touched) when another thread is inside one. api_leave gives
 * it back.
 */
int api_enter(a2amm_comm *comm, const char *call, a2amm_error *err);
void api_leave(a2amm_comm *comm);

/*
 * Every rank's words of this call (comm_agree: also a barrier), compared:
 * a different call, op or argument on another rank fails the communicator
 * with a message naming both ranks and what each passed. A2AMM_E_PEER at
 * once, starting nothing, when the communicator has failed. *top (may be
 * NULL) gets the highest heap top of every rank.
 */
int api_agree(a2amm_comm *comm, int64_t words[COMM_AGREE_WORDS], double timeout_s, const char *call, size_t *top,
              a2amm_error *err);

/* ---- config_agree.c: the creates' whole configs, as a hash --------------- */
/* A shared field of a config: its name in messages, where it is, its C type. */
typedef enum api_field_type { API_FIELD_I64, API_FIELD_INT, API_FIELD_DOUBLE } api_field_type;
typedef struct api_field {
    const char *name;
    size_t offset;
    api_field_type type;
    const char *const *values; /* an enum's value names by value, NULL-ended (messages say both); or NULL */
} api_field;
#define API_FIELD(type_, field, kind) {#field, offsetof(type_, field), kind, NULL}
#define API_FIELD_NAMED(type_, field, names) {#field, offsetof(type_, field), API_FIELD_INT, names}
/* The value names of the configs' enums (a2amm.h's values, in order). */
extern const char *const API_FP8_NAMES[], *const API_PATH_NAMES[], *const API_SCHEDULE_NAMES[],
    *const API_KIND_NAMES[];

/* The words of a create (call, op, a hash of every field of `fields` (ended by a NULL name) with its value
 * in config, a hash of the names, their count). */
void api_config_words(api_call call, int64_t op_id, const void *config, const api_field *fields,
                      int64_t w[COMM_AGREE_WORDS]);
/*
 * api_agree for a create: every rank's config (its `fields`) compared as those words, one round when
 * they agree; else every rank fails (the communicator with it) naming the first field that differs,
 * both ranks and both values, after extra rounds every rank takes. `name` is the call in messages.
 */
int api_agree_config(a2amm_comm *comm, api_call call, int64_t op_id, const void *config, const api_field *fields,
                     double timeout_s, const char *name, size_t *top, a2amm_error *err);

/* The error of a failed collective step, reported to every rank once: fails
 * the communicator unless rc is A2AMM_E_PEER or it has failed already. */
int api_fail_all(comm_ctx *ctx, int rc, const a2amm_error *err);
/*
 * A collective call's refusal of this rank's own arguments (rc, its message in err): fails the
 * communicator with that message (comm NULL: there is none to fail), so that every other rank's
 * collective call returns A2AMM_E_PEER at once, naming this rank and why. Returns rc. A call passes
 * an a2amm_error of its own where the caller's err is NULL, so that the others hear the reason.
 */
int api_refuse(a2amm_comm *comm, int rc, const a2amm_error *err);

/* ---- sized.c: the structs a caller fills -------------------------------- */
/*
 * Copies the caller's struct `given` (its first field its size in bytes as
 * the program was built) into ours [ours_size]: fields the caller's layout
 * lacks are 0; a size of 0, one below oldest_size (the first layout with a
 * size), or fields past ours that are not 0 are A2AMM_E_INVAL naming `call`
 * and the struct's `name`.
 */
int api_read_sized(const void *given, void *ours, size_t ours_size, size_t oldest_size, const char *call,
                   const char *name, a2amm_error *err);

/* Frees what a communicator's calls kept (its words). */
void api_comm_release(a2amm_comm *comm);

#endif
