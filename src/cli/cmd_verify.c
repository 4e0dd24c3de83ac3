/* `a2amm verify`: the seed's per-rank acceptance test, with more detail. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/data_dir.h"
#include "common/error.h"
#include "io/io.h"
#include "mx/mx.h"
#include "op/op_kind.h"
#include "verify/verify.h"

static void verify_usage(FILE *f)
{
    fprintf(f,
            "usage: a2amm verify M N R [--dir DIR] [--op OP] [--rtol X] [--atol X]\n"
            "\n"
            "Compares every rank's result DIR/output/<r>/npu_out.bin with its golden\n"
            "DIR/output/<r>/cpu_output.bin (both bf16: [M, N] for alltoall-matmul,\n"
            "[R*M, N/R] for matmul-alltoall) the way the seed's verify_result.py does:\n"
            "torch.allclose(golden, result, rtol=1e-2, atol=1e-2, equal_nan=True). Prints\n"
            "the seed's summary per rank (abs err max/mean/rmse, rel err max, count over\n"
            "tolerance, top-left corners), the worst error in bf16 ulps and the first element\n"
            "that is not close (its row and column in the rank's output). Exit 0 only if\n"
            "every rank passes. A folder where a killed run left its outputs half put in\n"
            "place is refused.\n"
            "\n"
            "options:\n"
            "  --dir DIR   the folder gen and run used (default: .)\n"
            "  --op alltoall-matmul|matmul-alltoall|moe  the op the data is for: what gen\n"
            "              recorded in DIR/input/a2amm-meta.txt (an op that contradicts it is\n"
            "              refused); without that file, alltoall-matmul unless named;\n"
            "              moe takes T H I R: a2amm verify --op moe --help\n"
            "  --rtol X    relative tolerance (default 1e-2)\n"
            "  --atol X    absolute tolerance (default 1e-2)\n"
            "\n"
            "example:\n"
            "  a2amm gen 700 256 96 2 --dir /tmp/a2amm-demo && a2amm run 700 256 96 2 --dir /tmp/a2amm-demo\n"
            "  a2amm verify 700 96 2 --dir /tmp/a2amm-demo\n"
            "  a2amm gen 700 256 96 2 --op matmul-alltoall --dir /tmp/a2amm-demo-reverse && a2amm run 700 256 96 2 --dir /tmp/a2amm-demo-reverse\n"
            "  a2amm verify 700 96 2 --op matmul-alltoall --dir /tmp/a2amm-demo-reverse\n");
}

/* Loads both files of rank r; 0 or an error already printed. */
static int load_pair(const char *dir, int r, size_t bytes, uint16_t *golden, uint16_t *out)
{
    char path[IO_PATH_MAX];
    a2amm_error err = {0, ""};
    int rc = io_rank_path(path, sizeof path, dir, "output", r, "npu_out.bin", &err);
    if (!rc) rc = io_read_exact(path, out, bytes, &err);
    if (!rc) rc = io_rank_path(path, sizeof path, dir, "output", r, "cpu_output.bin", &err);
    if (!rc && access(path, F_OK) != 0 && errno == ENOENT) {
        printf("[FAIL] Rank %d: no golden to compare with: %s does not exist (gen --no-golden writes none; run a2amm "
               "gen without it)\n", r, path);
        return A2AMM_E_IO;
    }
    if (!rc) rc = io_read_exact(path, golden, bytes, &err);
    if (rc) printf("[FAIL] Rank %d: %s\n", r, err.msg);
    return rc;
}

/* Whether rank r's npu_out.bin is older than its cpu_output.bin: a run's output from before the last gen. */
static int output_older(const char *dir, int r)
{
    char out[IO_PATH_MAX], golden[IO_PATH_MAX];
    struct stat so, sg;
    if (io_rank_path(out, sizeof out, dir, "output", r, "npu_out.bin", NULL) ||
        io_rank_path(golden, sizeof golden, dir, "output", r, "cpu_output.bin", NULL) || stat(out, &so) ||
        stat(golden, &sg))
        return 0;
    return so.st_mtim.tv_sec < sg.st_mtim.tv_sec ||
           (so.st_mtim.tv_sec == sg.st_mtim.tv_sec && so.st_mtim.tv_nsec < sg.st_mtim.tv_nsec);
}

/* Rank r's output [M, N] (the op's rows and columns: M = R*M and N = N/R for matmul-alltoall): 1 it
 * passes, 0 it differs, -1 its files could not be compared (said). */
static int verify_rank(const char *dir, int r, int64_t M, int64_t N, double rtol, double atol,
                       uint16_t *golden, uint16_t *out)
{
    if (load_pair(dir, r, (size_t)(M * N) * 2, golden, out)) return -1;
    verify_stats st;
    verify_compare(golden, out, M * N, rtol, atol, &st);
    printf("\n[Rank %d] [verify] shape=(%lld, %lld), elements=%lld\n", r, (long long)M, (long long)N,
           (long long)(M * N));
    printf("  abs_err: max=%.6e, mean=%.6e, rmse=%.6e\n", st.abs_max, st.abs_mean, st.rmse);
    printf("  rel_err: max=%.6e\n", st.rel_max);
    printf("  count(|abs_err| > %g): %lld / %lld\n", atol, (long long)st.over_tol, (long long)st.count);
    if (st.ulp_max_index >= 0)
        printf("  worst error: %u bf16 ulp at (%lld, %lld)\n", st.ulp_max,
               (long long)(st.ulp_max_index / N), (long long)(st.ulp_max_index % N));
    if (st.nonfinite) printf("  NaN/Inf pairs (compared for equality only): %lld\n", (long long)st.nonfinite);
    cli_print_corner("cpu golden", golden, M, N, 4, 4);
    cli_print_corner("npu output", out, M, N, 4, 4);
    if (st.pass) {
        printf("[PASS] Rank %d: results match the golden\n", r);
    } else {
        int64_t i = st.first_bad;
        printf("[FAIL] Rank %d: %lld elements not close (rtol=%g, atol=%g); first at row %lld, "
               "column %lld: golden %.8g (0x%04x), output %.8g (0x%04x)\n",
               r, (long long)st.not_close, rtol, atol, (long long)(i / N), (long long)(i % N),
               (double)mx_bf16_to_f32(golden[i]), golden[i], (double)mx_bf16_to_f32(out[i]), out[i]);
        if (output_older(dir, r))
            printf("  note: npu_out.bin is older than cpu_output.bin: it is a run's output from before the last gen "
                   "(run again)\n");
    }
    return st.pass;
}

int cmd_verify(int argc, char **argv)
{
    const char *dir = ".", *op = NULL;
    double rtol = VERIFY_TOL, atol = VERIFY_TOL;
    char *pos[3];
    int npos = 0;
    if (cli_moe_wanted(argc, argv, 1)) return cmd_verify_moe(argc, argv);
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        if (cli_is_help(argv[i])) { verify_usage(stdout); return 0; }
        if ((m = cli_option(argc, argv, &i, "--dir", &v))) { if (m < 0) return 2; dir = v; }
        else if ((m = cli_option(argc, argv, &i, "--op", &v))) {
            op_kind k;
            if (m < 0 || cli_parse_op("verify", v, &k)) return 2;
            op = v;
        } else if ((m = cli_option(argc, argv, &i, "--rtol", &v))) {
            if (m < 0 || cli_parse_double("verify", "--rtol", v, 0, 1e300, &rtol)) return 2;
        } else if ((m = cli_option(argc, argv, &i, "--atol", &v))) {
            if (m < 0 || cli_parse_double("verify", "--atol", v, 0, 1e300, &atol)) return 2;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0' && !(argv[i][1] >= '0' && argv[i][1] <= '9')) {
            fprintf(stderr, "a2amm verify: unknown option '%s' (see a2amm verify --help)\n", argv[i]);
            return 2;
        } else if (npos < 3) pos[npos++] = argv[i];
        else {
            fprintf(stderr, "a2amm verify: too many arguments at '%s' (expected M N R)\n", argv[i]);
            return 2;
        }
    }
    if (npos != 3) {
        fprintf(stderr, "a2amm verify: expected M N R, got %d of them\n", npos);
        verify_usage(stderr);
        return 2;
    }
    int64_t M, N, R;
    if (cli_parse_i64("verify", "M", pos[0], 1, INT64_C(1) << 40, &M) ||
        cli_parse_i64("verify", "N", pos[1], 1, INT64_C(1) << 40, &N) ||
        cli_parse_i64("verify", "R", pos[2], 1, 1 << 20, &R))
        return 2;
    if (M > (INT64_C(1) << 40) / N) {
        fprintf(stderr, "a2amm verify: M*N = %lld*%lld is too large (each output is M*N bf16 values)\n", (long long)M,
                (long long)N);
        return 2;
    }
    if (cli_dir_existing("verify", dir)) return 2;
    op_shape held_shape = {M, 0, N, R, A2AMM_E4M3, A2AMM_E4M3, OP_ALLTOALL_MATMUL};
    int held = cli_op_hold("verify", dir, op, &held_shape.kind);
    if (held) return held;
    /* the op's rules on N and R (verify has no K: one the rules take stands in for it) */
    const op_kind_row *kind = op_kind_row_of(held_shape.kind);
    op_shape probe = held_shape;
    probe.K = 32 * R;
    a2amm_error why = {0, ""};
    if (op_shape_check(&probe, NULL, &why)) {
        fprintf(stderr, "a2amm verify: %s\n", why.msg);
        return 2;
    }
    held = cli_meta_hold("verify", dir, &held_shape, NULL, NULL, CLI_TYPES_UNUSED);
    if (held) return held;
    char marker[IO_PATH_MAX];
    if (io_set_pending(dir, marker, sizeof marker)) {
        fprintf(stderr, "a2amm verify: %s: a run was killed while putting its outputs in place and nothing completed "
                "it (its guard was killed too), so the outputs may be a mix of two runs: the next a2amm run or gen "
                "on %s completes it\n", marker, dir);
        return 1;
    }
    if (io_staged_left(dir, marker, sizeof marker)) {
        fprintf(stderr, "a2amm verify: %s: a staged output remains (a run is writing its outputs now, or one was "
                "killed with its guard), so the outputs may not all be one run's: wait for the run, or let the next "
                "a2amm run or gen on %s remove it\n", marker, dir);
        return 1;
    }
    /* each rank's output: [M, N], or [R*M, N/R] (the same count of values) */
    int64_t rows = kind->out_blocks_per_rank ? R * M : M, cols = kind->out_cols_split ? N / R : N;
    uint16_t *golden = malloc((size_t)(M * N) * 2), *out = malloc((size_t)(M * N) * 2);
    if (!golden || !out) {
        fprintf(stderr, "a2amm verify: cannot allocate 2 x %lld bytes\n", (long long)(M * N * 2));
        free(golden), free(out);
        return 1;
    }
    printf("============================================================\n");
    printf("Verifying outputs for %lld ranks in %s/output\n", (long long)R, dir);
    if (rows != M || cols != N)
        printf("Matrix shape: M=%lld, N=%lld; op %s: each rank's output is [%lld, %lld]\n", (long long)M,
               (long long)N, kind->name, (long long)rows, (long long)cols);
    else
        printf("Matrix shape: M=%lld, N=%lld\n", (long long)M, (long long)N);
    printf("============================================================\n");
    signed char *status = calloc((size_t)R, 1);
    if (!status) {
        fprintf(stderr, "a2amm verify: out of memory\n");
        free(golden), free(out);
        return 1;
    }
    for (int r = 0; r < R; r++) status[r] = (signed char)verify_rank(dir, r, rows, cols, rtol, atol, golden, out);
    const int passed = verify_print_summary(status, (int)R, "differ from the golden", "a file missing or of another size");
    char meta[IO_PATH_MAX];
    struct stat sm;
    if (!passed && !io_meta_path(meta, sizeof meta, dir, NULL) && lstat(meta, &sm) != 0)
        printf("  note: %s is missing (a gen that did not finish, or files put there by hand): the inputs and the "
               "golden may not belong together; a2amm gen makes a matching set\n", meta);
    free(status), free(golden), free(out);
    return passed ? 0 : 1;
}
