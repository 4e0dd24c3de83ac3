/*
 * The public MoE op (a2amm.h, "Expert parallelism"): made once per
 * communicator, weights set locally, one collective call per step. A call:
 * its checks, the agreement, every rank's row counts to every rank (one
 * allgather: each rank checks every receiver's room, so all fail alike
 * before anything moves), the dispatch of records (api_exchangev), the
 * experts (op/moe.c), the partials back (api_exchangev), the combine.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "common/error.h"
#include "common/pool.h"
#include "op/moe.h"

struct a2amm_moe {
    a2amm_comm *comm;
    comm_ctx *ctx;
    int64_t id; /* its number among the communicator's ops: the same on every rank */
    a2amm_moe_config cfg;
    moe_shape s;
    gemm_isa isa;
    moe_weights w;
    int has_weights;
    pool *workers; /* its compute threads (the calling thread among them) */
    _Atomic int busy; /* a thread is in a call of it */
};

static int check_config(const a2amm_moe_config *c, int R, a2amm_error *err)
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
    if (!bad) return A2AMM_OK;
    return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_moe_create: %s (got experts %d on %d ranks, topk %d, hidden %lld, inter "
                      "%lld, max_tokens %lld, max_recv %lld, timeout_s %g)", bad, c->experts, R, c->topk,
                      (long long)c->hidden, (long long)c->inter, (long long)c->max_tokens, (long long)c->max_recv,
                      c->timeout_s);
}

/* The words of create: every field each rank must pass alike. */
static void create_words(const a2amm_moe *m, int64_t w[COMM_AGREE_WORDS])
{
    const a2amm_moe_config *c = &m->cfg;
    int64_t timeout_bits;
    memcpy(&timeout_bits, &c->timeout_s, sizeof timeout_bits);
    const int64_t args[] = {c->experts, c->topk, c->hidden, c->inter, c->max_tokens, c->max_recv, c->a_type,
                            c->b_type, timeout_bits};
    memset(w, 0, COMM_AGREE_WORDS * sizeof *w);
    w[API_WORD_CALL] = API_MOE_CREATE;
    w[API_WORD_OP] = m->id;
    memcpy(w + API_WORD_ARGS, args, sizeof args);
}

int a2amm_moe_create(a2amm_comm *comm, const a2amm_moe_config *config, a2amm_moe **out, a2amm_error *err)
{
    if (out) *out = NULL;
    if (!comm || !config || !out)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_moe_create: comm, config and moe must not be NULL");
    a2amm_moe *m = calloc(1, sizeof *m);
    if (!m) return a2amm_fail(err, A2AMM_E_NOMEM, "a2amm_moe_create: out of memory");
    int rc = api_read_sized(config, &m->cfg, sizeof m->cfg, sizeof m->cfg, "a2amm_moe_create", "config", err);
    if (rc) {
        free(m);
        return rc;
    }
    rc = api_enter(comm, "a2amm_moe_create", err);
    if (rc) {
        free(m);
        return rc;
    }
    m->comm = comm, m->ctx = comm->ctx, m->id = ++comm->ops_made;
    int R = comm_nranks(m->ctx);
    a2amm_moe_config *c = &m->cfg;
    if (c->timeout_s == 0) c->timeout_s = 60;
    if (c->max_recv == 0) c->max_recv = (int64_t)R * c->max_tokens;
    rc = check_config(c, R, err);
    if (!rc) rc = gemm_isa_select(&m->isa, err);
    int threads = c->threads > 0 ? c->threads : pool_cpu_count() / R > 0 ? pool_cpu_count() / R : 1;
    if (!rc && (c->threads < 0 || c->threads > 1024))
        rc = a2amm_fail(err, A2AMM_E_INVAL, "a2amm_moe_create: threads must be 0 (cores / R) to 1024 (got %d)",
                        c->threads);
    if (!rc) rc = pool_create(threads, &m->workers, err);
    if (rc) api_fail_all(m->ctx, rc, err); /* the others, in this call, stop at once */
    if (!rc) {
        m->s = (moe_shape){R, comm_rank(m->ctx), c->experts, c->experts / R, c->topk, c->hidden, c->inter, c->a_type,
                           c->b_type};
        int64_t words[COMM_AGREE_WORDS];
        create_words(m, words);
        comm_set_doing(m->ctx, "a2amm_moe_create of op %lld: waiting for every rank", (long long)m->id);
        rc = api_agree(comm, words, c->timeout_s, "a2amm_moe_create", NULL, err);
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
    int rc = moe_weights_prepare(&m->s, m->isa, w13, s13, ld13, w2, s2, ld2, &w, err);
    if (!rc) {
        if (m->has_weights) moe_weights_free(&m->s, &m->w);
        m->w = w, m->has_weights = 1;
    }
    atomic_store(&m->busy, 0);
    return rc;
}

/* The call's own arguments, before anything is collective. */
static int check_run(const a2amm_moe *m, int64_t T, const uint8_t *x, const uint8_t *sx, int64_t ldsx,
                     const int32_t *idx, const float *w, const uint16_t *out, a2amm_error *err)
{
    if (!m->has_weights)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_moe_run: rank %d has no weights: a2amm_moe_set_weights first",
                          m->s.me);
    if (T < 0 || T > m->cfg.max_tokens)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_moe_run: rank %d: tokens must be 0 to max_tokens = %lld (got "
                          "%lld)", m->s.me, (long long)m->cfg.max_tokens, (long long)T);
    if (T && (!x || !sx || !idx || !w || !out))
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_moe_run: rank %d: x, sx, topk_idx, topk_w and out must not be "
                          "NULL with %lld tokens", m->s.me, (long long)T);
    if (T && ldsx < m->s.H / 32)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_moe_run: rank %d: ldsx must be at least H/32 = %lld (got %lld)",
                          m->s.me, (long long)(m->s.H / 32), (long long)ldsx);
    return moe_check_routing(&m->s, T, idx, w, err);
}

/* Rows every rank sends every rank (all[i * R + j]: i to j) against each receiver's room: the same verdict
 * on every rank. */
static int check_rooms(const a2amm_moe *m, const int64_t *all, a2amm_error *err)
{
    int R = m->s.R;
    for (int j = 0; j < R; j++) {
        int64_t rows = 0;
        for (int i = 0; i < R; i++) rows += all[(size_t)i * R + j];
        if (rows > m->cfg.max_recv)
            return a2amm_fail(err, A2AMM_E_SIZE, "a2amm_moe_run: rank %d would receive %lld rows (tokens times the "
                              "ranks they go to), over its max_recv = %lld: nothing was computed and no output "
                              "written", j, (long long)rows, (long long)m->cfg.max_recv);
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

/* The call after its checks and agreement (top: the heap's agreed top). */
static int run_call(a2amm_moe *m, int64_t T, const uint8_t *x, const uint8_t *sx, int64_t ldsx, const int32_t *idx,
                    const float *w, uint16_t *out, size_t top, int *alike, a2amm_error *err)
{
    const moe_shape *s = &m->s;
    const int R = s->R, me = s->me;
    const size_t rb = moe_record_bytes(s), pb = (size_t)s->H * 2;
    int64_t *all = malloc(sizeof *all * (size_t)R * (R + 1)), *mine = all ? all + (size_t)R * R : NULL;
    size_t *z = malloc(sizeof *z * (size_t)R * 8);
    uint8_t *send = NULL, *recv = NULL;
    uint16_t *partials = NULL, *back = NULL;
    if (!all || !z) {
        free(all), free(z);
        return a2amm_fail(err, A2AMM_E_NOMEM, "a2amm_moe_run: rank %d: out of memory", me);
    }
    size_t *sb = z, *so = z + R, *rbytes = z + 2 * R, *ro = z + 3 * R, *pbytes = z + 4 * R, *po = z + 5 * R,
           *bbytes = z + 6 * R, *bo = z + 7 * R;
    moe_count(s, T, idx, mine);
    comm_set_doing(m->ctx, "a2amm_moe_run of op %lld: every rank's row counts", (long long)m->id);
    int rc = comm_allgather(m->ctx, mine, all, sizeof *mine * (size_t)R, comm_deadline_after(m->cfg.timeout_s), err);
    if (!rc) *alike = (rc = check_rooms(m, all, err)) != 0; /* every rank's own verdict, the same */
    int64_t sent = 0, got = 0;
    for (int p = 0; !rc && p < R; p++) sent += all[(size_t)me * R + p], got += all[(size_t)p * R + me];
    /* the dispatch: my records to each owner; each source's records to me */
    if (!rc) {
        blocks_of(all + (size_t)me * R, 1, R, rb, sb, so);
        blocks_of(all + me, R, R, rb, rbytes, ro);
        send = malloc(rb * (size_t)(sent ? sent : 1)), recv = malloc(rb * (size_t)(got ? got : 1));
        partials = malloc(pb * (size_t)(got ? got : 1)), back = malloc(pb * (size_t)(sent ? sent : 1));
        if (!send || !recv || !partials || !back)
            rc = a2amm_fail(err, A2AMM_E_NOMEM, "a2amm_moe_run: rank %d: out of memory for %lld rows out and %lld in",
                            me, (long long)sent, (long long)got);
    }
    if (!rc) {
        moe_pack(s, T, x, sx, ldsx, idx, w, send, so);
        const comm_blocks out_blocks = {sb, so}, in_blocks = {rbytes, ro};
        rc = api_exchangev(m->comm, send, &out_blocks, recv, &in_blocks, largest_pair(all, R, rb), top,
                           "a2amm_moe_run: the dispatch", m->cfg.timeout_s, err);
    }
    comm_set_doing(m->ctx, "a2amm_moe_run of op %lld: the experts on %lld rows", (long long)m->id, (long long)got);
    if (!rc) rc = moe_experts(s, &m->w, m->workers, recv, got, partials, err);
    /* the combine: each source's partials back to it, in the order of its records */
    if (!rc) {
        blocks_of(all + me, R, R, pb, pbytes, po);
        blocks_of(all + (size_t)me * R, 1, R, pb, bbytes, bo);
        const comm_blocks out_blocks = {pbytes, po}, in_blocks = {bbytes, bo};
        rc = api_exchangev(m->comm, partials, &out_blocks, back, &in_blocks, largest_pair(all, R, pb), top,
                           "a2amm_moe_run: the combine", m->cfg.timeout_s, err);
    }
    if (!rc) {
        for (int p = 0; p < R; p++) bo[p] /= 2; /* in elements */
        rc = moe_combine(s, T, idx, back, bo, out, err);
    }
    free(all), free(z), free(send), free(recv), free(partials), free(back);
    return rc;
}

int a2amm_moe_run(a2amm_moe *m, int64_t T, const uint8_t *x, const uint8_t *sx, int64_t ldsx, const int32_t *idx,
                  const float *w, uint16_t *out, a2amm_error *err)
{
    if (!m) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_moe_run: moe is NULL");
    int idle = 0;
    if (!atomic_compare_exchange_strong(&m->busy, &idle, 1))
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_moe_run: op %lld is in a call on another thread: the call "
                          "running goes on", (long long)m->id);
    int rc = api_enter(m->comm, "a2amm_moe_run", err);
    if (!rc) {
        rc = check_run(m, T, x, sx, ldsx, idx, w, out, err);
        if (rc) api_fail_all(m->ctx, rc, err); /* the others stop at once */
        int64_t words[COMM_AGREE_WORDS] = {API_MOE_RUN, m->id};
        size_t top = 0;
        comm_set_doing(m->ctx, "a2amm_moe_run of op %lld: waiting for every rank", (long long)m->id);
        if (!rc) rc = api_agree(m->comm, words, m->cfg.timeout_s, "a2amm_moe_run", &top, err);
        if (!rc) {
            int alike = 0; /* refused on every rank alike (rows over a room): the communicator goes on */
            rc = run_call(m, T, x, sx, ldsx, idx, w, out, top, &alike, err);
            if (rc && !alike) api_fail_all(m->ctx, rc, err);
            else comm_set_doing(m->ctx, "a2amm_moe_run of op %lld: done", (long long)m->id);
        }
        api_leave(m->comm);
    }
    atomic_store(&m->busy, 0);
    return rc;
}

void a2amm_moe_destroy(a2amm_moe *m)
{
    if (!m) return;
    if (m->has_weights) moe_weights_free(&m->s, &m->w);
    pool_destroy(m->workers);
    free(m);
}
