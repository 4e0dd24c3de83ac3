/*
 * moe_run_files: the MoE op over its files through the public API: the
 * launcher side (checks, a2amm_launch or one MPI rank, the outputs as a set)
 * and what each rank does.
 */
#include "cli/moe_runner.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/fault.h"
#include "cli/guard.h"
#include "cli/perf_report.h"
#include "cli/progress.h"
#include "cli/rank_report.h"
#include "cli/run_trace.h"
#include "cli/time_map.h"
#include "cli/trace.h"
#include "common/error.h"
#include "common/pool.h"
#include "io/io.h"

const char *const moe_variant_names[MOE_VARIANTS] = {"a2amm MoE call (dispatch, experts, combine)",
                                                     "the call on the other schedule",
                                                     "experts alone (the same rows)",
                                                     "exchange alone (dispatch + combine)"};

const char *moe_schedule_name(a2amm_schedule schedule)
{
    return schedule == A2AMM_SCHEDULE_UNFUSED ? "unfused" : schedule == A2AMM_SCHEDULE_OVERLAP ? "overlap" : "fused";
}

typedef struct moe_runner {
    const char *dir;
    moe_io_shape s;
    moe_run_options o;
    int threads;       /* a rank's, resolved */
    char tag[32];      /* outputs staged as npu_out.bin.tmp.<tag>, committed as a set */
    time_map tm;       /* shared with the ranks: the variants' times, then row MOE_ROW_RECEIVED: the most rows
                          each received in a call */
    trace_rank *mpi_trace; /* over MPI with --trace: this process's rank's spans, gathered after the run */
} moe_runner;

enum { MOE_ROW_RECEIVED, MOE_ROWS };

static double *time_slot(const moe_runner *rn, int v, int it, int r) { return time_map_at(&rn->tm, v, it, r); }

static double *received_slot(const moe_runner *rn, int r) { return time_map_row(&rn->tm, MOE_ROW_RECEIVED, r); }

size_t moe_run_heap_bytes(int R, int64_t max_tokens, int64_t H, int K)
{
    size_t rows = (size_t)R * (size_t)(max_tokens ? max_tokens : 1);
    size_t record = (size_t)H + (size_t)H / 32 + 8 * (size_t)K + 16, partial = 2 * (size_t)H;
    return 2 * rows * (record + partial) + ((size_t)64 << 20);
}

/* The run's MoE op (perf mode makes a second with the other schedule). */
static a2amm_moe_config run_config(const moe_runner *rn)
{
    const moe_io_shape *s = &rn->s;
    a2amm_moe_config cfg = A2AMM_MOE_CONFIG_INIT;
    cfg.experts = s->E, cfg.topk = s->K, cfg.hidden = s->H, cfg.inter = s->I, cfg.max_tokens = s->T ? s->T : 1;
    cfg.a_type = s->a_type, cfg.b_type = s->b_type, cfg.threads = rn->threads, cfg.timeout_s = rn->o.timeout_s;
    cfg.schedule = rn->o.schedule;
    return cfg;
}

/* The communicator's heap: the stage the run's MoE ops take (a2amm_moe_heap_bytes; both schedules' ops share
 * it), and room for the perf figures' AllToAll over mpirun's shm. A config the query refuses: the library's
 * default (a2amm_moe_create then names what is wrong). */
static size_t heap_bytes(const moe_runner *rn)
{
    a2amm_moe_config cfg = run_config(rn);
    size_t need = 0;
    if (a2amm_moe_heap_bytes(&cfg, rn->s.R, &need, NULL) || need > SIZE_MAX - ((size_t)64 << 20)) return 0;
    return need + ((size_t)64 << 20);
}

/* ---- one rank -------------------------------------------------------------------- */

/* The experts alone: every local expert on the rows a dispatch gave it, threads taking experts in turn. */
typedef struct experts_job {
    a2amm_moe *m;
    int local, threads;
    int64_t H;
    const int64_t *n;
    const uint8_t **codes, **scales;
    float **y;
    int64_t ldsx;
    int rc;
    a2amm_error err;
    pthread_mutex_t lock;
} experts_job;

typedef struct experts_worker {
    experts_job *job;
    int id;
} experts_worker;

static void *experts_thread(void *arg)
{
    experts_worker *w = arg;
    experts_job *j = w->job;
    for (int le = w->id; le < j->local; le += j->threads) {
        a2amm_error err = {0, ""};
        int rc = a2amm_moe_expert(j->m, le, j->n[le], j->codes[le], j->scales[le], j->ldsx, j->y[le], j->H, &err);
        if (rc) {
            pthread_mutex_lock(&j->lock);
            if (!j->rc) j->rc = rc, j->err = err;
            pthread_mutex_unlock(&j->lock);
        }
    }
    return NULL;
}

static int run_experts(experts_job *j, a2amm_error *err)
{
    pthread_t tid[256];
    experts_worker w[256];
    int n = j->threads < 256 ? j->threads : 256, started = 0;
    j->rc = 0;
    for (int i = 1; i < n; i++) {
        w[i] = (experts_worker){j, i};
        if (pthread_create(&tid[i], NULL, experts_thread, &w[i])) break;
        started = i;
    }
    int threads = j->threads;
    j->threads = started + 1; /* the experts a thread takes follow the threads that run */
    w[0] = (experts_worker){j, 0};
    experts_thread(&w[0]);
    for (int i = 1; i <= started; i++) pthread_join(tid[i], NULL);
    j->threads = threads;
    if (j->rc) *err = j->err;
    return j->rc;
}

/* A rank's state in its process. */
typedef struct moe_rank {
    const moe_runner *rn;
    a2amm_comm *comm;
    int me;
    moe_io_rank d;
    a2amm_moe *m, *other; /* the op on the schedule asked for; perf: on the other one */
    uint16_t *out;
    float **y;     /* [local]: the experts' outputs (perf) */
    int64_t *ycap; /* [local]: rows each y holds */
    trace_rank trace; /* --trace: the op's calls' spans */
} moe_rank;

/* y[le] room for n rows (perf), zeroed. */
static int y_room(moe_rank *k, int le, int64_t n, a2amm_error *err)
{
    if (n > k->ycap[le]) {
        free(k->y[le]);
        k->y[le] = malloc(sizeof(float) * (size_t)(n * k->rn->s.H));
        k->ycap[le] = k->y[le] ? n : 0;
        if (!k->y[le]) return a2amm_fail(err, A2AMM_E_NOMEM, "rank %d: out of memory for %lld rows", k->me, (long long)n);
    }
    if (n) memset(k->y[le], 0, sizeof(float) * (size_t)(n * k->rn->s.H));
    return A2AMM_OK;
}

static int call_op(moe_rank *k, a2amm_moe *m, a2amm_error *err)
{
    const moe_io_shape *s = &k->rn->s;
    return a2amm_moe_run(m, k->d.T, k->d.x, k->d.sx, moe_io_scale_row(s->H), k->d.idx, k->d.w, k->out, err);
}

/* One timed repetition of each variant (after a barrier each), into the shared times. */
static int perf_round(moe_rank *k, int it, a2amm_error *err)
{
    const moe_runner *rn = k->rn;
    const int local = rn->s.E / rn->s.R;
    const int64_t sh = moe_io_scale_row(rn->s.H);
    double t0;
    int rc = a2amm_comm_barrier(k->comm, rn->o.timeout_s, err);
    t0 = cli_now();
    if (!rc) rc = call_op(k, k->m, err);
    if (!rc && it >= 0) *time_slot(rn, MOE_V_CALL, it, k->me) = cli_now() - t0;
    if (!rc) rc = a2amm_comm_barrier(k->comm, rn->o.timeout_s, err);
    t0 = cli_now();
    if (!rc) rc = call_op(k, k->other, err);
    if (!rc && it >= 0) *time_slot(rn, MOE_V_OTHER, it, k->me) = cli_now() - t0;
    /* the experts alone, on the rows of a dispatch (then combined, untimed, to end the batch) */
    a2amm_moe_batch *batch = NULL;
    if (!rc) rc = a2amm_moe_dispatch(k->m, k->d.T, k->d.x, k->d.sx, sh, k->d.idx, k->d.w, &batch, err);
    const uint8_t *codes[MOE_IO_MAX_LOCAL], *scales[MOE_IO_MAX_LOCAL];
    int64_t n[MOE_IO_MAX_LOCAL], got = 0;
    for (int le = 0; !rc && le < local; le++) {
        rc = a2amm_moe_batch_rows(batch, le, &n[le], &codes[le], &scales[le], err);
        if (!rc) rc = y_room(k, le, n[le], err);
        got += n[le];
    }
    if (!rc && (double)got > *received_slot(rn, k->me)) *received_slot(rn, k->me) = (double)got;
    experts_job job = {k->m, local, rn->threads, rn->s.H, n, codes, scales, k->y, rn->s.H / 32, 0, {0, ""},
                       PTHREAD_MUTEX_INITIALIZER};
    if (!rc) rc = a2amm_comm_barrier(k->comm, rn->o.timeout_s, err);
    t0 = cli_now();
    if (!rc) rc = run_experts(&job, err);
    if (!rc && it >= 0 && fault_slow_here("slow-experts", k->me)) nanosleep(&(struct timespec){0, 50000000}, NULL);
    if (!rc && it >= 0) *time_slot(rn, MOE_V_EXPERTS, it, k->me) = cli_now() - t0;
    if (!rc) rc = a2amm_moe_combine(k->m, batch, (const float *const *)k->y, k->out, err);
    a2amm_moe_batch_destroy(batch);
    batch = NULL;
    /* the exchange alone: dispatch and combine, the experts' outputs zeros */
    if (!rc) rc = a2amm_comm_barrier(k->comm, rn->o.timeout_s, err);
    t0 = cli_now();
    if (!rc) rc = a2amm_moe_dispatch(k->m, k->d.T, k->d.x, k->d.sx, sh, k->d.idx, k->d.w, &batch, err);
    for (int le = 0; !rc && le < local; le++) {
        rc = a2amm_moe_batch_rows(batch, le, &n[le], NULL, NULL, err);
        if (!rc) rc = y_room(k, le, n[le], err);
    }
    if (!rc) rc = a2amm_moe_combine(k->m, batch, (const float *const *)k->y, k->out, err);
    if (!rc && it >= 0) *time_slot(rn, MOE_V_EXCHANGE, it, k->me) = cli_now() - t0;
    a2amm_moe_batch_destroy(batch);
    return rc;
}

static int rank_work(moe_rank *k, a2amm_error *err)
{
    const moe_runner *rn = k->rn;
    const moe_io_shape *s = &rn->s;
    const int local = s->E / s->R;
    a2amm_comm_say(k->comm, "loading its inputs");
    int rc = moe_io_rank_alloc(s, k->me, &k->d, err);
    if (!rc) rc = moe_io_rank_load(rn->dir, s, k->me, &k->d, err);
    k->out = malloc(sizeof *k->out * (size_t)(k->d.T * s->H) + 2);
    k->y = calloc((size_t)local, sizeof *k->y), k->ycap = calloc((size_t)local, sizeof *k->ycap);
    if (!rc && (!k->out || !k->y || !k->ycap)) rc = a2amm_fail(err, A2AMM_E_NOMEM, "rank %d: out of memory", k->me);
    a2amm_moe_config cfg = run_config(rn);
    if (!rc) rc = a2amm_moe_create(k->comm, &cfg, &k->m, err);
    a2amm_comm_say(k->comm, "preparing its experts' weights");
    if (!rc)
        rc = a2amm_moe_set_weights(k->m, k->d.w13, k->d.s13, moe_io_scale_row(s->H), k->d.w2, k->d.s2,
                                   moe_io_scale_row(s->I), err);
    cfg.schedule = moe_other_schedule(rn->o.schedule);
    if (!rc && rn->o.mode == RUN_PERF) rc = a2amm_moe_create(k->comm, &cfg, &k->other, err);
    if (!rc && rn->o.mode == RUN_PERF)
        rc = a2amm_moe_set_weights(k->other, k->d.w13, k->d.s13, moe_io_scale_row(s->H), k->d.w2, k->d.s2,
                                   moe_io_scale_row(s->I), err);
    trace_rank *trace = rn->mpi_trace ? rn->mpi_trace : &k->trace;
    if (!rc && rn->o.trace_path) rc = trace_rank_init(trace, k->me, s->R, 1, err);
    if (!rc && rn->o.trace_path) rc = a2amm_moe_set_observer(k->m, trace_observe, trace, err);
    if (!rc && rn->o.mode == RUN_PRECISION) rc = call_op(k, k->m, err);
    if (!rc && rn->o.mode == RUN_PRECISION) {
        char path[IO_PATH_MAX];
        a2amm_comm_say(k->comm, "writing its output");
        rc = io_rank_path(path, sizeof path, rn->dir, "output", k->me, "npu_out.bin", err);
        if (!rc) rc = io_write_staged(path, rn->tag, k->out, sizeof *k->out * (size_t)(k->d.T * s->H), err);
    }
    for (int it = -rn->o.warmup; !rc && rn->o.mode == RUN_PERF && it < rn->o.iters; it++) {
        a2amm_comm_say(k->comm, "perf repetition %d", it);
        if (rn->o.stop && *rn->o.stop) rc = a2amm_fail(err, A2AMM_E_INTERRUPTED, "interrupted");
        if (!rc) rc = perf_round(k, it, err);
    }
    if (!rc && rn->o.trace_path && !rn->mpi_trace) { /* the spans to the launcher (over MPI: gathered after) */
        a2amm_comm_say(k->comm, "saving the trace's spans");
        rc = run_trace_save_part(&k->trace, rn->o.trace_path, rn->tag, err);
    }
    /* every rank has written before any launcher commits */
    if (!rc) a2amm_comm_say(k->comm, "waiting at the end barrier");
    if (!rc) rc = a2amm_comm_barrier(k->comm, rn->o.timeout_s, err);
    return rc;
}

static int rank_main(a2amm_comm *comm, void *arg)
{
    moe_rank k = {.rn = arg, .comm = comm, .me = a2amm_comm_rank(comm)};
    a2amm_error err = {0, ""};
    int rc = rank_work(&k, &err);
    if (rc) rank_report_fail(comm, k.me, rc, &err);
    else a2amm_comm_say(comm, "done");
    a2amm_moe_destroy(k.m);
    a2amm_moe_destroy(k.other);
    for (int le = 0; k.y && le < k.rn->s.E / k.rn->s.R; le++) free(k.y[le]);
    free(k.y), free(k.ycap), free(k.out);
    moe_io_rank_free(&k.d);
    trace_rank_free(&k.trace);
    return rc;
}

/* ---- the launcher ---------------------------------------------------------------- */

/* Every rank's eight files exist with their sizes: a bad one is reported before any rank starts. */
static int check_inputs(const char *dir, const moe_io_shape *s, a2amm_error *err)
{
    for (int r = 0; r < s->R; r++) {
        size_t b[MOE_IO_INPUTS];
        moe_io_rank_bytes(s, r, b);
        for (int i = 0; i < MOE_IO_INPUTS; i++) {
            char path[IO_PATH_MAX];
            struct stat st;
            int rc = io_rank_path(path, sizeof path, dir, "input", r, moe_io_inputs[i].name, err);
            if (rc) return rc;
            int fd = io_open_regular(path, &st, err);
            if (fd < 0) {
                char why[sizeof err->msg];
                snprintf(why, sizeof why, "%s", err->msg);
                return a2amm_fail(err, fd, "rank %d: %s (expected its %s, %zu bytes)", r, why, moe_io_inputs[i].what,
                                  b[i]);
            }
            close(fd);
            if ((uint64_t)st.st_size != (uint64_t)b[i])
                return a2amm_fail(err, A2AMM_E_SIZE, "rank %d: %s (its %s, T_r = %lld tokens): expected %zu bytes, "
                                  "found %lld bytes (file is %s)", r, path, moe_io_inputs[i].what,
                                  (long long)s->tokens[r], b[i], (long long)st.st_size,
                                  (uint64_t)st.st_size < (uint64_t)b[i] ? "short" : "long");
        }
    }
    return A2AMM_OK;
}

/* What a killed launcher leaves, put right by its guard: staged outputs removed, a begun commit completed. */
static void clean_after_kill(void *arg)
{
    const moe_runner *rn = arg;
    int completed = 0;
    io_remove_stale(rn->dir, rn->tag, &completed);
    if (rn->o.trace_path) {
        run_trace_merge_parts(rn->o.trace_path, rn->tag, rn->s.R, 0, NULL, NULL);
        io_discard_staged(rn->o.trace_path, rn->tag);
    }
}

static int collect(const moe_runner *rn, moe_run_result *res, a2amm_error *err)
{
    res->iters = rn->o.iters;
    for (int v = 0; v < MOE_VARIANTS; v++) {
        res->t[v] = malloc(sizeof(double) * (size_t)rn->o.iters);
        if (!res->t[v]) return a2amm_fail(err, A2AMM_E_NOMEM, "out of memory");
        for (int it = 0; it < rn->o.iters; it++) {
            double worst = 0;
            for (int r = 0; r < rn->s.R; r++) worst = fmax(worst, *time_slot(rn, v, it, r));
            res->t[v][it] = worst;
        }
    }
    for (int r = 0; r < rn->s.R; r++)
        if ((int64_t)*received_slot(rn, r) > res->rows_max) res->rows_max = (int64_t)*received_slot(rn, r);
    return A2AMM_OK;
}

/* Perf mode's figures in a line, for the trace (collected: res->t), or NULL in precision mode. */
static const char *perf_summary(const moe_runner *rn, const moe_run_result *res, char *buf, size_t size)
{
    if (rn->o.mode != RUN_PERF || !res->t[MOE_V_CALL]) return NULL;
    const cli_summary call = cli_summarize(res->t[MOE_V_CALL], res->iters),
                      experts = cli_summarize(res->t[MOE_V_EXPERTS], res->iters);
    const double exchange = cli_summarize(res->t[MOE_V_EXCHANGE], res->iters).median;
    char exposed[200];
    cli_exposed_text_of(exposed, sizeof exposed, &call, &experts, "the experts alone's");
    snprintf(buf, size, "MoE call %.3f ms (%s schedule) vs experts alone %.3f ms, exchange alone %.3f ms (medians): "
             "call / experts alone = %.3f, exposed %s", call.median * 1e3, moe_schedule_name(rn->o.schedule),
             experts.median * 1e3, exchange * 1e3, call.median / experts.median, exposed);
    return buf;
}

/* ---- the progress of a perf run ---------------------------------------------------- */

/* Rank 0's finished repetitions in the shared times (the exchange alone, each round's last, is non-zero
 * once timed). */
static void poll_progress(void *arg, cli_progress *p)
{
    const moe_runner *rn = arg;
    int done = 0;
    for (int it = 0; it < rn->o.iters; it++) done += *time_slot(rn, MOE_V_EXCHANGE, it, 0) > 0;
    cli_progress_count(p, "a2amm: MoE perf repetition", done, done, rn->o.iters);
}

/* The trace's part of a run over MPI: each rank's clock offset measured before the run, its spans gathered
 * to rank 0 after, which writes the file. */
static int trace_mpi_write(const moe_runner *rn, const moe_run_result *res, const int64_t *offsets,
                           a2amm_error *err)
{
    char summary[500];
    trace_meta meta = {.moe = &rn->s, .mode = rn->o.mode == RUN_PERF ? "perf" : "precision", .transport = "mpi",
                       .path = "messages", .threads = rn->threads, .schedule = moe_schedule_name(rn->o.schedule),
                       .offset_ns = offsets, .summary = perf_summary(rn, res, summary, sizeof summary)};
    return run_trace_mpi_write(rn->mpi_trace, rn->o.trace_path, rn->s.R, res->rank, &meta, err);
}

static int run_mpi(moe_runner *rn, moe_run_result *res, a2amm_error *err)
{
    a2amm_comm *comm = NULL;
    trace_rank trace = {0};
    int64_t *offsets = NULL;
    int rc = A2AMM_OK;
    if (rn->o.trace_path) {
        rc = run_mpi_start(rn->s.R, &res->rank, err);
        offsets = calloc((size_t)rn->s.R, sizeof *offsets);
        if (!rc && !offsets) rc = a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the trace's bookkeeping");
        if (rc) {
            free(offsets);
            return rc;
        }
        run_trace_mpi_offsets(rn->s.R, res->rank, offsets); /* before anything is timed */
        rn->mpi_trace = &trace;
    }
    rc = run_mpi_call(rn->s.R, heap_bytes(rn), rank_main, rn, &res->rank, &comm, err);
    if (!rc && rn->o.mode == RUN_PRECISION) { /* every rank wrote (the end barrier): each commits its own */
        char path[IO_PATH_MAX];
        rc = io_rank_path(path, sizeof path, rn->dir, "output", res->rank, "npu_out.bin", err);
        if (!rc) rc = io_commit_staged(path, rn->tag, err);
    }
    if (!rc && rn->o.mode == RUN_PERF) rc = run_mpi_share(comm, rn->tm.d, time_map_doubles(&rn->tm), rn->o.timeout_s, err);
    if (!rc && rn->o.mode == RUN_PERF) rc = collect(rn, res, err); /* the trace carries the figures */
    if (!rc && rn->o.trace_path) rc = trace_mpi_write(rn, res, offsets, err);
    if (comm) a2amm_comm_barrier(comm, rn->o.timeout_s, NULL);
    a2amm_comm_destroy(comm);
    trace_rank_free(&trace);
    free(offsets);
    rn->mpi_trace = NULL;
    for (int r = 0; !rc && r < rn->s.R; r++) res->ranks[r] = (a2amm_rank_report){.started = 1, .status = A2AMM_OK};
    return rc;
}

int moe_run_files(const char *dir, const moe_io_shape *s, const moe_run_options *o, moe_run_result *res,
                  a2amm_error *err)
{
    memset(res, 0, sizeof *res);
    moe_runner rn = {.dir = dir, .s = *s, .o = *o};
    snprintf(rn.tag, sizeof rn.tag, "%ld", (long)getpid());
    if (rn.o.mode != RUN_PERF) rn.o.iters = 1, rn.o.warmup = 0;
    int rc = moe_io_shape_check(s, err);
    if (!rc && (rn.o.iters < 1 || rn.o.warmup < 0 || !(rn.o.timeout_s > 0) || rn.o.threads < 0 || rn.o.threads > 1024))
        rc = a2amm_fail(err, A2AMM_E_INVAL, "--iters must be at least 1, --warmup at least 0, --timeout positive and "
                        "--threads 0 to 1024");
    if (!rc) rc = a2amm_kernel(&res->kernel, err);
    if (!rc && o->transport != RUN_MPI) rc = check_inputs(dir, s, err);
    if (rc) return rc;
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int sharers = o->transport == RUN_MPI ? (local && atoi(local) > 0 ? atoi(local) : 1) : s->R;
    int cores = pool_cpu_count();
    rn.threads = o->threads ? o->threads : (cores / sharers > 0 ? cores / sharers : 1);
    res->threads = rn.threads;
    res->ranks = calloc((size_t)s->R, sizeof *res->ranks);
    if (!res->ranks) return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the run's bookkeeping");
    rc = time_map_create(&rn.tm, MOE_VARIANTS, rn.o.iters, s->R, MOE_ROWS, 0, err);
    if (rc) return rc;
    if (o->transport == RUN_MPI) {
        rc = run_mpi(&rn, res, err);
    } else {
        cli_guard guard = {0, -1};
        if (rn.o.mode == RUN_PRECISION || rn.o.trace_path) rc = cli_guard_start(&guard, clean_after_kill, &rn, err);
        /* the whole run's limit: a few waits a repetition, each within --timeout */
        double reps = rn.o.mode == RUN_PERF ? (double)(rn.o.warmup + rn.o.iters) : 1.0;
        a2amm_launch_options lo = {.size = sizeof lo, .heap_bytes = heap_bytes(&rn),
                                   .timeout_s = rn.o.timeout_s * (reps * 12.0 + 16.0),
                                   .stall_s = rn.o.timeout_s * 1.5 + 1.0, .stop = rn.o.stop, .reports = res->ranks};
        cli_watch watch = {0};
        if (!rc && rn.o.progress && rn.o.mode == RUN_PERF) cli_watch_start(&watch, poll_progress, &rn);
        if (!rc) rc = a2amm_launch(s->R, rank_main, &rn, &lo, err);
        cli_watch_stop(&watch);
        if (rn.o.mode == RUN_PRECISION) {
            if (rc) io_set_discard(dir, "npu_out.bin", s->R, rn.tag);
            else rc = io_set_commit(dir, "npu_out.bin", s->R, rn.tag, NULL, NULL, err);
        }
        if (!rc && rn.o.mode == RUN_PERF) rc = collect(&rn, res, err); /* the trace carries the figures */
        if (rn.o.trace_path) { /* the ranks' parts into one file; only removed after a failure */
            char summary[500];
            trace_meta meta = {.moe = s, .mode = rn.o.mode == RUN_PERF ? "perf" : "precision", .transport = "shm",
                               .path = "stage", .threads = rn.threads, .schedule = moe_schedule_name(rn.o.schedule),
                               .summary = perf_summary(&rn, res, summary, sizeof summary)};
            int traced = run_trace_merge_parts(rn.o.trace_path, rn.tag, s->R, rc == A2AMM_OK, &meta, err);
            if (!rc) rc = traced;
        }
        cli_guard_stop(&guard);
    }
    time_map_free(&rn.tm);
    return rc;
}

void moe_run_result_free(moe_run_result *res)
{
    free(res->ranks);
    for (int v = 0; v < MOE_VARIANTS; v++) free(res->t[v]);
    memset(res, 0, sizeof *res);
}
