/*
 * The public operator: an op made once per communicator with the largest
 * m, weights set locally, one collective call per step on the caller's
 * buffers. It drives the same rank pipeline as `a2amm run` (op/exec.c).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "common/error.h"
#include "common/pool.h"
#include "op/op_kind.h"
#include "op/rank.h"

/* Who holds an op now (its busy word): a call in progress on some thread. */
enum { OP_IDLE, OP_IN_RUN, OP_IN_LOCAL_CALL };

struct a2amm_op {
    a2amm_comm *comm;
    comm_ctx *ctx;
    int64_t id;        /* its number on the communicator (1, 2, ...): the same on every rank */
    a2amm_op_config cfg;
    op_shape shape; /* M is the current call's m */
    op_sizes z;     /* of the largest shape */
    op_options opt;
    op_rank rk;
    gemm_isa isa;
    uint64_t tiles_done, calls; /* tiles of every call so far: the next call's first global tile */
    size_t heap_mark, heap_end; /* its symmetric memory: [heap_mark, heap_end) */
    _Atomic int busy;  /* OP_IDLE, or what a thread is doing with it */
    struct a2amm_op *next; /* the live ops of this process */
};

/* ---- live ops: a call on a destroyed (or made-up) handle is refused ---- */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static a2amm_op *live;

static void live_add(a2amm_op *op)
{
    pthread_mutex_lock(&live_lock);
    op->next = live;
    live = op;
    pthread_mutex_unlock(&live_lock);
}

static int live_remove(a2amm_op *op)
{
    pthread_mutex_lock(&live_lock);
    a2amm_op **p = &live;
    while (*p && *p != op) p = &(*p)->next;
    int found = *p != NULL;
    if (found) *p = op->next;
    pthread_mutex_unlock(&live_lock);
    return found;
}

static int is_live(const a2amm_op *op)
{
    pthread_mutex_lock(&live_lock);
    const a2amm_op *p = live;
    while (p && p != op) p = p->next;
    pthread_mutex_unlock(&live_lock);
    return op && p == op;
}

static int not_live(const char *call, a2amm_error *err)
{
    return a2amm_fail(err, A2AMM_E_INVAL, "%s: op is not a live op (NULL, destroyed, or never made by a2amm_op_create)",
                      call);
}

/* Takes the op for one call on this thread (what: OP_IN_*): A2AMM_E_INVAL if another thread has it. */
static int take_op(a2amm_op *op, int what, const char *call, a2amm_error *err)
{
    int idle = OP_IDLE;
    if (atomic_compare_exchange_strong(&op->busy, &idle, what)) return A2AMM_OK;
    return a2amm_fail(err, A2AMM_E_INVAL, "%s: op %lld is busy: another thread of rank %d is in %s on it (an op "
                      "takes one call at a time)", call, (long long)op->id, comm_rank(op->ctx),
                      idle == OP_IN_RUN ? "a2amm_op_run" : "a local call");
}

static void give_op(a2amm_op *op) { atomic_store(&op->busy, OP_IDLE); }

/* ---- the config ----------------------------------------------------------- */

/* The caller's config, as its header laid it out, with the defaults filled in. */
static int with_defaults(const a2amm_op_config *c, a2amm_op_config *out, const char *call, a2amm_error *err)
{
    a2amm_op_config d;
    int rc = api_read_sized(c, &d, sizeof d, sizeof d, call, "config", err);
    if (rc) return rc;
    if (d.tile_m == 0) d.tile_m = 512;
    if (d.depth == 0) d.depth = 4;
    if (d.timeout_s == 0) d.timeout_s = 60;
    *out = d;
    return A2AMM_OK;
}

/* The config's rules, said as `call`'s own (a2amm_op_create, a2amm_op_heap_bytes). */
static int check_config(const a2amm_op_config *c, int R, op_shape *shape, op_sizes *z, const char *call,
                        a2amm_error *err)
{
    if (c->max_m < 1)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: max_m must be at least 1 (got %lld)", call, (long long)c->max_m);
    if ((c->a_type != A2AMM_E4M3 && c->a_type != A2AMM_E5M2) || (c->b_type != A2AMM_E4M3 && c->b_type != A2AMM_E5M2))
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: a_type and b_type must be A2AMM_E4M3 or A2AMM_E5M2", call);
    if (c->tile_m < 1) return a2amm_fail(err, A2AMM_E_INVAL, "%s: tile_m must be 0 (512) or positive", call);
    if (c->depth < 1 || c->depth > 1024)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: depth must be 0 (4) or 1 to 1024", call);
    if (c->threads < 0 || c->threads > 1024)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: threads must be 0 (automatic) to 1024 (got %d)", call, c->threads);
    if (c->path != A2AMM_PATH_DIRECT && c->path != A2AMM_PATH_PUT)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: path must be A2AMM_PATH_DIRECT or A2AMM_PATH_PUT", call);
    if (!(c->timeout_s > 0)) return a2amm_fail(err, A2AMM_E_INVAL, "%s: timeout_s must be 0 (60) or positive", call);
    if (c->schedule != A2AMM_SCHEDULE_FUSED && c->schedule != A2AMM_SCHEDULE_UNFUSED)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: schedule must be A2AMM_SCHEDULE_FUSED or A2AMM_SCHEDULE_UNFUSED "
                          "(A2AMM_SCHEDULE_OVERLAP is the MoE op's; got %d)", call, (int)c->schedule);
    const op_kind_row *kind = op_kind_row_of_api(c->kind);
    if (!kind)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: kind must be A2AMM_OP_ALLTOALL_MATMUL or A2AMM_OP_MATMUL_ALLTOALL "
                          "(got %d)", call, (int)c->kind);
    *shape = (op_shape){c->max_m, c->k, c->n, R, c->a_type, c->b_type, kind->kind};
    a2amm_error why = {0, ""};
    int rc = op_shape_check(shape, z, &why);
    if (rc) return a2amm_fail(err, rc, "%s: %s", call, why.msg);
    return A2AMM_OK;
}

static op_options options_of(const a2amm_op_config *c)
{
    return (op_options){.tile_m = c->tile_m, .depth = c->depth, .threads = c->threads,
                        .path = c->path == A2AMM_PATH_PUT ? OP_PATH_PUT : OP_PATH_DIRECT,
                        .unfused = c->schedule == A2AMM_SCHEDULE_UNFUSED, .timeout_s = c->timeout_s};
}


int a2amm_op_heap_bytes(const a2amm_op_config *config, int nranks, size_t *bytes, a2amm_error *err)
{
    if (bytes) *bytes = 0;
    if (!config || !bytes) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_heap_bytes: config and bytes must not be NULL");
    if (nranks < 1 || nranks > COMM_MAX_RANKS)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_heap_bytes: nranks must be 1 to %d (got %d)", COMM_MAX_RANKS,
                          nranks);
    a2amm_op_config c;
    op_shape s;
    op_sizes z;
    int rc = with_defaults(config, &c, "a2amm_op_heap_bytes", err);
    if (!rc) rc = check_config(&c, nranks, &s, &z, "a2amm_op_heap_bytes", err);
    if (rc) return rc;
    op_options o = options_of(&c);
    *bytes = op_rank_heap_bytes(&s, &z, &o);
    return A2AMM_OK;
}

const char *a2amm_op_kind_name(a2amm_op_kind kind)
{
    const op_kind_row *k = op_kind_row_of_api(kind);
    return k ? k->name : NULL;
}

int a2amm_op_geometry_of(const a2amm_op_config *config, int nranks, int64_t m, a2amm_op_geometry *geometry,
                         a2amm_error *err)
{
    const char *call = "a2amm_op_geometry_of";
    if (!config || !geometry) return a2amm_fail(err, A2AMM_E_INVAL, "%s: config and geometry must not be NULL", call);
    if (geometry->size < sizeof(size_t) + sizeof(int64_t))
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: geometry's size is %zu: make it with A2AMM_OP_GEOMETRY_INIT", call,
                          geometry->size);
    if (nranks < 1 || nranks > COMM_MAX_RANKS)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: nranks must be 1 to %d (got %d)", call, COMM_MAX_RANKS, nranks);
    a2amm_op_config c;
    op_shape s;
    op_sizes z;
    int rc = with_defaults(config, &c, call, err);
    if (!rc) rc = check_config(&c, nranks, &s, &z, call, err);
    if (rc) return rc;
    if (m < 1 || m > c.max_m)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: m must be 1 to max_m = %lld (got %lld)", call, (long long)c.max_m,
                          (long long)m);
    s.M = m; /* the sizes of a call of m: the rules held at max_m, so they hold at m */
    op_shape_check(&s, &z, NULL);
    a2amm_op_geometry g = {.size = sizeof g, .a_blocks = z.a_blocks, .a_rows = z.a_rows, .lda = z.ka, .ldsa = z.ska,
                           .out_rows = z.out_rows, .out_cols = z.out_cols, .b_rows = s.N, .b_cols = s.K,
                           .ldsb = z.sk};
    size_t size = geometry->size < sizeof g ? geometry->size : sizeof g;
    memcpy((char *)geometry + sizeof g.size, (const char *)&g + sizeof g.size, size - sizeof g.size);
    return A2AMM_OK;
}

/* The config every rank must pass alike (threads is each rank's own): compared as a hash at create. */
#define FIELD(f, t) API_FIELD(a2amm_op_config, f, t)
#define NAMED(f, names) API_FIELD_NAMED(a2amm_op_config, f, names)
static const api_field CREATE_FIELDS[] = {
    FIELD(max_m, API_FIELD_I64), FIELD(k, API_FIELD_I64), FIELD(n, API_FIELD_I64), NAMED(a_type, API_FP8_NAMES),
    NAMED(b_type, API_FP8_NAMES), FIELD(tile_m, API_FIELD_I64), FIELD(depth, API_FIELD_INT),
    NAMED(path, API_PATH_NAMES), NAMED(schedule, API_SCHEDULE_NAMES), FIELD(timeout_s, API_FIELD_DOUBLE),
    NAMED(kind, API_KIND_NAMES), {NULL, 0, API_FIELD_INT, NULL}};
#undef FIELD
#undef NAMED
_Static_assert(sizeof(a2amm_path) == sizeof(int) && sizeof(a2amm_schedule) == sizeof(int) &&
                   sizeof(a2amm_op_kind) == sizeof(int) && sizeof(a2amm_fp8_type) == sizeof(int),
               "the config's enums are read as ints");

/* The op's symmetric memory, from the highest heap top of every rank (the
 * same offsets everywhere, whatever each rank destroyed before), its
 * threads, and a barrier: every rank has made its op, or hears why not. */
static int make_op(a2amm_op *op, size_t top, a2amm_error *err)
{
    comm_heap_raise(op->ctx, top);
    op->heap_mark = comm_heap_mark(op->ctx);
    int rc = op_rank_alloc(&op->rk, err);
    op->heap_end = comm_heap_mark(op->ctx);
    if (!rc) rc = pool_create(op->opt.threads, &op->rk.pool, err);
    if (!rc) {
        free(op->rk.out); /* the caller's buffer is the output */
        op->rk.out = NULL;
    }
    if (rc) return api_fail_all(op->ctx, rc, err);
    rc = comm_barrier(op->ctx, comm_deadline_after(op->cfg.timeout_s), err);
    return rc ? api_fail_all(op->ctx, rc, err) : A2AMM_OK;
}

int a2amm_op_create(a2amm_comm *comm, const a2amm_op_config *config, a2amm_op **out, a2amm_error *err)
{
    a2amm_error own = {0, ""}; /* the reason the others hear, where the caller takes none */
    if (!err) err = &own;
    if (out) *out = NULL;
    if (!comm) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_create: comm, config and op must not be NULL");
    int rc = api_enter(comm, "a2amm_op_create", err);
    if (rc) return rc;
    a2amm_op *op = NULL;
    if (!config || !out)
        rc = a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_create: comm, config and op must not be NULL (%s is)",
                        !config ? "config" : "op");
    else if (!(op = calloc(1, sizeof *op)))
        rc = a2amm_fail(err, A2AMM_E_NOMEM, "a2amm_op_create: out of memory");
    if (rc) { /* the others, in this call, hear why at once */
        api_refuse(comm, rc, err);
        api_leave(comm);
        return rc;
    }
    op->comm = comm;
    op->ctx = comm->ctx;
    op->id = ++comm->ops_made;
    int R = comm_nranks(op->ctx), me = comm_rank(op->ctx);
    rc = with_defaults(config, &op->cfg, "a2amm_op_create", err);
    if (!rc) rc = check_config(&op->cfg, R, &op->shape, &op->z, "a2amm_op_create", err);
    if (!rc) rc = gemm_isa_select(&op->isa, err);
    if (rc) { /* a bad config on one rank must not leave the others waiting */
        api_fail_all(op->ctx, rc, err);
        free(op);
        api_leave(comm);
        return rc;
    }
    op->opt = options_of(&op->cfg);
    if (op->opt.threads == 0) op->opt.threads = pool_cpu_count() / R > 0 ? pool_cpu_count() / R : 1;
    op->rk = (op_rank){.s = &op->shape, .z = &op->z, .opt = &op->opt, .ctx = op->ctx, .me = me, .R = R,
                       .m = op->cfg.max_m, .m_max = op->cfg.max_m};
    op->rk.tm = op->cfg.tile_m < op->cfg.max_m ? op->cfg.tile_m : op->cfg.max_m;
    size_t top = 0;
    comm_set_doing(op->ctx, "a2amm_op_create of op %lld: waiting for every rank", (long long)op->id);
    rc = api_agree_config(comm, API_OP_CREATE, op->id, &op->cfg, CREATE_FIELDS, op->cfg.timeout_s,
                          "a2amm_op_create", &top, err);
    if (!rc) rc = make_op(op, top, err);
    if (rc) {
        op_rank_free(&op->rk);
        if (op->heap_end > op->heap_mark) comm_heap_release_range(op->ctx, op->heap_mark, op->heap_end);
        free(op);
        api_leave(comm);
        return rc;
    }
    comm_set_doing(op->ctx, "a2amm_op_create of op %lld: done", (long long)op->id);
    live_add(op);
    api_leave(comm);
    *out = op;
    return A2AMM_OK;
}

static int set_weights(a2amm_op *op, const uint8_t *b, const uint8_t *sb, int64_t ldsb, a2amm_error *err)
{
    if (!b || !sb) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_set_weights: b and sb must not be NULL");
    if (ldsb < op->cfg.k / 32)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_set_weights: ldsb must be at least k/32 = %lld (got %lld)",
                          (long long)(op->cfg.k / 32), (long long)ldsb);
    gemm_b *nb = NULL;
    /* Every matmul of the op is one tile's rows or fewer: where the level reads B in fp8 for so few
     * (decode-sized tiles), B is kept in fp8 only, no wider copy (gemm_b_prepare_for). */
    int rc = gemm_b_prepare_for(op->rk.pool, op->isa, b, sb, op->cfg.n, op->cfg.k, ldsb, op->cfg.b_type, op->rk.tm,
                                &nb, err);
    if (rc) return rc;
    gemm_b_free(op->rk.owned_b);
    op->rk.owned_b = nb;
    op->rk.b = nb;
    return A2AMM_OK;
}

int a2amm_op_set_weights(a2amm_op *op, const uint8_t *b, const uint8_t *sb, int64_t ldsb, a2amm_error *err)
{
    if (!is_live(op)) return not_live("a2amm_op_set_weights", err);
    int rc = take_op(op, OP_IN_LOCAL_CALL, "a2amm_op_set_weights", err);
    if (rc) return rc;
    rc = set_weights(op, b, sb, ldsb, err);
    give_op(op);
    return rc;
}

static int use_weights(a2amm_op *op, const a2amm_weights *w, a2amm_error *err)
{
    if (!w) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_use_weights: w must not be NULL");
    if (w->n != op->cfg.n || w->k != op->cfg.k || w->b_type != op->cfg.b_type)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_use_weights: the weights are n %lld, k %lld, %s; the op's are "
                          "n %lld, k %lld, %s", (long long)w->n, (long long)w->k, a2amm_fp8_type_name(w->b_type),
                          (long long)op->cfg.n, (long long)op->cfg.k, a2amm_fp8_type_name(op->cfg.b_type));
    if (gemm_b_isa(w->b) != op->isa)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_use_weights: the weights were prepared for the %s kernels, "
                          "the op runs %s (was A2AMM_ISA or A2AMM_CPU_HIDE changed in between?)",
                          gemm_isa_name(gemm_b_isa(w->b)), gemm_isa_name(op->isa));
    gemm_b_free(op->rk.owned_b);
    op->rk.owned_b = NULL;
    op->rk.b = w->b;
    return A2AMM_OK;
}

int a2amm_op_use_weights(a2amm_op *op, const a2amm_weights *w, a2amm_error *err)
{
    if (!is_live(op)) return not_live("a2amm_op_use_weights", err);
    int rc = take_op(op, OP_IN_LOCAL_CALL, "a2amm_op_use_weights", err);
    if (rc) return rc;
    rc = use_weights(op, w, err);
    give_op(op);
    return rc;
}

int a2amm_op_set_observer(a2amm_op *op, a2amm_observer_fn fn, void *arg, a2amm_error *err)
{
    if (!is_live(op)) return not_live("a2amm_op_set_observer", err);
    int rc = take_op(op, OP_IN_LOCAL_CALL, "a2amm_op_set_observer", err);
    if (rc) return rc;
    op->rk.observer = fn;
    op->rk.observer_arg = fn ? arg : NULL;
    give_op(op);
    return A2AMM_OK;
}

int a2amm_op_input(a2amm_op *op, uint8_t **a, uint8_t **sa, int64_t *lda, int64_t *ldsa, int64_t *block_rows,
                   a2amm_error *err)
{
    if (!is_live(op)) return not_live("a2amm_op_input", err);
    if (a) *a = op->rk.a;
    if (sa) *sa = op->rk.sa;
    if (lda) *lda = op->z.ka;
    if (ldsa) *ldsa = op->z.ska;
    if (block_rows) *block_rows = op->cfg.max_m;
    return A2AMM_OK;
}

/* The caller's arguments of a call: 0, or the error (this rank's alone: the caller fails the others). */
static int check_run(const a2amm_op *op, int64_t m, const uint8_t *a, const uint8_t *sa, const uint16_t *out,
                     a2amm_error *err)
{
    int me = comm_rank(op->ctx);
    if (m < 1 || m > op->cfg.max_m)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_run: rank %d: m must be 1 to max_m = %lld (got %lld)", me,
                          (long long)op->cfg.max_m, (long long)m);
    if (!out) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_run: rank %d: out is NULL", me);
    if ((a == NULL) != (sa == NULL))
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_run: rank %d: a and sa must both be given, or both NULL (the "
                          "input written at a2amm_op_input)", me);
    if (!op->rk.b)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_run: rank %d: no weights: call a2amm_op_set_weights (or "
                          "a2amm_op_use_weights) first", me);
    return A2AMM_OK;
}

/* One call, the op and the communicator taken: copy-in, the agreement (a
 * barrier that also checks every rank is in this call of this op with this
 * m), the pipeline into out, a barrier. */
static int run_call(a2amm_op *op, int64_t m, const uint8_t *a, const uint8_t *sa, uint16_t *out, a2amm_error *err)
{
    int rc = check_run(op, m, a, sa, out, err); /* fails every rank: the others are (or will be) in this call */
    if (rc) return api_fail_all(op->ctx, rc, err);
    const int64_t ka = op->z.ka, ska = op->z.ska, mm = op->cfg.max_m;
    /* a_blocks blocks of m rows (alltoall-matmul: one per destination), each at its block of max_m rows */
    for (int64_t j = 0; a && j < op->z.a_blocks; j++) {
        memcpy(op->rk.a + j * mm * ka, a + j * m * ka, (size_t)(m * ka));
        memcpy(op->rk.sa + j * mm * ska, sa + j * m * ska, (size_t)(m * ska));
    }
    op->calls++;
    op->rk.call = op->calls;
    op->rk.ntiles = (m + op->rk.tm - 1) / op->rk.tm;
    op_observe(&op->rk, A2AMM_EVENT_CALL_BEGIN, -1, m, -1, -1, 0, 0);
    comm_set_doing(op->ctx, "a2amm_op_run call %llu on op %lld: waiting for every rank", (unsigned long long)op->calls,
                   (long long)op->id);
    op_observe(&op->rk, A2AMM_EVENT_BARRIER_BEGIN, -1, m, -1, -1, 0, 0);
    int64_t words[COMM_AGREE_WORDS] = {API_OP_RUN, op->id, m};
    rc = api_agree(op->comm, words, op->cfg.timeout_s, "a2amm_op_run", NULL, err);
    op_observe(&op->rk, A2AMM_EVENT_BARRIER_END, -1, m, -1, -1, 0, 0);
    if (!rc) {
        op->shape.M = m;
        op->rk.m = m;
        op->rk.out = out;
        const op_kind_row *kind = op_kind_row_of(op->shape.kind);
        rc = op->opt.unfused ? kind->exec_unfused(&op->rk, err) : kind->exec_fused(&op->rk, op->tiles_done, err);
        op->tiles_done += (uint64_t)op->rk.ntiles;
        op->rk.out = NULL;
    }
    /* nobody reads A or the ring once every rank is past this */
    comm_set_doing(op->ctx, "a2amm_op_run call %llu on op %lld: done, waiting for every rank",
                   (unsigned long long)op->calls, (long long)op->id);
    if (!rc) {
        op_observe(&op->rk, A2AMM_EVENT_BARRIER_BEGIN, -1, m, -1, -1, 0, 0);
        rc = comm_barrier(op->ctx, comm_deadline_after(op->cfg.timeout_s), err);
        op_observe(&op->rk, A2AMM_EVENT_BARRIER_END, -1, m, -1, -1, 0, 0);
    }
    if (rc) return api_fail_all(op->ctx, rc, err);
    op_observe(&op->rk, A2AMM_EVENT_CALL_END, -1, m, -1, -1, 0, 0);
    comm_set_doing(op->ctx, "a2amm_op_run call %llu on op %lld: done", (unsigned long long)op->calls,
                   (long long)op->id);
    return A2AMM_OK;
}

int a2amm_op_run(a2amm_op *op, int64_t m, const uint8_t *a, const uint8_t *sa, uint16_t *out, a2amm_error *err)
{
    a2amm_error own = {0, ""}; /* the reason the others hear, where the caller takes none */
    if (!err) err = &own;
    if (!is_live(op)) return not_live("a2amm_op_run", err);
    /* a second thread on this op, or in another collective call of its communicator, is refused:
     * the call running is left alone */
    int rc = take_op(op, OP_IN_RUN, "a2amm_op_run", err);
    if (rc) return rc;
    rc = api_enter(op->comm, "a2amm_op_run", err);
    if (!rc) {
        rc = run_call(op, m, a, sa, out, err);
        api_leave(op->comm);
    }
    give_op(op);
    return rc;
}

void a2amm_op_destroy(a2amm_op *op)
{
    if (!op || !live_remove(op)) return;
    op->rk.out = NULL;
    op_rank_free(&op->rk);
    comm_heap_release_range(op->ctx, op->heap_mark, op->heap_end); /* in any order: see make_op */
    free(op);
}
