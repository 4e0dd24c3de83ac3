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
#include "op/rank.h"

/* What every rank publishes at create, compared with every peer's. */
enum { CFG_MAX_M, CFG_K, CFG_N, CFG_A_TYPE, CFG_B_TYPE, CFG_TILE_M, CFG_DEPTH, CFG_PATH, CFG_SCHEDULE, CFG_WORDS };
static const char *const CFG_NAMES[CFG_WORDS] = {"max_m", "k", "n", "a_type", "b_type", "tile_m", "depth", "path",
                                                 "schedule"};

struct a2amm_op {
    comm_ctx *ctx;
    a2amm_op_config cfg;
    a2amm_shape shape; /* M is the current call's m */
    a2amm_sizes z;     /* of the largest shape */
    op_options opt;
    op_rank rk;
    gemm_isa isa;
    uint64_t tiles_done, calls; /* tiles of every call so far: the next call's first global tile */
    int64_t *cfg_sym; /* [CFG_WORDS] then this call's m */
    size_t heap_mark, heap_end; /* its symmetric memory: [heap_mark, heap_end) */
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

/* ---- the config ----------------------------------------------------------- */

/* The config with its defaults filled in. */
static a2amm_op_config with_defaults(const a2amm_op_config *c)
{
    a2amm_op_config d = *c;
    if (d.tile_m == 0) d.tile_m = 512;
    if (d.depth == 0) d.depth = 4;
    if (d.timeout_s == 0) d.timeout_s = 60;
    return d;
}

static int check_config(const a2amm_op_config *c, int R, a2amm_shape *shape, a2amm_sizes *z, a2amm_error *err)
{
    if (c->max_m < 1) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_create: max_m must be at least 1 (got %lld)", (long long)c->max_m);
    if ((c->a_type != A2AMM_E4M3 && c->a_type != A2AMM_E5M2) || (c->b_type != A2AMM_E4M3 && c->b_type != A2AMM_E5M2))
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_create: a_type and b_type must be A2AMM_E4M3 or A2AMM_E5M2");
    if (c->tile_m < 1) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_create: tile_m must be 0 (512) or positive");
    if (c->depth < 1 || c->depth > 1024) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_create: depth must be 0 (4) or 1 to 1024");
    if (c->threads < 0 || c->threads > 1024)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_create: threads must be 0 (automatic) to 1024 (got %d)", c->threads);
    if (c->path != A2AMM_PATH_DIRECT && c->path != A2AMM_PATH_PUT)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_create: path must be A2AMM_PATH_DIRECT or A2AMM_PATH_PUT");
    if (!(c->timeout_s > 0)) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_create: timeout_s must be 0 (60) or positive");
    if (c->schedule != A2AMM_SCHEDULE_FUSED && c->schedule != A2AMM_SCHEDULE_UNFUSED)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_create: schedule must be A2AMM_SCHEDULE_FUSED or "
                          "A2AMM_SCHEDULE_UNFUSED");
    *shape = (a2amm_shape){c->max_m, c->k, c->n, R, c->a_type, c->b_type};
    a2amm_error why = {0, ""};
    int rc = a2amm_shape_check(shape, z, &why);
    if (rc) return a2amm_fail(err, rc, "a2amm_op_create: %s", why.msg);
    return A2AMM_OK;
}

static op_options options_of(const a2amm_op_config *c)
{
    return (op_options){.tile_m = c->tile_m, .depth = c->depth, .threads = c->threads,
                        .path = c->path == A2AMM_PATH_PUT ? OP_PATH_PUT : OP_PATH_DIRECT,
                        .unfused = c->schedule == A2AMM_SCHEDULE_UNFUSED, .timeout_s = c->timeout_s};
}

/* The symmetric regions an op of these options needs: the ring (fused put path), xbuf (unfused). */
static int needs_ring(const op_options *o) { return o->path == OP_PATH_PUT && !o->unfused; }

size_t a2amm_op_heap_bytes(const a2amm_op_config *config, int nranks)
{
    if (!config || nranks < 1) return 0;
    a2amm_op_config c = with_defaults(config);
    a2amm_shape s;
    a2amm_sizes z;
    if (check_config(&c, nranks, &s, &z, NULL)) return 0;
    op_options o = options_of(&c);
    return op_rank_heap_bytes(&s, &z, &o, needs_ring(&o), o.unfused) + (CFG_WORDS + 1) * 8 + 128;
}

/* The error of a failed collective step, reported to every rank once. */
static int fail_all(a2amm_op *op, int rc, const a2amm_error *err)
{
    if (rc == A2AMM_E_PEER || comm_check_peers(op->ctx, NULL) != A2AMM_OK) return rc;
    return comm_fail(op->ctx, rc, "%s", err ? err->msg : a2amm_strerror(rc));
}

/* Every peer's published words [0, n) equal mine: 0, or the first difference (failing the communicator). */
static int compare_with_peers(a2amm_op *op, int n, const char *call, a2amm_error *err)
{
    int me = comm_rank(op->ctx), R = comm_nranks(op->ctx);
    int64_t *all = NULL;
    if (comm_msg(op->ctx)) { /* no peer memory: the words travel by allgather */
        if (!(all = malloc((size_t)R * (CFG_WORDS + 1) * sizeof *all)))
            return fail_all(op, a2amm_fail(err, A2AMM_E_NOMEM, "%s: out of memory", call), err);
        int64_t mine[CFG_WORDS + 1] = {0};
        memcpy(mine, op->cfg_sym, (size_t)n * sizeof *mine);
        int rc = comm_allgather(op->ctx, mine, all, sizeof mine, comm_deadline_after(op->cfg.timeout_s), err);
        if (rc) {
            free(all);
            return fail_all(op, rc, err);
        }
    }
    for (int p = 0; p < R; p++) {
        if (p == me) continue;
        const int64_t *theirs = all ? all + (size_t)p * (CFG_WORDS + 1) : comm_ptr(op->ctx, op->cfg_sym, p);
        int64_t w[CFG_WORDS + 1];
        if (theirs) memcpy(w, theirs, (size_t)n * sizeof *w);
        else if (comm_get(op->ctx, w, op->cfg_sym, (size_t)n * sizeof *w, p, err)) {
            free(all);
            return err ? err->code : A2AMM_E_SYS;
        }
        for (int i = 0; i < n; i++)
            if (w[i] != op->cfg_sym[i]) {
                /* a peer that failed may have released its heap (zeroed) before we read it */
                if (comm_check_peers(op->ctx, err) != A2AMM_OK) {
                    free(all);
                    return A2AMM_E_PEER;
                }
                const char *what = i < CFG_WORDS ? CFG_NAMES[i] : "m";
                int rc = a2amm_fail(err, A2AMM_E_INVAL, "%s: rank %d has %s = %lld, rank %d has %lld: every rank "
                                    "must pass the same", call, me, what, (long long)op->cfg_sym[i], p, (long long)w[i]);
                free(all);
                return fail_all(op, rc, err);
            }
    }
    free(all);
    return A2AMM_OK;
}

int a2amm_op_create(a2amm_comm *comm, const a2amm_op_config *config, a2amm_op **out, a2amm_error *err)
{
    if (out) *out = NULL;
    if (!comm || !config || !out)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_create: comm, config and op must not be NULL");
    a2amm_op *op = calloc(1, sizeof *op);
    if (!op) return a2amm_fail(err, A2AMM_E_NOMEM, "a2amm_op_create: out of memory");
    op->ctx = comm->ctx;
    op->cfg = with_defaults(config);
    int R = comm_nranks(op->ctx), me = comm_rank(op->ctx);
    int rc = check_config(&op->cfg, R, &op->shape, &op->z, err);
    if (!rc) rc = gemm_isa_select(&op->isa, err);
    if (rc) { /* a bad config on one rank must not leave the others waiting */
        fail_all(op, rc, err);
        free(op);
        return rc;
    }
    op->opt = options_of(&op->cfg);
    if (op->opt.threads == 0) op->opt.threads = pool_cpu_count() / R > 0 ? pool_cpu_count() / R : 1;
    op->heap_mark = comm_heap_mark(op->ctx);
    op->rk = (op_rank){.s = &op->shape, .z = &op->z, .opt = &op->opt, .ctx = op->ctx, .me = me, .R = R,
                       .m = op->cfg.max_m, .m_max = op->cfg.max_m};
    op->rk.tm = op->cfg.tile_m < op->cfg.max_m ? op->cfg.tile_m : op->cfg.max_m;
    rc = comm_alloc(op->ctx, (CFG_WORDS + 1) * sizeof(int64_t), 64, (void **)&op->cfg_sym, err);
    if (!rc) rc = op_rank_alloc(&op->rk, needs_ring(&op->opt), op->opt.unfused, err);
    if (!rc) rc = pool_create(op->opt.threads, &op->rk.pool, err);
    if (!rc) {
        free(op->rk.out); /* the caller's buffer is the output */
        op->rk.out = NULL;
        const int64_t words[CFG_WORDS] = {op->cfg.max_m, op->cfg.k, op->cfg.n, op->cfg.a_type,
                                          op->cfg.b_type, op->cfg.tile_m, op->cfg.depth, op->cfg.path,
                                          op->cfg.schedule};
        memcpy(op->cfg_sym, words, sizeof words);
        comm_set_doing(op->ctx, "a2amm_op_create: waiting for every rank");
        rc = comm_barrier(op->ctx, comm_deadline_after(op->cfg.timeout_s), err);
    }
    if (!rc) rc = compare_with_peers(op, CFG_WORDS, "a2amm_op_create", err);
    if (!rc) rc = comm_barrier(op->ctx, comm_deadline_after(op->cfg.timeout_s), err); /* all compared: words reusable */
    if (rc) {
        fail_all(op, rc, err);
        op_rank_free(&op->rk);
        comm_heap_release(op->ctx, op->heap_mark);
        free(op);
        return rc;
    }
    op->heap_end = comm_heap_mark(op->ctx);
    live_add(op);
    *out = op;
    return A2AMM_OK;
}

int a2amm_op_set_weights(a2amm_op *op, const uint8_t *b, const uint8_t *sb, int64_t ldsb, a2amm_error *err)
{
    if (!is_live(op)) return not_live("a2amm_op_set_weights", err);
    if (!b || !sb) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_set_weights: b and sb must not be NULL");
    if (ldsb < op->cfg.k / 32)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_set_weights: ldsb must be at least k/32 = %lld (got %lld)",
                          (long long)(op->cfg.k / 32), (long long)ldsb);
    gemm_b *nb = NULL;
    int rc = gemm_b_prepare_on(op->rk.pool, op->isa, b, sb, op->cfg.n, op->cfg.k, ldsb, op->cfg.b_type, &nb, err);
    if (rc) return rc;
    gemm_b_free(op->rk.owned_b);
    op->rk.owned_b = nb;
    op->rk.b = nb;
    return A2AMM_OK;
}

int a2amm_op_use_weights(a2amm_op *op, const a2amm_weights *w, a2amm_error *err)
{
    if (!is_live(op)) return not_live("a2amm_op_use_weights", err);
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

int a2amm_op_set_observer(a2amm_op *op, a2amm_observer_fn fn, void *arg)
{
    if (!is_live(op)) return not_live("a2amm_op_set_observer", NULL);
    op->rk.observer = fn;
    op->rk.observer_arg = fn ? arg : NULL;
    return A2AMM_OK;
}

int a2amm_op_input(a2amm_op *op, uint8_t **a, uint8_t **sa, int64_t *lda, int64_t *ldsa, int64_t *block_rows)
{
    if (!is_live(op)) return not_live("a2amm_op_input", NULL);
    if (a) *a = op->rk.a;
    if (sa) *sa = op->rk.sa;
    if (lda) *lda = op->z.ka;
    if (ldsa) *ldsa = op->z.ska;
    if (block_rows) *block_rows = op->cfg.max_m;
    return A2AMM_OK;
}

int a2amm_op_run(a2amm_op *op, int64_t m, const uint8_t *a, const uint8_t *sa, uint16_t *out, a2amm_error *err)
{
    if (!is_live(op)) return not_live("a2amm_op_run", err);
    /* argument errors fail every rank: the others are (or will be) waiting in this call */
    int rc = A2AMM_OK;
    if (m < 1 || m > op->cfg.max_m)
        rc = a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_run: rank %d: m must be 1 to max_m = %lld (got %lld)",
                        comm_rank(op->ctx), (long long)op->cfg.max_m, (long long)m);
    else if (!out) rc = a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_run: rank %d: out is NULL", comm_rank(op->ctx));
    else if ((a == NULL) != (sa == NULL))
        rc = a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_run: rank %d: a and sa must both be given, or both NULL "
                        "(the input written at a2amm_op_input)", comm_rank(op->ctx));
    else if (!op->rk.b)
        rc = a2amm_fail(err, A2AMM_E_INVAL, "a2amm_op_run: rank %d: no weights: call a2amm_op_set_weights (or "
                        "a2amm_op_use_weights) first",
                        comm_rank(op->ctx));
    if (rc) return fail_all(op, rc, err);
    const int64_t ka = op->z.ka, ska = op->z.ska, R = op->shape.R, mm = op->cfg.max_m;
    for (int64_t j = 0; a && j < R; j++) {
        memcpy(op->rk.a + j * mm * ka, a + j * m * ka, (size_t)(m * ka));
        memcpy(op->rk.sa + j * mm * ska, sa + j * m * ska, (size_t)(m * ska));
    }
    op->calls++;
    op->cfg_sym[CFG_WORDS] = m;
    op->rk.call = op->calls;
    op->rk.ntiles = (m + op->rk.tm - 1) / op->rk.tm;
    op_observe(&op->rk, A2AMM_EVENT_CALL_BEGIN, -1, m, -1, -1, 0, 0);
    comm_set_doing(op->ctx, "a2amm_op_run call %llu: waiting for every rank", (unsigned long long)op->calls);
    op_observe(&op->rk, A2AMM_EVENT_BARRIER_BEGIN, -1, m, -1, -1, 0, 0);
    rc = comm_barrier(op->ctx, comm_deadline_after(op->cfg.timeout_s), err);
    op_observe(&op->rk, A2AMM_EVENT_BARRIER_END, -1, m, -1, -1, 0, 0);
    if (!rc) rc = compare_with_peers(op, CFG_WORDS + 1, "a2amm_op_run", err); /* the same m everywhere */
    if (!rc) {
        op->shape.M = m;
        op->rk.m = m;
        op->rk.out = out;
        if (op->opt.unfused) rc = op_exec_unfused(&op->rk, err);
        else rc = op_exec_fused(&op->rk, op->tiles_done, err);
        op->tiles_done += (uint64_t)op->rk.ntiles;
        op->rk.out = NULL;
    }
    /* nobody reads A, the ring or m once every rank is past this */
    comm_set_doing(op->ctx, "a2amm_op_run call %llu: done, waiting for every rank", (unsigned long long)op->calls);
    if (!rc) {
        op_observe(&op->rk, A2AMM_EVENT_BARRIER_BEGIN, -1, m, -1, -1, 0, 0);
        rc = comm_barrier(op->ctx, comm_deadline_after(op->cfg.timeout_s), err);
        op_observe(&op->rk, A2AMM_EVENT_BARRIER_END, -1, m, -1, -1, 0, 0);
    }
    if (!rc) op_observe(&op->rk, A2AMM_EVENT_CALL_END, -1, m, -1, -1, 0, 0);
    return rc ? fail_all(op, rc, err) : A2AMM_OK;
}

void a2amm_op_destroy(a2amm_op *op)
{
    if (!op || !live_remove(op)) return;
    op->rk.out = NULL;
    op_rank_free(&op->rk);
    comm_heap_release_range(op->ctx, op->heap_mark, op->heap_end); /* ops may be destroyed in any order */
    free(op);
}
