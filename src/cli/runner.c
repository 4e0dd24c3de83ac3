/*
 * run_files: the operator over the seed's files through the public API.
 * The launcher side checks, launches and settles the outputs; each rank
 * loads, prepares and runs once or times the perf variants.
 */
#include "cli/runner.h"

#include <cblas.h>
#include <pthread.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "a2amm_mpi.h"
#include "cli/args.h"
#include "cli/fault.h"
#include "cli/progress.h"
#include "cli/measure.h"
#include "cli/run_trace.h"
#include "cli/trace.h"
#include "common/error.h"
#include "common/pool.h"
#include "io/io.h"

static const char *const INPUT_NAMES[4] = {"input_a.bin", "input_scaleA.bin", "input_b.bin", "input_scaleB.bin"};

typedef struct runner {
    const char *dir;
    a2amm_shape s;
    a2amm_sizes z;
    run_options o;
    int threads;   /* per rank, resolved */
    char tag[32];  /* outputs are staged as npu_out.bin.tmp.<tag>, committed as a set */
    double *times; /* shared with the ranks: [RUN_VARIANTS][iters][R], prepare [R], then
                      the breakdown [RUN_BD_FIELDS + R][R] (see breakdown_slot) */
    char *baseline_what; /* shared, after the times: how rank 0 ran the baseline */
    trace_rank *trace;   /* this process's rank's spans and sums (each rank its own copy) */
} runner;

/* perf mode's per-rank breakdown of a fused call, in the shared times after
 * the preparations: call, matmul, waits, sends, barriers, then waits by source */
enum { RUN_BD_CALL, RUN_BD_MATMUL, RUN_BD_WAIT, RUN_BD_SEND, RUN_BD_BARRIER, RUN_BD_FIELDS };

static double *breakdown_slot(const runner *rn, int field, int r)
{
    size_t base = ((size_t)RUN_VARIANTS * (size_t)rn->o.iters + 1) * (size_t)rn->s.R;
    return &rn->times[base + (size_t)field * (size_t)rn->s.R + (size_t)r];
}

#define BASELINE_WHAT_CHARS sizeof(((run_perf *)0)->baseline_what)

static double *time_slot(const runner *rn, int v, int it, int r)
{
    return &rn->times[((size_t)v * (size_t)rn->o.iters + (size_t)it) * (size_t)rn->s.R + (size_t)r];
}

static a2amm_op_config config_of(const runner *rn, int unfused)
{
    return (a2amm_op_config){.max_m = rn->s.M, .k = rn->s.K, .n = rn->s.N, .a_type = rn->s.a_type,
                             .b_type = rn->s.b_type, .tile_m = rn->o.tile_m, .depth = rn->o.depth,
                             .threads = rn->threads, .path = rn->o.path, .timeout_s = rn->o.timeout_s,
                             .schedule = unfused ? A2AMM_SCHEDULE_UNFUSED : A2AMM_SCHEDULE_FUSED};
}

/* ---- one rank ------------------------------------------------------------ */

typedef struct rank_state {
    a2amm_comm *comm;
    const runner *rn;
    int me, R;
    a2amm_op *op;      /* the configured op */
    a2amm_op *op_u;    /* perf: the unfused op (op itself when that is what was asked) */
    a2amm_weights *w;  /* prepared once, used by every op and the matmul alone */
    uint16_t *out;     /* [M, N] */
    uint8_t *b, *sb;   /* the weights as read, until prepared */
    /* perf: the matmul alone, on the rows the AllToAll brings: [M, K] and [M, K/32] */
    uint8_t *xa, *xsa;
    /* perf: received blocks [R][M*ka], [R][M*ska] (the AllToAll alone, the baseline) */
    uint8_t *ra, *rsa;
    /* perf baseline: its matmul, and where A [M, K] goes dequantized */
    const run_baseline_gemm *gemm;
    void *gemm_ctx;
    float *bl_x;
    fault_plan fault;
} rank_state;

static void rank_state_free(rank_state *st)
{
    if (st->op_u != st->op) a2amm_op_destroy(st->op_u);
    a2amm_op_destroy(st->op);
    a2amm_weights_destroy(st->w);
    free(st->out), free(st->b), free(st->sb), free(st->xa), free(st->xsa), free(st->ra), free(st->rsa);
    if (st->gemm_ctx) st->gemm->destroy(st->gemm_ctx);
}

/* Reads this rank's files: A and its scales straight into the op's input, B and its scales aside. */
static int load_inputs(rank_state *st, a2amm_error *err)
{
    const a2amm_sizes *z = &st->rn->z;
    uint8_t *a = NULL, *sa = NULL;
    a2amm_op_input(st->op, &a, &sa, NULL, NULL, NULL);
    st->b = malloc(z->b_bytes);
    st->sb = malloc(z->sb_bytes);
    st->out = malloc(z->out_bytes);
    if (!st->b || !st->sb || !st->out)
        return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate %.1f MB for B and the output",
                          (double)(z->b_bytes + z->sb_bytes + z->out_bytes) / 1e6);
    uint8_t *dst[4] = {a, sa, st->b, st->sb};
    size_t bytes[4] = {z->a_bytes, z->sa_bytes, z->b_bytes, z->sb_bytes};
    for (int i = 0; i < 4; i++) {
        char path[IO_PATH_MAX];
        a2amm_comm_say(st->comm, "loading %s", INPUT_NAMES[i]);
        int rc = io_rank_path(path, sizeof path, st->rn->dir, "input", st->me, INPUT_NAMES[i], err);
        if (!rc) rc = io_read_exact(path, dst[i], bytes[i], err);
        if (rc) return rc;
    }
    return A2AMM_OK;
}

/* The weights prepared once; the time it took into the shared times. */
static int prepare_weights(rank_state *st, a2amm_error *err)
{
    const runner *rn = st->rn;
    a2amm_comm_say(st->comm, "preparing B");
    int64_t t0 = trace_now_ns();
    int rc = a2amm_weights_create(st->b, st->sb, rn->s.N, rn->s.K, rn->z.sk, rn->s.b_type, rn->threads, &st->w, err);
    int64_t t1 = trace_now_ns();
    trace_span(rn->trace, TRACE_PREPARE, t0, t1, -1);
    rn->times[(size_t)RUN_VARIANTS * (size_t)rn->o.iters * (size_t)rn->s.R + (size_t)st->me] = (double)(t1 - t0) * 1e-9;
    if (!rc) rc = a2amm_op_use_weights(st->op, st->w, err);
    return rc;
}

/* A barrier of the command's own, as a span of the trace. */
static int traced_barrier(rank_state *st, a2amm_error *err)
{
    int64_t t0 = trace_now_ns();
    int rc = a2amm_comm_barrier(st->comm, st->rn->o.timeout_s, err);
    trace_span(st->rn->trace, TRACE_BARRIER, t0, trace_now_ns(), -1);
    return rc;
}

/* ---- perf mode: the variants ---------------------------------------------- */

typedef int (*variant_fn)(rank_state *st, a2amm_error *err);

static int v_configured(rank_state *st, a2amm_error *err)
{
    return a2amm_op_run(st->op, st->rn->s.M, NULL, NULL, st->out, err);
}

static int v_unfused(rank_state *st, a2amm_error *err)
{
    return a2amm_op_run(st->op_u, st->rn->s.M, NULL, NULL, st->out, err);
}

static int v_matmul(rank_state *st, a2amm_error *err)
{
    const a2amm_shape *s = &st->rn->s;
    return a2amm_matmul(st->w, st->xa, s->K, st->xsa, s->K / 32, s->M, s->a_type, st->out, s->N, st->rn->threads,
                        err);
}

/* The AllToAll alone: A and its scales, as the op moves them, with no matmul. */
static int v_alltoall(rank_state *st, a2amm_error *err)
{
    const a2amm_shape *s = &st->rn->s;
    const a2amm_sizes *z = &st->rn->z;
    uint8_t *a = NULL, *sa = NULL;
    a2amm_op_input(st->op, &a, &sa, NULL, NULL, NULL);
    int rc = a2amm_comm_alltoall(st->comm, a, st->ra, (size_t)(s->M * z->ka), st->rn->o.timeout_s, err);
    if (!rc) rc = a2amm_comm_alltoall(st->comm, sa, st->rsa, (size_t)(s->M * z->ska), st->rn->o.timeout_s, err);
    return rc;
}

/* fp32 to bf16, rounded to nearest even (NaN stays NaN). */
static uint16_t bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* The command's baseline matmul: OpenBLAS sgemm on fp32, rounded to bf16. */
typedef struct sgemm_baseline {
    int64_t M, N, K;
    float *x, *bt, *c;
} sgemm_baseline;

static void sgemm_destroy(void *ctx)
{
    sgemm_baseline *g = ctx;
    if (g) free(g->x), free(g->bt), free(g->c);
    free(g);
}

static int sgemm_create(const float *bt, int64_t M, int64_t N, int64_t K, int threads, void **ctx, float **x,
                        const char **what, a2amm_error *err)
{
    sgemm_baseline *g = calloc(1, sizeof *g);
    if (g) *g = (sgemm_baseline){M, N, K, malloc((size_t)(M * K) * sizeof(float)),
                                 malloc((size_t)(N * K) * sizeof(float)), malloc((size_t)(M * N) * sizeof(float))};
    if (!g || !g->x || !g->bt || !g->c) {
        sgemm_destroy(g);
        return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the baseline's fp32 operands");
    }
    memcpy(g->bt, bt, (size_t)(N * K) * sizeof(float));
    openblas_set_num_threads(threads);
    *ctx = g, *x = g->x, *what = "OpenBLAS sgemm on fp32 (weights dequantized once)";
    return A2AMM_OK;
}

static int sgemm_run(void *ctx, uint16_t *out, a2amm_error *err)
{
    (void)err;
    sgemm_baseline *g = ctx;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)g->M, (int)g->N, (int)g->K, 1.0f, g->x, (int)g->K,
                g->bt, (int)g->K, 0.0f, g->c, (int)g->N);
    for (int64_t i = 0; i < g->M * g->N; i++) out[i] = bf16_of(g->c[i]);
    return A2AMM_OK;
}

static const run_baseline_gemm SGEMM_BASELINE = {sgemm_create, sgemm_run, NULL, sgemm_destroy};

/* The baseline's exchange: over MPI what users write, MPI_Alltoall of the
 * codes and of the scales; else the AllToAll alone. */
static int baseline_exchange(rank_state *st, a2amm_error *err)
{
    if (st->rn->o.transport != RUN_MPI) return v_alltoall(st, err);
    const a2amm_shape *s = &st->rn->s;
    const a2amm_sizes *z = &st->rn->z;
    uint8_t *a = NULL, *sa = NULL;
    a2amm_op_input(st->op, &a, &sa, NULL, NULL, NULL);
    int64_t counts[2] = {s->M * z->ka, s->M * z->ska};
    uint8_t *send[2] = {a, sa}, *recv[2] = {st->ra, st->rsa};
    for (int i = 0; i < 2; i++) {
        if (counts[i] > INT32_MAX)
            return a2amm_fail(err, A2AMM_E_INVAL, "baseline: MPI_Alltoall takes at most %d bytes per rank, "
                              "this shape sends %lld", INT32_MAX, (long long)counts[i]);
        if (MPI_Alltoall(send[i], (int)counts[i], MPI_BYTE, recv[i], (int)counts[i], MPI_BYTE, MPI_COMM_WORLD))
            return a2amm_fail(err, A2AMM_E_SYS, "baseline: MPI_Alltoall failed");
    }
    return A2AMM_OK;
}

/* What a user writes today: the whole AllToAll, dequantize to fp32, the baseline's matmul, bf16 out. */
static int v_baseline(rank_state *st, a2amm_error *err)
{
    const a2amm_shape *s = &st->rn->s;
    const a2amm_sizes *z = &st->rn->z;
    int rc = baseline_exchange(st, err);
    for (int j = 0; !rc && j < st->R; j++) /* block j is rank j's rows: columns j*ka.. of X */
        rc = a2amm_mx_dequantize_f32(st->ra + (size_t)j * (size_t)(s->M * z->ka), z->ka,
                                     st->rsa + (size_t)j * (size_t)(s->M * z->ska), z->ska, s->M, z->ka, s->a_type,
                                     st->bl_x + j * z->ka, s->K, err);
    return rc ? rc : st->gemm->run(st->gemm_ctx, st->out, err);
}

/* The baseline's matmul made on the weights dequantized as read; rank 0 says how it runs. */
static int baseline_setup(rank_state *st, a2amm_error *err)
{
    const a2amm_shape *s = &st->rn->s;
    st->gemm = st->rn->o.gemm ? st->rn->o.gemm : &SGEMM_BASELINE;
    float *bt = malloc((size_t)(s->N * s->K) * sizeof(float));
    if (!bt) return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the baseline's fp32 weights");
    const char *what = "";
    a2amm_comm_say(st->comm, "perf: making the baseline's matmul");
    int rc = a2amm_mx_dequantize_f32(st->b, s->K, st->sb, st->rn->z.sk, s->N, s->K, s->b_type, bt, s->K, err);
    if (!rc) rc = st->gemm->create(bt, s->M, s->N, s->K, st->rn->threads, &st->gemm_ctx, &st->bl_x, &what, err);
    free(bt);
    if (!rc && st->me == 0)
        snprintf(st->rn->baseline_what, BASELINE_WHAT_CHARS, "%s, %s",
                 st->rn->o.transport == RUN_MPI ? "MPI_Alltoall" : "a2amm_comm_alltoall", what);
    return rc;
}

/* The unfused op, the gathered rows for the matmul alone, the baseline's operands. */
static int perf_setup(rank_state *st, a2amm_error *err)
{
    const runner *rn = st->rn;
    const a2amm_shape *s = &rn->s;
    const a2amm_sizes *z = &rn->z;
    int rc = A2AMM_OK;
    if (rn->o.unfused) st->op_u = st->op;
    else {
        a2amm_op_config cu = config_of(rn, 1);
        rc = a2amm_op_create(st->comm, &cu, &st->op_u, err);
        if (!rc) rc = a2amm_op_use_weights(st->op_u, st->w, err);
        uint8_t *a = NULL, *sa = NULL, *ua = NULL, *usa = NULL;
        a2amm_op_input(st->op, &a, &sa, NULL, NULL, NULL);
        if (!rc) a2amm_op_input(st->op_u, &ua, &usa, NULL, NULL, NULL);
        if (!rc) memcpy(ua, a, z->a_bytes), memcpy(usa, sa, z->sa_bytes);
    }
    if (rc) return rc;
    st->ra = malloc(z->a_bytes);
    st->rsa = malloc(z->sa_bytes);
    st->xa = malloc((size_t)(s->M * s->K));
    st->xsa = malloc((size_t)(s->M * (s->K / 32)));
    if (!st->ra || !st->rsa || !st->xa || !st->xsa)
        return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the perf variants' buffers");
    /* the rows of A the AllToAll brings, side by side along K: what the matmul alone multiplies */
    a2amm_comm_say(st->comm, "perf: gathering the rows for the matmul alone");
    rc = v_alltoall(st, err);
    if (rc) return rc;
    int64_t bpr = z->ka / 32; /* scale bytes a block of a row carries (ska may pad past them) */
    for (int j = 0; j < st->R; j++)
        for (int64_t i = 0; i < s->M; i++) {
            memcpy(st->xa + i * s->K + j * z->ka, st->ra + ((int64_t)j * s->M + i) * z->ka, (size_t)z->ka);
            memcpy(st->xsa + i * (s->K / 32) + j * bpr, st->rsa + ((int64_t)j * s->M + i) * z->ska, (size_t)bpr);
        }
    return rn->o.baseline ? baseline_setup(st, err) : A2AMM_OK;
}

static int rank_perf(rank_state *st, a2amm_error *err)
{
    const runner *rn = st->rn;
    variant_fn variants[RUN_VARIANTS] = {v_configured, v_unfused, v_matmul, v_alltoall, v_baseline};
    int nvariants = rn->o.baseline ? RUN_VARIANTS : RUN_V_BASELINE;
    measure_flusher fl;
    int rc = measure_flusher_init(&fl, NULL, measure_flush_bytes((int)rn->s.R), err);
    for (int w = 0; !rc && w < rn->o.warmup; w++)
        for (int v = 0; !rc && v < nvariants; v++) {
            a2amm_comm_say(st->comm, "perf warm-up %d, variant %d", w, v);
            rc = variants[v](st, err);
        }
    for (int it = 0; !rc && it < rn->o.iters; it++)
        for (int v = 0; !rc && v < nvariants; v++) {
            measure_flush(&fl);
            a2amm_comm_say(st->comm, "perf repetition %d, variant %d", it, v);
            rc = traced_barrier(st, err);
            rn->trace->counting = v == RUN_V_CONFIGURED;
            int64_t t0 = trace_now_ns();
            if (!rc) rc = variants[v](st, err);
            int64_t t1 = trace_now_ns();
            rn->trace->counting = 0;
            *time_slot(rn, v, it, st->me) = (double)(t1 - t0) * 1e-9;
            trace_span(rn->trace, TRACE_VARIANT, t0, t1, v);
            if (v == RUN_V_BASELINE && st->gemm->idle) st->gemm->idle(st->gemm_ctx);
        }
    if (!rc) rc = traced_barrier(st, err);
    measure_flusher_free(&fl);
    const trace_rank *tr = rn->trace; /* the breakdown: per fused call, this rank */
    double calls = tr->calls > 0 ? (double)tr->calls : 1.0;
    int fields[RUN_BD_FIELDS] = {TRACE_CALL, TRACE_MATMUL, TRACE_WAIT, TRACE_SEND, TRACE_BARRIER};
    for (int f = 0; f < RUN_BD_FIELDS; f++) *breakdown_slot(rn, f, st->me) = tr->sum_s[fields[f]] / calls;
    for (int src = 0; src < st->R; src++) *breakdown_slot(rn, RUN_BD_FIELDS + src, st->me) = tr->wait_from_s[src] / calls;
    return rc;
}

/* ---- precision mode -------------------------------------------------------- */

static int rank_precision(rank_state *st, a2amm_error *err)
{
    const runner *rn = st->rn;
    int rc = a2amm_op_run(st->op, rn->s.M, NULL, NULL, st->out, err);
    if (!rc) {
        char path[IO_PATH_MAX];
        a2amm_comm_say(st->comm, "writing npu_out.bin (staged)");
        int64_t t0 = trace_now_ns();
        rc = io_rank_path(path, sizeof path, rn->dir, "output", st->me, "npu_out.bin", err);
        if (!rc) rc = io_write_staged(path, rn->tag, st->out, rn->z.out_bytes, err);
        trace_span(rn->trace, TRACE_WRITE, t0, trace_now_ns(), -1);
    }
    a2amm_comm_say(st->comm, "waiting at the end barrier");
    if (!rc) rc = traced_barrier(st, err);
    return rc;
}

/* Reports this rank's failure to every rank (the first report wins), without a doubled "rank N: ". */
static int rank_failed(rank_state *st, int rc, const a2amm_error *err)
{
    char prefix[32];
    int n = snprintf(prefix, sizeof prefix, "rank %d: ", st->me);
    const char *msg = err->msg[0] ? err->msg : a2amm_strerror(rc);
    if (!strncmp(msg, prefix, (size_t)n)) msg += n;
    if (rc != A2AMM_E_PEER) a2amm_comm_fail(st->comm, rc, msg);
    return rc;
}

static int rank_main(a2amm_comm *comm, void *arg)
{
    const runner *rn = arg;
    a2amm_error err = {0, ""};
    rank_state st = {.comm = comm, .rn = rn, .me = a2amm_comm_rank(comm), .R = a2amm_comm_size(comm)};
    st.fault = (fault_plan){fault_from_env(st.me), comm, 0};
    int rc = trace_rank_init(rn->trace, st.me, st.R, rn->o.trace_path != NULL, &err);
    a2amm_comm_say(comm, "making the op");
    a2amm_op_config c = config_of(rn, rn->o.unfused);
    if (!rc) rc = a2amm_op_create(comm, &c, &st.op, &err);
    if (!rc) rc = load_inputs(&st, &err);
    if (!rc) rc = prepare_weights(&st, &err);
    if (!rc && rn->o.mode == RUN_PERF) rc = perf_setup(&st, &err); /* the baseline dequantizes B as read */
    free(st.b), free(st.sb);
    st.b = st.sb = NULL;
    if (!rc && (rn->o.trace_path || rn->o.mode == RUN_PERF)) { /* the spans, or perf mode's breakdown */
        rn->trace->next = fault_in_pipeline(&st.fault) ? fault_observe : NULL;
        rn->trace->next_arg = &st.fault;
        rc = a2amm_op_set_observer(st.op, trace_observe, rn->trace);
    } else if (!rc && fault_in_pipeline(&st.fault)) {
        rc = a2amm_op_set_observer(st.op, fault_observe, &st.fault);
    }
    if (!rc && rn->o.mode == RUN_PERF) {
        rc = rank_perf(&st, &err);
    } else if (!rc) {
        rc = rank_precision(&st, &err);
    }
    if (!rc) fault_at_end(&st.fault);
    if (!rc && rn->o.trace_path && rn->o.transport != RUN_MPI) { /* the spans to the launcher */
        a2amm_comm_say(comm, "saving the trace's spans");
        rc = run_trace_save_part(rn->trace, rn->o.trace_path, rn->tag, &err);
    }
    if (rc) rank_failed(&st, rc, &err);
    else a2amm_comm_say(comm, "done");
    rank_state_free(&st);
    return rc;
}

/* ---- the launcher side ----------------------------------------------------- */

/* Every rank's four input files exist with the right sizes: a bad file on
 * one rank is reported before any rank starts. */
static int check_inputs(const char *dir, const a2amm_shape *s, const a2amm_sizes *z, a2amm_error *err)
{
    size_t bytes[4] = {z->a_bytes, z->sa_bytes, z->b_bytes, z->sb_bytes};
    for (int r = 0; r < s->R; r++)
        for (int i = 0; i < 4; i++) {
            char path[IO_PATH_MAX];
            struct stat st;
            int rc = io_rank_path(path, sizeof path, dir, "input", r, INPUT_NAMES[i], err);
            if (rc) return rc;
            int fd = io_open_regular(path, &st, err);
            if (fd < 0) {
                char why[sizeof err->msg];
                snprintf(why, sizeof why, "%s", err->msg);
                return a2amm_fail(err, fd, "rank %d: %s (expected a file of %zu bytes)", r, why, bytes[i]);
            }
            close(fd);
            if ((uint64_t)st.st_size != (uint64_t)bytes[i])
                return a2amm_fail(err, A2AMM_E_SIZE, "rank %d: %s: expected %zu bytes, found %lld bytes (file is %s)",
                                  r, path, bytes[i], (long long)st.st_size,
                                  (uint64_t)st.st_size < (uint64_t)bytes[i] ? "short" : "long");
        }
    return A2AMM_OK;
}

/* --trace FILE: a file (not a folder) in a folder this process may write, checked before any rank starts. */
static int check_trace_path(const char *path, a2amm_error *err)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return a2amm_fail(err, A2AMM_E_INVAL, "--trace %s: is a folder; name a file, e.g. %s/trace.json", path, path);
    char folder[4096];
    const char *slash = strrchr(path, '/');
    int n = slash ? snprintf(folder, sizeof folder, "%.*s", slash == path ? 1 : (int)(slash - path), path)
                  : snprintf(folder, sizeof folder, ".");
    if (n < 0 || (size_t)n >= sizeof folder) return a2amm_fail(err, A2AMM_E_INVAL, "--trace: the path is too long");
    if (stat(folder, &st) != 0 || !S_ISDIR(st.st_mode))
        return a2amm_fail(err, A2AMM_E_IO, "--trace %s: the folder %s does not exist", path, folder);
    if (access(folder, W_OK) != 0)
        return a2amm_fail(err, A2AMM_E_IO, "--trace %s: cannot write in %s", path, folder);
    return A2AMM_OK;
}

static int check_options(const a2amm_shape *s, const run_options *o, a2amm_error *err)
{
    if (o->tile_m < 1) return a2amm_fail(err, A2AMM_E_INVAL, "--tile-m must be at least 1 (got %lld)", (long long)o->tile_m);
    if (o->depth < 1) return a2amm_fail(err, A2AMM_E_INVAL, "--depth must be at least 1 (got %d)", o->depth);
    if (o->threads < 0 || o->threads > 1024)
        return a2amm_fail(err, A2AMM_E_INVAL, "--threads must be 0 (automatic) to 1024 (got %d)", o->threads);
    if (!(o->timeout_s > 0)) return a2amm_fail(err, A2AMM_E_INVAL, "--timeout must be positive (got %g)", o->timeout_s);
    if (o->iters < 1 || o->warmup < 0)
        return a2amm_fail(err, A2AMM_E_INVAL, "--iters must be at least 1 and --warmup at least 0");
    if (s->R > 1024) return a2amm_fail(err, A2AMM_E_INVAL, "R must be at most 1024 (got %lld)", (long long)s->R);
    return o->trace_path ? check_trace_path(o->trace_path, err) : A2AMM_OK;
}

/*
 * The outputs as a set: every rank's staged npu_out.bin renamed into place
 * when the whole run succeeded, all of them removed otherwise, so that a
 * failed run changes no output.
 */
static int settle_outputs(const runner *rn, int success, a2amm_error *err)
{
    int rc = A2AMM_OK;
    for (int r = 0; r < rn->s.R; r++) {
        char path[IO_PATH_MAX];
        if (io_rank_path(path, sizeof path, rn->dir, "output", r, "npu_out.bin", NULL)) continue;
        if (success && !rc) rc = io_commit_staged(path, rn->tag, err);
        else io_discard_staged(path, rn->tag);
    }
    return rc;
}

/* Symmetric memory per rank: the op(s), and in perf mode the AllToAll's staging. */
static size_t heap_bytes(const runner *rn)
{
    a2amm_op_config c = config_of(rn, rn->o.unfused), cu = config_of(rn, 1);
    size_t bytes = a2amm_op_heap_bytes(&c, (int)rn->s.R) + (64u << 10);
    if (rn->o.mode == RUN_PERF)
        bytes += (rn->o.unfused ? 0 : a2amm_op_heap_bytes(&cu, (int)rn->s.R)) + rn->z.a_bytes + rn->z.sa_bytes +
                 (64u << 10);
    return bytes;
}

/*
 * The whole run's limit, from --timeout and the shape: a rank waits at most
 * --timeout at each of its waits (one per tile and source, a few barriers),
 * repetition by repetition; a run that outlives them all is stuck in a way
 * no single wait sees (a livelock).
 */
static double run_limit_s(const runner *rn, int64_t ntiles)
{
    double reps = rn->o.mode == RUN_PERF ? (double)(rn->o.warmup + rn->o.iters) * RUN_VARIANTS + 2.0 : 1.0;
    double waits = reps * ((double)ntiles * (double)rn->s.R + 8.0) + 16.0;
    return rn->o.timeout_s * waits;
}

/* ---- the progress line of a perf run ------------------------------------------ */

typedef struct progress_watch {
    const runner *rn;
    _Atomic int stop;
} progress_watch;

/* Counts rank 0's finished repetitions in the shared times (each is non-zero once timed). */
static void *watch_progress(void *arg)
{
    progress_watch *w = arg;
    const runner *rn = w->rn;
    cli_progress p;
    cli_progress_start(&p, 0, 0);
    while (!atomic_load(&w->stop)) {
        int done = 0;
        for (int it = 0; it < rn->o.iters; it++) done += *time_slot(rn, RUN_V_CONFIGURED, it, 0) > 0;
        cli_progress_say(&p, "a2amm: perf repetition %d of %d", done, rn->o.iters);
        struct timespec pause = {0, 100000000};
        nanosleep(&pause, NULL);
    }
    cli_progress_end(&p);
    return NULL;
}

/* ---- this process as one rank of an MPI job -------------------------------- */

int run_under_mpirun(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

int run_mpi_rank(void)
{
    static const char *const names[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (getenv(names[i])) return atoi(getenv(names[i]));
    return -1;
}

void run_mpi_finalize(void)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized) MPI_Finalize();
}

/* mpirun stops the other ranks with SIGTERM when one fails or dies: each
 * says what it was doing (write(2) only: this runs in a signal handler). */
static a2amm_comm *stopped_comm;
static int stopped_rank;

static void say_stopped(int sig)
{
    (void)sig;
    char head[96];
    int n = snprintf(head, sizeof head, "a2amm: rank %d stopped by mpirun (another rank failed) while: ", stopped_rank);
    const char *doing = stopped_comm ? a2amm_comm_doing(stopped_comm) : "";
    ssize_t w = write(2, head, (size_t)n);
    w += write(2, doing, strnlen(doing, 160));
    w += write(2, "\n", 1);
    (void)w;
    _exit(143);
}

/* Every rank's column of the times into everyone's copy (each rank wrote only its own). */
static int share_times(a2amm_comm *comm, runner *rn, size_t tbytes, a2amm_error *err)
{
    int R = (int)rn->s.R, me = a2amm_comm_rank(comm);
    size_t n = tbytes / sizeof(double);
    double *send = malloc(tbytes * (size_t)R), *recv = malloc(tbytes * (size_t)R);
    int rc = send && recv ? A2AMM_OK : a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the perf figures");
    for (int r = 0; !rc && r < R; r++) memcpy(send + (size_t)r * n, rn->times, tbytes);
    if (!rc) rc = a2amm_comm_alltoall(comm, send, recv, tbytes, rn->o.timeout_s, err);
    for (size_t i = 0; !rc && i < n; i++) /* entry i belongs to rank i mod R */
        if ((int)(i % (size_t)R) != me) rn->times[i] = recv[(i % (size_t)R) * n + i];
    free(send), free(recv);
    return rc;
}

static int run_files_mpi(runner *rn, run_result *res, size_t tbytes, int64_t *offsets, a2amm_error *err)
{
    int inited = 0, provided = 0, rank = 0, size = 0;
    MPI_Initialized(&inited);
    if (!inited) MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    res->rank = rank;
    if (size != rn->s.R)
        return a2amm_fail(err, A2AMM_E_INVAL, "mpirun started %d ranks, the shape's R is %lld: run mpirun -np %lld",
                          size, (long long)rn->s.R, (long long)rn->s.R);
    if (rn->o.trace_path) run_trace_mpi_offsets(size, rank, offsets); /* before anything is timed */
    a2amm_comm *comm = NULL;
    int rc = a2amm_mpi_comm_create(MPI_COMM_WORLD, heap_bytes(rn), &comm, err);
    if (!rc) {
        stopped_comm = comm, stopped_rank = rank;
        signal(SIGTERM, say_stopped);
        rc = rank_main(comm, rn); /* a failure aborts the job, naming the rank */
        signal(SIGTERM, SIG_DFL);
        stopped_comm = NULL;
    }
    if (!rc && rn->o.mode == RUN_PRECISION) {
        /* every rank wrote (the end barrier): each commits its own */
        char path[IO_PATH_MAX];
        rc = io_rank_path(path, sizeof path, rn->dir, "output", rank, "npu_out.bin", err);
        if (!rc) rc = io_commit_staged(path, rn->tag, err);
    }
    if (!rc && rn->o.mode == RUN_PERF) rc = share_times(comm, rn, tbytes, err);
    if (comm) a2amm_comm_barrier(comm, rn->o.timeout_s, NULL);
    a2amm_comm_destroy(comm);
    for (int r = 0; !rc && r < rn->s.R; r++) res->ranks[r] = (a2amm_rank_report){.started = 1, .status = A2AMM_OK};
    return rc;
}

/* Per repetition, the slowest rank's time of variant v. */
static void max_over_ranks(const runner *rn, int v, double *out)
{
    for (int it = 0; it < rn->o.iters; it++) {
        double m = 0;
        for (int r = 0; r < rn->s.R; r++) m = fmax(m, *time_slot(rn, v, it, r));
        out[it] = m;
    }
}

static int collect_perf(const runner *rn, run_perf *p, a2amm_error *err)
{
    p->iters = rn->o.iters;
    int nv = rn->o.baseline ? RUN_VARIANTS : RUN_V_BASELINE;
    for (int v = 0; v < nv; v++) {
        if (!(p->t[v] = calloc((size_t)p->iters, sizeof(double))))
            return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the perf figures");
        max_over_ranks(rn, v, p->t[v]);
    }
    for (int r = 0; r < rn->s.R; r++)
        p->prepare_s = fmax(p->prepare_s, rn->times[(size_t)RUN_VARIANTS * (size_t)p->iters * (size_t)rn->s.R + (size_t)r]);
    p->flush_bytes = (double)measure_flush_bytes((int)rn->s.R);
    int R = (int)rn->s.R;
    if (!(p->ranks = calloc((size_t)R, sizeof *p->ranks)))
        return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the perf figures");
    for (int r = 0; r < R; r++) {
        struct run_rank_breakdown *b = &p->ranks[r];
        b->call_s = *breakdown_slot(rn, RUN_BD_CALL, r), b->matmul_s = *breakdown_slot(rn, RUN_BD_MATMUL, r);
        b->wait_s = *breakdown_slot(rn, RUN_BD_WAIT, r), b->send_s = *breakdown_slot(rn, RUN_BD_SEND, r);
        b->barrier_s = *breakdown_slot(rn, RUN_BD_BARRIER, r);
        if (!(b->wait_from_s = calloc((size_t)R, sizeof *b->wait_from_s)))
            return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the perf figures");
        for (int src = 0; src < R; src++) b->wait_from_s[src] = *breakdown_slot(rn, RUN_BD_FIELDS + src, r);
    }
    snprintf(p->baseline_what, sizeof p->baseline_what, "%s", rn->baseline_what);
    return A2AMM_OK;
}

static double median_of(const double *t, int n)
{
    double *c = malloc((size_t)n * sizeof *c), m = 0;
    if (!c || n < 1) {
        free(c);
        return 0;
    }
    memcpy(c, t, (size_t)n * sizeof *c);
    for (int i = 1; i < n; i++) /* insertion sort: a few repetitions */
        for (int j = i; j > 0 && c[j] < c[j - 1]; j--) {
            double x = c[j];
            c[j] = c[j - 1], c[j - 1] = x;
        }
    m = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    free(c);
    return m;
}

/* What the trace file says it holds; perf mode's figures for its title. */
static trace_meta meta_of(const runner *rn, const run_result *res, const int64_t *offsets, char *summary, size_t size)
{
    static const char *const variant_names[RUN_VARIANTS] = {"configured op", "unfused", "matmul alone",
                                                            "alltoall alone", "baseline"};
    trace_meta m = {.s = &rn->s, .mode = rn->o.mode == RUN_PERF ? "perf" : "precision",
                    .transport = rn->o.transport == RUN_MPI ? "mpi" : "shm", .path = run_path_name(rn->o.path),
                    .tile_m = rn->o.tile_m, .depth = rn->o.depth, .threads = rn->threads, .unfused = rn->o.unfused,
                    .variant_names = variant_names, .offset_ns = offsets};
    const run_perf *p = &res->perf;
    if (rn->o.mode == RUN_PERF && p->t[RUN_V_CONFIGURED]) {
        m.fused_s = median_of(p->t[RUN_V_CONFIGURED], p->iters);
        m.matmul_s = median_of(p->t[RUN_V_MATMUL], p->iters);
        m.alltoall_s = median_of(p->t[RUN_V_ALLTOALL], p->iters);
        double exposed = m.fused_s - m.matmul_s;
        snprintf(summary, size, "%s %.3f ms vs matmul alone %.3f ms, alltoall alone %.3f ms (medians): "
                 "exposed communication %.3f ms (%.1f%%), %s / max(alone) = %.3f",
                 rn->o.unfused ? "unfused" : "fused", m.fused_s * 1e3, m.matmul_s * 1e3, m.alltoall_s * 1e3,
                 exposed * 1e3, 100.0 * exposed / m.fused_s, rn->o.unfused ? "unfused" : "fused",
                 m.fused_s / fmax(m.matmul_s, m.alltoall_s));
        m.summary = summary;
    }
    return m;
}

int run_files(const char *dir, const a2amm_shape *s, const run_options *opt, run_result *res, a2amm_error *err)
{
    memset(res, 0, sizeof *res);
    runner rn = {.dir = dir, .s = *s, .o = *opt};
    snprintf(rn.tag, sizeof rn.tag, "%ld", (long)getpid());
    int rc = a2amm_shape_check(s, &rn.z, err);
    if (!rc) rc = check_options(s, &rn.o, err);
    if (!rc) rc = a2amm_kernel(&res->kernel, err);
    if (!rc && rn.o.transport == RUN_MPI && rn.o.path != A2AMM_PATH_PUT)
        rc = a2amm_fail(err, A2AMM_E_INVAL, "--transport mpi moves rows as messages: it needs --path put (a rank "
                        "cannot read another machine's memory)");
    if (!rc && rn.o.transport == RUN_MPI && !run_under_mpirun())
        rc = a2amm_fail(err, A2AMM_E_INVAL, "--transport mpi: this process is not part of an MPI job; launch every "
                        "rank with mpirun, e.g. mpirun -np %lld a2amm run M K N %lld --transport mpi --dir DIR",
                        (long long)s->R, (long long)s->R);
    /* over MPI each rank reads only its own folder (which may be on its own host): it checks it as it loads */
    if (!rc && rn.o.transport != RUN_MPI) rc = check_inputs(dir, s, &rn.z, err);
    if (rc) return rc;
    int R = (int)s->R, cores = pool_cpu_count();
    /* ranks that share this machine share its cores */
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int sharers = rn.o.transport == RUN_MPI ? (local && atoi(local) > 0 ? atoi(local) : 1) : R;
    rn.threads = rn.o.threads ? rn.o.threads : (cores / sharers > 0 ? cores / sharers : 1);
    if (rn.o.mode != RUN_PERF) rn.o.iters = 1;
    int64_t tm = rn.o.tile_m < s->M ? rn.o.tile_m : s->M;
    res->threads = rn.threads;
    res->ntiles = (s->M + tm - 1) / tm;
    res->ranks = calloc((size_t)R, sizeof *res->ranks);
    size_t tbytes = ((size_t)RUN_VARIANTS * (size_t)rn.o.iters + 1 + RUN_BD_FIELDS + (size_t)R) * (size_t)R * sizeof(double);
    rn.times = mmap(NULL, tbytes + BASELINE_WHAT_CHARS, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (!res->ranks || rn.times == MAP_FAILED) {
        if (rn.times != MAP_FAILED) munmap(rn.times, tbytes + BASELINE_WHAT_CHARS);
        return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the run's bookkeeping");
    }
    rn.baseline_what = (char *)rn.times + tbytes;
    res->nranks = R;
    trace_rank trace = {0};
    rn.trace = &trace; /* each rank process its own */
    if (rn.o.transport == RUN_MPI) {
        int64_t *offsets = calloc((size_t)R, sizeof *offsets);
        rc = offsets ? run_files_mpi(&rn, res, tbytes, offsets, err)
                     : a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the run's bookkeeping");
        if (!rc && rn.o.mode == RUN_PERF) rc = collect_perf(&rn, &res->perf, err);
        if (!rc && rn.o.trace_path) {
            char summary[300];
            trace_meta meta = meta_of(&rn, res, offsets, summary, sizeof summary);
            rc = run_trace_mpi_write(&trace, rn.o.trace_path, R, res->rank, &meta, err);
        }
        trace_rank_free(&trace);
        free(offsets);
        munmap(rn.times, tbytes + BASELINE_WHAT_CHARS);
        return rc;
    }
    a2amm_launch_options lo = {.heap_bytes = heap_bytes(&rn), .timeout_s = run_limit_s(&rn, res->ntiles),
                               .stall_s = rn.o.timeout_s * 1.5 + 1.0, .stop = rn.o.stop, .reports = res->ranks};
    progress_watch watch = {&rn, 0};
    pthread_t watcher;
    int watching = rn.o.progress && rn.o.mode == RUN_PERF && pthread_create(&watcher, NULL, watch_progress, &watch) == 0;
    rc = a2amm_launch(R, rank_main, &rn, &lo, err);
    if (watching) {
        atomic_store(&watch.stop, 1);
        pthread_join(watcher, NULL);
    }
    if (rn.o.mode == RUN_PRECISION) {
        int settled = settle_outputs(&rn, rc == A2AMM_OK, err);
        if (!rc) rc = settled;
    }
    if (!rc && rn.o.mode == RUN_PERF) rc = collect_perf(&rn, &res->perf, err);
    if (rn.o.trace_path) { /* the ranks' parts into one file; only removed after a failure */
        char summary[300];
        trace_meta meta = meta_of(&rn, res, NULL, summary, sizeof summary);
        int traced = run_trace_merge_parts(rn.o.trace_path, rn.tag, R, rc == A2AMM_OK, &meta, err);
        if (!rc) rc = traced;
    }
    munmap(rn.times, tbytes + BASELINE_WHAT_CHARS);
    return rc;
}

void run_result_free(run_result *r)
{
    for (int i = 0; r->perf.ranks && i < r->nranks; i++) free(r->perf.ranks[i].wait_from_s);
    free(r->perf.ranks);
    free(r->ranks);
    for (int v = 0; v < RUN_VARIANTS; v++) free(r->perf.t[v]);
    memset(r, 0, sizeof *r);
}
