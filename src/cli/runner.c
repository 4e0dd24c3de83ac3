/*
 * run_files: the operator over the seed's files through the public API.
 * This is the launcher side: it checks the inputs and options, launches the
 * ranks (run_rank.c is what each does; over MPI this process is one rank,
 * run_mpi.c), and settles the outputs as a set.
 */
#include "cli/runner.h"

#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/fault.h"
#include "cli/guard.h"
#include "cli/progress.h"
#include "cli/measure.h"
#include "cli/out_path.h"
#include "cli/perf_report.h"
#include "cli/run_rank.h"
#include "cli/run_trace.h"
#include "cli/trace.h"
#include "common/error.h"
#include "common/pool.h"
#include "io/io.h"


/* Every rank's four input files exist with the right sizes: a bad file on
 * one rank is reported before any rank starts. */
static int check_inputs(const char *dir, const op_shape *s, const op_sizes *z, a2amm_error *err)
{
    size_t bytes[4] = {z->a_bytes, z->sa_bytes, z->b_bytes, z->sb_bytes};
    for (int r = 0; r < s->R; r++)
        for (int i = 0; i < 4; i++) {
            char path[IO_PATH_MAX];
            struct stat st;
            int rc = io_rank_path(path, sizeof path, dir, "input", r, io_rank_files[i].name, err);
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

static int check_options(const char *dir, const op_shape *s, const run_options *o, a2amm_error *err)
{
    if (o->tile_m < 1) return a2amm_fail(err, A2AMM_E_INVAL, "--tile-m must be at least 1 (got %lld)", (long long)o->tile_m);
    if (o->depth < 1) return a2amm_fail(err, A2AMM_E_INVAL, "--depth must be at least 1 (got %d)", o->depth);
    if (o->threads < 0 || o->threads > 1024)
        return a2amm_fail(err, A2AMM_E_INVAL, "--threads must be 0 (automatic) to 1024 (got %d)", o->threads);
    if (!(o->timeout_s > 0)) return a2amm_fail(err, A2AMM_E_INVAL, "--timeout must be positive (got %g)", o->timeout_s);
    if (o->iters < 1 || o->warmup < 0)
        return a2amm_fail(err, A2AMM_E_INVAL, "--iters must be at least 1 and --warmup at least 0");
    if (s->R > RUN_MAX_R)
        return a2amm_fail(err, A2AMM_E_INVAL, "R must be at most %d (got %lld)", RUN_MAX_R, (long long)s->R);
    /* the commands check it before they start (exit 2); this keeps any other caller to the same rule */
    return o->trace_path ? cli_check_output("--trace", o->trace_path, dir, s->R, err) : A2AMM_OK;
}

/* The failure tests' pauses inside the commit (fault.h). */
static void commit_step(void *arg, int renamed)
{
    (void)arg;
    if (renamed == 0) fault_pause("commit-0", -1);
    if (renamed == 1) fault_pause("commit-1", -1);
}

/*
 * The outputs as a set (io_set_commit): every rank's staged npu_out.bin put
 * in place when the whole run succeeded, all of them removed otherwise, so
 * that a failed run changes no output.
 */
static int settle_outputs(const runner *rn, int success, a2amm_error *err)
{
    if (!success) {
        io_set_discard(rn->dir, "npu_out.bin", (int)rn->s.R, rn->tag);
        return A2AMM_OK;
    }
    fault_pause("before-commit", -1);
    return io_set_commit(rn->dir, "npu_out.bin", (int)rn->s.R, rn->tag, commit_step, NULL, err);
}

/*
 * What a killed launcher leaves, put right by its guard (guard.h) once the
 * launcher and every rank are gone: a commit it began is completed, staged
 * outputs and trace parts of this run are removed.
 */
static void clean_after_kill(void *arg)
{
    const runner *rn = arg;
    int completed = 0, removed = io_remove_stale(rn->dir, rn->tag, &completed);
    if (rn->o.trace_path) {
        run_trace_merge_parts(rn->o.trace_path, rn->tag, (int)rn->s.R, 0, NULL, NULL);
        io_discard_staged(rn->o.trace_path, rn->tag); /* the merged trace's temporary name */
    }
    if (completed)
        dprintf(STDERR_FILENO, "a2amm run: the run (pid %s) was killed while putting its outputs in place: its "
                "guard completed the set (%d file%s)\n", rn->tag, completed, completed == 1 ? "" : "s");
    else if (removed)
        dprintf(STDERR_FILENO, "a2amm run: the run (pid %s) was killed before its outputs were committed: its guard "
                "removed %d staged file%s (the outputs are as they were)\n", rn->tag, removed, removed == 1 ? "" : "s");
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

/* Rank 0's finished repetitions in the shared times (each is non-zero once timed). */
static void poll_progress(void *arg, cli_progress *p)
{
    const runner *rn = arg;
    int done = 0;
    for (int it = 0; it < rn->o.iters; it++) done += *time_slot(rn, RUN_V_CONFIGURED, it, 0) > 0;
    cli_progress_count(p, "a2amm: perf repetition", done, done, rn->o.iters);
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
        cli_summary f = cli_summarize(p->t[RUN_V_CONFIGURED], p->iters);
        cli_summary mm = cli_summarize(p->t[RUN_V_MATMUL], p->iters);
        m.fused_s = f.median;
        m.matmul_s = mm.median;
        m.alltoall_s = cli_summarize(p->t[RUN_V_ALLTOALL], p->iters).median;
        char exposed[200];
        cli_exposed_text(exposed, sizeof exposed, &f, &mm);
        snprintf(summary, size, "%s %.3f ms vs matmul alone %.3f ms, alltoall alone %.3f ms (medians): "
                 "exposed communication %s, %s / max(alone) = %.3f",
                 rn->o.unfused ? "unfused" : "fused", m.fused_s * 1e3, m.matmul_s * 1e3, m.alltoall_s * 1e3,
                 exposed, rn->o.unfused ? "unfused" : "fused", m.fused_s / fmax(m.matmul_s, m.alltoall_s));
        m.summary = summary;
    }
    return m;
}

int run_files(const char *dir, const op_shape *s, const run_options *opt, run_result *res, a2amm_error *err)
{
    memset(res, 0, sizeof *res);
    runner rn = {.dir = dir, .s = *s, .o = *opt};
    snprintf(rn.tag, sizeof rn.tag, "%ld", (long)getpid());
    int rc = op_shape_check(s, &rn.z, err);
    if (!rc) rc = check_options(dir, s, &rn.o, err);
    if (!rc) rc = a2amm_kernel(&res->kernel, err);
    if (!rc && rn.o.transport == RUN_MPI && rn.o.path != A2AMM_PATH_PUT)
        rc = a2amm_fail(err, A2AMM_E_INVAL, "--transport mpi moves rows as messages: it needs --path put (a rank "
                        "cannot read another machine's memory)");
    if (!rc && rn.o.transport == RUN_MPI && !run_under_mpirun())
        rc = a2amm_fail(err, A2AMM_E_INVAL, "--transport mpi: this process is not part of an MPI job; launch every "
                        "rank with mpirun, e.g. mpirun --allow-run-as-root --oversubscribe -np %lld "
                        "a2amm run M K N %lld --transport mpi --dir DIR",
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
    if (!res->ranks) return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the run's bookkeeping");
    rc = time_map_create(&rn.tm, RUN_VARIANTS, (int)rn.o.iters, R, RUN_ROWS(R), BASELINE_WHAT_CHARS, err);
    if (rc) return rc;
    res->nranks = R;
    trace_rank trace = {0};
    rn.trace = &trace; /* each rank process its own */
    if (rn.o.transport == RUN_MPI) {
        int64_t *offsets = calloc((size_t)R, sizeof *offsets);
        rc = offsets ? run_files_mpi(&rn, res, offsets, err)
                     : a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the run's bookkeeping");
        if (!rc && rn.o.mode == RUN_PERF) rc = run_collect_perf(&rn, &res->perf, err);
        if (!rc && rn.o.trace_path) {
            char summary[400];
            trace_meta meta = meta_of(&rn, res, offsets, summary, sizeof summary);
            rc = run_trace_mpi_write(&trace, rn.o.trace_path, R, res->rank, &meta, err);
        }
        trace_rank_free(&trace);
        free(offsets);
        time_map_free(&rn.tm);
        return rc;
    }
    /* a run that writes files has a guard, which cleans up after a kill of the launcher */
    cli_guard guard = {0, -1};
    if (rn.o.mode == RUN_PRECISION || rn.o.trace_path) rc = cli_guard_start(&guard, clean_after_kill, &rn, err);
    if (rc) {
        time_map_free(&rn.tm);
        return rc;
    }
    fault_pause("launch", -1);
    a2amm_launch_options lo = {.size = sizeof(a2amm_launch_options), .heap_bytes = run_heap_bytes(&rn), .timeout_s = run_limit_s(&rn, res->ntiles),
                               .stall_s = rn.o.timeout_s * 1.5 + 1.0, .stop = rn.o.stop, .reports = res->ranks};
    cli_watch watch = {0};
    if (rn.o.progress && rn.o.mode == RUN_PERF) cli_watch_start(&watch, poll_progress, &rn);
    rc = a2amm_launch(R, run_rank_main, &rn, &lo, err);
    cli_watch_stop(&watch);
    if (rn.o.mode == RUN_PRECISION) {
        int settled = settle_outputs(&rn, rc == A2AMM_OK, err);
        if (!rc) rc = settled;
        if (!rc) fault_pause("after-commit", -1);
    }
    if (!rc && rn.o.mode == RUN_PERF) rc = run_collect_perf(&rn, &res->perf, err);
    if (rn.o.trace_path) { /* the ranks' parts into one file; only removed after a failure */
        char summary[400];
        trace_meta meta = meta_of(&rn, res, NULL, summary, sizeof summary);
        int traced = run_trace_merge_parts(rn.o.trace_path, rn.tag, R, rc == A2AMM_OK, &meta, err);
        if (!rc) rc = traced;
    }
    cli_guard_stop(&guard);
    time_map_free(&rn.tm);
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
