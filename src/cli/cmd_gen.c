/* `a2amm gen`: every rank's inputs in the seed's layout, and the golden. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/data_dir.h"
#include "cli/fault.h"
#include "cli/guard.h"
#include "common/error.h"
#include "gen/gen.h"
#include "io/io.h"
#include "cli/progress.h"
#include "ref/ref_op.h"

static void gen_usage(FILE *f)
{
    fprintf(f,
            "usage: a2amm gen M K N R [options]\n"
            "\n"
            "Writes every rank's inputs in the seed's layout and the reference result\n"
            "(the golden, fp64 and one bf16 rounding) that a correct run must match.\n"
            "--op alltoall-matmul (the seed's op, the default): the AllToAll of A, then\n"
            "each rank's [M, K] rows times its B:\n"
            "  DIR/input/<r>/input_a.bin       A_r [R*M, K/R] fp8 (row block j goes to rank j)\n"
            "  DIR/input/<r>/input_scaleA.bin  its E8M0 scales [R*M, 2*ceil(K/R/64)]\n"
            "  DIR/input/<r>/input_b.bin       B_r transposed [N, K] fp8\n"
            "  DIR/input/<r>/input_scaleB.bin  its E8M0 scales [N, 2*ceil(K/64)]\n"
            "  DIR/output/<r>/cpu_output.bin   golden bf16 [M, N]\n"
            "--op matmul-alltoall (the reverse): Y_r = X_r x B_r, then column block j of\n"
            "every Y_r (N/R columns) goes to rank j, stacked by source:\n"
            "  DIR/input/<r>/input_a.bin       X_r [M, K] fp8\n"
            "  DIR/input/<r>/input_scaleA.bin  its E8M0 scales [M, 2*ceil(K/64)]\n"
            "  DIR/input/<r>/input_b.bin       B_r transposed [N, K] fp8\n"
            "  DIR/input/<r>/input_scaleB.bin  its E8M0 scales [N, 2*ceil(K/64)]\n"
            "  DIR/output/<r>/cpu_output.bin   golden bf16 [R*M, N/R] (rows i*M.. from rank i)\n"
            "and for both:\n"
            "  DIR/input/a2amm-meta.txt        the shape, element types and op, for later commands\n"
            "\n"
            "Rules: M, K, N, R >= 1; alltoall-matmul: K divisible by R, K/R a multiple of 32;\n"
            "matmul-alltoall: K a multiple of 32, N divisible by R.\n"
            "\n"
            "options:\n"
            "  --dir DIR             where to write (default: .)\n"
            "  --op alltoall-matmul|matmul-alltoall|moe  which op (default alltoall-matmul;\n"
            "                        moe takes T H I R: a2amm gen --op moe --help)\n"
            "  --a-type e4m3|e5m2    A's element type (default e4m3)\n"
            "  --b-type e4m3|e5m2    B's element type (default e4m3)\n"
            "  --dist NAME           value distribution (default normal):\n");
    for (int d = 0; d < GEN_DIST_COUNT; d++)
        fprintf(f, "      %-9s %s\n", gen_dist_name((gen_dist)d), gen_dist_help((gen_dist)d));
    fprintf(f,
            "  --scale-mode floor|rceil  how block scales are chosen when quantizing (default floor)\n"
            "  --seed S              random seed (default 1); same seed, same bytes everywhere\n"
            "  --no-golden           write the inputs only (and remove an earlier gen's goldens in DIR)\n"
            "  --quiet               no progress line (it shows only when stderr is a terminal)\n"
            "\n"
            "example:\n"
            "  a2amm gen 700 256 96 2 --dir /tmp/a2amm-demo --a-type e5m2\n"
            "  a2amm gen 700 256 96 2 --op matmul-alltoall --dir /tmp/a2amm-demo-reverse\n");
}

/* Every rank's golden, one rank at a time: the forward op's from every rank's A and rank j's B, the
 * reverse op's from every rank's X and B. */
static int write_goldens(const char *dir, const op_shape *s, const op_sizes *z,
                         const io_rank_inputs *in, uint16_t *out, cli_progress *progress, a2amm_error *err)
{
    const uint8_t **a = malloc((size_t)s->R * sizeof *a), **sa = malloc((size_t)s->R * sizeof *sa);
    const uint8_t **b = malloc((size_t)s->R * sizeof *b), **sb = malloc((size_t)s->R * sizeof *sb);
    int rc = A2AMM_OK;
    if (!a || !sa || !b || !sb) rc = a2amm_fail(err, A2AMM_E_NOMEM, "gen: out of memory");
    for (int r = 0; !rc && r < s->R; r++) a[r] = in[r].a, sa[r] = in[r].sa, b[r] = in[r].b, sb[r] = in[r].sb;
    for (int j = 0; !rc && j < s->R; j++) {
        char path[IO_PATH_MAX];
        cli_progress_say(progress, "a2amm gen: golden of rank %d of %lld", j, (long long)s->R);
        rc = ref_op_golden(s, j, a, sa, b, sb, out, err);
        if (!rc) rc = io_rank_path(path, sizeof path, dir, "output", j, "cpu_output.bin", err);
        if (!rc) rc = io_write_atomic(path, out, z->out_bytes, err);
        if (!rc && j == 0) cli_print_corner("golden, rank 0", out, z->out_rows, z->out_cols, 4, 4);
    }
    free(a), free(sa), free(b), free(sb);
    return rc;
}

/* What a killed gen leaves (its files' temporary names), removed by its guard (guard.h). */
typedef struct gen_leftovers {
    const char *dir;
    char tag[32];
} gen_leftovers;

static void clean_after_kill(void *arg)
{
    const gen_leftovers *g = arg;
    char meta[IO_PATH_MAX];
    struct stat st;
    io_remove_stale(g->dir, g->tag, NULL);
    if (io_meta_path(meta, sizeof meta, g->dir, NULL) == A2AMM_OK && lstat(meta, &st) != 0) /* else it finished */
        dprintf(STDERR_FILENO, "a2amm gen: gen (pid %s) was killed before it finished: %s has no meta file, so it "
                "is not a complete set (its guard removed what it was writing)\n", g->tag, g->dir);
}

int cmd_gen(int argc, char **argv)
{
    const char *dir = ".";
    gen_options opt = {GEN_DIST_NORMAL, 1, MX_SCALE_FLOOR};
    int scale_mode = MX_SCALE_FLOOR;
    op_shape s = {0, 0, 0, 0, A2AMM_E4M3, A2AMM_E4M3, OP_ALLTOALL_MATMUL};
    char *pos[4];
    int npos = 0, golden = 1, quiet = 0;
    if (cli_moe_wanted(argc, argv, 0)) return cmd_gen_moe(argc, argv);
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        if (cli_is_help(argv[i])) { gen_usage(stdout); return 0; }
        if ((m = cli_option(argc, argv, &i, "--dir", &v))) { if (m < 0) return 2; dir = v; }
        else if ((m = cli_option(argc, argv, &i, "--op", &v))) {
            if (m < 0 || cli_parse_op("gen", v, &s.kind)) return 2;
        } else if ((m = cli_option(argc, argv, &i, "--a-type", &v))) {
            if (m < 0 || cli_parse_type("gen", "--a-type", v, &s.a_type)) return 2;
        } else if ((m = cli_option(argc, argv, &i, "--b-type", &v))) {
            if (m < 0 || cli_parse_type("gen", "--b-type", v, &s.b_type)) return 2;
        } else if ((m = cli_option(argc, argv, &i, "--dist", &v))) {
            if (m < 0) return 2;
            if (gen_dist_parse(v, &opt.dist)) {
                fprintf(stderr, "a2amm gen: --dist must be one of normal, seed, uniform, extreme, special; got '%s'\n", v);
                return 2;
            }
        } else if ((m = cli_gen_option(argc, argv, &i, &scale_mode, &opt.seed))) {
            if (m < 0) return 2;
            opt.scale_mode = (mx_scale_mode)scale_mode;
        } else if (!strcmp(argv[i], "--no-golden")) golden = 0;
        else if (!strcmp(argv[i], "--quiet")) quiet = 1;
        else if (argv[i][0] == '-' && argv[i][1] != '\0' && !(argv[i][1] >= '0' && argv[i][1] <= '9')) {
            fprintf(stderr, "a2amm gen: unknown option '%s' (see a2amm gen --help)\n", argv[i]);
            return 2;
        } else if (npos < 4) pos[npos++] = argv[i];
        else {
            fprintf(stderr, "a2amm gen: too many arguments at '%s' (expected M K N R)\n", argv[i]);
            return 2;
        }
    }
    if (npos != 4) {
        fprintf(stderr, "a2amm gen: expected M K N R, got %d of them\n", npos);
        gen_usage(stderr);
        return 2;
    }
    op_sizes z;
    if (cli_parse_shape("gen", pos, &s, &z)) return 2;
    if (cli_dir_check("gen", dir)) return 2;
    char what[96];
    snprintf(what, sizeof what, "the data (%lld ranks' inputs%s)", (long long)s.R, golden ? " and golden" : "");
    if (cli_space_check("gen", dir, (double)s.R * (double)(z.a_bytes + z.sa_bytes + z.b_bytes + z.sb_bytes +
                                                             (golden ? z.out_bytes : 0)), what))
        return 1;

    a2amm_error err = {0, ""};
    io_meta meta = {.shape = s, .seed = opt.seed};
    snprintf(meta.dist, sizeof meta.dist, "%s", gen_dist_name(opt.dist));
    snprintf(meta.scale_mode, sizeof meta.scale_mode, "%s", mx_scale_mode_name(opt.scale_mode));
    /* The meta file is written last: a folder without it is not a complete set. */
    char meta_file[IO_PATH_MAX];
    if (io_meta_path(meta_file, sizeof meta_file, dir, &err)) {
        cli_print_error("gen", &err);
        return 2;
    }
    if (cli_dir_lock("gen", dir, 1) < 0) return 1;
    unlink(meta_file);
    gen_leftovers leftovers = {.dir = dir};
    snprintf(leftovers.tag, sizeof leftovers.tag, "%ld", (long)getpid()); /* io_write_atomic's */
    cli_guard guard;
    if (cli_guard_start(&guard, clean_after_kill, &leftovers, &err)) {
        cli_print_error("gen", &err);
        return 1;
    }
    fault_pause("gen-inputs", -1);

    printf("a2amm gen: M=%lld K=%lld N=%lld R=%lld, op %s, A %s, B %s, dist %s, scale mode %s, seed %" PRIu64 "\n",
           (long long)s.M, (long long)s.K, (long long)s.N, (long long)s.R, op_kind_name(s.kind),
           a2amm_fp8_type_name(s.a_type), a2amm_fp8_type_name(s.b_type), meta.dist, meta.scale_mode,
           opt.seed);
    printf("  per rank: A %zu B, scaleA %zu B, B %zu B, scaleB %zu B, output %zu B\n", z.a_bytes,
           z.sa_bytes, z.b_bytes, z.sb_bytes, z.out_bytes);
    io_rank_inputs *in = calloc((size_t)s.R, sizeof *in);
    uint16_t *out = malloc(z.out_bytes);
    int rc = in && out ? A2AMM_OK
                         : a2amm_fail(&err, A2AMM_E_NOMEM, "cannot allocate %zu bytes", z.out_bytes);
    int removed = 0; /* an earlier gen's goldens, of other inputs: verify must not compare against them */
    if (!rc && !golden) rc = gen_remove_goldens(dir, &removed, &err);
    if (!rc && removed)
        printf("  removed %d earlier golden%s (%s/output/<r>/cpu_output.bin): --no-golden\n", removed,
               removed == 1 ? "" : "s", dir);
    double t0 = cli_now();
    if (!rc) rc = gen_write_inputs(dir, &s, &z, &opt, in, &err);
    double t1 = cli_now();
    if (!rc && golden) fault_pause("gen-golden", -1);
    cli_progress progress;
    cli_progress_start(&progress, quiet, 0);
    if (!rc && golden) rc = write_goldens(dir, &s, &z, in, out, &progress, &err);
    cli_progress_end(&progress);
    double t2 = cli_now();
    if (!rc) fault_pause("gen-meta", -1);
    if (!rc) rc = io_meta_write(dir, &meta, &err);
    cli_guard_stop(&guard); /* every write is complete or removed */
    for (int r = 0; in && r < s.R; r++) io_rank_inputs_free(&in[r]);
    free(in);
    free(out);
    if (rc) {
        cli_print_error("gen", &err);
        return 1;
    }
    printf("  inputs: %.2f s", t1 - t0);
    if (golden)
        printf(", golden: %.2f s (fp64 reference, %.1f GFLOP)", t2 - t1,
               2.0 * (double)s.M * (double)s.N * (double)s.K * (double)s.R / 1e9);
    if (golden) printf("\n  wrote %s/input/<0..%lld>/ and %s/output/<r>/cpu_output.bin\n", dir, (long long)s.R - 1, dir);
    else printf("\n  wrote %s/input/<0..%lld>/ (no golden)\n", dir, (long long)s.R - 1);
    return 0;
}
