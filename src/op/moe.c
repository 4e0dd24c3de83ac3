/* The MoE op's rank-local steps (see moe.h). */
#include "op/moe.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "common/hugemem.h"
#include "common/scratch.h"
#include "mx/expf.h"
#include "mx/mx.h"
#include "op/swiglu.h"

/* A record: int32 token, int32 slots here (n), n x {int32 local expert, float weight}, then k - n unused
 * entries, the token's H codes and H/32 scales, padding to 8 bytes. */
enum { REC_HEAD = 8, REC_SLOT = 8 };

size_t moe_record_bytes(const moe_shape *s)
{
    size_t b = REC_HEAD + (size_t)REC_SLOT * (size_t)s->k + (size_t)s->H + (size_t)(s->H / 32);
    return (b + 7) & ~(size_t)7;
}

static int owner_of(const moe_shape *s, int32_t e) { return e / s->local; }

int moe_check_routing(const moe_shape *s, int64_t T, const int32_t *idx, const float *w, a2amm_error *err)
{
    for (int64_t t = 0; t < T; t++)
        for (int j = 0; j < s->k; j++) {
            int32_t e = idx[t * s->k + j];
            if (e == -1) continue;
            if (e < 0 || e >= s->E)
                return a2amm_fail(err, A2AMM_E_INVAL, "rank %d: token %lld, slot %d: expert %d is out of range: "
                                  "expected 0 .. %d, or -1 for an unused slot", s->me, (long long)t, j, (int)e,
                                  s->E - 1);
            for (int i = 0; i < j; i++)
                if (idx[t * s->k + i] == e)
                    return a2amm_fail(err, A2AMM_E_INVAL, "rank %d: token %lld, slot %d: expert %d is already in "
                                      "slot %d: an expert at most once a token", s->me, (long long)t, j, (int)e, i);
            float v = w[t * s->k + j];
            if (!isfinite(v))
                return a2amm_fail(err, A2AMM_E_INVAL, "rank %d: token %lld, slot %d: the weight of expert %d is %g: "
                                  "expected a finite number", s->me, (long long)t, j, (int)e, (double)v);
        }
    return A2AMM_OK;
}

/* Whether token t (its k ids at ids) has a slot owned by o. */
static int has_owner(const moe_shape *s, const int32_t *ids, int o)
{
    for (int j = 0; j < s->k; j++)
        if (ids[j] >= 0 && owner_of(s, ids[j]) == o) return 1;
    return 0;
}

void moe_count(const moe_shape *s, int64_t T, const int32_t *idx, int64_t *counts)
{
    for (int o = 0; o < s->R; o++) counts[o] = 0;
    for (int64_t t = 0; t < T; t++)
        for (int o = 0; o < s->R; o++) counts[o] += has_owner(s, idx + t * s->k, o);
}

void moe_pack(const moe_shape *s, int64_t T, const uint8_t *x, const uint8_t *sx, int64_t ldsx, const int32_t *idx,
              const float *w, uint8_t *send, const size_t *first)
{
    const size_t rb = moe_record_bytes(s), sw = (size_t)(s->H / 32);
    for (int o = 0; o < s->R; o++) {
        uint8_t *rec = send + first[o];
        for (int64_t t = 0; t < T; t++) {
            const int32_t *ids = idx + t * s->k;
            if (!has_owner(s, ids, o)) continue;
            memset(rec, 0, rb);
            int32_t token = (int32_t)t, n = 0;
            for (int j = 0; j < s->k; j++) {
                if (ids[j] < 0 || owner_of(s, ids[j]) != o) continue;
                int32_t le = ids[j] - o * s->local;
                memcpy(rec + REC_HEAD + (size_t)n * REC_SLOT, &le, 4);
                memcpy(rec + REC_HEAD + (size_t)n * REC_SLOT + 4, &w[t * s->k + j], 4);
                n++;
            }
            memcpy(rec, &token, 4);
            memcpy(rec + 4, &n, 4);
            uint8_t *codes = rec + REC_HEAD + (size_t)REC_SLOT * (size_t)s->k;
            memcpy(codes, x + t * s->H, (size_t)s->H);
            memcpy(codes + s->H, sx + t * ldsx, sw);
            rec += rb;
        }
    }
}

int moe_weights_prepare(const moe_shape *s, gemm_isa isa, int64_t max_rows, const uint8_t *w13, const uint8_t *s13,
                        int64_t ld13, const uint8_t *w2, const uint8_t *s2, int64_t ld2, moe_weights *out,
                        a2amm_error *err)
{
    memset(out, 0, sizeof *out);
    const int64_t H = s->H, I = s->I;
    const size_t down_bytes = moe_down_bytes(H, I);
    out->w13 = calloc((size_t)s->local, sizeof *out->w13);
    /* read whole on every call: on 2 MB pages (the experts' W1/W3 are, in gemm_b) the stream meets a
     * TLB miss and a stop of the hardware prefetcher every 2 MB rather than every 4 KB */
    out->w2 = hugemem_alloc(down_bytes * (size_t)s->local);
    out->down = moe_down_for(isa);
    int rc = out->w13 && out->w2
                 ? A2AMM_OK
                 : a2amm_fail(err, A2AMM_E_NOMEM, "rank %d: out of memory for %d experts' weights", s->me, s->local);
    for (int le = 0; !rc && le < s->local; le++)
        rc = gemm_b_prepare_for(NULL, isa, w13 + (size_t)le * (size_t)(2 * I * H),
                                s13 + (size_t)le * (size_t)(2 * I * ld13), 2 * I, H, ld13, s->b_type, max_rows,
                                &out->w13[le], err);
    if (!rc) {
        for (int le = 0; le < s->local; le++)
            moe_down_pack(H, I, s->b_type, w2 + (size_t)le * (size_t)(H * I), I, s2 + (size_t)le * (size_t)(H * ld2), ld2,
                          out->w2 + (size_t)le * down_bytes);
    } else {
        moe_weights_free(s, out);
    }
    return rc;
}

void moe_weights_free(const moe_shape *s, moe_weights *w)
{
    for (int le = 0; w->w13 && le < s->local; le++) gemm_b_free(w->w13[le]);
    free(w->w13), free(w->w2);
    memset(w, 0, sizeof *w);
}

/* A received record's parts. */
typedef struct record_view {
    int32_t n;                    /* its slots here */
    const uint8_t *slots, *codes; /* n x {local expert, weight}; H codes, then H/32 scales */
} record_view;

int32_t moe_record_token(const moe_shape *s, const uint8_t *recs, int64_t r)
{
    int32_t token;
    memcpy(&token, recs + (size_t)r * moe_record_bytes(s), 4); /* a record starts with its token */
    return token;
}

static record_view record_at(const moe_shape *s, const uint8_t *recv, int64_t r)
{
    const uint8_t *rec = recv + (size_t)r * moe_record_bytes(s);
    record_view v = {0, rec + REC_HEAD, rec + REC_HEAD + (size_t)REC_SLOT * (size_t)s->k};
    memcpy(&v.n, rec + 4, 4);
    return v;
}

static int32_t slot_expert(const record_view *v, int i)
{
    int32_t le;
    memcpy(&le, v->slots + (size_t)i * REC_SLOT, 4);
    return le;
}

static float slot_weight(const record_view *v, int i)
{
    float w;
    memcpy(&w, v->slots + (size_t)i * REC_SLOT + 4, 4);
    return w;
}

int moe_group(const moe_shape *s, const uint8_t *recv, int64_t nrec, moe_groups *g, a2amm_error *err)
{
    memset(g, 0, sizeof *g);
    g->nrec = nrec;
    for (int64_t r = 0; r < nrec; r++) g->pairs += record_at(s, recv, r).n;
    g->first = calloc((size_t)nrec + 1, sizeof *g->first), g->start = calloc((size_t)s->local + 1, sizeof *g->start);
    g->rec = malloc(sizeof *g->rec * (size_t)(g->pairs + 1)), g->pair = malloc(sizeof *g->pair * (size_t)(g->pairs + 1));
    int64_t *fill = calloc((size_t)s->local, sizeof *fill);
    if (!g->first || !g->start || !g->rec || !g->pair || !fill) {
        free(fill);
        moe_groups_free(g);
        return a2amm_fail(err, A2AMM_E_NOMEM, "rank %d: out of memory for the experts of %lld rows", s->me,
                          (long long)nrec);
    }
    for (int64_t r = 0; r < nrec; r++) {
        record_view v = record_at(s, recv, r);
        g->first[r + 1] = g->first[r] + v.n;
        for (int i = 0; i < v.n; i++) g->start[slot_expert(&v, i) + 1]++;
    }
    for (int le = 0; le < s->local; le++) g->start[le + 1] += g->start[le];
    for (int64_t r = 0; r < nrec; r++) {
        record_view v = record_at(s, recv, r);
        for (int i = 0; i < v.n; i++) {
            int32_t le = slot_expert(&v, i);
            int64_t at = g->start[le] + fill[le]++;
            g->rec[at] = r, g->pair[at] = g->first[r] + i;
        }
    }
    free(fill);
    return A2AMM_OK;
}

void moe_groups_free(moe_groups *g)
{
    free(g->first), free(g->start), free(g->rec), free(g->pair);
    memset(g, 0, sizeof *g);
}

void moe_gather_rows(const moe_shape *s, const uint8_t *recv, const moe_groups *g, int le, uint8_t *codes,
                     uint8_t *scales)
{
    const int64_t H = s->H, sw = H / 32;
    for (int64_t i = 0; i < g->start[le + 1] - g->start[le]; i++) {
        record_view v = record_at(s, recv, g->rec[g->start[le] + i]);
        memcpy(codes + i * H, v.codes, (size_t)H);
        memcpy(scales + i * sw, v.codes + H, (size_t)sw);
    }
}

/* The experts' work of one call: tasks of a pool, one an expert (each with scratch of its own: the same
 * bits on any thread). */
typedef struct experts_job {
    const moe_shape *s;
    const moe_weights *w;
    const uint8_t *recv;
    const moe_groups *g;
    float *y;           /* [pairs, H] */
    _Atomic int failed; /* a task ran out of memory */
    moe_expert_span *spans; /* [local], or NULL */
} experts_job;

int moe_expert_rows(const moe_shape *s, const moe_weights *w, int le, const uint8_t *codes, const uint8_t *scales,
                    int64_t n, float *const *ys)
{
    const int64_t H = s->H, I = s->I;
    if (n == 0) return 0;
    /* g, u and a in the thread's scratch (kept between calls: fresh mappings cost their page faults) */
    const size_t c_bytes = sizeof(float) * (size_t)(n * 2 * I);
    float *c = scratch_get(SCRATCH_MOE_EXPERT, c_bytes + sizeof(float) * (size_t)(n * I));
    float *act = c ? c + n * 2 * I : NULL;
    int ok = c != NULL;
    if (ok) {
        gemm_a_slab slab = {codes, scales, H, H / 32, s->a_type};
        gemm_multiply(w->w13[le], &slab, n, 0, H, 0, 2 * I, c, 2 * I);
        for (int64_t i = 0; i < n; i++) swiglu_row_f32(c + i * 2 * I, c + i * 2 * I + I, I, act + i * I);
        ok = w->down(H, I, s->b_type, act, n, w->w2 + (size_t)le * moe_down_bytes(H, I), ys) == 0;
    }
    return ok ? 0 : -1;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One expert on its rows, gathered from the records, into the rows of its pairs. */
static void expert_task(void *arg, int le)
{
    experts_job *j = arg;
    const moe_shape *s = j->s;
    const int64_t n = j->g->start[le + 1] - j->g->start[le], H = s->H, sw = H / 32;
    if (j->spans) j->spans[le] = (moe_expert_span){now_ns(), 0, pool_thread_index(), n};
    if (n == 0) return;
    /* the expert's rows, their scales and their ys, in the thread's scratch (kept between calls) */
    const size_t xa_bytes = (size_t)(n * H + 63) / 64 * 64, xs_bytes = (size_t)(n * sw + 63) / 64 * 64;
    char *mem = scratch_get(SCRATCH_MOE_ROWS, xa_bytes + xs_bytes + sizeof(float *) * (size_t)n);
    int ok = mem != NULL;
    if (ok) {
        uint8_t *xa = (uint8_t *)mem, *xs = xa + xa_bytes;
        float **ys = (float **)(xs + xs_bytes);
        moe_gather_rows(s, j->recv, j->g, le, xa, xs);
        for (int64_t i = 0; i < n; i++) ys[i] = j->y + j->g->pair[j->g->start[le] + i] * H;
        ok = moe_expert_rows(s, j->w, le, xa, xs, n, ys) == 0;
    }
    if (!ok) atomic_store(&j->failed, 1);
    if (j->spans) j->spans[le].t1_ns = now_ns();
}

int moe_experts(const moe_shape *s, const moe_weights *w, pool *workers, const uint8_t *recv, const moe_groups *g,
                float *y, moe_expert_span *spans, a2amm_error *err)
{
    experts_job job = {s, w, recv, g, y, 0, spans};
    pool_run(workers, expert_task, &job, s->local);
    return atomic_load(&job.failed) ? a2amm_fail(err, A2AMM_E_NOMEM, "rank %d: out of memory for an expert's rows",
                                                 s->me)
                                    : A2AMM_OK;
}

/* Columns a partial or a combine sums at once on the stack (its fp32 sums, then one bf16 rounding of them). */
enum { SUM_COLS = 1024 };

/* Rows a task of the partials or the combine takes at least: fewer cost more to hand out than to sum. */
enum { SUM_TASK_ROWS = 16 };

/* The tasks for n rows over a pool: a few a thread (their sizes differ with the rows' slots), each at least
 * SUM_TASK_ROWS rows; 1 without a pool. */
static int sum_tasks(const pool *workers, int64_t n)
{
    int64_t tasks = workers ? 4 * (int64_t)pool_threads(workers) : 1, most = (n + SUM_TASK_ROWS - 1) / SUM_TASK_ROWS;
    if (tasks > most) tasks = most;
    return tasks > 1 ? (int)tasks : 1;
}

typedef struct partials_job {
    const moe_shape *s;
    const uint8_t *recv;
    const moe_groups *g;
    const float *const *y;
    uint16_t *partials;
    int tasks;
} partials_job;

/* Records [r0, r1) of the partials: each row's alone, so any split gives the same bits. */
static void partials_rows(const partials_job *j, int64_t r0, int64_t r1)
{
    const moe_shape *s = j->s;
    const moe_groups *g = j->g;
    const float *const *y = j->y;
    const int64_t H = s->H;
    float acc[SUM_COLS];
    for (int64_t r = r0; r < r1; r++) { /* its slots' w * y summed in slot order in fp32, rounded once */
        record_view v = record_at(s, j->recv, r);
        for (int64_t c0 = 0; c0 < H; c0 += SUM_COLS) {
            const int64_t n = H - c0 < SUM_COLS ? H - c0 : SUM_COLS;
            for (int64_t col = 0; col < n; col++) acc[col] = 0.0f;
            for (int i = 0; i < v.n; i++) { /* each column's sum in slot order: a slot at a time over the row */
                const float w = slot_weight(&v, i), *yi = y[g->first[r] + i] + c0;
                for (int64_t col = 0; col < n; col++) acc[col] += w * yi[col];
            }
            gemm_store_bf16(acc, n, 1, 0, n, j->partials + r * H + c0, n);
        }
    }
}

static void partials_task(void *arg, int task)
{
    const partials_job *j = arg;
    const int64_t n = j->g->nrec;
    partials_rows(j, n * task / j->tasks, n * (task + 1) / j->tasks);
}

void moe_partials(const moe_shape *s, const uint8_t *recv, const moe_groups *g, const float *const *y,
                  uint16_t *partials, pool *workers)
{
    partials_job j = {s, recv, g, y, partials, sum_tasks(workers, g->nrec)};
    if (j.tasks > 1) pool_run(workers, partials_task, &j, j.tasks);
    else partials_rows(&j, 0, g->nrec);
}

/* bf16 bits to their float (exact). */
static inline float bf16_value(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

typedef struct combine_job {
    const moe_shape *s;
    int64_t T;
    const int32_t *idx;
    const uint16_t *partials;
    uint16_t *out;
    int tasks;
    size_t *next; /* [tasks][R]: where each task's first token's partial from each owner starts */
} combine_job;

/* Tokens [t0, t1) of the combine, next[o] at their first partial from owner o: each token's sum alone. */
static void combine_tokens(const combine_job *j, int64_t t0, int64_t t1, size_t *next)
{
    const moe_shape *s = j->s;
    const int32_t *idx = j->idx;
    const uint16_t *partials = j->partials;
    uint16_t *out = j->out;
    const int64_t H = s->H;
    float acc[SUM_COLS];
    for (int64_t t = t0; t < t1; t++) {
        const int32_t *ids = idx + t * s->k;
        for (int64_t c0 = 0; c0 < H; c0 += SUM_COLS) {
            const int64_t n = H - c0 < SUM_COLS ? H - c0 : SUM_COLS;
            for (int64_t col = 0; col < n; col++) acc[col] = 0.0f;
            for (int o = 0; o < s->R; o++) { /* owners in rank order */
                if (!has_owner(s, ids, o)) continue;
                const uint16_t *p = partials + next[o] + c0;
                for (int64_t col = 0; col < n; col++) acc[col] += bf16_value(p[col]);
            }
            gemm_store_bf16(acc, n, 1, 0, n, out + t * H + c0, n);
        }
        for (int o = 0; o < s->R; o++)
            if (has_owner(s, ids, o)) next[o] += (size_t)H;
    }
}

static void combine_task(void *arg, int task)
{
    const combine_job *j = arg;
    combine_tokens(j, j->T * task / j->tasks, j->T * (task + 1) / j->tasks, j->next + (size_t)task * (size_t)j->s->R);
}

int moe_combine(const moe_shape *s, int64_t T, const int32_t *idx, const uint16_t *partials, const size_t *first,
                uint16_t *out, pool *workers, a2amm_error *err)
{
    combine_job j = {s, T, idx, partials, out, sum_tasks(workers, T), NULL};
    const size_t R = (size_t)s->R;
    j.next = malloc(sizeof *j.next * R * (size_t)j.tasks);
    if (!j.next) return a2amm_fail(err, A2AMM_E_NOMEM, "rank %d: out of memory for the combine", s->me);
    /* each task's starts: the owners' partials of the tokens before it, counted in one pass */
    for (size_t o = 0; o < R; o++) j.next[o] = first[o];
    for (int task = 1; task < j.tasks; task++) {
        size_t *at = j.next + (size_t)task * R;
        memcpy(at, at - R, sizeof *at * R);
        for (int64_t t = T * (task - 1) / j.tasks; t < T * task / j.tasks; t++)
            for (int o = 0; o < s->R; o++)
                if (has_owner(s, idx + t * s->k, o)) at[o] += (size_t)s->H;
    }
    if (j.tasks > 1) pool_run(workers, combine_task, &j, j.tasks);
    else combine_tokens(&j, 0, T, j.next);
    free(j.next);
    return A2AMM_OK;
}
