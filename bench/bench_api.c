/*
 * `a2amm bench api M K N R`: the in-memory call of the public API
 * (a2amm_op_run, inside ranks made by a2amm_launch) beside the command's
 * pipeline (`a2amm run` perf mode, over files) on the same data, in
 * rounds that alternate the two so that a slow phase of a shared machine
 * hits both; and a2amm_op_set_weights on fresh weights, as a training step
 * sets them on every call. Each repetition is timed on every rank after a
 * cache flush; its time is the slowest rank's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench/bench.h"
#include "cli/args.h"
#include "cli/data_dir.h"
#include "cli/json.h"
#include "cli/op_args.h"
#include "cli/perf_report.h"
#include "common/error.h"
#include "gen/gen.h"
#include "io/io.h"
#include "cli/measure.h"
#include "cli/progress.h"
#include "cli/runner.h"
#include "cli/trace.h"

static void bench_api_usage(FILE *f)
{
    fprintf(f,
            "usage: a2amm bench api M K N R [options]\n"
            "\n"
            "Times the fused operator two ways on the same MXFP8 data (normal values):\n"
            "  a2amm run           the command's pipeline (perf mode, over files)\n"
            "  in-memory call      a2amm_op_run of the public API, inside ranks made by\n"
            "                      a2amm_launch, input copied in from the rank's own arrays\n"
            "  set_weights         a2amm_op_set_weights on fresh weights (the preparation a\n"
            "                      training step pays on every call)\n"
            "  in-memory + weights the call with its weights set anew every time\n"
            "  in-memory, traced   the call with --trace's recorder as its observer (every\n"
            "                      span kept), right after each untraced call\n"
            "in ROUNDS rounds of ITERS repetitions each, alternating the two, caches flushed\n"
            "before every repetition, a repetition's time the slowest rank's.\n"
            "\n"
            "options:\n"
            "  --iters N          repetitions per round (default 3)\n"
            "  --rounds N         rounds (default 2)\n"
            "  --threads T        compute threads per rank, 1 to 1024 (default: cores / R)\n"
            "  --tile-m ROWS      rows per pipeline tile (default 512)\n"
            "  --depth SLOTS      ring slots on the put path (default 4)\n"
            "  --path direct|put  how rows travel (default direct)\n"
            "  --timeout SECONDS  deadline of every wait between ranks (default 60)\n"
            "  --json             one JSON object instead of the table\n"
            "  --quiet            no progress on stderr (the rounds done and the time left: on a\n"
            "                     terminal a line rewritten in place, else a line every few seconds)\n"
            "\n"
            "example:\n"
            "  a2amm bench api 512 2048 896 4 --iters 3\n"
            "  a2amm bench api 2048 8192 3584 4 --iters 2 --rounds 2   (the seed's perf shape)\n");
}

typedef struct api_bench {
    op_shape s;
    op_sizes z;
    run_options o;
    int iters;
    io_rank_inputs *in;   /* every rank's inputs (inherited by the ranks through fork) */
    double *t_call, *t_weights, *t_traced; /* shared: [iters][R] */
    size_t flush_bytes;
} api_bench;

/* One call from cold caches, every rank starting together; its time into *t. */
static int timed_call(a2amm_comm *comm, a2amm_op *op, const api_bench *b, const io_rank_inputs *in, uint16_t *out,
                      measure_flusher *fl, double *t, a2amm_error *err)
{
    measure_flush(fl);
    int rc = a2amm_comm_barrier(comm, b->o.timeout_s, err);
    double t0 = cli_now();
    if (!rc) rc = a2amm_op_run(op, b->s.M, in->a, in->sa, out, err);
    *t = cli_now() - t0;
    return rc;
}

static int api_rank(a2amm_comm *comm, void *arg)
{
    api_bench *b = arg;
    int me = a2amm_comm_rank(comm), R = (int)b->s.R;
    a2amm_error err = {0, ""};
    a2amm_op_config cfg = {.size = sizeof(a2amm_op_config), .max_m = b->s.M, .k = b->s.K, .n = b->s.N, .a_type = b->s.a_type,
                           .b_type = b->s.b_type, .tile_m = b->o.tile_m, .depth = b->o.depth,
                           .threads = b->o.threads, .path = b->o.path,
                           .timeout_s = b->o.timeout_s};
    a2amm_op *op = NULL;
    uint16_t *out = malloc(b->z.out_bytes);
    measure_flusher fl;
    int rc = measure_flusher_init(&fl, NULL, b->flush_bytes, &err);
    if (!rc) rc = out ? a2amm_op_create(comm, &cfg, &op, &err) : a2amm_fail(&err, A2AMM_E_NOMEM, "out of memory");
    const io_rank_inputs *in = &b->in[me];
    trace_rank tr = {0};
    if (!rc) rc = trace_rank_init(&tr, me, R, 1, &err);
    if (!rc) rc = a2amm_op_set_weights(op, in->b, in->sb, b->z.sk, &err); /* one warm-up */
    if (!rc) rc = a2amm_op_run(op, b->s.M, in->a, in->sa, out, &err);
    for (int it = 0; !rc && it < b->iters; it++) {
        size_t slot = (size_t)it * (size_t)R + (size_t)me;
        measure_flush(&fl);
        double t0 = cli_now();
        rc = a2amm_op_set_weights(op, in->b, in->sb, b->z.sk, &err);
        b->t_weights[slot] = cli_now() - t0;
        if (!rc) rc = timed_call(comm, op, b, in, out, &fl, &b->t_call[slot], &err);
        /* the same call traced: every span kept, as --trace does */
        tr.n = 0;
        if (!rc) rc = a2amm_op_set_observer(op, trace_observe, &tr, &err);
        if (!rc) rc = timed_call(comm, op, b, in, out, &fl, &b->t_traced[slot], &err);
        if (!rc) rc = a2amm_op_set_observer(op, NULL, NULL, &err);
    }
    trace_rank_free(&tr);
    a2amm_op_destroy(op);
    free(out);
    measure_flusher_free(&fl);
    if (rc) fprintf(stderr, "a2amm bench api: rank %d: %s\n", me, err.msg);
    return rc;
}

/* The slowest rank's time of each repetition, appended to all[*n]. */
static void slowest(const double *t, int iters, int R, double *all, int *n)
{
    for (int it = 0; it < iters; it++) {
        double m = 0;
        for (int r = 0; r < R; r++) m = fmax(m, t[(size_t)it * (size_t)R + (size_t)r]);
        all[(*n)++] = m;
    }
}

int cmd_bench_api(int argc, char **argv)
{
    api_bench b;
    memset(&b, 0, sizeof b);
    run_options_default(&b.o);
    b.o.mode = RUN_PERF;
    b.iters = 3;
    int rounds = 2, json = 0, quiet = 0, npos = 0;
    char *pos[4];
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        int64_t x;
        if (cli_is_help(argv[i])) {
            bench_api_usage(stdout);
            return 0;
        }
        if ((m = cli_op_option("bench api", argc, argv, &i, &b.o))) {
            if (m < 0) return 2;
        } else if ((m = cli_option(argc, argv, &i, "--rounds", &v))) {
            if (m < 0 || cli_parse_i64("bench api", "--rounds", v, 1, 1000, &x)) return 2;
            rounds = (int)x;
        } else if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--quiet")) quiet = 1;
        else if (argv[i][0] == '-' && argv[i][1] && !(argv[i][1] >= '0' && argv[i][1] <= '9')) {
            fprintf(stderr, "a2amm bench api: unknown option '%s' (see a2amm bench api --help)\n", argv[i]);
            return 2;
        } else if (npos < 4) pos[npos++] = argv[i];
        else {
            fprintf(stderr, "a2amm bench api: too many arguments at '%s' (expected M K N R)\n", argv[i]);
            return 2;
        }
    }
    if (npos != 4) {
        fprintf(stderr, "a2amm bench api: expected M K N R, got %d of them\n", npos);
        bench_api_usage(stderr);
        return 2;
    }
    b.s = (op_shape){0, 0, 0, 0, A2AMM_E4M3, A2AMM_E4M3, OP_ALLTOALL_MATMUL};
    if (cli_parse_shape("bench api", pos, &b.s, &b.z)) return 2;
    b.iters = b.o.iters == 10 ? 3 : b.o.iters; /* --iters: repetitions per round */
    b.o.iters = b.iters;
    int R = (int)b.s.R;
    b.flush_bytes = measure_flush_bytes(R);

    const char *tmpdir = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/a2amm-bench-api.XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(dir)) {
        perror("a2amm bench api: cannot make a temporary folder");
        return 1;
    }
    a2amm_error err = {0, ""};
    gen_options g = {GEN_DIST_NORMAL, 1, MX_SCALE_FLOOR};
    b.in = calloc((size_t)R, sizeof *b.in);
    size_t tbytes = (size_t)b.iters * (size_t)R * sizeof(double);
    b.t_call = mmap(NULL, 3 * tbytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    double *all_run = calloc((size_t)(rounds * b.iters), sizeof(double));
    double *all_call = calloc((size_t)(rounds * b.iters), sizeof(double));
    double *all_w = calloc((size_t)(rounds * b.iters), sizeof(double));
    double *all_traced = calloc((size_t)(rounds * b.iters), sizeof(double));
    int rc = b.in && b.t_call != MAP_FAILED && all_run && all_call && all_w && all_traced ? gen_write_inputs(dir, &b.s, &b.z, &g, b.in, &err)
                                                                          : a2amm_fail(&err, A2AMM_E_NOMEM, "out of memory");
    if (b.t_call != MAP_FAILED) b.t_weights = b.t_call + (size_t)b.iters * (size_t)R;
    if (b.t_call != MAP_FAILED) b.t_traced = b.t_weights + (size_t)b.iters * (size_t)R;
    int n_run = 0, n_call = 0, n_w = 0, n_traced = 0;
    a2amm_op_config heap_cfg = {.size = sizeof(a2amm_op_config), .max_m = b.s.M, .k = b.s.K, .n = b.s.N, .a_type = b.s.a_type, .b_type = b.s.b_type,
                                .tile_m = b.o.tile_m, .depth = b.o.depth,
                                .path = b.o.path};
    size_t op_heap = 0; /* a config that breaks a rule says so at create */
    a2amm_op_heap_bytes(&heap_cfg, R, &op_heap, NULL);
    /* a rank that stops showing signs of life (a hang of its own, outside every wait) fails the launch */
    a2amm_launch_options lo = {.size = sizeof(a2amm_launch_options), .heap_bytes = op_heap + (1u << 20),
                               .stall_s = b.o.timeout_s * 1.5 + 1.0};
    cli_progress progress;
    cli_progress_start_lines(&progress, quiet, json);
    for (int round = 0; !rc && round < rounds; round++) {
        cli_progress_count(&progress, "a2amm bench api: round", round + 1, round, rounds);
        run_result res;
        rc = run_files(dir, &b.s, &b.o, &res, &err);
        if (!rc)
            for (int it = 0; it < b.iters; it++) all_run[n_run++] = res.perf.t[RUN_V_CONFIGURED][it];
        run_result_free(&res);
        if (!rc) rc = a2amm_launch(R, api_rank, &b, &lo, &err);
        if (!rc) {
            slowest(b.t_call, b.iters, R, all_call, &n_call);
            slowest(b.t_weights, b.iters, R, all_w, &n_w);
            slowest(b.t_traced, b.iters, R, all_traced, &n_traced);
        }
    }
    if (!rc) cli_progress_count(&progress, "a2amm bench api: round", rounds, rounds, rounds);
    cli_progress_end(&progress);
    if (!rc) {
        cli_summary run = cli_summarize(all_run, n_run), call = cli_summarize(all_call, n_call),
                    w = cli_summarize(all_w, n_w), traced = cli_summarize(all_traced, n_traced);
        double flop = 2.0 * (double)b.s.M * (double)b.s.N * (double)b.s.K * (double)R;
        if (json) {
            printf("{\"command\":\"bench api\",\"M\":%lld,\"K\":%lld,\"N\":%lld,\"R\":%d,\"iters\":%d,\"rounds\":%d",
                   (long long)b.s.M, (long long)b.s.K, (long long)b.s.N, R, b.iters, rounds);
            cli_json_key_num("run_median_s", "%.6g", run.median);
            cli_json_key_num("call_median_s", "%.6g", call.median);
            cli_json_key_num("set_weights_median_s", "%.6g", w.median);
            cli_json_key_num("call_with_weights_s", "%.6g", call.median + w.median);
            cli_json_key_num("call_over_run", "%.4g", call.median / run.median);
            cli_json_key_num("traced_call_median_s", "%.6g", traced.median);
            cli_json_key_num("traced_over_call", "%.4g", traced.median / call.median);
            printf("}\n");
        } else {
            printf("a2amm bench api: M=%lld K=%lld N=%lld R=%d, %d rounds of %d repetitions, %.1f GFLOP each\n",
                   (long long)b.s.M, (long long)b.s.K, (long long)b.s.N, R, rounds, b.iters, flop / 1e9);
            printf("  %-34s %10s %10s %10s %10s\n", "", "min ms", "median ms", "max ms", "GFLOP/s");
            printf("  %-34s %10.3f %10.3f %10.3f %10.1f\n", "a2amm run (fused, perf mode)", run.min * 1e3,
                   run.median * 1e3, run.max * 1e3, flop / run.median / 1e9);
            printf("  %-34s %10.3f %10.3f %10.3f %10.1f\n", "in-memory call (a2amm_op_run)", call.min * 1e3,
                   call.median * 1e3, call.max * 1e3, flop / call.median / 1e9);
            printf("  %-34s %10.3f %10.3f %10.3f\n", "set_weights (per rank, slowest)", w.min * 1e3, w.median * 1e3,
                   w.max * 1e3);
            printf("  %-34s %10s %10.3f %10s %10.1f\n", "in-memory, weights set every call", "-",
                   (call.median + w.median) * 1e3, "-", flop / (call.median + w.median) / 1e9);
            printf("  %-34s %10.3f %10.3f %10.3f %10.1f\n", "in-memory call, traced (recorder)", traced.min * 1e3,
                   traced.median * 1e3, traced.max * 1e3, flop / traced.median / 1e9);
            printf("  in-memory call / a2amm run (medians): %.3f\n", call.median / run.median);
            printf("  traced / untraced call (medians): %.3f (the cost of --trace's recorder%s)\n",
                   traced.median / call.median,
                   cli_difference_measurable(&traced, &call) ? "" : "; within the spread: none measurable");
            if (cli_spread_wide(run.min, run.max) || cli_spread_wide(call.min, call.max) ||
                cli_spread_wide(traced.min, traced.max))
                printf("  a busy machine: a spread (max - min) over 10%% of the max means other work took the cores\n"
                       "  during these repetitions; ratios of medians within the spread say little\n");
        }
    } else {
        fprintf(stderr, "a2amm bench api: %s\n", err.msg);
    }
    for (int r = 0; b.in && r < R; r++) io_rank_inputs_free(&b.in[r]);
    free(b.in);
    free(all_run), free(all_call), free(all_w), free(all_traced);
    if (b.t_call != MAP_FAILED) munmap(b.t_call, 3 * tbytes);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "a2amm bench api: could not remove %s\n", dir);
    return rc ? 1 : 0;
}
