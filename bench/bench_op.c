/*
 * `a2amm bench op M K N R`: the fused run beside the unfused run, the same
 * matmuls on data already in place, and the baseline a user writes today
 * (whole AllToAll + fp32 dequantize + oneDNN's matmul), all in one run.
 */
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "bench/bench.h"
#include "cli/data_dir.h"
#include "cli/out_path.h"
#include "common/error.h"
#include "cli/op_args.h"
#include "cli/perf_report.h"
#include "cli/progress.h"
#include "gen/gen.h"
#include "cli/runner.h"
#include "bench/bench_peers.h"
#include "bench/op_baseline.h"

static void bench_op_usage(FILE *f)
{
    fprintf(f,
            "usage: a2amm bench op M K N R [options]\n"
            "\n"
            "Generates MXFP8 inputs for R ranks (normal values, no golden) and times, in one\n"
            "run, with caches flushed before every repetition and the slowest rank's time\n"
            "per repetition: the fused run; the unfused run; the same matmuls on data\n"
            "already in place (the matmul alone: their difference from the fused run is the\n"
            "communication left exposed); the AllToAll alone; and the baseline a user writes\n"
            "today, with oneDNN's matmul, its weights packed once (bf16 where oneDNN has one\n"
            "for this CPU, else fp32), to bf16:\n"
            "  --op alltoall-matmul (the seed's op, the default): the whole AllToAll of A\n"
            "    (MPI_Alltoall over MPI), dequantize to fp32, the matmul;\n"
            "  --op matmul-alltoall (the reverse): dequantize X to fp32, the matmul [M, N],\n"
            "    then the AllToAll of its column blocks (MPI_Alltoall over MPI).\n"
            "\n"
            "options:\n"
            "  --op alltoall-matmul|matmul-alltoall  which op (default alltoall-matmul)\n"
            "  --iters N          repetitions (default 10)\n"
            "  --threads T        compute threads per rank, 1 to 1024 (default: cores / R)\n"
            "  --tile-m ROWS      rows per pipeline tile (default 512)\n"
            "  --depth SLOTS      ring slots on the put path (default 4)\n"
            "  --path direct|put  how rows travel (default direct)\n"
            "  --timeout SECONDS  deadline of every wait between ranks (default 60)\n"
            "  --transport shm|mpi  shm: R ranks forked here (default); mpi: this process is one\n"
            "                     rank of an MPI job, each generating and reading only its own\n"
            "                     inputs:\n"
            "                       mpirun --allow-run-as-root --oversubscribe -np R \\\n"
            "                         a2amm bench op M K N R --transport mpi\n"
            "  --dir DIR          keep the generated inputs in DIR (default: a temporary folder)\n"
            "  --trace FILE       every rank's pipeline over the repetitions as a Chrome trace\n"
            "                     (JSON; a2amm timeline FILE draws it); FILE is replaced whole: a\n"
            "                     device, a FIFO, a folder or one of --dir's files is refused\n"
            "  --json             one JSON object instead of the table\n"
            "  --quiet            no progress on stderr (see Time)\n"
            "\n"
            "Time: (1 warm-up + --iters) runs of each of the 5 variants, after writing the\n"
            "inputs; it grows with M x K x N x R and --iters: about 340 s at the seed's perf\n"
            "shape (2048 8192 3584 4) with the defaults on a 2-core machine, about a second at\n"
            "the first example's. Progress goes to stderr: the inputs being written, then the\n"
            "repetitions done and about how long is left (on a terminal a line rewritten in\n"
            "place, else a line every few seconds); --quiet or --json: none.\n"
            "\n"
            "example:\n"
            "  a2amm bench op 512 2048 896 4 --iters 3\n"
            "  a2amm bench op 512 2048 896 4 --iters 3 --op matmul-alltoall\n"
            "  a2amm bench op 2048 8192 3584 4      (the seed's perf shape)\n");
}

/* nftw's visitor for removing the scratch folder, deepest first. */
static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

int cmd_bench_op(int argc, char **argv)
{
    run_options o;
    run_options_default(&o);
    o.mode = RUN_PERF;
    o.baseline = 1;
    o.gemm = &bench_onednn_baseline;
    const char *dir = NULL, *op = NULL;
    op_kind kind = OP_ALLTOALL_MATMUL;
    char *pos[4];
    int npos = 0, json = 0, quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        if (cli_is_help(argv[i])) { bench_op_usage(stdout); return 0; }
        if ((m = cli_option(argc, argv, &i, "--dir", &v))) { if (m < 0) return 2; dir = v; }
        else if ((m = cli_op_option("bench op", argc, argv, &i, &o))) { if (m < 0) return 2; }
        else if ((m = cli_option(argc, argv, &i, "--op", &v))) {
            if (m < 0 || cli_parse_op("bench op", v, &kind)) return 2;
            op = v; /* the last one wins */
        }
        else if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--quiet")) quiet = 1;
        else if (argv[i][0] == '-' && argv[i][1] != '\0' && !(argv[i][1] >= '0' && argv[i][1] <= '9')) {
            fprintf(stderr, "a2amm bench op: unknown option '%s' (see a2amm bench op --help)\n", argv[i]);
            return 2;
        } else if (npos < 4) pos[npos++] = argv[i];
        else {
            fprintf(stderr, "a2amm bench op: too many arguments at '%s' (expected M K N R)\n", argv[i]);
            return 2;
        }
    }
    if (op && !strcmp(op, "moe")) {
        fprintf(stderr, "a2amm bench op: --op moe: bench op times alltoall-matmul or matmul-alltoall; the MoE op "
                        "has its own: a2amm bench moe --help\n");
        return 2;
    }
    if (npos != 4) {
        fprintf(stderr, "a2amm bench op: expected M K N R, got %d of them\n", npos);
        bench_op_usage(stderr);
        return 2;
    }
    bench_onednn_cap_isa(); /* oneDNN as on a CPU without what A2AMM_CPU_HIDE hides */
    op_shape s = {0, 0, 0, 0, A2AMM_E4M3, A2AMM_E4M3, kind};
    op_sizes z;
    if (cli_parse_shape("bench op", pos, &s, &z)) return 2;
    a2amm_error err = {0, ""};
    /* before any input is written: the trace never replaces a device or the data it runs on (--dir) */
    if (o.trace_path && cli_check_output("--trace", o.trace_path, dir, s.R, &err)) {
        cli_print_error("bench op", &err);
        return 2;
    }
    int mpi_rank = -1; /* over MPI: this process's rank, which generates only its own inputs */
    if (o.transport == RUN_MPI) {
        mpi_rank = run_mpi_rank();
        if (mpi_rank < 0) {
            fprintf(stderr, "a2amm bench op: --transport mpi: this process is not part of an MPI job; launch every "
                            "rank with mpirun:\n  mpirun --allow-run-as-root --oversubscribe -np %lld "
                            "a2amm bench op %lld %lld %lld %lld%s --transport mpi\n",
                    (long long)s.R, (long long)s.M, (long long)s.K, (long long)s.N, (long long)s.R,
                    kind == OP_MATMUL_ALLTOALL ? " --op matmul-alltoall" : "");
            return 2;
        }
        o.path = A2AMM_PATH_PUT;
        if (mpi_rank != 0 && !freopen("/dev/null", "w", stdout)) return 1;
    }

    /* a scratch folder under $TMPDIR (else /tmp), removed at the end */
    const char *tmpdir = getenv("TMPDIR");
    char tmp[4096];
    int n = snprintf(tmp, sizeof tmp, "%s/a2amm-bench-op.XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (n < 0 || (size_t)n >= sizeof tmp) {
        fprintf(stderr, "a2amm bench op: TMPDIR is too long (%zu characters)\n", strlen(tmpdir));
        return 1;
    }
    if (!dir && !(dir = mkdtemp(tmp))) {
        fprintf(stderr, "a2amm bench op: cannot make a temporary folder %s: %s\n", tmp, strerror(errno));
        return 1;
    }
    o.progress = !quiet && !json && o.transport != RUN_MPI; /* the repetitions done (progress.h) */
    cli_progress progress;
    cli_progress_start_lines(&progress, !o.progress, 0);
    cli_progress_say(&progress, "a2amm bench op: writing %lld ranks' inputs", (long long)s.R);
    o.stop = cli_catch_stop_signals(); /* Ctrl-C: stop the ranks, remove the scratch folder, exit 130 */
    gen_options g = {GEN_DIST_NORMAL, 1, MX_SCALE_FLOOR};
    io_rank_inputs *in = calloc((size_t)s.R, sizeof *in);
    int rc = in ? A2AMM_OK : a2amm_fail(&err, A2AMM_E_NOMEM, "out of memory");
    if (!rc && mpi_rank >= 0) { /* only this rank's folder (the others may be on other hosts) */
        rc = io_rank_inputs_alloc(&z, &in[0], &err);
        if (!rc) rc = gen_rank_inputs(&s, &z, &g, mpi_rank, &in[0], &err);
        if (!rc) rc = io_save_rank_inputs(dir, mpi_rank, &z, &in[0], &err);
    } else if (!rc) {
        rc = gen_write_inputs(dir, &s, &z, &g, in, &err);
    }
    cli_progress_end(&progress);
    for (int r = 0; in && r < s.R; r++) io_rank_inputs_free(&in[r]);
    free(in);
    if (!rc && *o.stop) rc = a2amm_fail(&err, A2AMM_E_INTERRUPTED, "interrupted while writing the inputs");
    run_result res = {0};
    if (!rc) {
        if (!json) {
            printf("a2amm bench op: M=%lld K=%lld N=%lld R=%lld, op %s, e4m3 x e4m3, path %s, tile %lld, %d "
                   "repetitions\n", (long long)s.M, (long long)s.K, (long long)s.N, (long long)s.R,
                   op_kind_name(s.kind), run_path_name(o.path), (long long)o.tile_m, o.iters);
            fflush(stdout);
        }
        rc = run_files(dir, &s, &o, &res, &err);
    }
    if (o.transport == RUN_MPI) run_mpi_finalize();
    if (!rc) {
        if (!json) printf("  %d compute thread%s per rank, kernel %s\n", res.threads, res.threads == 1 ? "" : "s",
                          res.kernel);
        cli_print_op_perf(&s, &o, &res, json);
        if (!json) {
            cli_summary f = cli_summarize(res.perf.t[RUN_V_CONFIGURED], res.perf.iters);
            cli_summary l = cli_summarize(res.perf.t[RUN_V_MATMUL], res.perf.iters);
            cli_summary b = cli_summarize(res.perf.t[RUN_V_BASELINE], res.perf.iters);
            printf("  ratios (medians): fused / matmul alone = %.3f; baseline / fused = %.2fx\n",
                   f.median / l.median, b.median / f.median);
            if (o.trace_path)
                printf("  trace: %s (draw it: a2amm timeline %s -o %s.svg)\n", o.trace_path, o.trace_path,
                       o.trace_path);
        }
    } else {
        cli_print_error("bench op", &err);
    }
    run_result_free(&res);
    if (dir == tmp && nftw(tmp, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "a2amm bench op: could not remove %s: %s\n", tmp, strerror(errno));
    if (rc == A2AMM_E_INTERRUPTED && cli_exit_code_for_stop()) return cli_exit_code_for_stop();
    return rc ? 1 : 0;
}
