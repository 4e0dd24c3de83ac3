/*
 * op_run: the launcher side of a run (checks, world, fork, collect) and the
 * body of each rank (load, prepare B, execute once or time repetitions).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/llc.h"
#include "io/io.h"
#include "op/rank.h"

/* The timed variants in perf mode, in the order of the times array. */
enum { V_RUN, V_UNFUSED, V_LOCAL, V_BASELINE, OP_VARIANTS };

void op_options_default(op_options *o)
{
    *o = (op_options){.tile_m = 512, .depth = 4, .threads = 0, .path = OP_PATH_DIRECT, .unfused = 0,
                      .timeout_s = 60, .mode = OP_MODE_PRECISION, .iters = 10, .warmup = 1};
}

const char *op_path_name(op_path p) { return p == OP_PATH_PUT ? "put" : "direct"; }

typedef struct run_args {
    const char *dir;
    const a2amm_shape *s;
    const a2amm_sizes *z;
    op_options opt;
    int64_t ntiles, tm;
    gemm_isa isa;
    int need_ring, need_xbuf;
    char tag[32];  /* outputs are staged as npu_out.bin.tmp.<tag>, committed as a set */
    double *times; /* shared: [OP_VARIANTS][iters][R] then prepare [R] */
} run_args;

static op_fault fault_from_env(int rank)
{
    const char *r = getenv("A2AMM_FAULT_RANK"), *f = getenv("A2AMM_FAULT");
    if (!r || !f || atoi(r) != rank) return OP_FAULT_NONE;
    if (!strcmp(f, "kill")) return OP_FAULT_KILL;
    if (!strcmp(f, "exit")) return OP_FAULT_EXIT;
    if (!strcmp(f, "stall")) return OP_FAULT_STALL;
    if (!strcmp(f, "error")) return OP_FAULT_ERROR;
    if (!strcmp(f, "stall-end")) return OP_FAULT_STALL_END;
    return OP_FAULT_NONE;
}

/* Reads A and SA into symmetric memory, prepares B; the time of the latter. */
static int rank_load(op_rank *rk, const run_args *ra, double *prepare_s, a2amm_error *err)
{
    static const char *names[4] = {"input_a.bin", "input_scaleA.bin", "input_b.bin", "input_scaleB.bin"};
    const a2amm_sizes *z = ra->z;
    uint8_t *b = malloc(z->b_bytes), *sb = malloc(z->sb_bytes);
    uint8_t *dst[4] = {rk->a, rk->sa, b, sb};
    size_t bytes[4] = {z->a_bytes, z->sa_bytes, z->b_bytes, z->sb_bytes};
    int rc = b && sb ? A2AMM_OK : a2amm_fail(err, A2AMM_E_NOMEM, "rank %d: cannot allocate B", rk->me);
    for (int i = 0; !rc && i < 4; i++) {
        char path[IO_PATH_MAX];
        comm_set_doing(rk->ctx, "loading %s", names[i]);
        rc = io_rank_path(path, sizeof path, ra->dir, "input", rk->me, names[i], err);
        if (!rc) rc = io_read_exact(path, dst[i], bytes[i], err);
    }
    if (!rc) {
        comm_set_doing(rk->ctx, "preparing B");
        int64_t t0 = comm_now_ns();
        rc = gemm_b_prepare_on(rk->pool, ra->isa, b, sb, rk->s->N, rk->s->K, z->sk, rk->s->b_type, &rk->b, err);
        *prepare_s = (double)(comm_now_ns() - t0) * 1e-9;
    }
    if (!rc && ra->opt.baseline && ra->opt.mode == OP_MODE_PERF) rc = op_baseline_prepare(rk, b, sb, err);
    free(b);
    free(sb);
    return rc;
}

/* A pass over a buffer larger than this rank's share of the caches. */
static void flush_caches(volatile uint8_t *buf, size_t bytes)
{
    for (size_t i = 0; i < bytes; i += 64) buf[i] = (uint8_t)(buf[i] + 1);
}


static size_t flush_bytes(int R)
{
    size_t per_rank = llc_bytes() * 2 / (size_t)R;
    return per_rank < (8u << 20) ? (8u << 20) : per_rank;
}

/* An execution; the fused one takes the global number of its first tile. */
typedef int (*exec_fn)(op_rank *rk, uint64_t base, a2amm_error *err);

static int exec_unfused_epoch(op_rank *rk, uint64_t epoch, a2amm_error *err)
{
    (void)epoch;
    return op_exec_unfused(rk, err);
}

static int exec_local_epoch(op_rank *rk, uint64_t epoch, a2amm_error *err)
{
    (void)epoch;
    return op_exec_local(rk, err);
}

static int exec_baseline_epoch(op_rank *rk, uint64_t epoch, a2amm_error *err)
{
    (void)epoch;
    return op_exec_baseline(rk, err);
}

static int rank_perf(op_rank *rk, const run_args *ra, a2amm_error *err)
{
    exec_fn configured = ra->opt.unfused ? exec_unfused_epoch : op_exec_fused;
    exec_fn variants[OP_VARIANTS] = {configured, exec_unfused_epoch, exec_local_epoch, exec_baseline_epoch};
    int nvariants = ra->opt.baseline ? OP_VARIANTS : V_BASELINE;
    size_t fbytes = flush_bytes(rk->R);
    uint8_t *fbuf = calloc(fbytes, 1);
    if (!fbuf) return comm_fail(rk->ctx, A2AMM_E_NOMEM, "rank %d: cannot allocate the cache-flush buffer", rk->me);
    uint64_t epoch = 0;
    int rc = A2AMM_OK;
    for (int w = 0; !rc && w < ra->opt.warmup; w++) {
        comm_set_doing(rk->ctx, "perf warm-up %d", w);
        rc = configured(rk, (epoch++) * (uint64_t)rk->ntiles, err);
        if (!rc) rc = exec_unfused_epoch(rk, 0, err); /* fills xbuf for the local variant */
    }
    if (!rc && ra->opt.warmup == 0) rc = exec_unfused_epoch(rk, 0, err);
    for (int it = 0; !rc && it < ra->opt.iters; it++)
        for (int v = 0; !rc && v < nvariants; v++) {
            flush_caches(fbuf, fbytes);
            rc = comm_barrier(rk->ctx, comm_deadline_after(ra->opt.timeout_s), err);
            int64_t t0 = comm_now_ns();
            if (!rc) rc = variants[v](rk, v == V_RUN ? (epoch++) * (uint64_t)rk->ntiles : 0, err);
            int64_t t1 = comm_now_ns();
            ra->times[((size_t)v * (size_t)ra->opt.iters + (size_t)it) * (size_t)rk->R + (size_t)rk->me] =
                (double)(t1 - t0) * 1e-9;
        }
    if (!rc) rc = comm_barrier(rk->ctx, comm_deadline_after(ra->opt.timeout_s), err);
    free(fbuf);
    return rc;
}

/* Fails the world with this rank's error, its message prefixed "rank N: " once. */
static int rank_fail(comm_ctx *ctx, int rc, int me, const char *msg)
{
    char prefix[32];
    int n = snprintf(prefix, sizeof prefix, "rank %d: ", me);
    if (!strncmp(msg, prefix, (size_t)n)) return comm_fail(ctx, rc, "%s", msg);
    return comm_fail(ctx, rc, "%s%s", prefix, msg);
}

static int rank_main(comm_ctx *ctx, void *arg)
{
    const run_args *ra = arg;
    a2amm_error err = {0, ""};
    op_rank rk = {.s = ra->s, .z = ra->z, .opt = &ra->opt, .ctx = ctx, .me = comm_rank(ctx),
                  .R = comm_nranks(ctx), .m = ra->s->M, .m_max = ra->s->M, .ntiles = ra->ntiles, .tm = ra->tm};
    rk.fault = fault_from_env(rk.me);
    int threads = ra->opt.threads;
    int rc = op_rank_alloc(&rk, ra->need_ring, ra->need_xbuf, &err);
    if (!rc) rc = pool_create(threads, &rk.pool, &err);
    double prep = 0;
    if (!rc) rc = rank_load(&rk, ra, &prep, &err);
    ra->times[(size_t)OP_VARIANTS * (size_t)ra->opt.iters * (size_t)rk.R + (size_t)rk.me] = prep;
    if (rc) rc = rank_fail(ctx, rc, rk.me, err.msg);
    comm_set_doing(ctx, "waiting at the start barrier");
    if (!rc) rc = comm_barrier(ctx, comm_deadline_after(ra->opt.timeout_s), &err);
    if (!rc && ra->opt.mode == OP_MODE_PERF) {
        rc = rank_perf(&rk, ra, &err);
    } else if (!rc) {
        rc = ra->opt.unfused ? op_exec_unfused(&rk, &err) : op_exec_fused(&rk, 0, &err);
        char path[IO_PATH_MAX];
        if (!rc) {
            comm_set_doing(ctx, "writing npu_out.bin (staged)");
            rc = io_rank_path(path, sizeof path, ra->dir, "output", rk.me, "npu_out.bin", &err);
            if (!rc) rc = io_write_staged(path, ra->tag, rk.out, ra->z->out_bytes, &err);
            if (rc) rc = rank_fail(ctx, rc, rk.me, err.msg);
        }
        comm_set_doing(ctx, "waiting at the end barrier");
        if (!rc) rc = comm_barrier(ctx, comm_deadline_after(ra->opt.timeout_s), &err);
    }
    if (!rc && rk.fault == OP_FAULT_STALL_END) {
        comm_set_doing(ctx, "stalling after the last barrier (injected)");
        for (;;) pause();
    }
    if (rc && rc != A2AMM_E_PEER) rank_fail(ctx, rc, rk.me, err.msg);
    if (rc) comm_progress(ctx); /* "doing" keeps what it was doing when it stopped */
    else comm_set_doing(ctx, "done");
    op_rank_free(&rk);
    return rc;
}

/* Every rank's four input files exist with the right sizes: a bad file on
 * one rank is reported before any rank starts. */
static int check_inputs(const char *dir, const a2amm_shape *s, const a2amm_sizes *z, a2amm_error *err)
{
    static const char *names[4] = {"input_a.bin", "input_scaleA.bin", "input_b.bin", "input_scaleB.bin"};
    size_t bytes[4] = {z->a_bytes, z->sa_bytes, z->b_bytes, z->sb_bytes};
    for (int r = 0; r < s->R; r++)
        for (int i = 0; i < 4; i++) {
            char path[IO_PATH_MAX];
            struct stat st;
            int rc = io_rank_path(path, sizeof path, dir, "input", r, names[i], err);
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

static int check_options(const a2amm_shape *s, const op_options *o, a2amm_error *err)
{
    if (o->tile_m < 1) return a2amm_fail(err, A2AMM_E_INVAL, "--tile-m must be at least 1 (got %lld)", (long long)o->tile_m);
    if (o->depth < 1) return a2amm_fail(err, A2AMM_E_INVAL, "--depth must be at least 1 (got %d)", o->depth);
    if (o->threads < 0 || o->threads > 1024)
        return a2amm_fail(err, A2AMM_E_INVAL, "--threads must be 0 (automatic) to 1024 (got %d)", o->threads);
    if (!(o->timeout_s > 0)) return a2amm_fail(err, A2AMM_E_INVAL, "--timeout must be positive (got %g)", o->timeout_s);
    if (o->iters < 1 || o->warmup < 0)
        return a2amm_fail(err, A2AMM_E_INVAL, "--iters must be at least 1 and --warmup at least 0");
    if (s->R > 1024) return a2amm_fail(err, A2AMM_E_INVAL, "R must be at most 1024 (got %lld)", (long long)s->R);
    return A2AMM_OK;
}

/*
 * The outputs as a set: every rank's staged npu_out.bin renamed into place
 * when the whole run succeeded, all of them removed otherwise, so that a
 * failed run changes no output.
 */
static int settle_outputs(const run_args *ra, int success, a2amm_error *err)
{
    int rc = A2AMM_OK;
    for (int r = 0; r < ra->s->R; r++) {
        char path[IO_PATH_MAX];
        if (io_rank_path(path, sizeof path, ra->dir, "output", r, "npu_out.bin", NULL)) continue;
        if (success && !rc) rc = io_commit_staged(path, ra->tag, err);
        else io_discard_staged(path, ra->tag);
    }
    return rc;
}

/* The per-repetition maximum over ranks of one variant. */
static void max_over_ranks(const double *times, int iters, int R, int v, double *out)
{
    for (int it = 0; it < iters; it++) {
        double m = 0;
        for (int r = 0; r < R; r++) m = fmax(m, times[((size_t)v * (size_t)iters + (size_t)it) * (size_t)R + (size_t)r]);
        out[it] = m;
    }
}

/*
 * A rank silent for longer than this has stalled: longer than any wait's
 * --timeout deadline (which fails first, with the better message), and
 * every tile, phase and wait gives a sign of life.
 */
static double stall_limit_s(double timeout_s) { return timeout_s * 1.5 + 1.0; }

/*
 * The whole run's limit, from --timeout and the shape: a rank waits at most
 * --timeout at each of its waits (one per tile and source, a few barriers),
 * repetition by repetition; a run that outlives them all is stuck in a way
 * no single wait sees (a livelock).
 */
static double run_limit_s(const a2amm_shape *s, const run_args *ra)
{
    double reps = ra->opt.mode == OP_MODE_PERF ? (double)(ra->opt.warmup + ra->opt.iters) * OP_VARIANTS : 1.0;
    double waits = reps * ((double)ra->ntiles * (double)s->R + 4.0) + 8.0;
    return ra->opt.timeout_s * waits;
}

int op_run(const char *dir, const a2amm_shape *s, const op_options *opt_in, op_result *res, a2amm_error *err)
{
    memset(res, 0, sizeof *res);
    a2amm_sizes z;
    run_args ra = {.dir = dir, .s = s, .z = &z, .opt = *opt_in};
    snprintf(ra.tag, sizeof ra.tag, "%ld", (long)getpid());
    int rc = a2amm_shape_check(s, &z, err);
    if (!rc) rc = check_options(s, &ra.opt, err);
    if (!rc) rc = gemm_isa_select(&ra.isa, err);
    if (!rc) rc = check_inputs(dir, s, &z, err);
    if (rc) return rc;
    int R = (int)s->R;
    if (ra.opt.threads == 0) {
        int cores = pool_cpu_count();
        ra.opt.threads = cores / R > 0 ? cores / R : 1;
    }
    if (ra.opt.mode != OP_MODE_PERF) ra.opt.iters = 1;
    ra.tm = ra.opt.tile_m < s->M ? ra.opt.tile_m : s->M;
    ra.ntiles = (s->M + ra.tm - 1) / ra.tm;
    ra.need_ring = ra.opt.path == OP_PATH_PUT && !ra.opt.unfused;
    ra.need_xbuf = ra.opt.unfused || ra.opt.mode == OP_MODE_PERF;
    res->threads = ra.opt.threads;
    res->isa = ra.isa;
    res->ntiles = ra.ntiles;
    res->ranks = calloc((size_t)R, sizeof *res->ranks);
    size_t tbytes = ((size_t)OP_VARIANTS * (size_t)ra.opt.iters + 1) * (size_t)R * sizeof(double);
    ra.times = mmap(NULL, tbytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    comm_rank_outcome *outcomes = calloc((size_t)R, sizeof *outcomes);
    if (!res->ranks || ra.times == MAP_FAILED || !outcomes) {
        if (ra.times != MAP_FAILED) munmap(ra.times, tbytes);
        free(outcomes);
        return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the run's bookkeeping");
    }
    comm_world *world = NULL;
    rc = comm_world_create(R, op_rank_heap_bytes(s, &z, &ra.opt, ra.need_ring, ra.need_xbuf), &world, err);
    if (!rc) {
        comm_launch_options lo = {.timeout_s = run_limit_s(s, &ra), .grace_s = 1.5,
                                  .stall_s = stall_limit_s(ra.opt.timeout_s), .stop = ra.opt.stop};
        rc = comm_launch(world, rank_main, &ra, &lo, outcomes, err);
    }
    if (ra.opt.mode == OP_MODE_PRECISION) {
        int settled = settle_outputs(&ra, rc == A2AMM_OK, err);
        if (!rc) rc = settled;
    }
    for (int r = 0; r < R; r++) {
        res->ranks[r].status = outcomes[r].status;
        res->ranks[r].term_signal = outcomes[r].term_signal;
        res->ranks[r].started = outcomes[r].pid > 0;
        res->ranks[r].exit_code = outcomes[r].exit_code;
        res->ranks[r].failed_first = outcomes[r].failed_first;
        res->ranks[r].killed_by_launcher = outcomes[r].killed_by_launcher;
        snprintf(res->ranks[r].doing, sizeof res->ranks[r].doing, "%s", outcomes[r].doing);
    }
    if (!rc && ra.opt.mode == OP_MODE_PERF) {
        op_perf *p = &res->perf;
        p->iters = ra.opt.iters;
        p->fused = calloc((size_t)p->iters, sizeof(double));
        p->unfused = calloc((size_t)p->iters, sizeof(double));
        p->local = calloc((size_t)p->iters, sizeof(double));
        if (ra.opt.baseline) p->baseline = calloc((size_t)p->iters, sizeof(double));
        if (!p->fused || !p->unfused || !p->local || (ra.opt.baseline && !p->baseline)) {
            rc = a2amm_fail(err, A2AMM_E_NOMEM, "out of memory");
        } else {
            max_over_ranks(ra.times, p->iters, R, V_RUN, p->fused);
            max_over_ranks(ra.times, p->iters, R, V_UNFUSED, p->unfused);
            max_over_ranks(ra.times, p->iters, R, V_LOCAL, p->local);
            if (p->baseline) max_over_ranks(ra.times, p->iters, R, V_BASELINE, p->baseline);
            for (int r = 0; r < R; r++)
                p->prepare_s = fmax(p->prepare_s, ra.times[(size_t)OP_VARIANTS * (size_t)p->iters * (size_t)R + (size_t)r]);
            p->flush_bytes = (double)flush_bytes(R);
        }
    }
    comm_world_destroy(world);
    munmap(ra.times, tbytes);
    free(outcomes);
    return rc;
}

void op_result_free(op_result *r)
{
    free(r->ranks);
    free(r->perf.fused);
    free(r->perf.unfused);
    free(r->perf.local);
    free(r->perf.baseline);
    memset(r, 0, sizeof *r);
}
