/*
 * The public MoE op (a2amm.h, "Expert parallelism"): made once per
 * communicator, weights set locally, one collective call per step. A call:
 * its checks, the agreement, the dispatch of records, the experts
 * (op/moe.c), the partials back (api_exchangev), the combine.
 *
 * The dispatch's counts travel with the records (api_exchange_counted: a
 * size ahead of each block, no collective first) where no receiver can
 * overflow: a token goes to an owner once, so a rank sends another at most
 * max_tokens records and receives at most R * max_tokens, the default
 * max_recv. Only a smaller max_recv gathers every rank's counts first (one
 * allgather), so that each rank checks every receiver's room and a call
 * over it is refused on every rank alike before anything moves.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api_internal.h"
#include "common/error.h"
#include "common/hugemem.h"
#include "common/pool.h"
#include "op/moe.h"

/*
 * Memory an op keeps between its calls, grown as a call needs it (never
 * shrunk; freed with the op): the experts' outputs and the combine's
 * partials are tens of MB at prefill, and fresh ones every call were fresh
 * mappings whose page faults and zeroing cost 15-20 ms of a 50 ms exchange
 * (run --op moe perf, DeepSeek-V2-Lite prefill).
 */
typedef struct kept_buf {
    void *p;
    size_t cap;
} kept_buf;

static void *kept(kept_buf *k, size_t bytes)
{
    if (bytes > k->cap) {
        void *p = hugemem_alloc(bytes);
        if (!p) return NULL;
        free(k->p);
        k->p = p, k->cap = bytes;
    }
    return k->p;
}

enum { KEPT_CHUNKS = 2 /* FUSED_CHUNKS_MAX: a fused call's chunks' outputs live at once */ };

struct a2amm_moe {
    a2amm_comm *comm;
    comm_ctx *ctx;
    int64_t id; /* its number among the communicator's ops: the same on every rank */
    a2amm_moe_config cfg; /* as the caller passed it (timeout_s 0: 60) */
    int64_t max_recv;     /* cfg.max_recv, or R * max_tokens where it is 0 */
    moe_shape s;
    gemm_isa isa;
    moe_weights own;              /* prepared by a2amm_moe_set_weights */
    const moe_weights *weights;   /* &own, or an a2amm_moe_weights' (a2amm_moe_use_weights); NULL: none yet */
    pool *workers; /* its compute threads (the calling thread among them) */
    _Atomic int busy; /* a thread is in a call of it */
    a2amm_observer_fn observer;
    void *observer_arg;
    uint64_t calls;          /* a2amm_moe_run calls made, for the events */
    struct moe_log *log;     /* the call's events while one runs with an observer, else NULL */
    kept_buf y[KEPT_CHUNKS];  /* the experts' outputs of a call (of each chunk) */
    kept_buf partials, back;  /* the combine's: sent and received (one combine at a time) */
};

/* ---- the observer: a call's events, kept as they happen (on either of its threads) and reported to the
 * observer on the calling thread at the call's end, in time order ------------------------------------ */

typedef struct moe_log {
    pthread_mutex_t lock;
    a2amm_event *ev;
    size_t n, cap;
} moe_log;

static int64_t log_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One event of the call (nothing without an observer; an event that finds no memory is left out). */
static void log_event(a2amm_moe *m, a2amm_event_kind kind, int64_t tile, int64_t rows, int slot, int64_t bytes,
                      int64_t time_ns, int thread, int64_t duration_ns)
{
    moe_log *l = m->log;
    if (!l) return;
    a2amm_event e = {.kind = kind, .rank = m->s.me, .call = m->calls, .tile = tile, .tiles = -1, .rows = rows,
                     .peer = -1, .slot = slot, .k = m->s.H, .bytes = bytes, .time_ns = time_ns, .thread = thread,
                     .duration_ns = duration_ns};
    pthread_mutex_lock(&l->lock);
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        a2amm_event *grown = realloc(l->ev, cap * sizeof *grown);
        if (grown) l->ev = grown, l->cap = cap;
    }
    if (l->n < l->cap) l->ev[l->n++] = e;
    pthread_mutex_unlock(&l->lock);
}

/* Time, then the order logged (kept in `tiles` while sorting). */
static int by_time(const void *a, const void *b)
{
    const a2amm_event *x = a, *y = b;
    if (x->time_ns != y->time_ns) return x->time_ns < y->time_ns ? -1 : 1;
    return x->tiles < y->tiles ? -1 : x->tiles > y->tiles;
}

/* The call's events to the observer, in time order, then the log freed. */
static void log_deliver(a2amm_moe *m, moe_log *l)
{
    for (size_t i = 0; i < l->n; i++) l->ev[i].tiles = (int64_t)i;
    qsort(l->ev, l->n, sizeof *l->ev, by_time);
    for (size_t i = 0; i < l->n; i++) {
        l->ev[i].tiles = -1;
        m->observer(m->observer_arg, &l->ev[i]);
    }
    free(l->ev);
    pthread_mutex_destroy(&l->lock);
}

static int check_config(const a2amm_moe_config *c, int R, const char *call, a2amm_error *err)
{
    const char *bad = NULL;
    if (c->experts < 1 || c->experts % R) bad = "experts must be a positive multiple of the ranks";
    else if (c->topk < 1 || c->topk > 32) bad = "topk must be 1 to 32";
    else if (c->hidden < 32 || c->hidden % 32 || c->hidden > (INT64_C(1) << 24)) bad = "hidden must be a multiple of 32 (up to 2^24)";
    else if (c->inter < 32 || c->inter % 32 || c->inter > (INT64_C(1) << 24)) bad = "inter must be a multiple of 32 (up to 2^24)";
    else if (c->max_tokens < 1 || c->max_tokens > (INT64_C(1) << 31)) bad = "max_tokens must be 1 to 2^31";
    else if (c->max_recv < 0) bad = "max_recv must be 0 (R * max_tokens) or positive";
    else if ((c->a_type != A2AMM_E4M3 && c->a_type != A2AMM_E5M2) || (c->b_type != A2AMM_E4M3 && c->b_type != A2AMM_E5M2))
        bad = "a_type and b_type must be A2AMM_E4M3 or A2AMM_E5M2";
    else if (!(c->timeout_s > 0) || isinf(c->timeout_s)) bad = "timeout_s must be positive (0 in the config: 60)";
    else if (c->schedule != A2AMM_SCHEDULE_FUSED && c->schedule != A2AMM_SCHEDULE_UNFUSED &&
             c->schedule != A2AMM_SCHEDULE_OVERLAP)
        bad = "schedule must be A2AMM_SCHEDULE_FUSED, A2AMM_SCHEDULE_UNFUSED or A2AMM_SCHEDULE_OVERLAP";
    if (!bad) return A2AMM_OK;
    return a2amm_fail(err, A2AMM_E_INVAL, "%s: %s (got experts %d on %d ranks, topk %d, hidden %lld, inter "
                      "%lld, max_tokens %lld, max_recv %lld, timeout_s %g)", call, bad, c->experts, R, c->topk,
                      (long long)c->hidden, (long long)c->inter, (long long)c->max_tokens, (long long)c->max_recv,
                      c->timeout_s);
}

/* Every field each rank must pass alike (threads is each rank's own): compared as a hash at create. */
#define FIELD(f, t) API_FIELD(a2amm_moe_config, f, t)
#define NAMED(f, names) API_FIELD_NAMED(a2amm_moe_config, f, names)
static const api_field CREATE_FIELDS[] = {
    FIELD(experts, API_FIELD_INT), FIELD(topk, API_FIELD_INT), FIELD(hidden, API_FIELD_I64),
    FIELD(inter, API_FIELD_I64), FIELD(max_tokens, API_FIELD_I64), FIELD(max_recv, API_FIELD_I64),
    NAMED(a_type, API_FP8_NAMES), NAMED(b_type, API_FP8_NAMES), FIELD(timeout_s, API_FIELD_DOUBLE),
    NAMED(schedule, API_SCHEDULE_NAMES), {NULL, 0, API_FIELD_INT, NULL}};
#undef FIELD
#undef NAMED

/* The stage one rank needs for an op of config c on R ranks (shm): the dispatch's records (max_tokens from
 * each rank, each block behind its size) or the combine's partials (bf16 [max_tokens, hidden] from each
 * rank), the larger. A2AMM_E_OVERFLOW where it does not fit a size_t. */
static int stage_need(const a2amm_moe_config *c, int R, size_t *need, const char *call, a2amm_error *err)
{
    moe_shape s = {.R = R, .k = c->topk, .H = c->hidden};
    size_t records = 0, partials = 0, rows = (size_t)c->max_tokens;
    if (__builtin_mul_overflow(moe_record_bytes(&s), rows, &records) || records > SIZE_MAX - 128 ||
        __builtin_mul_overflow((records + 8 + 63) & ~(size_t)63, (size_t)R, &records) ||
        __builtin_mul_overflow(rows * (size_t)R, (size_t)c->hidden * 2, &partials))
        return a2amm_fail(err, A2AMM_E_OVERFLOW, "%s: the stage of %d ranks of max_tokens %lld, hidden %lld overflows",
                          call, R, (long long)c->max_tokens, (long long)c->hidden);
    *need = records > partials ? records : partials;
    return A2AMM_OK;
}

int a2amm_moe_heap_bytes(const a2amm_moe_config *config, int nranks, size_t *bytes, a2amm_error *err)
{
    static const char *call = "a2amm_moe_heap_bytes";
    if (bytes) *bytes = 0;
    if (!config || !bytes) return a2amm_fail(err, A2AMM_E_INVAL, "%s: config and bytes must not be NULL", call);
    if (nranks < 1 || nranks > COMM_MAX_RANKS)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: nranks must be 1 to %d (got %d)", call, COMM_MAX_RANKS, nranks);
    a2amm_moe_config c;
    int rc = api_read_sized(config, &c, sizeof c, sizeof c, call, "config", err);
    if (!rc && c.timeout_s == 0) c.timeout_s = 60;
    if (!rc) rc = check_config(&c, nranks, call, err);
    return rc ? rc : stage_need(&c, nranks, bytes, call, err);
}

int a2amm_moe_create(a2amm_comm *comm, const a2amm_moe_config *config, a2amm_moe **out, a2amm_error *err)
{
    a2amm_error own = {0, ""}; /* the reason the others hear, where the caller takes none */
    if (!err) err = &own;
    if (out) *out = NULL;
    if (!comm) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_moe_create: comm, config and moe must not be NULL");
    int rc = api_enter(comm, "a2amm_moe_create", err);
    if (rc) return rc;
    a2amm_moe *m = NULL;
    if (!config || !out)
        rc = a2amm_fail(err, A2AMM_E_INVAL, "a2amm_moe_create: comm, config and moe must not be NULL (%s is)",
                        !config ? "config" : "moe");
    else if (!(m = calloc(1, sizeof *m)))
        rc = a2amm_fail(err, A2AMM_E_NOMEM, "a2amm_moe_create: out of memory");
    else
        rc = api_read_sized(config, &m->cfg, sizeof m->cfg, sizeof m->cfg, "a2amm_moe_create", "config", err);
    if (rc) { /* the others, in this call, hear why at once */
        free(m);
        api_refuse(comm, rc, err);
        api_leave(comm);
        return rc;
    }
    m->comm = comm, m->ctx = comm->ctx, m->id = ++comm->ops_made;
    int R = comm_nranks(m->ctx);
    a2amm_moe_config *c = &m->cfg;
    if (c->timeout_s == 0) c->timeout_s = 60;
    rc = check_config(c, R, "a2amm_moe_create", err); /* on the values passed: its message shows them */
    m->max_recv = c->max_recv ? c->max_recv : (int64_t)R * c->max_tokens;
    size_t need = 0;
    if (!rc) rc = stage_need(c, R, &need, "a2amm_moe_create", err);
    if (!rc) rc = gemm_isa_select(&m->isa, err);
    int threads = c->threads > 0 ? c->threads : pool_cpu_count() / R > 0 ? pool_cpu_count() / R : 1;
    if (!rc && (c->threads < 0 || c->threads > 1024))
        rc = a2amm_fail(err, A2AMM_E_INVAL, "a2amm_moe_create: threads must be 0 (cores / R) to 1024 (got %d)",
                        c->threads);
    if (!rc) rc = pool_create(threads, &m->workers, err);
    if (rc) api_refuse(comm, rc, err); /* the others, in this call, stop at once */
    if (!rc) {
        m->s = (moe_shape){R, comm_rank(m->ctx), c->experts, c->experts / R, c->topk, c->hidden, c->inter, c->a_type,
                           c->b_type};
        comm_set_doing(m->ctx, "a2amm_moe_create of op %lld: waiting for every rank", (long long)m->id);
        size_t top = 0;
        /* agreed on the room each rank derives: max_recv 0 on one rank, R * max_tokens on another agree */
        a2amm_moe_config agreed = *c;
        agreed.max_recv = m->max_recv;
        rc = api_agree_config(comm, API_MOE_CREATE, m->id, &agreed, CREATE_FIELDS, c->timeout_s, "a2amm_moe_create",
                              &top, err);
        /* the stage its calls need, taken now (a transport with its own exchange needs none): a heap too
         * small is refused here, on every rank alike (the communicator stays usable), not at the first call */
        if (!rc && !comm_transport_of(m->ctx)->exchangev)
            rc = api_stage_reserve(comm, need, top, "a2amm_moe_create", err);
        if (!rc) comm_set_doing(m->ctx, "a2amm_moe_create of op %lld: done", (long long)m->id);
    }
    api_leave(comm);
    if (rc) {
        pool_destroy(m->workers);
        free(m);
        return rc;
    }
    *out = m;
    return A2AMM_OK;
}

int a2amm_moe_set_weights(a2amm_moe *m, const uint8_t *w13, const uint8_t *s13, int64_t ld13, const uint8_t *w2,
                          const uint8_t *s2, int64_t ld2, a2amm_error *err)
{
    if (!m || !w13 || !s13 || !w2 || !s2)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_moe_set_weights: moe and the four arrays must not be NULL");
    if (ld13 < m->s.H / 32 || ld2 < m->s.I / 32)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_moe_set_weights: ld13 must be at least H/32 = %lld and ld2 at "
                          "least I/32 = %lld (got %lld and %lld)", (long long)(m->s.H / 32), (long long)(m->s.I / 32),
                          (long long)ld13, (long long)ld2);
    int idle = 0;
    if (!atomic_compare_exchange_strong(&m->busy, &idle, 1))
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_moe_set_weights: op %lld is in a call on another thread",
                          (long long)m->id);
    moe_weights w;
    int rc = moe_weights_prepare(&m->s, m->isa, (int64_t)m->s.R * m->cfg.max_tokens, w13, s13, ld13, w2, s2, ld2, &w,
                                 err);
    if (!rc) {
        if (m->weights == &m->own) moe_weights_free(&m->s, &m->own);
        m->own = w, m->weights = &m->own;
    }
    atomic_store(&m->busy, 0);
    return rc;
}

int a2amm_moe_set_observer(a2amm_moe *m, a2amm_observer_fn fn, void *arg, a2amm_error *err)
{
    if (!m) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_moe_set_observer: moe is NULL");
    int idle = 0;
    if (!atomic_compare_exchange_strong(&m->busy, &idle, 1))
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_moe_set_observer: op %lld is in a call on another thread",
                          (long long)m->id);
    m->observer = fn, m->observer_arg = fn ? arg : NULL;
    atomic_store(&m->busy, 0);
    return A2AMM_OK;
}

/* ---- weights prepared once, shared by several ops ------------------------------------------------ */

struct a2amm_moe_weights {
    moe_shape s;      /* local experts, H, I, b_type (R and me unused) */
    int64_t max_rows; /* the most rows an expert of an op using them may get in a call */
    gemm_isa isa;
    moe_weights w;
};

int a2amm_moe_weights_create(int local_experts, int64_t hidden, int64_t inter, a2amm_fp8_type b_type, int64_t max_rows,
                             const uint8_t *w13, const uint8_t *s13, int64_t ld13, const uint8_t *w2, const uint8_t *s2,
                             int64_t ld2, a2amm_moe_weights **out, a2amm_error *err)
{
    static const char *call = "a2amm_moe_weights_create";
    if (out) *out = NULL;
    if (!out || !w13 || !s13 || !w2 || !s2)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: the four arrays and out must not be NULL", call);
    if (local_experts < 1 || hidden < 32 || hidden % 32 || inter < 32 || inter % 32 || max_rows < 1 ||
        (b_type != A2AMM_E4M3 && b_type != A2AMM_E5M2) || ld13 < hidden / 32 || ld2 < inter / 32)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: local_experts and max_rows must be positive, hidden and inter "
                          "multiples of 32, b_type E4M3 or E5M2, ld13 >= hidden/32 and ld2 >= inter/32 (got %d experts, "
                          "hidden %lld, inter %lld, max_rows %lld, ld13 %lld, ld2 %lld)", call, local_experts,
                          (long long)hidden, (long long)inter, (long long)max_rows, (long long)ld13, (long long)ld2);
    a2amm_moe_weights *w = calloc(1, sizeof *w);
    if (!w) return a2amm_fail(err, A2AMM_E_NOMEM, "%s: out of memory", call);
    w->s = (moe_shape){1, 0, local_experts, local_experts, 1, hidden, inter, b_type, b_type};
    w->max_rows = max_rows;
    int rc = gemm_isa_select(&w->isa, err);
    if (!rc) rc = moe_weights_prepare(&w->s, w->isa, max_rows, w13, s13, ld13, w2, s2, ld2, &w->w, err);
    if (rc) {
        free(w);
        return rc;
    }
    *out = w;
    return A2AMM_OK;
}

void a2amm_moe_weights_destroy(a2amm_moe_weights *w)
{
    if (!w) return;
    moe_weights_free(&w->s, &w->w);
    free(w);
}

int a2amm_moe_use_weights(a2amm_moe *m, const a2amm_moe_weights *w, a2amm_error *err)
{
    static const char *call = "a2amm_moe_use_weights";
    if (!m || !w) return a2amm_fail(err, A2AMM_E_INVAL, "%s: moe and weights must not be NULL", call);
    const int64_t rows = (int64_t)m->s.R * m->cfg.max_tokens;
    if (w->s.local != m->s.local || w->s.H != m->s.H || w->s.I != m->s.I || w->s.b_type != m->s.b_type)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: the weights are %d experts of hidden %lld, inter %lld, %s; rank %d's "
                          "op has %d local experts of hidden %lld, inter %lld, %s", call, w->s.local, (long long)w->s.H,
                          (long long)w->s.I, a2amm_fp8_type_name(w->s.b_type), m->s.me, m->s.local, (long long)m->s.H,
                          (long long)m->s.I, a2amm_fp8_type_name(m->s.b_type));
    if (w->max_rows < rows || w->isa != m->isa)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: the weights were prepared for %lld rows an expert%s; this op may give "
                          "an expert %lld (R * max_tokens): prepare them with max_rows >= %lld", call,
                          (long long)w->max_rows, w->isa != m->isa ? " on another kernel level" : "", (long long)rows,
                          (long long)rows);
    int idle = 0;
    if (!atomic_compare_exchange_strong(&m->busy, &idle, 1))
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: op %lld is in a call on another thread", call, (long long)m->id);
    if (m->weights == &m->own) moe_weights_free(&m->s, &m->own);
    m->weights = &w->w;
    atomic_store(&m->busy, 0);
    return A2AMM_OK;
}

/* The call's own arguments, before anything is collective. */
/* The arguments of a run (out) or a dispatch (batch). */
typedef struct tokens_args {
    const char *call;
    int64_t T;
    const uint8_t *x, *sx;
    int64_t ldsx;
    const int32_t *idx;
    const float *w;
    uint16_t *out;           /* run */
    a2amm_moe_batch **batch; /* dispatch */
    int dispatch;
} tokens_args;

/* A run's or a dispatch's own arguments, before anything is collective (a dispatch needs no weights: the
 * caller's experts run on its rows). */
static int check_tokens(a2amm_moe *m, void *arg, a2amm_error *err)
{
    const tokens_args *t = arg;
    const int64_t T = t->T;
    if (t->dispatch && !t->batch)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: rank %d: batch must not be NULL", t->call, m->s.me);
    if (!t->dispatch && !m->weights)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: rank %d has no weights: a2amm_moe_set_weights first", t->call,
                          m->s.me);
    if (T < 0 || T > m->cfg.max_tokens)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: rank %d: tokens must be 0 to max_tokens = %lld (got %lld)", t->call,
                          m->s.me, (long long)m->cfg.max_tokens, (long long)T);
    if (T && (!t->x || !t->sx || !t->idx || !t->w || (!t->dispatch && !t->out)))
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: rank %d: x, sx, topk_idx, topk_w%s must not be NULL with %lld "
                          "tokens", t->call, m->s.me, t->dispatch ? "" : " and out", (long long)T);
    if (T && t->ldsx < m->s.H / 32)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: rank %d: ldsx must be at least H/32 = %lld (got %lld)", t->call,
                          m->s.me, (long long)(m->s.H / 32), (long long)t->ldsx);
    return moe_check_routing(&m->s, T, t->idx, t->w, err);
}

/* Rows every rank sends every rank (all[i * R + j]: i to j) against each receiver's room: the same verdict
 * on every rank. */
static int check_rooms(const a2amm_moe *m, const int64_t *all, a2amm_error *err)
{
    int R = m->s.R;
    for (int j = 0; j < R; j++) {
        int64_t rows = 0;
        for (int i = 0; i < R; i++) rows += all[(size_t)i * R + j];
        if (rows > m->max_recv)
            return a2amm_fail(err, A2AMM_E_SIZE, "a2amm_moe: rank %d would receive %lld rows (tokens times the "
                              "ranks they go to), over its max_recv = %lld: nothing was computed and no output "
                              "written", j, (long long)rows, (long long)m->max_recv);
    }
    return A2AMM_OK;
}

/* Blocks of `unit` bytes a row: bytes[p] = rows[p * stride] * unit, at offsets in order; the largest. */
static size_t blocks_of(const int64_t *rows, int stride, int R, size_t unit, size_t *bytes, size_t *offsets)
{
    size_t at = 0, largest = 0;
    for (int p = 0; p < R; p++) {
        bytes[p] = (size_t)rows[(size_t)p * stride] * unit, offsets[p] = at, at += bytes[p];
        if (bytes[p] > largest) largest = bytes[p];
    }
    return largest;
}

/* The largest block of any pair: every rank's stage slot (the same everywhere). */
static size_t largest_pair(const int64_t *all, int R, size_t unit)
{
    int64_t most = 0;
    for (size_t i = 0; i < (size_t)R * R; i++)
        if (all[i] > most) most = all[i];
    return (size_t)most * unit;
}

/* What a dispatch leaves for its combine: the rows this rank received, grouped by local expert, and what
 * the combine needs of this rank's own tokens. */
struct a2amm_moe_batch {
    a2amm_moe *m;
    int64_t T, sent, got; /* this rank's tokens, its records out, the records it received */
    int32_t *idx;         /* [T, k]: the routing of this rank's tokens */
    int64_t *to, *from;   /* [R] each: records this rank sent each owner, received from each source */
    int64_t slot_rows;    /* the most records of any pair of the call (its stage slots on shm) */
    uint8_t *recv;        /* the records received, in source order */
    moe_groups g;
    uint8_t *codes, *scales; /* every local expert's rows, in expert order: [pairs, H], [pairs, H/32] */
};

void a2amm_moe_batch_destroy(a2amm_moe_batch *b)
{
    if (!b) return;
    moe_groups_free(&b->g);
    free(b->idx), free(b->to), free(b->recv), free(b->codes), free(b->scales);
    free(b);
}

/* Whether the call gathers every rank's counts first: only where max_recv is below the worst case. */
static int counts_first(const a2amm_moe *m) { return m->max_recv < (int64_t)m->s.R * m->cfg.max_tokens; }

/* The records' exchange with every rank's counts gathered first (counts_first): the rooms checked on
 * every rank alike (*alike), b->from and b->slot_rows from the counts, then the records. */
static int exchange_after_counts(a2amm_moe *m, a2amm_moe_batch *b, const uint8_t *send, size_t top, int *alike,
                                 a2amm_error *err)
{
    const int R = m->s.R, me = m->s.me;
    const size_t rb = moe_record_bytes(&m->s);
    int64_t *all = malloc(sizeof *all * (size_t)R * R);
    size_t *z = malloc(sizeof *z * (size_t)R * 4);
    int rc = all && z ? A2AMM_OK : a2amm_fail(err, A2AMM_E_NOMEM, "a2amm_moe: rank %d: out of memory", me);
    comm_set_doing(m->ctx, "a2amm_moe of op %lld: every rank's row counts", (long long)m->id);
    if (!rc) rc = comm_allgather(m->ctx, b->to, all, sizeof *all * (size_t)R, comm_deadline_after(m->cfg.timeout_s), err);
    if (!rc) *alike = (rc = check_rooms(m, all, err)) != 0; /* every rank's own verdict, the same */
    if (!rc) {
        size_t *sb = z, *so = z + R, *rbytes = z + 2 * R, *ro = z + 3 * R;
        for (int p = 0; p < R; p++) b->from[p] = all[(size_t)p * R + me], b->got += b->from[p];
        b->slot_rows = (int64_t)(largest_pair(all, R, rb) / rb);
        blocks_of(b->to, 1, R, rb, sb, so);
        blocks_of(b->from, 1, R, rb, rbytes, ro);
        b->recv = malloc(rb * (size_t)(b->got ? b->got : 1));
        if (!b->recv)
            rc = a2amm_fail(err, A2AMM_E_NOMEM, "a2amm_moe: rank %d: out of memory for %lld rows in", me,
                            (long long)b->got);
        const comm_blocks out_blocks = {sb, so}, in_blocks = {rbytes, ro};
        if (!rc)
            rc = api_exchangev(m->comm, send, &out_blocks, b->recv, &in_blocks, (size_t)b->slot_rows * rb, top,
                               "a2amm_moe: the dispatch", m->cfg.timeout_s, err);
    }
    free(all), free(z);
    return rc;
}

/* The records' exchange with their counts travelling with them: room for max_tokens records from each
 * rank, then what came packed in source order. */
static int exchange_counted(a2amm_moe *m, a2amm_moe_batch *b, const uint8_t *send, size_t top, a2amm_error *err)
{
    const int R = m->s.R, me = m->s.me;
    const size_t rb = moe_record_bytes(&m->s), room = rb * (size_t)m->cfg.max_tokens;
    size_t *z = malloc(sizeof *z * (size_t)R * 5);
    b->recv = malloc(room * (size_t)R + 1);
    int rc = z && b->recv ? A2AMM_OK
                          : a2amm_fail(err, A2AMM_E_NOMEM, "a2amm_moe: rank %d: out of memory for %lld rows in", me,
                                       (long long)R * m->cfg.max_tokens);
    if (!rc) {
        size_t *sb = z, *so = z + R, *rooms = z + 2 * R, *ro = z + 3 * R, *got = z + 4 * R;
        blocks_of(b->to, 1, R, rb, sb, so);
        for (int p = 0; p < R; p++) rooms[p] = room, ro[p] = (size_t)p * room;
        const comm_blocks out_blocks = {sb, so}, in_blocks = {rooms, ro};
        b->slot_rows = m->cfg.max_tokens;
        rc = api_exchange_counted(m->comm, send, &out_blocks, b->recv, &in_blocks, got, room, top,
                                  "a2amm_moe: the dispatch", m->cfg.timeout_s, err);
        for (int p = 0; !rc && p < R; p++) { /* packed in source order: each block moves down, never up */
            b->from[p] = (int64_t)(got[p] / rb);
            if (got[p]) memmove(b->recv + (size_t)b->got * rb, b->recv + ro[p], got[p]);
            b->got += b->from[p];
        }
    }
    free(z);
    return rc;
}

/* The dispatch after its checks and agreement (top: the heap's agreed top): this rank's records to their
 * owners (their counts with them, or gathered first: *alike, refused on every rank alike), grouped by
 * expert. */
static int dispatch_core(a2amm_moe *m, int64_t T, const uint8_t *x, const uint8_t *sx, int64_t ldsx,
                         const int32_t *idx, const float *w, size_t top, a2amm_moe_batch **out, int *alike,
                         a2amm_error *err)
{
    const moe_shape *s = &m->s;
    const int R = s->R, me = s->me;
    const size_t rb = moe_record_bytes(s);
    a2amm_moe_batch *b = calloc(1, sizeof *b);
    size_t *so = malloc(sizeof *so * (size_t)R), *sb = malloc(sizeof *sb * (size_t)R);
    uint8_t *send = NULL;
    if (b) b->to = malloc(sizeof *b->to * (size_t)R * 2), b->idx = malloc(sizeof *b->idx * (size_t)(T * s->k) + 4);
    int rc = b && so && sb && b->to && b->idx
                 ? A2AMM_OK
                 : a2amm_fail(err, A2AMM_E_NOMEM, "a2amm_moe: rank %d: out of memory", me);
    if (!rc) {
        b->m = m, b->T = T, b->from = b->to + R;
        if (T) memcpy(b->idx, idx, sizeof *idx * (size_t)(T * s->k));
        moe_count(s, T, idx, b->to);
        for (int p = 0; p < R; p++) b->sent += b->to[p];
        blocks_of(b->to, 1, R, rb, sb, so);
        send = malloc(rb * (size_t)(b->sent ? b->sent : 1));
        if (!send)
            rc = a2amm_fail(err, A2AMM_E_NOMEM, "a2amm_moe: rank %d: out of memory for %lld rows out", me,
                            (long long)b->sent);
    }
    if (!rc) {
        moe_pack(s, T, x, sx, ldsx, idx, w, send, so);
        comm_set_doing(m->ctx, "a2amm_moe of op %lld: the dispatch", (long long)m->id);
        rc = counts_first(m) ? exchange_after_counts(m, b, send, top, alike, err)
                             : exchange_counted(m, b, send, top, err);
    }
    if (!rc) rc = moe_group(s, b->recv, b->got, &b->g, err);
    free(so), free(sb), free(send);
    if (rc) {
        a2amm_moe_batch_destroy(b);
        return rc;
    }
    *out = b;
    return A2AMM_OK;
}

/* The combine after its agreement: the partials from y (a row per pair of the batch), back to their
 * tokens' ranks, summed into out; the sums over `workers` (NULL: this thread alone, where the pool may be
 * running another chunk's experts). */
static int combine_core(a2amm_moe *m, a2amm_moe_batch *b, const float *const *y, uint16_t *out, size_t top,
                        pool *workers, a2amm_error *err)
{
    const moe_shape *s = &m->s;
    const int R = s->R, me = s->me;
    const size_t pb = (size_t)s->H * 2;
    uint16_t *partials = kept(&m->partials, pb * (size_t)(b->got ? b->got : 1));
    uint16_t *back = kept(&m->back, pb * (size_t)(b->sent ? b->sent : 1));
    size_t *z = malloc(sizeof *z * (size_t)R * 4);
    int rc = partials && back && z ? A2AMM_OK
                                   : a2amm_fail(err, A2AMM_E_NOMEM, "a2amm_moe: rank %d: out of memory", me);
    if (!rc) {
        size_t *pbytes = z, *po = z + R, *bbytes = z + 2 * R, *bo = z + 3 * R;
        moe_partials(s, b->recv, &b->g, y, partials, workers);
        blocks_of(b->from, 1, R, pb, pbytes, po); /* to each source, its records' partials */
        blocks_of(b->to, 1, R, pb, bbytes, bo);   /* from each owner, mine */
        const comm_blocks out_blocks = {pbytes, po}, in_blocks = {bbytes, bo};
        comm_set_doing(m->ctx, "a2amm_moe of op %lld: the combine", (long long)m->id);
        rc = api_exchangev(m->comm, partials, &out_blocks, back, &in_blocks, (size_t)b->slot_rows * pb, top,
                           "a2amm_moe: the combine", m->cfg.timeout_s, err);
        for (int p = 0; !rc && p < R; p++) bo[p] /= 2; /* in elements */
        if (!rc) rc = moe_combine(s, b->T, b->idx, back, bo, out, workers, err);
    }
    free(z);
    return rc;
}

/* ---- a call's steps, each with its events (chunk c: the exchange's tile) ------------------------------ */

/* The dispatch of chunk c (count tokens from token `first`): EXCHANGE_BEGIN/END, slot 0, bytes received. */
static int step_dispatch(a2amm_moe *m, const tokens_args *t, int c, int64_t first, int64_t count, size_t top,
                         a2amm_moe_batch **b, int *alike, a2amm_error *err)
{
    const int k = m->s.k;
    int64_t t0 = log_now();
    log_event(m, A2AMM_EVENT_EXCHANGE_BEGIN, c, count, 0, 0, t0, 0, 0);
    int rc = dispatch_core(m, count, t->x + first * m->s.H, t->sx + first * t->ldsx, t->ldsx, t->idx + first * k,
                           t->w + first * k, top, b, alike, err);
    log_event(m, A2AMM_EVENT_EXCHANGE_END, c, count, 0, rc ? 0 : (*b)->got * (int64_t)moe_record_bytes(&m->s),
              log_now(), 0, 0);
    return rc;
}

/* Chunk c's experts: MATMUL_BEGIN/END around them (rows: the chunk's expert rows), a WORK event for each
 * expert that had rows (slot: the local expert; thread, start and duration where it ran). */
static int step_experts(a2amm_moe *m, int c, const a2amm_moe_batch *b, float *y, a2amm_error *err)
{
    moe_expert_span *spans = m->log ? calloc((size_t)m->s.local, sizeof *spans) : NULL;
    int64_t t0 = log_now();
    log_event(m, A2AMM_EVENT_MATMUL_BEGIN, c, b->g.pairs, -1, 0, t0, 0, 0);
    int rc = moe_experts(&m->s, m->weights, m->workers, b->recv, &b->g, y, spans, err);
    log_event(m, A2AMM_EVENT_MATMUL_END, c, b->g.pairs, -1, 0, log_now(), 0, 0);
    for (int le = 0; spans && le < m->s.local; le++)
        if (spans[le].rows)
            log_event(m, A2AMM_EVENT_WORK, c, spans[le].rows, le, 0, spans[le].t0_ns, spans[le].thread,
                      spans[le].t1_ns - spans[le].t0_ns);
    free(spans);
    return rc;
}

/* Chunk c's combine into out (its tokens' rows): EXCHANGE_BEGIN/END, slot 1, bytes received. */
static int step_combine(a2amm_moe *m, int c, a2amm_moe_batch *b, const float *const *rows, uint16_t *out, size_t top,
                        pool *workers, a2amm_error *err)
{
    int64_t t0 = log_now();
    log_event(m, A2AMM_EVENT_EXCHANGE_BEGIN, c, b->T, 1, 0, t0, 0, 0);
    int rc = combine_core(m, b, rows, out, top, workers, err);
    log_event(m, A2AMM_EVENT_EXCHANGE_END, c, b->T, 1, rc ? 0 : b->sent * m->s.H * 2, log_now(), 0, 0);
    return rc;
}

/* ---- the fused schedule ------------------------------------------------------------------------------ */

/*
 * FUSED_ROWS_MIN: the rows a local expert gets a chunk on average from which the fused schedule overlaps.
 * Each chunk reads every hit expert's weights again; with the amx kernels (this Xeon, DeepSeek-V2-Lite's
 * experts) that read costs about what 10 rows' work does: two chunks of 96 rows an expert took 1.11x one
 * pass of 192 (experts alone, bench moe 2 512 vs 1024), more than the half of the exchange they hide on
 * one machine (5-10% of the call) or across hosts at 1 Gbit/s (docs/performance.md).
 */
enum { FUSED_CHUNKS_MAX = KEPT_CHUNKS, FUSED_CHUNK_MIN = 64 /* tokens */, FUSED_ROWS_MIN = 256 };

/* The chunks of every rank's call: the same on every rank (from the shared config), so that every rank
 * makes the same exchanges. Unfused, fused below FUSED_ROWS_MIN, or where counts go first (their refusal
 * is one for the whole call): one. */
static int fused_chunks(const a2amm_moe *m)
{
    if (m->cfg.schedule == A2AMM_SCHEDULE_UNFUSED || counts_first(m)) return 1;
    const double rows_a_chunk = (double)m->s.R * (double)m->cfg.max_tokens * m->cfg.topk /
                                ((double)m->cfg.experts * FUSED_CHUNKS_MAX);
    if (m->cfg.schedule == A2AMM_SCHEDULE_FUSED && rows_a_chunk < FUSED_ROWS_MIN) return 1;
    int64_t c = (m->cfg.max_tokens + FUSED_CHUNK_MIN - 1) / FUSED_CHUNK_MIN;
    return c < FUSED_CHUNKS_MAX ? (int)c : FUSED_CHUNKS_MAX;
}

/* Chunk c of this rank's T tokens: at least FUSED_CHUNK_MIN tokens each, so a small call is one chunk and
 * the others are empty (their exchanges carry nothing). */
static void chunk_of(int64_t T, int chunks, int c, int64_t *first, int64_t *count)
{
    int64_t size = (T + chunks - 1) / chunks;
    if (size < FUSED_CHUNK_MIN) size = FUSED_CHUNK_MIN;
    int64_t lo = size * c < T ? size * c : T, hi = lo + size < T ? lo + size : T;
    *first = lo, *count = hi - lo;
}

/* A fused call: the exchanges on a thread of their own (dispatch c + 1 and combine c - 1 while the experts
 * run on chunk c on the caller's pool), handing chunks over under one lock. */
typedef struct fused {
    a2amm_moe *m;
    const tokens_args *t;
    size_t top;
    int chunks;
    pthread_mutex_t lock;
    pthread_cond_t moved;
    int dispatched, computed, failed; /* chunks whose rows are here, whose experts are done; a failure */
    a2amm_moe_batch *batch[FUSED_CHUNKS_MAX];
    float *y[FUSED_CHUNKS_MAX];
    const float **rows[FUSED_CHUNKS_MAX];
    int rc;            /* the exchanges' first failure */
    a2amm_error err;
} fused;

/* Marks a step done (or the call failed) and wakes the other side. */
static void fused_step(fused *f, int *counter, int value, int rc)
{
    pthread_mutex_lock(&f->lock);
    if (rc) f->failed = 1;
    else *counter = value;
    pthread_cond_broadcast(&f->moved);
    pthread_mutex_unlock(&f->lock);
}

/* Waits until *counter reaches value; 0, or STOPPED where the call failed on the other side. */
enum { STOPPED = 1 };
static int fused_wait(fused *f, const int *counter, int value)
{
    pthread_mutex_lock(&f->lock);
    while (*counter < value && !f->failed) pthread_cond_wait(&f->moved, &f->lock);
    int ok = *counter >= value && !f->failed;
    pthread_mutex_unlock(&f->lock);
    return ok ? 0 : STOPPED;
}

/* Chunk c's combine once its experts are done (the exchanges' thread); STOPPED where they failed. */
static int fused_combine(fused *f, int c)
{
    if (fused_wait(f, &f->computed, c + 1)) return STOPPED;
    int64_t first, count;
    chunk_of(f->t->T, f->chunks, c, &first, &count);
    /* the last chunk's combine has the pool to itself (every chunk's experts are done); the others run
     * beside the next chunk's experts, on this thread alone */
    pool *workers = c == f->chunks - 1 ? f->m->workers : NULL;
    return step_combine(f->m, c, f->batch[c], f->rows[c], f->t->out + first * f->m->s.H, f->top, workers, &f->err);
}

static void *fused_exchanges(void *arg)
{
    fused *f = arg;
    const tokens_args *t = f->t;
    int rc = A2AMM_OK, alike = 0;
    for (int c = 0; !rc && c < f->chunks; c++) {
        int64_t first, count;
        chunk_of(t->T, f->chunks, c, &first, &count);
        rc = step_dispatch(f->m, t, c, first, count, f->top, &f->batch[c], &alike, &f->err);
        fused_step(f, &f->dispatched, c + 1, rc);
        if (!rc && c > 0) rc = fused_combine(f, c - 1);
    }
    if (!rc) rc = fused_combine(f, f->chunks - 1);
    if (rc && rc != STOPPED) { /* the exchanges' own failure (a peer's, a deadline's): the experts stop */
        f->rc = rc;
        fused_step(f, &f->computed, 0, rc);
    }
    return NULL;
}

static int run_fused(a2amm_moe *m, const tokens_args *t, size_t top, int chunks, a2amm_error *err)
{
    fused f = {.m = m, .t = t, .top = top, .chunks = chunks, .err = {0, ""}};
    pthread_mutex_init(&f.lock, NULL);
    pthread_cond_init(&f.moved, NULL);
    pthread_t thread;
    int rc = pthread_create(&thread, NULL, fused_exchanges, &f)
                 ? a2amm_fail(err, A2AMM_E_SYS, "a2amm_moe_run: rank %d: cannot start the exchanges' thread", m->s.me)
                 : A2AMM_OK;
    const int started = !rc;
    const int64_t H = m->s.H;
    for (int c = 0; !rc && c < chunks; c++) {
        if (fused_wait(&f, &f.dispatched, c + 1)) break; /* the exchanges failed: their error below */
        const a2amm_moe_batch *b = f.batch[c];
        const int64_t pairs = b->g.pairs;
        f.y[c] = kept(&m->y[c], sizeof *f.y[c] * (size_t)((pairs ? pairs : 1) * H));
        f.rows[c] = malloc(sizeof *f.rows[c] * (size_t)(pairs + 1));
        if (!f.y[c] || !f.rows[c]) rc = a2amm_fail(err, A2AMM_E_NOMEM, "a2amm_moe_run: rank %d: out of memory", m->s.me);
        for (int64_t p = 0; !rc && p < pairs; p++) f.rows[c][p] = f.y[c] + p * H;
        if (!rc) rc = step_experts(m, c, b, f.y[c], err);
        fused_step(&f, &f.computed, c + 1, rc);
    }
    if (started) pthread_join(thread, NULL);
    if (!rc && f.rc) { /* the exchanges' error: a peer's, a deadline's */
        rc = f.rc;
        if (err) *err = f.err;
    }
    for (int c = 0; c < chunks; c++) a2amm_moe_batch_destroy(f.batch[c]), free(f.rows[c]);
    pthread_cond_destroy(&f.moved);
    pthread_mutex_destroy(&f.lock);
    return rc;
}

/* The whole call after its checks and agreement (the unfused schedule): the dispatch, this rank's experts,
 * the combine. */
static int run_call(a2amm_moe *m, const tokens_args *t, size_t top, int *alike, a2amm_error *err)
{
    a2amm_moe_batch *b = NULL;
    int rc = step_dispatch(m, t, 0, 0, t->T, top, &b, alike, err);
    if (rc) return rc;
    const int64_t pairs = b->g.pairs, H = m->s.H;
    float *y = kept(&m->y[0], sizeof *y * (size_t)((pairs ? pairs : 1) * H));
    const float **rows = malloc(sizeof *rows * (size_t)(pairs + 1));
    if (!y || !rows) rc = a2amm_fail(err, A2AMM_E_NOMEM, "a2amm_moe_run: rank %d: out of memory", m->s.me);
    for (int64_t p = 0; !rc && p < pairs; p++) rows[p] = y + p * H;
    comm_set_doing(m->ctx, "a2amm_moe_run of op %lld: the experts on %lld rows", (long long)m->id, (long long)b->got);
    if (!rc) rc = step_experts(m, 0, b, y, err);
    if (!rc) rc = step_combine(m, 0, b, rows, t->out, top, m->workers, err);
    free(rows);
    a2amm_moe_batch_destroy(b);
    return rc;
}

/* One collective call of the op: busy, the communicator taken, `check` (or none) failing every rank on its
 * own error, the agreement on `call`, then `body`; a failure of the body fails the others unless it is the
 * same refusal on every rank (*alike). */
typedef int (*moe_body)(a2amm_moe *m, void *arg, size_t top, int *alike, a2amm_error *err);

static int moe_call(a2amm_moe *m, api_call call, const char *name, int (*check)(a2amm_moe *m, void *arg, a2amm_error *err),
                    moe_body body, void *arg, a2amm_error *err)
{
    a2amm_error own = {0, ""}; /* the reason the others hear, where the caller takes none */
    if (!err) err = &own;
    if (!m) return a2amm_fail(err, A2AMM_E_INVAL, "%s: moe is NULL", name);
    int idle = 0;
    if (!atomic_compare_exchange_strong(&m->busy, &idle, 1))
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: op %lld is in a call on another thread: the call running goes on",
                          name, (long long)m->id);
    int rc = api_enter(m->comm, name, err);
    if (!rc) {
        rc = check ? check(m, arg, err) : A2AMM_OK;
        if (rc) api_refuse(m->comm, rc, err); /* the others stop at once, hearing why */
        int64_t words[COMM_AGREE_WORDS] = {call, m->id};
        size_t top = 0;
        comm_set_doing(m->ctx, "%s of op %lld: waiting for every rank", name, (long long)m->id);
        if (!rc) rc = api_agree(m->comm, words, m->cfg.timeout_s, name, &top, err);
        if (!rc) {
            int alike = 0; /* refused on every rank alike (rows over a room): the communicator goes on */
            rc = body(m, arg, top, &alike, err);
            if (rc && !alike) api_fail_all(m->ctx, rc, err);
            else comm_set_doing(m->ctx, "%s of op %lld: %s", name, (long long)m->id, rc ? "refused" : "done");
        }
        api_leave(m->comm);
    }
    atomic_store(&m->busy, 0);
    return rc;
}

static int run_body(a2amm_moe *m, void *arg, size_t top, int *alike, a2amm_error *err)
{
    const tokens_args *t = arg;
    const int chunks = fused_chunks(m);
    moe_log log = {.n = 0};
    m->calls++;
    if (m->observer) {
        pthread_mutex_init(&log.lock, NULL);
        m->log = &log;
    }
    log_event(m, A2AMM_EVENT_CALL_BEGIN, -1, t->T, -1, 0, log_now(), 0, 0);
    int rc = chunks > 1 ? run_fused(m, t, top, chunks, err) : run_call(m, t, top, alike, err);
    log_event(m, A2AMM_EVENT_CALL_END, -1, t->T, -1, 0, log_now(), 0, 0);
    m->log = NULL;
    if (m->observer) log_deliver(m, &log);
    return rc;
}

static int dispatch_body(a2amm_moe *m, void *arg, size_t top, int *alike, a2amm_error *err)
{
    const tokens_args *t = arg;
    int rc = dispatch_core(m, t->T, t->x, t->sx, t->ldsx, t->idx, t->w, top, t->batch, alike, err);
    if (rc) return rc;
    /* the experts' rows for the caller: each expert's, contiguous, in expert order */
    a2amm_moe_batch *b = *t->batch;
    const int64_t H = m->s.H, pairs = b->g.pairs;
    b->codes = malloc((size_t)((pairs ? pairs : 1) * H)), b->scales = malloc((size_t)((pairs ? pairs : 1) * (H / 32)));
    if (!b->codes || !b->scales) {
        a2amm_moe_batch_destroy(b);
        *t->batch = NULL;
        return a2amm_fail(err, A2AMM_E_NOMEM, "a2amm_moe_dispatch: rank %d: out of memory", m->s.me);
    }
    for (int le = 0; le < m->s.local; le++)
        moe_gather_rows(&m->s, b->recv, &b->g, le, b->codes + b->g.start[le] * H, b->scales + b->g.start[le] * (H / 32));
    return A2AMM_OK;
}

int a2amm_moe_run(a2amm_moe *m, int64_t T, const uint8_t *x, const uint8_t *sx, int64_t ldsx, const int32_t *idx,
                  const float *w, uint16_t *out, a2amm_error *err)
{
    tokens_args t = {"a2amm_moe_run", T, x, sx, ldsx, idx, w, out, NULL, 0};
    return moe_call(m, API_MOE_RUN, "a2amm_moe_run", check_tokens, run_body, &t, err);
}

int a2amm_moe_dispatch(a2amm_moe *m, int64_t T, const uint8_t *x, const uint8_t *sx, int64_t ldsx,
                       const int32_t *idx, const float *w, a2amm_moe_batch **batch, a2amm_error *err)
{
    if (batch) *batch = NULL;
    tokens_args t = {"a2amm_moe_dispatch", T, x, sx, ldsx, idx, w, NULL, batch, 1};
    return moe_call(m, API_MOE_DISPATCH, "a2amm_moe_dispatch", check_tokens, dispatch_body, &t, err);
}

int a2amm_moe_expert(a2amm_moe *m, int le, int64_t rows, const uint8_t *codes, const uint8_t *scales, int64_t ldsx,
                     float *y, int64_t ldy, a2amm_error *err)
{
    static const char *call = "a2amm_moe_expert";
    if (!m) return a2amm_fail(err, A2AMM_E_INVAL, "%s: moe is NULL", call);
    const int64_t H = m->s.H, sw = H / 32;
    if (!m->weights)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: rank %d has no weights: a2amm_moe_set_weights first", call,
                          m->s.me);
    if (le < 0 || le >= m->s.local)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: local_expert must be one of the local experts 0 .. %d (got %d)",
                          call, m->s.local - 1, le);
    if (rows < 0) return a2amm_fail(err, A2AMM_E_INVAL, "%s: rows must not be negative (got %lld)", call, (long long)rows);
    if (rows && (!codes || !scales || !y))
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: codes, scales and y must not be NULL with %lld rows", call,
                          (long long)rows);
    if (rows && (ldsx < sw || ldy < H))
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: ldsx must be at least hidden/32 = %lld and ldy at least hidden = "
                          "%lld (got %lld and %lld)", call, (long long)sw, (long long)H, (long long)ldsx, (long long)ldy);
    if (rows == 0) return A2AMM_OK;
    uint8_t *packed = malloc((size_t)(rows * sw)); /* the scales as the kernels read them: sw a row */
    float **ys = malloc(sizeof *ys * (size_t)rows);
    int rc = packed && ys ? A2AMM_OK : a2amm_fail(err, A2AMM_E_NOMEM, "%s: out of memory for %lld rows", call,
                                                  (long long)rows);
    for (int64_t i = 0; !rc && i < rows; i++) memcpy(packed + i * sw, scales + i * ldsx, (size_t)sw), ys[i] = y + i * ldy;
    if (!rc && moe_expert_rows(&m->s, m->weights, le, codes, packed, rows, ys))
        rc = a2amm_fail(err, A2AMM_E_NOMEM, "%s: out of memory for %lld rows", call, (long long)rows);
    free(packed), free(ys);
    return rc;
}

int a2amm_moe_batch_rows(const a2amm_moe_batch *b, int expert, int64_t *rows, const uint8_t **codes,
                         const uint8_t **scales, a2amm_error *err)
{
    if (!b || !rows) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_moe_batch_rows: batch and rows must not be NULL");
    const moe_shape *s = &b->m->s;
    if (expert < 0 || expert >= s->local)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_moe_batch_rows: rank %d holds local experts 0 .. %d (experts %d "
                          ".. %d); got %d", s->me, s->local - 1, s->me * s->local, (s->me + 1) * s->local - 1, expert);
    *rows = b->g.start[expert + 1] - b->g.start[expert];
    if (codes) *codes = b->codes + b->g.start[expert] * s->H;
    if (scales) *scales = b->scales + b->g.start[expert] * (s->H / 32);
    return A2AMM_OK;
}

/* The arguments of a combine. */
typedef struct combine_args {
    a2amm_moe_batch *b;
    const float *const *y;
    uint16_t *out;
} combine_args;

static int check_combine(a2amm_moe *m, void *arg, a2amm_error *err)
{
    const combine_args *c = arg;
    if (!c->b || c->b->m != m)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_moe_combine: rank %d: the batch is not one of this op's "
                          "dispatches", m->s.me);
    if (!c->y || (c->b->T && !c->out))
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_moe_combine: rank %d: y and out must not be NULL", m->s.me);
    for (int le = 0; le < m->s.local; le++)
        if (!c->y[le] && c->b->g.start[le + 1] > c->b->g.start[le])
            return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_moe_combine: rank %d: y[%d] is NULL for %lld rows", m->s.me,
                              le, (long long)(c->b->g.start[le + 1] - c->b->g.start[le]));
    return A2AMM_OK;
}

static int combine_body(a2amm_moe *m, void *arg, size_t top, int *alike, a2amm_error *err)
{
    (void)alike;
    const combine_args *c = arg;
    a2amm_moe_batch *b = c->b;
    const int64_t H = m->s.H;
    const float **rows = malloc(sizeof *rows * (size_t)(b->g.pairs + 1));
    if (!rows) return a2amm_fail(err, A2AMM_E_NOMEM, "a2amm_moe_combine: rank %d: out of memory", m->s.me);
    for (int le = 0; le < m->s.local; le++) /* expert le's row i is the y of its entry i's pair */
        for (int64_t i = 0; i < b->g.start[le + 1] - b->g.start[le]; i++)
            rows[b->g.pair[b->g.start[le] + i]] = c->y[le] + i * H;
    int rc = combine_core(m, b, rows, c->out, top, m->workers, err);
    free(rows);
    return rc;
}

int a2amm_moe_combine(a2amm_moe *m, a2amm_moe_batch *b, const float *const *y, uint16_t *out, a2amm_error *err)
{
    combine_args c = {b, y, out};
    return moe_call(m, API_MOE_COMBINE, "a2amm_moe_combine", check_combine, combine_body, &c, err);
}

void a2amm_moe_destroy(a2amm_moe *m)
{
    if (!m) return;
    if (m->weights == &m->own) moe_weights_free(&m->s, &m->own);
    pool_destroy(m->workers);
    for (int c = 0; c < KEPT_CHUNKS; c++) free(m->y[c].p);
    free(m->partials.p), free(m->back.p);
    free(m);
}
