/* `a2amm run` (and the seed's `a2amm M K N R [mode]`): the fused operator
 * across R processes, in precision or perf mode. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/json.h"
#include "cli/commands.h"
#include "cli/data_dir.h"
#include "io/io.h"
#include "cli/runner.h"
#include "cli/op_args.h"
#include "cli/out_path.h"
#include "cli/perf_report.h"
#include "cli/rank_report.h"

static void run_usage(FILE *f)
{
    fprintf(f,
            "usage: a2amm run M K N R [precision|perf] [options]\n"
            "       a2amm M K N R [precision|perf] [options]     (the seed's form)\n"
            "\n"
            "Forks R rank processes over shared symmetric memory. Each reads its inputs\n"
            "from DIR/input/<r>/ (as written by a2amm gen) and runs the op gen made them for\n"
            "(DIR/input/a2amm-meta.txt records it):\n"
            "  alltoall-matmul (the seed's): each rank receives its row blocks of A from\n"
            "    every rank while it multiplies what has arrived by its own B, tile by tile,\n"
            "    and writes DIR/output/<r>/npu_out.bin (bf16 [M, N]);\n"
            "  matmul-alltoall (the reverse): each rank multiplies its X [M, K] by its own B,\n"
            "    sending column block j of each tile's result to rank j while it computes the\n"
            "    next, and writes the blocks it receives, stacked by source (bf16 [R*M, N/R]).\n"
            "perf mode times repetitions instead (caches flushed before each) and reports\n"
            "the slowest rank's time, TFLOP/s and the communication left exposed; it takes\n"
            "(--warmup + --iters) runs of each of 4 variants (5 with --baseline), each about\n"
            "as long as one run, and says on stderr how many are done and about how long is left.\n"
            "It calls the public API (include/a2amm.h) like any program could.\n"
            "\n"
            "options:\n"
            "  --dir DIR          the folder gen wrote (default: .)\n"
            "  --op alltoall-matmul|matmul-alltoall|moe  the op: what gen recorded (an op that\n"
            "                     contradicts it is refused); without a meta file, alltoall-matmul\n"
            "                     unless named (the seed's form too); moe takes T H I R:\n"
            "                     a2amm run --op moe --help\n"
            "  --tile-m ROWS      rows of M per pipeline tile (default 512)\n"
            "  --depth SLOTS      ring slots per source on the put path (default 4; alltoall-matmul)\n"
            "  --threads T        compute threads per rank, 1 to 1024 (default: cores / R, at\n"
            "                     least 1)\n"
            "  --path direct|put  direct: read rows from the peer's memory (default);\n"
            "                     put: the owner puts rows into a ring of slots and signals\n"
            "  --unfused          the whole AllToAll, a barrier, then the matmul (matmul-alltoall:\n"
            "                     the whole matmul, then the AllToAll)\n"
            "  --iters N          perf repetitions (default 10)\n"
            "  --warmup N         perf warm-up runs (default 1)\n"
            "  --timeout SECONDS  deadline of every wait between ranks (default 60); a rank\n"
            "                     silent for 1.5 x this + 1 s (stopped, stuck) fails the run\n"
            "  --a-type/--b-type e4m3|e5m2  element types: what gen recorded in\n"
            "                     DIR/input/a2amm-meta.txt (a type or shape that contradicts\n"
            "                     it is refused); without that file run needs both named, and\n"
            "                     the seed's form takes the seed's e4m3 for those not named\n"
            "                     (as the seed's launcher; it says so on stderr)\n"
            "  --json             print one JSON object: perf mode its figures, precision mode\n"
            "                     the run (shape, each rank's status, time, the outputs written)\n"
            "  --quiet            no progress in perf mode: on stderr, the repetitions done and\n"
            "                     about how long is left (on a terminal a line rewritten in\n"
            "                     place, else a line every few seconds; never with --json)\n"
            "  --baseline         perf mode: also time what a user writes today: alltoall-matmul\n"
            "                     the whole AllToAll + dequantize to fp32 + OpenBLAS sgemm;\n"
            "                     matmul-alltoall dequantize + sgemm, then the AllToAll of the blocks\n"
            "  --trace FILE       every rank's pipeline as a Chrome trace (JSON; open it in\n"
            "                     Perfetto or chrome://tracing, or draw it: a2amm timeline FILE):\n"
            "                     B preparation, each tile's waits per source, matmuls, sends,\n"
            "                     signals, barriers, the output write; perf mode: every repetition.\n"
            "                     FILE is replaced whole (a new file renamed over it): a device, a\n"
            "                     FIFO, a folder or one of the data's files is refused\n"
            "  --transport shm|mpi  shm: fork R ranks here over shared memory (default);\n"
            "                     mpi: this process is one rank of an MPI job, across machines:\n"
            "                       mpirun --allow-run-as-root --oversubscribe -np R [--host h1,h2] \\\n"
            "                         a2amm run M K N R --transport mpi --dir D\n"
            "                     rank r reads D/input/<r>/ and writes D/output/<r>/ (D shared or\n"
            "                     per host); rows travel as messages, so it takes the put path\n"
            "\n"
            "Outputs are written as a set: every rank's npu_out.bin when the run succeeds,\n"
            "none changed when it fails or is interrupted (Ctrl-C: exit 130, SIGTERM: 143).\n"
            "Killed (kill -9 included), it leaves the old set or the new one, never a mix,\n"
            "and no temporary file: its guard process (a2amm-guard) cleans up.\n"
            "One gen or run at a time per folder (a second is refused).\n"
            "\n"
            "A2AMM_ISA=ref|avx2|avx512|amx forces a kernel level (default: the best this CPU\n"
            "runs). A2AMM_CPU_HIDE=amx,avx512bf16,avx512,avx2 hides CPU features, as on a CPU\n"
            "without them: the run takes the next level down, with the same bits as forcing\n"
            "that level (a2amm cpu says what runs here).\n"
            "\n"
            "example:\n"
            "  a2amm gen 700 256 96 2 --dir /tmp/a2amm-demo\n"
            "  a2amm run 700 256 96 2 --dir /tmp/a2amm-demo --tile-m 128\n"
            "  a2amm verify 700 96 2 --dir /tmp/a2amm-demo\n"
            "  a2amm gen 700 256 96 2 --op matmul-alltoall --dir /tmp/a2amm-demo-reverse\n"
            "  a2amm run 700 256 96 2 --op matmul-alltoall --dir /tmp/a2amm-demo-reverse --tile-m 128\n"
            "  a2amm run 700 256 96 2 perf --op matmul-alltoall --dir /tmp/a2amm-demo-reverse --iters 3\n"
            "  a2amm verify 700 96 2 --dir /tmp/a2amm-demo-reverse\n");
}

/* --json in precision mode: the run as one object (shape, each rank, time, the outputs). */
static void print_precision_json(const char *dir, const op_shape *s, const run_options *o, const run_result *res,
                                 int rc, const a2amm_error *err, double wall)
{
    printf("{\"command\":\"run\",\"mode\":\"precision\",\"M\":%lld,\"K\":%lld,\"N\":%lld,\"R\":%lld",
           (long long)s->M, (long long)s->K, (long long)s->N, (long long)s->R);
    cli_json_key_str("op", op_kind_name(s->kind));
    cli_json_key_str("a_type", a2amm_fp8_type_name(s->a_type));
    cli_json_key_str("b_type", a2amm_fp8_type_name(s->b_type));
    cli_json_key_str("path", run_path_name(o->path));
    printf(",\"fused\":%s,\"tile_m\":%lld,\"depth\":%d", o->unfused ? "false" : "true", (long long)o->tile_m,
           o->depth);
    cli_json_key_str("status", rc ? "FAILURE" : "SUCCESS");
    cli_json_key_str("error", rc ? err->msg : NULL);
    cli_json_key_str("kernel", res->ranks ? res->kernel : NULL);
    cli_json_key_num("wall_s", "%.6f", wall);
    rank_report_json_tail(res->ranks, (int)s->R, dir, rc != 0);
}

/* run and the seed's form (seed_form: the types default to the seed's where no meta file records them). */
static int run_command(int argc, char **argv, int seed_form)
{
    if (cli_moe_wanted(argc, argv, 1)) return cmd_run_moe(argc, argv);
    run_options o;
    run_options_default(&o);
    o.path = (a2amm_path)-1; /* not given yet: its default follows --transport */
    const char *dir = ".", *at = NULL, *bt = NULL, *op = NULL;
    char *pos[4];
    int npos = 0, json = 0, quiet = 0, modes = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        int64_t x;
        if (cli_is_help(argv[i])) { run_usage(stdout); return 0; }
        if ((m = cli_option(argc, argv, &i, "--dir", &v))) { if (m < 0) return 2; dir = v; }
        else if ((m = cli_op_option("run", argc, argv, &i, &o))) { if (m < 0) return 2; }
        else if ((m = cli_option(argc, argv, &i, "--warmup", &v))) {
            if (m < 0 || cli_parse_i64("run", "--warmup", v, 0, 1000, &x)) return 2;
            o.warmup = (int)x;
        } else if ((m = cli_option(argc, argv, &i, "--op", &v))) {
            op_kind k;
            if (m < 0 || cli_parse_op("run", v, &k)) return 2;
            op = v;
        } else if ((m = cli_option(argc, argv, &i, "--a-type", &v))) { if (m < 0) return 2; at = v; }
        else if ((m = cli_option(argc, argv, &i, "--b-type", &v))) { if (m < 0) return 2; bt = v; }
        else if (!strcmp(argv[i], "--unfused")) o.unfused = 1;
        else if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--quiet")) quiet = 1;
        else if (!strcmp(argv[i], "--baseline")) o.baseline = 1;
        else if ((!strcmp(argv[i], "precision") || !strcmp(argv[i], "perf")) && npos == 4) {
            int mode = (int)o.mode;
            if (cli_mode_word("run", argv[i], &modes, &mode)) return 2;
            o.mode = (run_mode)mode;
        }
        else if (argv[i][0] == '-' && argv[i][1] != '\0' && !(argv[i][1] >= '0' && argv[i][1] <= '9')) {
            fprintf(stderr, "a2amm run: unknown option '%s' (see a2amm run --help)\n", argv[i]);
            return 2;
        } else if (npos < 4) pos[npos++] = argv[i];
        else {
            fprintf(stderr, "a2amm run: unexpected '%s': after M K N R comes precision or perf\n", argv[i]);
            return 2;
        }
    }
    if (cli_perf_only_options("run", argc, argv, o.mode == RUN_PERF)) return 2;
    if (npos != 4) {
        fprintf(stderr, "a2amm run: expected M K N R, got %d of them\n", npos);
        run_usage(stderr);
        return 2;
    }
    if ((int)o.path == -1) o.path = o.transport == RUN_MPI ? A2AMM_PATH_PUT : A2AMM_PATH_DIRECT;
    op_shape s = {0, 0, 0, 0, A2AMM_E4M3, A2AMM_E4M3, OP_ALLTOALL_MATMUL};
    if (cli_dir_existing("run", dir)) return 2;
    int held = cli_op_hold("run", dir, op, &s.kind); /* the shape's rules are the op's */
    if (held) return held;
    op_sizes z;
    if (cli_parse_shape("run", pos, &s, &z)) return 2;
    held = cli_meta_hold("run", dir, &s, at, bt, seed_form ? CLI_TYPES_SEED : CLI_TYPES_NAMED);
    if (held) return held;
    a2amm_error err = {0, ""};
    if (o.trace_path && cli_check_output("--trace", o.trace_path, dir, s.R, &err)) {
        cli_print_error("run", &err);
        return 2;
    }
    /* over MPI several ranks of one host may share the folder: each writes only its own files */
    if (o.transport != RUN_MPI && cli_dir_lock("run", dir, 0) < 0) return 1;
    if (o.transport == RUN_MPI && !run_under_mpirun()) {
        fprintf(stderr, "a2amm run: --transport mpi: this process is not part of an MPI job. Launch every rank with "
                        "mpirun:\n  mpirun --allow-run-as-root --oversubscribe -np %lld "
                        "a2amm run %lld %lld %lld %lld%s%s --transport mpi --dir %s\n"
                        "(across machines: add --host h1,h2 or --hostfile FILE; see README)\n",
                (long long)s.R, (long long)s.M, (long long)s.K, (long long)s.N, (long long)s.R,
                s.kind != OP_ALLTOALL_MATMUL ? " --op " : "", s.kind != OP_ALLTOALL_MATMUL ? op_kind_name(s.kind) : "",
                dir);
        return 2;
    }
    if (o.transport != RUN_MPI) o.stop = cli_catch_stop_signals();
    o.progress = !quiet && !json; /* perf mode's progress (progress.h) */
    /* over MPI only rank 0 speaks */
    if (o.transport == RUN_MPI && run_mpi_rank() > 0 && !freopen("/dev/null", "w", stdout)) return 1;

    if (!json)
        printf("a2amm run: M=%lld K=%lld N=%lld R=%lld, op %s, A %s, B %s, %s mode, %s, path %s, tile %lld rows, "
               "depth %d\n",
               (long long)s.M, (long long)s.K, (long long)s.N, (long long)s.R, op_kind_name(s.kind),
               a2amm_fp8_type_name(s.a_type), a2amm_fp8_type_name(s.b_type), o.mode == RUN_PERF ? "perf" : "precision",
               o.unfused ? "unfused" : "fused", run_path_name(o.path), (long long)o.tile_m, o.depth);
    fflush(stdout);
    run_result res;
    double t0 = cli_now();
    int rc = run_files(dir, &s, &o, &res, &err);
    double wall = cli_now() - t0;
    if (o.transport == RUN_MPI) run_mpi_finalize();
    if (json && o.mode == RUN_PRECISION) {
        print_precision_json(dir, &s, &o, &res, rc, &err, wall);
        if (rc) cli_print_error("run", &err);
        run_result_free(&res);
        if (rc == A2AMM_E_INTERRUPTED && cli_exit_code_for_stop()) return cli_exit_code_for_stop();
        return rc ? 1 : 0;
    }
    if (!json || rc) {
        if (res.ranks) {
            printf("  %lld tile%s, %d compute thread%s per rank, kernel %s\n", (long long)res.ntiles,
                   res.ntiles == 1 ? "" : "s", res.threads, res.threads == 1 ? "" : "s", res.kernel);
            for (int r = 0; r < s.R; r++) rank_report_print(r, &res.ranks[r]);
        }
    }
    if (rc) {
        cli_print_error("run", &err);
        printf("All workers finished. Status: FAILURE\n");
    } else {
        if (o.mode == RUN_PERF) cli_print_op_perf(&s, &o, &res, json);
        else if (!json)
            printf("  wrote %s/output/<0..%lld>/npu_out.bin (bf16 [%lld, %lld] each) in %.3f s (whole run: load, "
                   "prepare, multiply, write)\n", dir, (long long)s.R - 1,
                   (long long)z.out_rows, (long long)z.out_cols, wall);
        if (!json && o.trace_path)
            printf("  trace: %s (draw it: a2amm timeline %s)\n", o.trace_path, o.trace_path);
        if (!json) printf("All workers finished. Status: SUCCESS\n");
    }
    run_result_free(&res);
    if (rc == A2AMM_E_INTERRUPTED && cli_exit_code_for_stop()) return cli_exit_code_for_stop();
    return rc ? 1 : 0;
}

int cmd_run(int argc, char **argv) { return run_command(argc, argv, 0); }

int cmd_run_seed(int argc, char **argv) { return run_command(argc, argv, 1); }
