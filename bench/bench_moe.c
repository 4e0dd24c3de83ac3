/*
 * `a2amm bench moe R T H I E K`: the MoE op (a2amm_moe_run, expert
 * parallelism) on R ranks of a2amm_launch (or of an MPI job: --transport
 * mpi), T tokens a rank, beside, in the same rounds and on the same data:
 *   experts alone        this rank's experts on the rows a dispatch gave
 *                        them, on the op's threads and kernels (what the op
 *                        would cost if moving rows were free)
 *   (1) gather + reduce-scatter  the way without expert parallelism (vLLM's CPU
 *                        backend): every rank's tokens to every rank, each
 *                        rank's experts on what routes to them, then every
 *                        rank's dense [T, H] partials back to the tokens'
 *                        ranks and summed: the same experts, the same sums
 *                        (the same bits, checked), R times the bytes moved
 *   (2) alltoallv + oneDNN  expert parallelism as users write it without
 *                        a2amm (bench/moe_dnn.h): bf16 rows, oneDNN's bf16
 *                        matmuls per expert
 *   read of the experts  every local expert's fp8 codes read once (a decode
 *                        call's floor: it hits nearly every expert)
 * Each repetition starts after a barrier; its time is the slowest rank's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench/bench.h"
#include "bench/bench_data.h"
#include "cli/args.h"
#include "cli/measure.h"
#include "cli/moe_runner.h"
#include "cli/perf_report.h"
#include "cli/fault.h"
#include "cli/progress.h"
#include "cli/runner.h"
#include "common/error.h"
#include "common/pool.h"
#include "mx/mx.h"
#include "op/moe.h"
#include "bench/moe_dnn.h"
#include "bench/bench_peers.h"

enum { MOE_BENCH_MAX_ITERS = 1000, WAYS = 7 };
enum { WAY_CALL, WAY_UNFUSED, WAY_OVERLAP, WAY_EXPERTS, WAY_GATHER, WAY_DNN, WAY_READ };
static const char *const WAY_NAMES[WAYS] = {"a2amm MoE call (fused schedule)", "a2amm MoE call, unfused schedule",
                                            "a2amm MoE call, overlap schedule", "experts alone (the same rows)", "(1) gather + reduce-scatter",
                                            "(2) alltoallv + oneDNN bf16 experts", "read of the experts' fp8 codes"};

typedef struct moe_bench {
    int R, E, K, iters, threads, skew, mpi, uniform_codes;
    int64_t T, H, I;
    double timeout_s;
    double *t;        /* shared: [way][iteration][rank] */
    int *same;        /* shared: [rank] the baseline gave the op's bits */
    double *dnn_err;  /* shared: [rank] oneDNN's out against the op's: |d|_2 / |out|_2 */
    char *dnn_what;   /* shared: rank 0's description of oneDNN's matmuls */
    uint64_t *sink;   /* shared: [rank] */
    volatile int *rounds; /* shared: [0] rank 0 has prepared (1), [1] the repetitions rank 0 has done */
} moe_bench;

static void moe_bench_usage(FILE *f)
{
    fprintf(f,
            "usage: a2amm bench moe R T H I E K [options]\n"
            "\n"
            "Times the MoE op (expert parallelism: each token to the ranks of its top-K\n"
            "experts, SwiGLU experts, the weighted results back) on R ranks, T tokens a rank,\n"
            "hidden H, inner I, E experts (E/R a rank), random MXFP8 data, beside the same\n"
            "experts alone and what users run today: (1) every token to every rank and the\n"
            "results reduce-scattered back (vLLM's CPU backend; the same bits, checked), and\n"
            "(2) counts by AllToAll, each (token, expert) row in bf16 to the expert's rank,\n"
            "oneDNN's bf16 matmuls per expert, results back (the uneven AllToAlls are the\n"
            "communicator's: MPI messages over MPI); and a read of the experts' fp8 codes.\n"
            "Each repetition's time is the slowest rank's. The op runs on each schedule: fused\n"
            "(the default: overlap where each local expert gets 256 rows a chunk, else one pass),\n"
            "unfused, and overlap (two chunks of each rank's tokens, one's exchanges while the\n"
            "other's experts run, every hit expert's weights read once a chunk).\n"
            "\n"
            "options:\n"
            "  --iters N          repetitions (default 5)\n"
            "  --threads T        compute threads a rank, 1 to 1024 (default: cores / R)\n"
            "  --skew             route most tokens to the first experts (default: uniform)\n"
            "  --uniform-codes    weights and x as fp8 codes 0..63 drawn uniformly, zeros and\n"
            "                     subnormals in nearly every block (the small-M widening's\n"
            "                     exact path); default: floats uniform in [-1, 1] MX-quantized,\n"
            "                     as real weights, nearly no such code\n"
            "  --timeout SECONDS  deadline of every wait between ranks (default 60); a rank that shows\n"
            "                     no sign of life for 1.5 times it (and a second) fails the run\n"
            "  --transport shm|mpi  shm: R ranks forked here (default); mpi: this process is one rank\n"
            "                     of an MPI job, the exchanges (the baselines' too) MPI messages:\n"
            "                       mpirun --allow-run-as-root --oversubscribe -np R \\\n"
            "                         a2amm bench moe R T H I E K --transport mpi\n"
            "  --quiet            no progress on stderr (see Time)\n"
            "\n"
            "Time: each rank makes its data and prepares the op on its three schedules and the\n"
            "baselines, then runs --iters rounds of the 7 ways; it grows with T x K x H x I\n"
            "(the experts' work) and E x H x I (the weights): 10 to 20 s at either example's\n"
            "shape on a 2-core machine, most of it the preparation. Progress goes to stderr\n"
            "(over shm): the preparation, then the repetitions done and about how long is left\n"
            "(on a terminal a line rewritten in place, else a line every few seconds); --quiet:\n"
            "none.\n"
            "\n"
            "examples:\n"
            "  a2amm bench moe 2 16 2048 1408 64 6      (DeepSeek-V2-Lite, decode)\n"
            "  a2amm bench moe 2 256 2048 1408 64 6 --iters 3   (prefill)\n");
}

static uint64_t next(uint64_t *s)
{
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

static void fill(uint8_t *p, size_t n, uint8_t lo, uint8_t spread, uint64_t *s)
{
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(lo + next(s) % spread);
}

/* One rank's data: its tokens and routing, its experts' weights. */
typedef struct rank_data {
    int64_t T;
    uint8_t *x, *sx, *w13, *s13, *w2, *s2;
    int32_t *idx;
    float *w;
} rank_data;

static void rank_data_free(rank_data *d)
{
    free(d->x), free(d->sx), free(d->w13), free(d->s13), free(d->w2), free(d->s2), free(d->idx), free(d->w);
}

static int rank_data_make(const moe_bench *b, int r, rank_data *d)
{
    const int64_t H = b->H, I = b->I, T = b->T, local = b->E / b->R;
    const size_t n13 = (size_t)(local * 2 * I * H), n2 = (size_t)(local * H * I);
    uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(r + 1);
    d->T = T;
    d->x = malloc((size_t)(T * H) + 1), d->sx = malloc((size_t)(T * H / 32) + 1);
    d->w13 = malloc(n13), d->s13 = malloc(n13 / 32), d->w2 = malloc(n2), d->s2 = malloc(n2 / 32);
    d->idx = malloc(sizeof *d->idx * (size_t)(T * b->K) + 4), d->w = malloc(sizeof *d->w * (size_t)(T * b->K) + 4);
    if (!d->x || !d->sx || !d->w13 || !d->s13 || !d->w2 || !d->s2 || !d->idx || !d->w) return -1;
    if (b->uniform_codes) { /* codes 0..63 (zeros and subnormals among them): the widening's exact path */
        fill(d->w13, n13, 0, 0x40, &s), fill(d->s13, n13 / 32, 122, 3, &s), fill(d->w2, n2, 0, 0x40, &s);
        fill(d->s2, n2 / 32, 121, 3, &s), fill(d->x, (size_t)(T * H), 0, 0x40, &s);
        fill(d->sx, (size_t)(T * H / 32), 126, 3, &s);
    } else {
        a2amm_error err = {0, ""};
        if (bench_uniform_mx(&s, local * 2 * I, H, d->w13, d->s13, &err) ||
            bench_uniform_mx(&s, local * H, I, d->w2, d->s2, &err) || bench_uniform_mx(&s, T, H, d->x, d->sx, &err))
            return -1;
    }
    for (int64_t t = 0; t < T; t++)
        for (int j = 0; j < b->K; j++) {
            int32_t e;
            int fresh;
            do { /* skewed: half the draws from the first 2K experts */
                uint64_t v = next(&s);
                e = (int32_t)(b->skew && (v >> 40) % 2 ? v % (uint64_t)(2 * b->K < b->E ? 2 * b->K : b->E)
                                                       : v % (uint64_t)b->E);
                fresh = 1;
                for (int i = 0; i < j; i++) fresh &= d->idx[t * b->K + i] != e;
            } while (!fresh);
            d->idx[t * b->K + j] = e, d->w[t * b->K + j] = 1.0f / (float)b->K;
        }
    return 0;
}

/* The experts of this rank over the pool: tasks of local experts, each on its rows (codes, scales, n). */
typedef struct experts_task {
    const moe_shape *s;
    const moe_weights *w;
    const uint8_t **codes, **scales;
    const int64_t *n;
    float **y; /* [local]: n[le] rows of H */
    int failed;
} experts_task;

static void expert_fn(void *arg, int le)
{
    experts_task *e = arg;
    if (!e->n[le]) return;
    float **ys = malloc(sizeof *ys * (size_t)e->n[le]);
    if (!ys) {
        e->failed = 1;
        return;
    }
    for (int64_t i = 0; i < e->n[le]; i++) ys[i] = e->y[le] + i * e->s->H;
    if (moe_expert_rows(e->s, e->w, le, e->codes[le], e->scales[le], e->n[le], ys)) e->failed = 1;
    free(ys);
}

/* The gather + reduce-scatter baseline: every rank's tokens (codes, scales, ids, weights) to every rank;
 * this rank's records of them (the tokens with an expert here, in source then token order), the experts,
 * the partials; each source's tokens' partials as a dense [T, H] bf16 block (zeros where none) back to it;
 * out = bf16 of the fp32 sum of the R blocks in rank order. */
typedef struct baseline {
    const moe_bench *b;
    const moe_shape *s;
    const moe_weights *w;
    pool *workers;
    size_t per_token, room; /* bytes of a token in the gather, of a rank's tokens at most */
    uint8_t *gathered, *records, *pack;
    uint16_t *dense, *back, *partials;
    float *y;
    size_t *z; /* 7 R sizes */
} baseline;

static int baseline_run(a2amm_comm *comm, baseline *bl, const rank_data *d, uint16_t *out, a2amm_error *err)
{
    const moe_bench *b = bl->b;
    const moe_shape *s = bl->s;
    const int R = b->R, me = s->me, k = b->K;
    const int64_t H = b->H, sw = H / 32;
    size_t *sb = bl->z, *so = sb + R, *room = so + R, *ro = room + R, *got = ro + R, *db = got + R, *dof = db + R;
    /* one block of this rank's tokens, sent to every rank: ids, weights, codes, scales (aligned in that
     * order) */
    uint8_t *mine = bl->pack;
    memcpy(mine, d->idx, sizeof *d->idx * (size_t)(d->T * k));
    memcpy(mine + 4 * d->T * k, d->w, sizeof *d->w * (size_t)(d->T * k));
    memcpy(mine + 8 * d->T * k, d->x, (size_t)(d->T * H));
    memcpy(mine + 8 * d->T * k + d->T * H, d->sx, (size_t)(d->T * sw));
    for (int p = 0; p < R; p++) sb[p] = (size_t)d->T * bl->per_token, so[p] = 0, room[p] = bl->room, ro[p] = p * bl->room;
    int rc = a2amm_comm_alltoallv(comm, mine, sb, so, bl->gathered, room, ro, got, b->timeout_s, err);
    if (rc) return rc;
    /* this rank's records of every source's tokens */
    const size_t rb = moe_record_bytes(s);
    int64_t nrec = 0, counts[256], src_first[257];
    size_t first[256];
    for (int q = 0; q < R; q++) {
        const int64_t Tq = (int64_t)(got[q] / bl->per_token);
        const uint8_t *blk = bl->gathered + ro[q], *x = blk + 8 * Tq * k;
        const int32_t *idx = (const int32_t *)blk;
        moe_count(s, Tq, idx, counts);
        size_t at = 0;
        for (int o = 0; o < R; o++) first[o] = at, at += (size_t)counts[o] * rb;
        moe_pack(s, Tq, x, x + Tq * H, sw, idx, (const float *)(blk + 4 * Tq * k), bl->pack, first);
        memcpy(bl->records + (size_t)nrec * rb, bl->pack + first[me], (size_t)counts[me] * rb);
        src_first[q] = nrec;
        nrec += counts[me];
    }
    src_first[R] = nrec;
    moe_groups g;
    rc = moe_group(s, bl->records, nrec, &g, err);
    if (!rc) rc = moe_experts(s, bl->w, bl->workers, bl->records, &g, bl->y, NULL, err);
    const float **rows = malloc(sizeof *rows * (size_t)(g.pairs + 1));
    if (!rc && !rows) rc = a2amm_fail(err, A2AMM_E_NOMEM, "out of memory");
    for (int64_t p = 0; !rc && p < g.pairs; p++) rows[p] = bl->y + p * H;
    if (!rc) moe_partials(s, bl->records, &g, rows, bl->partials, bl->workers);
    free(rows);
    moe_groups_free(&g);
    if (rc) return rc;
    /* dense blocks back: source q's tokens, zeros where none of its slots is here */
    size_t at = 0;
    for (int q = 0; q < R; q++) {
        const int64_t Tq = (int64_t)(got[q] / bl->per_token);
        db[q] = (size_t)Tq * (size_t)H * 2, dof[q] = at;
        memset((uint8_t *)bl->dense + at, 0, db[q]);
        for (int64_t r = src_first[q]; r < src_first[q + 1]; r++) {
            const int32_t token = moe_record_token(s, bl->records, r);
            memcpy((uint8_t *)bl->dense + at + (size_t)token * (size_t)H * 2, bl->partials + r * H, (size_t)H * 2);
        }
        at += db[q];
    }
    size_t back_room = (size_t)b->T * (size_t)H * 2;
    for (int p = 0; p < R; p++) room[p] = back_room, ro[p] = (size_t)p * back_room;
    rc = a2amm_comm_alltoallv(comm, bl->dense, db, dof, bl->back, room, ro, got, b->timeout_s, err);
    for (int64_t t = 0; !rc && t < d->T; t++)
        for (int64_t c = 0; c < H; c++) {
            float acc = 0.0f;
            for (int p = 0; p < R; p++) acc += mx_bf16_to_f32(bl->back[(size_t)p * (back_room / 2) + t * H + c]);
            out[t * H + c] = mx_f32_to_bf16(acc);
        }
    return rc;
}

static int bench_rank(a2amm_comm *comm, void *arg)
{
    moe_bench *b = arg;
    const int r = a2amm_comm_rank(comm), R = b->R, local = b->E / b->R;
    fault_pause("bench-prepare", r);
    const int64_t H = b->H, I = b->I, T = b->T, sw = H / 32;
    a2amm_error err = {0, ""};
    rank_data d = {0};
    a2amm_moe_config cfg = A2AMM_MOE_CONFIG_INIT;
    cfg.experts = b->E, cfg.topk = b->K, cfg.hidden = H, cfg.inter = I, cfg.max_tokens = T ? T : 1;
    cfg.threads = b->threads, cfg.timeout_s = b->timeout_s;
    a2amm_moe *m = NULL;
    moe_shape s = {R, r, b->E, local, b->K, H, I, A2AMM_E4M3, A2AMM_E4M3};
    moe_weights w = {0};
    pool *workers = NULL;
    gemm_isa isa;
    baseline bl = {b, &s, &w, NULL, (size_t)(H + sw + 8 * b->K), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    bl.room = (bl.per_token * (size_t)cfg.max_tokens + 7) & ~(size_t)7;
    const size_t rb = moe_record_bytes(&s), max_rec = (size_t)R * (size_t)cfg.max_tokens;
    uint16_t *out = malloc(sizeof *out * (size_t)(T * H) + 2), *out_base = malloc(sizeof *out_base * (size_t)(T * H) + 2);
    float **ys = calloc((size_t)local, sizeof *ys);
    bl.gathered = malloc(bl.room * (size_t)R), bl.records = malloc(rb * max_rec + 1);
    bl.pack = malloc(rb * (size_t)cfg.max_tokens * (size_t)R + bl.room + 1);
    bl.dense = malloc((size_t)R * (size_t)cfg.max_tokens * (size_t)H * 2);
    bl.back = malloc((size_t)R * (size_t)cfg.max_tokens * (size_t)H * 2);
    bl.partials = malloc(max_rec * (size_t)H * 2), bl.y = malloc(max_rec * (size_t)b->K * (size_t)H * sizeof(float));
    bl.z = malloc(sizeof *bl.z * (size_t)R * 7);
    int rc = rank_data_make(b, r, &d);
    if (rc || !out || !out_base || !ys || !bl.gathered || !bl.records || !bl.pack || !bl.dense || !bl.back ||
        !bl.partials || !bl.y || !bl.z || R > 256)
        rc = a2amm_fail(&err, A2AMM_E_NOMEM, "rank %d: out of memory", r);
    /* the op, and the same experts prepared for the bench's own use of them */
    a2amm_moe *m_unfused = NULL, *m_overlap = NULL;
    a2amm_moe_config cfg_unfused = cfg, cfg_overlap = cfg;
    cfg_unfused.schedule = A2AMM_SCHEDULE_UNFUSED, cfg_overlap.schedule = A2AMM_SCHEDULE_OVERLAP;
    if (!rc) rc = a2amm_moe_create(comm, &cfg, &m, &err);
    if (!rc) rc = a2amm_moe_set_weights(m, d.w13, d.s13, sw, d.w2, d.s2, I / 32, &err);
    if (!rc) rc = a2amm_moe_create(comm, &cfg_unfused, &m_unfused, &err);
    if (!rc) rc = a2amm_moe_set_weights(m_unfused, d.w13, d.s13, sw, d.w2, d.s2, I / 32, &err);
    if (!rc) rc = a2amm_moe_create(comm, &cfg_overlap, &m_overlap, &err);
    if (!rc) rc = a2amm_moe_set_weights(m_overlap, d.w13, d.s13, sw, d.w2, d.s2, I / 32, &err);
    if (!rc) rc = gemm_isa_select(&isa, &err);
    if (!rc) rc = moe_weights_prepare(&s, isa, (int64_t)max_rec, d.w13, d.s13, sw, d.w2, d.s2, I / 32, &w, &err);
    if (!rc) rc = pool_create(b->threads > 0 ? b->threads : (pool_cpu_count() / R > 0 ? pool_cpu_count() / R : 1),
                              &workers, &err);
    bl.workers = workers;
    if (!rc) rc = a2amm_moe_run(m, T, d.x, d.sx, sw, d.idx, d.w, out, &err); /* warm-up, and the op's bits */
    if (!rc) rc = baseline_run(comm, &bl, &d, out_base, &err);
    b->same[r] = !rc && !memcmp(out, out_base, sizeof *out * (size_t)(T * H));
    moe_dnn *dnn = NULL;
    moe_dnn_shape ds = {R, b->E, b->K, T, H, I, cfg.max_tokens, A2AMM_E4M3, A2AMM_E4M3, cfg.threads ? cfg.threads : 1,
                        b->timeout_s};
    if (!b->threads) ds.threads = pool_cpu_count() / R > 0 ? pool_cpu_count() / R : 1;
    moe_dnn_inputs din = {d.x, d.sx, d.w13, d.s13, d.w2, d.s2, d.idx, d.w};
    if (!rc) rc = moe_dnn_create(comm, &ds, &din, &dnn, &err);
    if (!rc) rc = moe_dnn_run(dnn, out_base, &err);
    if (r == 0) b->rounds[0] = 1; /* prepared: the repetitions begin */
    if (!rc) {
        double dd = 0, oo = 0;
        for (int64_t i = 0; i < T * H; i++) {
            double x = mx_bf16_to_f32(out[i]), y = mx_bf16_to_f32(out_base[i]);
            dd += (x - y) * (x - y), oo += x * x;
        }
        b->dnn_err[r] = oo > 0 ? sqrt(dd / oo) : sqrt(dd);
        if (r == 0) snprintf(b->dnn_what, 200, "%s", moe_dnn_what(dnn));
        moe_dnn_idle(dnn);
    }
    for (int it = 0; !rc && it < b->iters; it++) {
        double *t = b->t + (size_t)it * R + r, t0;
        const size_t way = (size_t)b->iters * R;
        rc = a2amm_comm_barrier(comm, b->timeout_s, &err);
        t0 = cli_now();
        if (!rc) rc = a2amm_moe_run(m, T, d.x, d.sx, sw, d.idx, d.w, out, &err);
        t[WAY_CALL * way] = cli_now() - t0;
        if (!rc) rc = a2amm_comm_barrier(comm, b->timeout_s, &err);
        t0 = cli_now();
        if (!rc) rc = a2amm_moe_run(m_unfused, T, d.x, d.sx, sw, d.idx, d.w, out_base, &err);
        t[WAY_UNFUSED * way] = cli_now() - t0;
        if (!rc && memcmp(out, out_base, sizeof *out * (size_t)(T * H))) b->same[r] = 0; /* the two schedules' bits */
        if (!rc) rc = a2amm_comm_barrier(comm, b->timeout_s, &err);
        t0 = cli_now();
        if (!rc) rc = a2amm_moe_run(m_overlap, T, d.x, d.sx, sw, d.idx, d.w, out_base, &err);
        t[WAY_OVERLAP * way] = cli_now() - t0;
        if (!rc && memcmp(out, out_base, sizeof *out * (size_t)(T * H))) b->same[r] = 0;
        /* the experts alone, on the rows a dispatch gives them (then combined, to end the batch) */
        a2amm_moe_batch *batch = NULL;
        if (!rc) rc = a2amm_moe_dispatch(m, T, d.x, d.sx, sw, d.idx, d.w, &batch, &err);
        const uint8_t *codes[1024], *scales[1024];
        int64_t n[1024];
        for (int le = 0; !rc && le < local && le < 1024; le++) {
            rc = a2amm_moe_batch_rows(batch, le, &n[le], &codes[le], &scales[le], &err);
            free(ys[le]);
            ys[le] = malloc(sizeof **ys * (size_t)((n[le] ? n[le] : 1) * H));
            if (!rc && !ys[le]) rc = a2amm_fail(&err, A2AMM_E_NOMEM, "rank %d: out of memory", r);
        }
        if (!rc) rc = a2amm_comm_barrier(comm, b->timeout_s, &err);
        t0 = cli_now();
        experts_task task = {&s, &w, codes, scales, n, ys, 0};
        if (!rc) pool_run(workers, expert_fn, &task, local);
        t[WAY_EXPERTS * way] = cli_now() - t0;
        if (!rc && task.failed) rc = a2amm_fail(&err, A2AMM_E_NOMEM, "rank %d: out of memory", r);
        if (!rc) rc = a2amm_moe_combine(m, batch, (const float *const *)ys, out, &err);
        a2amm_moe_batch_destroy(batch);
        if (!rc) rc = a2amm_comm_barrier(comm, b->timeout_s, &err);
        t0 = cli_now();
        if (!rc) rc = baseline_run(comm, &bl, &d, out_base, &err);
        t[WAY_GATHER * way] = cli_now() - t0;
        if (!rc) rc = a2amm_comm_barrier(comm, b->timeout_s, &err);
        t0 = cli_now();
        if (!rc) rc = moe_dnn_run(dnn, out_base, &err);
        t[WAY_DNN * way] = cli_now() - t0;
        if (!rc) moe_dnn_idle(dnn);
        if (!rc) rc = a2amm_comm_barrier(comm, b->timeout_s, &err);
        t0 = cli_now();
        uint64_t sum = 0;
        const uint64_t *q13 = (const uint64_t *)d.w13, *q2 = (const uint64_t *)d.w2;
        for (size_t i = 0; i < (size_t)(local * 2 * I * H) / 8; i++) sum += q13[i];
        for (size_t i = 0; i < (size_t)(local * H * I) / 8; i++) sum += q2[i];
        t[WAY_READ * way] = cli_now() - t0;
        b->sink[r] += sum;
        if (r == 0) b->rounds[1] = it + 1;
    }
    if (rc) fprintf(stderr, "a2amm bench moe: rank %d: %s\n", r, err.msg);
    a2amm_moe_destroy(m);
    a2amm_moe_destroy(m_unfused);
    a2amm_moe_destroy(m_overlap);
    moe_dnn_free(dnn);
    moe_weights_free(&s, &w);
    pool_destroy(workers);
    for (int le = 0; le < local; le++) free(ys[le]);
    free(ys), free(out), free(out_base), free(bl.gathered), free(bl.records), free(bl.pack), free(bl.dense);
    free(bl.back), free(bl.partials), free(bl.y), free(bl.z);
    rank_data_free(&d);
    return rc;
}

/* --transport mpi: this process is one rank of the MPI job (mpirun -np R ...); every rank's figures to every
 * rank's copy after, then MPI ends. */
static int run_on_mpi(moe_bench *b, a2amm_error *err)
{
    if (!run_under_mpirun())
        return a2amm_fail(err, A2AMM_E_INVAL, "--transport mpi: this process is not part of an MPI job; launch every "
                          "rank with mpirun:\n  mpirun --allow-run-as-root --oversubscribe -np %d "
                          "a2amm bench moe %d %lld %lld %lld %d %d --transport mpi", b->R, b->R, (long long)b->T, (long long)b->H, (long long)b->I,
                          b->E, b->K);
    int rank = 0;
    a2amm_comm *comm = NULL;
    int rc = run_mpi_call(b->R, moe_run_heap_bytes(b->R, b->T, b->H, b->K), bench_rank, b, &rank, &comm, err);
    double *flags = malloc(sizeof *flags * (size_t)b->R);
    if (!rc && !flags) rc = a2amm_fail(err, A2AMM_E_NOMEM, "out of memory");
    if (!rc) rc = run_mpi_share(comm, b->t, (size_t)WAYS * (size_t)b->iters * (size_t)b->R, b->timeout_s, err);
    if (!rc) rc = run_mpi_share(comm, b->dnn_err, (size_t)b->R, b->timeout_s, err);
    for (int r = 0; !rc && r < b->R; r++) flags[r] = b->same[r];
    if (!rc) rc = run_mpi_share(comm, flags, (size_t)b->R, b->timeout_s, err);
    for (int r = 0; !rc && r < b->R; r++) b->same[r] = flags[r] != 0;
    free(flags);
    if (comm) a2amm_comm_barrier(comm, b->timeout_s, NULL);
    a2amm_comm_destroy(comm);
    run_mpi_finalize();
    return rc;
}

/* The progress of the ranks' work, from rank 0's marks in the shared memory. */
static void poll_progress(void *arg, cli_progress *p)
{
    const moe_bench *b = arg;
    if (!b->rounds[0])
        cli_progress_say(p, "a2amm bench moe: preparing %d ranks' data, the op and the baselines", b->R);
    else
        cli_progress_count(p, "a2amm bench moe: repetition", b->rounds[1], b->rounds[1], b->iters);
}

int cmd_bench_moe(int argc, char **argv)
{
    moe_bench b = {.iters = 5, .timeout_s = 60};
    char *pos[6];
    int npos = 0, quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        int64_t x;
        double f;
        if (cli_is_help(argv[i])) {
            moe_bench_usage(stdout);
            return 0;
        }
        if ((m = cli_option(argc, argv, &i, "--iters", &v))) {
            if (m < 0 || cli_parse_i64("bench moe", "--iters", v, 1, MOE_BENCH_MAX_ITERS, &x)) return 2;
            b.iters = (int)x;
        } else if ((m = cli_option(argc, argv, &i, "--threads", &v))) {
            if (m < 0 || cli_parse_i64("bench moe", "--threads", v, 1, 1024, &x)) return 2;
            b.threads = (int)x;
        } else if ((m = cli_option(argc, argv, &i, "--timeout", &v))) {
            if (m < 0 || cli_parse_double("bench moe", "--timeout", v, 0.001, 86400, &f)) return 2;
            b.timeout_s = f;
        } else if (!strcmp(argv[i], "--skew")) {
            b.skew = 1;
        } else if (!strcmp(argv[i], "--uniform-codes")) {
            b.uniform_codes = 1;
        } else if (!strcmp(argv[i], "--quiet")) {
            quiet = 1;
        } else if ((m = cli_option(argc, argv, &i, "--transport", &v))) {
            if (m < 0) return 2;
            if (strcmp(v, "shm") && strcmp(v, "mpi")) {
                fprintf(stderr, "a2amm bench moe: --transport must be shm or mpi, got '%s'\n", v);
                return 2;
            }
            b.mpi = !strcmp(v, "mpi");
        } else if (argv[i][0] == '-' && argv[i][1] && !(argv[i][1] >= '0' && argv[i][1] <= '9')) {
            fprintf(stderr, "a2amm bench moe: unknown option '%s' (see a2amm bench moe --help)\n", argv[i]);
            return 2;
        } else if (npos < 6) {
            pos[npos++] = argv[i];
        } else {
            fprintf(stderr, "a2amm bench moe: too many arguments at '%s' (expected R T H I E K)\n", argv[i]);
            return 2;
        }
    }
    if (npos != 6) {
        fprintf(stderr, "a2amm bench moe: expected R T H I E K, got %d of them\n", npos);
        moe_bench_usage(stderr);
        return 2;
    }
    int64_t v[6];
    static const char *const names[6] = {"R", "T", "H", "I", "E", "K"};
    static const int64_t lo[6] = {1, 1, 32, 32, 1, 1}, hi[6] = {256, 1 << 20, 1 << 20, 1 << 20, 1 << 16, 32};
    for (int i = 0; i < 6; i++)
        if (cli_parse_i64("bench moe", names[i], pos[i], lo[i], hi[i], &v[i])) return 2;
    b.R = (int)v[0], b.T = v[1], b.H = v[2], b.I = v[3], b.E = (int)v[4], b.K = (int)v[5];
    const char *broken = b.H % 32 || b.I % 32 ? "H and I must be multiples of 32"
                         : b.E % b.R          ? "E must be a multiple of R"
                         : b.E / b.R > 1024   ? "E must be at most 1024 a rank"
                         : b.K > b.E          ? "K (experts a token) must be at most E"
                                              : NULL;
    if (broken) {
        fprintf(stderr, "a2amm bench moe: %s (got H=%lld I=%lld E=%d R=%d K=%d)\n", broken, (long long)b.H,
                (long long)b.I, b.E, b.R, b.K);
        return 2;
    }
    size_t tbytes = sizeof(double) * (size_t)WAYS * (size_t)b.iters * (size_t)b.R;
    size_t shared = tbytes + sizeof(int) * (size_t)b.R + sizeof(uint64_t) * (size_t)b.R + sizeof(double) * (size_t)b.R + 200 +
                    2 * sizeof(int);
    uint8_t *mem = mmap(NULL, shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        perror("a2amm bench moe: mmap");
        return 1;
    }
    memset(mem, 0, shared);
    b.t = (double *)mem, b.sink = (uint64_t *)(mem + tbytes), b.dnn_err = (double *)(mem + tbytes + 8 * (size_t)b.R);
    b.same = (int *)(mem + tbytes + 16 * (size_t)b.R), b.dnn_what = (char *)(mem + tbytes + 20 * (size_t)b.R);
    b.rounds = (volatile int *)(mem + tbytes + 20 * (size_t)b.R + 200);
    bench_onednn_cap_isa(); /* oneDNN as on a CPU without what A2AMM_CPU_HIDE hides */
    a2amm_error err = {0, ""};
    int rc;
    if (b.mpi) {
        rc = run_on_mpi(&b, &err);
        if (!rc && run_mpi_rank() > 0) { /* rank 0 reports */
            munmap(mem, shared);
            return 0;
        }
    } else {
        /* a rank that stops showing signs of life (a hang of its own, outside every wait) fails the launch */
        a2amm_launch_options lo_opt = {.size = sizeof lo_opt, .heap_bytes = moe_run_heap_bytes(b.R, b.T, b.H, b.K),
                                       .stall_s = b.timeout_s * 1.5 + 1.0};
        cli_watch watch = {0};
        if (!quiet) cli_watch_start(&watch, poll_progress, &b);
        rc = a2amm_launch(b.R, bench_rank, &b, &lo_opt, &err);
        cli_watch_stop(&watch);
    }
    if (rc) {
        fprintf(stderr, "a2amm bench moe: %s\n", err.msg);
        munmap(mem, shared);
        return 1;
    }
    cli_summary sum[WAYS];
    double *slowest = malloc(sizeof *slowest * (size_t)b.iters);
    for (int wy = 0; slowest && wy < WAYS; wy++) {
        for (int it = 0; it < b.iters; it++) {
            slowest[it] = 0;
            for (int r = 0; r < b.R; r++)
                slowest[it] = fmax(slowest[it], b.t[((size_t)wy * b.iters + it) * b.R + r]);
        }
        sum[wy] = cli_summarize(slowest, b.iters);
    }
    int same = 1, dnn_ok = 0;
    for (int r = 0; r < b.R; r++) same &= b.same[r];
    const char *kernel = "?";
    a2amm_kernel(&kernel, NULL);
    printf("a2amm bench moe: R=%d T=%lld a rank, H=%lld I=%lld E=%d top-%d, %s routing, %d repetitions (%s, kernel "
           "%s)\n", b.R, (long long)b.T, (long long)b.H, (long long)b.I, b.E, b.K, b.skew ? "skewed" : "uniform",
           b.iters, a2amm_version(), kernel);
    printf("  %-46s %10s %10s %10s %12s\n", "", "min ms", "median ms", "max ms", "tokens/s");
    int busy = 0;
    for (int wy = 0; slowest && wy < WAYS; wy++) {
        int wide = cli_spread_wide(sum[wy].min, sum[wy].max);
        busy |= wide;
        printf("  %-46s %10.3f %10.3f %10.3f %12.0f%s\n", WAY_NAMES[wy], sum[wy].min * 1e3, sum[wy].median * 1e3,
               sum[wy].max * 1e3, wy == WAY_READ ? 0.0 : (double)(b.T * b.R) / sum[wy].median, wide ? "  wide" : "");
    }
    if (busy)
        printf("  a busy machine: a spread (max - min) over 10%% of the max (wide) means other work took the cores\n"
               "  during these repetitions; ratios of medians within the spread say little (compare with care)\n");
    if (slowest) {
        printf("  call / experts alone %.3f; unfused / fused %.3f; overlap / experts alone %.3f; (1) / call %.3f; (2) / "
               "call %.3f; call / read %.3f (medians)\n", sum[WAY_CALL].median / sum[WAY_EXPERTS].median,
               sum[WAY_UNFUSED].median / sum[WAY_CALL].median, sum[WAY_OVERLAP].median / sum[WAY_EXPERTS].median,
               sum[WAY_GATHER].median / sum[WAY_CALL].median, sum[WAY_DNN].median / sum[WAY_CALL].median,
               sum[WAY_CALL].median / sum[WAY_READ].median);
        printf("  (1), the unfused and the overlap schedules give the fused call's bits on every rank: %s\n",
               same ? "yes" : "NO");
        double worst = 0;
        for (int r = 0; r < b.R; r++) worst = fmax(worst, b.dnn_err[r]);
        printf("  (2) runs %s; its out against the op's: %.2e (|difference|_2 / |out|_2, worst rank: bf16 "
               "roundings of g, u and y)\n", b.dnn_what, worst);
        dnn_ok = worst < 0.05;
    }
    free(slowest);
    munmap(mem, shared);
    if (!dnn_ok) fprintf(stderr, "a2amm bench moe: baseline (2) does not agree with the op (over 5%%): a bug\n");
    return same && dnn_ok ? 0 : 1;
}
