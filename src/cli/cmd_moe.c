/* `a2amm gen|run|verify ... --op moe`: the MoE op's data, its run and its check. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/data_dir.h"
#include "cli/guard.h"
#include "cli/json.h"
#include "cli/moe_runner.h"
#include "cli/out_path.h"
#include "cli/perf_report.h"
#include "cli/progress.h"
#include "cli/rank_report.h"
#include "common/error.h"
#include "gen/gen_moe.h"
#include "io/io.h"
#include "io/moe_io.h"
#include "mx/mx.h"
#include "ref/ref_moe.h"
#include "util/parse.h"
#include "verify/verify.h"

/* ---- what the three commands share ------------------------------------------------ */

int cli_moe_wanted(int argc, char **argv, int from_meta)
{
    const char *dir = ".", *op = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--op") && i + 1 < argc) op = argv[++i];
        else if (!strncmp(a, "--op=", 5)) op = a + 5;
        else if (!strcmp(a, "--dir") && i + 1 < argc) dir = argv[++i];
        else if (!strncmp(a, "--dir=", 6)) dir = a + 6;
    }
    if (op) return !strcmp(op, "moe");
    return from_meta && dir[0] && moe_io_dir_is_moe(dir);
}

/* The command line's view of the shape: positional T H I R and the options that size it. */
typedef struct moe_args {
    char *pos[4];
    int npos;
    const char *experts, *topk, *tokens, *at, *bt, *route;
} moe_args;

/* One of the options every MoE command takes; 1 taken, 0 not ours, -1 bad. */
static int shape_option(int argc, char **argv, int *i, moe_args *a)
{
    static const char *const names[] = {"--experts", "--topk", "--tokens", "--a-type", "--b-type", "--route"};
    const char **slots[] = {&a->experts, &a->topk, &a->tokens, &a->at, &a->bt, &a->route};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        const char *v;
        int m = cli_option(argc, argv, i, names[k], &v);
        if (m) {
            if (m > 0) *slots[k] = v;
            return m;
        }
    }
    return 0;
}

/* The shape from the arguments (the defaults where not given); 0 or 2 after saying why. */
static int shape_from_args(const char *cmd, const moe_args *a, moe_io_route route, moe_io_shape *s)
{
    int64_t v[4];
    static const char *const names[4] = {"T", "H", "I", "R"};
    static const int64_t lo[4] = {0, 32, 32, 1}, hi[4] = {INT64_C(1) << 30, 1 << 20, 1 << 20, MOE_IO_MAX_R};
    for (int i = 0; i < 4; i++)
        if (cli_parse_i64(cmd, names[i], a->pos[i], lo[i], hi[i], &v[i])) return 2;
    memset(s, 0, sizeof *s);
    s->T = v[0], s->H = v[1], s->I = v[2], s->R = (int)v[3];
    int64_t e = 4 * s->R, k = 2;
    if (a->experts && cli_parse_i64(cmd, "--experts", a->experts, 1, 1 << 20, &e)) return 2;
    if (a->topk && cli_parse_i64(cmd, "--topk", a->topk, 1, MOE_IO_MAX_TOPK, &k)) return 2;
    s->E = (int)e, s->K = (int)(a->topk || k < e ? k : e); /* the default, 2, fits E = 1 */
    s->a_type = s->b_type = A2AMM_E4M3;
    if (a->at && cli_parse_type(cmd, "--a-type", a->at, &s->a_type)) return 2;
    if (a->bt && cli_parse_type(cmd, "--b-type", a->bt, &s->b_type)) return 2;
    for (int r = 0; r < s->R; r++) /* the empty route leaves the odd ranks without tokens */
        s->tokens[r] = route == MOE_ROUTE_EMPTY && r % 2 ? 0 : s->T;
    if (a->tokens) {
        int n = 0;
        for (const char *p = a->tokens;;) {
            const char *comma = strchr(p, ',');
            size_t len = comma ? (size_t)(comma - p) : strlen(p);
            uint64_t u;
            if (n == s->R || len == 0 || parse_u64_n(p, len, &u) != PARSE_OK || u > (uint64_t)s->T) {
                fprintf(stderr, "a2amm %s: --tokens must be R = %d counts from 0 to T = %lld, separated by commas "
                        "(rank 0's first); got '%s'\n", cmd, s->R, (long long)s->T, a->tokens);
                return 2;
            }
            s->tokens[n++] = (int64_t)u;
            if (!comma) break;
            p = comma + 1;
        }
        if (n != s->R) {
            fprintf(stderr, "a2amm %s: --tokens lists %d counts, R is %d: one a rank\n", cmd, n, s->R);
            return 2;
        }
    }
    a2amm_error err = {0, ""};
    if (moe_io_shape_check(s, &err)) {
        cli_print_error(cmd, &err);
        return 2;
    }
    return 0;
}

/*
 * run and verify: the shape the folder's meta file records, the command line held to it (T H I R, and
 * --experts, --topk, --tokens, the types where given: a contradiction is refused naming both); without a
 * meta file, the arguments'. 0, 1 (a bad meta file) or 2.
 */
static int shape_of_dir(const char *cmd, const char *dir, const moe_args *a, moe_io_shape *s)
{
    char path[IO_PATH_MAX];
    struct stat st;
    if (io_meta_path(path, sizeof path, dir, NULL) || lstat(path, &st) != 0) {
        fprintf(stderr, "a2amm %s: %s is missing: the shape comes from the arguments (--experts %s, --topk %s, "
                "--tokens %s, types %s/%s)\n", cmd, path, a->experts ? a->experts : "4*R", a->topk ? a->topk : "2",
                a->tokens ? a->tokens : "T on every rank", a->at ? a->at : "e4m3", a->bt ? a->bt : "e4m3");
        return shape_from_args(cmd, a, MOE_ROUTE_UNIFORM, s);
    }
    moe_io_meta m;
    a2amm_error err = {0, ""};
    if (moe_io_meta_read(dir, &m, &err)) {
        cli_print_error(cmd, &err);
        return 1;
    }
    moe_io_shape given;
    moe_args full = *a; /* what the command line leaves out is the recorded value */
    char e[16], k[16], at[8], bt[8];
    snprintf(e, sizeof e, "%d", m.shape.E), snprintf(k, sizeof k, "%d", m.shape.K);
    snprintf(at, sizeof at, "%s", a2amm_fp8_type_name(m.shape.a_type));
    snprintf(bt, sizeof bt, "%s", a2amm_fp8_type_name(m.shape.b_type));
    if (!full.experts) full.experts = e;
    if (!full.topk) full.topk = k;
    if (!full.at) full.at = at;
    if (!full.bt) full.bt = bt;
    int rc = shape_from_args(cmd, &full, MOE_ROUTE_UNIFORM, &given);
    if (rc) return rc;
    if (!a->tokens) memcpy(given.tokens, m.shape.tokens, sizeof given.tokens);
    const char *what = given.T != m.shape.T ? "T" : given.H != m.shape.H ? "H" : given.I != m.shape.I ? "I"
                       : given.R != m.shape.R ? "R" : given.E != m.shape.E ? "--experts" : given.K != m.shape.K ? "--topk"
                       : memcmp(given.tokens, m.shape.tokens, sizeof given.tokens) ? "--tokens"
                       : given.a_type != m.shape.a_type ? "--a-type" : given.b_type != m.shape.b_type ? "--b-type" : NULL;
    if (what) {
        fprintf(stderr, "a2amm %s: %s contradicts %s, which records T=%lld H=%lld I=%lld R=%d, %d experts, top-%d, "
                "A %s, B %s: refused (leave it out to use what gen recorded)\n", cmd, what, path, (long long)m.shape.T,
                (long long)m.shape.H, (long long)m.shape.I, m.shape.R, m.shape.E, m.shape.K,
                a2amm_fp8_type_name(m.shape.a_type), a2amm_fp8_type_name(m.shape.b_type));
        return 2;
    }
    *s = m.shape;
    return 0;
}

static void print_shape(const char *cmd, const moe_io_shape *s)
{
    printf("a2amm %s: op moe, T=%lld H=%lld I=%lld R=%d, %d experts (%d a rank), top-%d, x %s, weights %s, tokens ",
           cmd, (long long)s->T, (long long)s->H, (long long)s->I, s->R, s->E, s->E / s->R, s->K,
           a2amm_fp8_type_name(s->a_type), a2amm_fp8_type_name(s->b_type));
    for (int r = 0; r < s->R; r++) printf("%s%lld", r ? "," : "", (long long)s->tokens[r]);
    printf("\n");
}

/* Every rank's inputs in memory (data[R], loaded or made): freed by free_all. */
static void free_all(moe_io_rank *data, int R)
{
    for (int r = 0; data && r < R; r++) moe_io_rank_free(&data[r]);
    free(data);
}

/* Every rank's reference, bound and reach (ref_moe.h; [R] arrays of [T_r, H]), computed from data; 0, or
 * 1 after saying why (and nothing left to free). */
typedef struct moe_refs {
    double **ref, **bound, **reach;
} moe_refs;

static void free_refs(moe_refs *m, int R)
{
    for (int r = 0; r < R && m->ref && m->bound && m->reach; r++) free(m->ref[r]), free(m->bound[r]), free(m->reach[r]);
    free(m->ref), free(m->bound), free(m->reach);
    *m = (moe_refs){0};
}

static int references(const char *cmd, const moe_io_shape *s, const moe_io_rank *data, moe_refs *m)
{
    m->ref = calloc((size_t)s->R, sizeof *m->ref), m->bound = calloc((size_t)s->R, sizeof *m->bound);
    m->reach = calloc((size_t)s->R, sizeof *m->reach);
    a2amm_error err = {0, ""};
    int rc = m->ref && m->bound && m->reach ? A2AMM_OK : a2amm_fail(&err, A2AMM_E_NOMEM, "out of memory");
    for (int r = 0; !rc && r < s->R; r++) {
        size_t n = (size_t)(s->tokens[r] * s->H) + 1;
        m->ref[r] = malloc(n * sizeof(double)), m->bound[r] = malloc(n * sizeof(double));
        m->reach[r] = malloc(n * sizeof(double));
        if (!m->ref[r] || !m->bound[r] || !m->reach[r])
            rc = a2amm_fail(&err, A2AMM_E_NOMEM, "out of memory for rank %d's reference", r);
    }
    if (!rc) rc = ref_moe(s, data, m->ref, m->bound, m->reach, &err);
    if (rc) {
        cli_print_error(cmd, &err);
        free_refs(m, s->R);
        return 1;
    }
    return 0;
}

/* ---- gen ---------------------------------------------------------------------------- */

static void gen_usage(FILE *f)
{
    fprintf(f,
            "usage: a2amm gen T H I R --op moe [options]\n"
            "\n"
            "Writes every rank's inputs of the MoE op (expert parallelism: each token to the\n"
            "ranks of its top-K experts, SwiGLU experts, the weighted results back; see\n"
            "docs/op-contract.md) and the golden. T: the most tokens of a rank; H: hidden\n"
            "size; I: the experts' inner size (multiples of 32); R: ranks. Rank r owns\n"
            "experts r*E/R .. (r+1)*E/R-1. Per rank r, with T_r tokens:\n"
            "  DIR/input/<r>/input_x.bin, input_scaleX.bin     x [T_r, H] fp8, scales [T_r, 2*ceil(H/64)]\n"
            "  DIR/input/<r>/input_topk_idx.bin, input_topk_w.bin  [T_r, K] int32 / fp32 (little-endian)\n"
            "  DIR/input/<r>/input_w13.bin, input_scaleW13.bin  [E/R, 2I, H] gate then up rows, scales\n"
            "  DIR/input/<r>/input_w2.bin, input_scaleW2.bin    [E/R, H, I], scales [E/R, H, 2*ceil(I/64)]\n"
            "  DIR/output/<r>/cpu_output.bin                    golden bf16 [T_r, H] (fp64, one rounding)\n"
            "  DIR/input/a2amm-meta.txt                         op moe, the shape, every rank's tokens\n"
            "\n"
            "options:\n"
            "  --experts E           experts over all ranks, a multiple of R (default 4*R)\n"
            "  --topk K              experts a token (default 2, at most E and 32)\n"
            "  --tokens T0,T1,...    each rank's tokens, 0 to T (default T on every rank; the empty\n"
            "                        route: 0 on odd ranks)\n"
            "  --route NAME          uniform: top-K of softmaxed random logits (default);\n"
            "                        skewed: experts drawn with Zipf popularity (expert e about 1/(e+1));\n"
            "                        hot: every token's first slot on expert 0;\n"
            "                        empty: odd ranks without tokens, a slot in 4 unused (-1), a token\n"
            "                        in 8 with none. Weights: softmax over the chosen experts' logits\n"
            "  --a-type e4m3|e5m2    x's element type (default e4m3)\n"
            "  --b-type e4m3|e5m2    the experts' weights' (default e4m3)\n"
            "  --dist normal|uniform values before quantizing (default normal; weights times 1/sqrt(fan-in))\n"
            "  --scale-mode floor|rceil  block scales (default floor)\n"
            "  --seed S              random seed (default 1): the same bytes everywhere; expert e's weights\n"
            "                        depend on e and S only, not on R\n"
            "  --dir DIR             where to write (default: .)\n"
            "  --no-golden           write the inputs only (and remove an earlier gen's goldens in DIR)\n"
            "  --quiet               no progress line\n"
            "\n"
            "example:\n"
            "  a2amm gen 64 256 128 2 --op moe --experts 8 --topk 2 --route skewed --dir /tmp/a2amm-moe\n"
            "  a2amm run 64 256 128 2 --op moe --dir /tmp/a2amm-moe\n"
            "  a2amm verify 64 256 128 2 --op moe --dir /tmp/a2amm-moe\n");
}

/* What a killed gen leaves (its files' temporary names), removed by its guard. */
static void gen_clean_after_kill(void *arg) { io_remove_stale(arg, NULL, NULL); }

int cmd_gen_moe(int argc, char **argv)
{
    const char *dir = ".";
    gen_options opt = {GEN_DIST_NORMAL, 1, MX_SCALE_FLOOR};
    int scale_mode = MX_SCALE_FLOOR;
    moe_args a = {0};
    int golden = 1, quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        if (cli_is_help(argv[i])) { gen_usage(stdout); return 0; }
        if ((m = shape_option(argc, argv, &i, &a))) { if (m < 0) return 2; }
        else if ((m = cli_option(argc, argv, &i, "--dir", &v))) { if (m < 0) return 2; dir = v; }
        else if ((m = cli_option(argc, argv, &i, "--op", &v))) { /* each checked, the last one wins */
            op_kind k;
            if (m < 0 || cli_parse_op("gen", v, &k)) return 2;
        }
        else if ((m = cli_option(argc, argv, &i, "--dist", &v))) {
            if (m < 0) return 2;
            if (gen_dist_parse(v, &opt.dist) || (opt.dist != GEN_DIST_NORMAL && opt.dist != GEN_DIST_UNIFORM)) {
                fprintf(stderr, "a2amm gen: --op moe: --dist must be normal or uniform, got '%s'\n", v);
                return 2;
            }
        } else if ((m = cli_gen_option(argc, argv, &i, &scale_mode, &opt.seed))) {
            if (m < 0) return 2;
            opt.scale_mode = (mx_scale_mode)scale_mode;
        } else if (!strcmp(argv[i], "--no-golden")) golden = 0;
        else if (!strcmp(argv[i], "--quiet")) quiet = 1;
        else if (argv[i][0] == '-' && argv[i][1] && !(argv[i][1] >= '0' && argv[i][1] <= '9')) {
            fprintf(stderr, "a2amm gen: unknown option '%s' for --op moe (see a2amm gen --op moe --help)\n", argv[i]);
            return 2;
        } else if (a.npos < 4) a.pos[a.npos++] = argv[i];
        else {
            fprintf(stderr, "a2amm gen: too many arguments at '%s' (expected T H I R)\n", argv[i]);
            return 2;
        }
    }
    if (a.npos != 4) {
        fprintf(stderr, "a2amm gen: --op moe: expected T H I R, got %d of them\n", a.npos);
        gen_usage(stderr);
        return 2;
    }
    moe_io_meta meta = {.seed = opt.seed};
    if (a.route && moe_io_route_parse(a.route, &meta.route)) {
        fprintf(stderr, "a2amm gen: --route must be uniform, skewed, hot or empty, got '%s'\n", a.route);
        return 2;
    }
    if (shape_from_args("gen", &a, meta.route, &meta.shape) || cli_dir_check("gen", dir)) return 2;
    snprintf(meta.scale_mode, sizeof meta.scale_mode, "%s", mx_scale_mode_name(opt.scale_mode));
    const moe_io_shape *s = &meta.shape;
    double need = 0;
    for (int r = 0; r < s->R; r++) {
        size_t b[MOE_IO_INPUTS];
        moe_io_rank_bytes(s, r, b);
        for (int i = 0; i < MOE_IO_INPUTS; i++) need += (double)b[i];
        if (golden) need += 2.0 * (double)s->tokens[r] * (double)s->H;
    }
    if (cli_space_check("gen", dir, need, golden ? "the data (inputs and golden)" : "the data (inputs)")) return 1;
    char meta_file[IO_PATH_MAX];
    a2amm_error err = {0, ""};
    if (io_meta_path(meta_file, sizeof meta_file, dir, &err)) {
        cli_print_error("gen", &err);
        return 2;
    }
    if (cli_dir_lock("gen", dir, 1) < 0) return 1;
    unlink(meta_file); /* written last: a folder without it is not a complete set */
    cli_guard guard;
    if (cli_guard_start(&guard, gen_clean_after_kill, (void *)dir, &err)) {
        cli_print_error("gen", &err);
        return 1;
    }
    print_shape("gen", s);
    printf("  route %s, dist %s, scale mode %s, seed %" PRIu64 "\n", moe_io_route_name(meta.route),
           gen_dist_name(opt.dist), meta.scale_mode, opt.seed);
    double t0 = cli_now();
    moe_io_rank *data = calloc((size_t)s->R, sizeof *data);
    int rc = data ? A2AMM_OK : a2amm_fail(&err, A2AMM_E_NOMEM, "out of memory");
    int removed = 0; /* an earlier gen's goldens, of other inputs: no comparison with them */
    if (!rc && !golden) rc = gen_remove_goldens(dir, &removed, &err);
    if (!rc && removed)
        printf("  removed %d earlier golden%s (%s/output/<r>/cpu_output.bin): --no-golden\n", removed,
               removed == 1 ? "" : "s", dir);
    cli_progress progress;
    cli_progress_start(&progress, quiet, 0);
    for (int r = 0; !rc && r < s->R; r++) {
        cli_progress_say(&progress, "a2amm gen: inputs of rank %d of %d", r, s->R);
        rc = moe_io_rank_alloc(s, r, &data[r], &err);
        if (!rc) rc = gen_moe_rank(s, meta.route, &opt, r, &data[r], &err);
        if (!rc) rc = moe_io_rank_save(dir, s, r, &data[r], &err);
    }
    cli_progress_end(&progress);
    double t1 = cli_now();
    if (!rc && golden) {
        moe_refs m = {0};
        rc = references("gen", s, data, &m) ? a2amm_fail(&err, A2AMM_E_NOMEM, "no golden") : A2AMM_OK;
        double **ref = m.ref;
        for (int r = 0; !rc && r < s->R; r++) {
            size_t n = (size_t)(s->tokens[r] * s->H);
            uint16_t *out = malloc(2 * n + 2);
            char path[IO_PATH_MAX];
            if (!out) rc = a2amm_fail(&err, A2AMM_E_NOMEM, "out of memory");
            for (size_t i = 0; !rc && i < n; i++) out[i] = mx_f32_to_bf16((float)ref[r][i]);
            if (!rc) rc = io_rank_path(path, sizeof path, dir, "output", r, "cpu_output.bin", &err);
            if (!rc) rc = io_write_atomic(path, out, 2 * n, &err);
            if (!rc && r == 0) cli_print_corner("golden, rank 0", out, s->tokens[0], s->H, 4, 4);
            free(out);
        }
        free_refs(&m, s->R);
    }
    double t2 = cli_now();
    if (!rc) rc = moe_io_meta_write(dir, &meta, &err);
    cli_guard_stop(&guard);
    free_all(data, s->R);
    if (rc) {
        cli_print_error("gen", &err);
        return 1;
    }
    printf("  inputs: %.2f s", t1 - t0);
    if (golden) printf(", golden: %.2f s (fp64 reference)", t2 - t1);
    printf("\n  wrote %s/input/<0..%d>/%s\n", dir, s->R - 1, golden ? " and output/<r>/cpu_output.bin" : " (no golden)");
    return 0;
}

/* ---- run ---------------------------------------------------------------------------- */

static void run_usage(FILE *f)
{
    fprintf(f,
            "usage: a2amm run T H I R --op moe [precision|perf] [options]\n"
            "\n"
            "The MoE op on R ranks over the files gen --op moe wrote: each rank sends each\n"
            "of its tokens once to every rank that owns one of its experts, runs its experts\n"
            "(gate and up by the kernel level's matmul, SwiGLU, down) on the rows that\n"
            "arrived, and sends the weighted partials back, where each token's are summed.\n"
            "Precision mode writes DIR/output/<r>/npu_out.bin (bf16 [T_r, H], x's token\n"
            "order; every rank's as a set, none changed when the run fails). Perf mode times\n"
            "the call, the call on the other schedule, its experts alone (the same rows, the\n"
            "op's thread count) and the exchange alone (dispatch and combine), each\n"
            "repetition the slowest rank's.\n"
            "It calls the public API (a2amm_moe_*, include/a2amm.h).\n"
            "\n"
            "options:\n"
            "  --dir DIR          the folder gen wrote (default: .); its meta file gives the shape:\n"
            "                     without one, the arguments below do (defaults as gen's)\n"
            "  --experts E, --topk K, --tokens T0,T1,..., --a-type, --b-type\n"
            "                     as gen's: held to what gen recorded (a contradiction is refused)\n"
            "  --threads T        compute threads a rank (default: cores / ranks on this machine)\n"
            "  --unfused          the unfused schedule: the whole dispatch, the experts, the whole\n"
            "                     combine. perf mode times the other schedule too (unfused, or fused)\n"
            "  --overlap          each rank's tokens in 2 chunks (T over 64), one chunk's dispatch\n"
            "                     and combine while the other's experts run; each chunk reads every\n"
            "                     hit expert's weights again. The default, fused, overlaps where each\n"
            "                     local expert gets 256 rows a chunk on average (R T K / E / 2), else\n"
            "                     runs unfused. Every schedule gives the same bits\n"
            "  --iters N          perf repetitions (default 10)\n"
            "  --warmup N         perf untimed repetitions first (default 1)\n"
            "  --timeout SECONDS  deadline of every wait between ranks (default 60)\n"
            "  --transport shm|mpi  shm: fork R ranks here (default); mpi: this process is one\n"
            "                     rank of an MPI job:\n"
            "                       mpirun --allow-run-as-root --oversubscribe -np R \\\n"
            "                         a2amm run T H I R --op moe --transport mpi --dir D\n"
            "  --json             one JSON object: the run (precision mode) or its figures (perf mode)\n"
            "  --quiet            no progress in perf mode: on stderr, the repetitions done and\n"
            "                     about how long is left (on a terminal a line rewritten in place,\n"
            "                     else a line every few seconds); --json gives none either\n"
            "  --trace FILE       every rank's calls as a Chrome trace (Perfetto, chrome://tracing, or\n"
            "                     a2amm timeline FILE): each chunk's dispatch and combine, its experts,\n"
            "                     each expert on its thread; perf mode: every repetition. Over\n"
            "                     MPI rank 0 gathers the spans (clocks aligned by a ping exchange)\n"
            "                     and writes FILE on its host\n"
            "\n"
            "example:\n"
            "  a2amm gen 64 256 128 2 --op moe --experts 8 --dir /tmp/a2amm-moe\n"
            "  a2amm run 64 256 128 2 --op moe --dir /tmp/a2amm-moe\n"
            "  a2amm run 64 256 128 2 --op moe perf --iters 5 --dir /tmp/a2amm-moe\n");
}

/* --json in precision mode: the run as one object (shape, schedule, each rank, time, the outputs). */
static void print_precision_json(const char *dir, const moe_io_shape *s, const moe_run_options *o,
                                 const moe_run_result *res, int rc, const a2amm_error *err, double wall)
{
    printf("{\"command\":\"run\",\"mode\":\"precision\",\"op\":\"moe\",\"T\":%lld,\"H\":%lld,\"I\":%lld,\"R\":%d,"
           "\"experts\":%d,\"topk\":%d,\"tokens\":[", (long long)s->T, (long long)s->H, (long long)s->I, s->R, s->E,
           s->K);
    for (int r = 0; r < s->R; r++) printf("%s%lld", r ? "," : "", (long long)s->tokens[r]);
    printf("]");
    cli_json_key_str("a_type", a2amm_fp8_type_name(s->a_type));
    cli_json_key_str("b_type", a2amm_fp8_type_name(s->b_type));
    cli_json_key_str("schedule", moe_schedule_name(o->schedule));
    cli_json_key_str("transport", o->transport == RUN_MPI ? "mpi" : "shm");
    cli_json_key_str("status", rc ? "FAILURE" : "SUCCESS");
    cli_json_key_str("error", rc ? err->msg : NULL);
    cli_json_key_str("kernel", rc ? NULL : res->kernel);
    if (!rc) printf(",\"threads\":%d", res->threads);
    cli_json_key_num("wall_s", "%.6f", wall);
    rank_report_json_tail(o->transport != RUN_MPI ? res->ranks : NULL, s->R, dir, rc != 0);
}

static void print_perf(const moe_io_shape *s, const moe_run_result *res, a2amm_schedule schedule, int json)
{
    cli_summary sum[MOE_VARIANTS];
    for (int v = 0; v < MOE_VARIANTS; v++) sum[v] = cli_summarize(res->t[v], res->iters);
    int64_t tokens = 0;
    for (int r = 0; r < s->R; r++) tokens += s->tokens[r];
    const double call = sum[MOE_V_CALL].median, experts = sum[MOE_V_EXPERTS].median;
    int busy = 0;
    for (int v = 0; v < MOE_VARIANTS; v++) busy |= cli_spread_wide(sum[v].min, sum[v].max);
    const int exposed_ok = call > experts && cli_difference_measurable(&sum[MOE_V_CALL], &sum[MOE_V_EXPERTS]);
    if (json) {
        printf("{\"command\":\"run\",\"op\":\"moe\",\"mode\":\"perf\",\"T\":%lld,\"H\":%lld,\"I\":%lld,\"R\":%d,"
               "\"experts\":%d,\"topk\":%d,\"tokens\":%lld,\"threads\":%d", (long long)s->T, (long long)s->H,
               (long long)s->I, s->R, s->E, s->K, (long long)tokens, res->threads);
        cli_json_key_str("kernel", res->kernel);
        static const char *const keys[MOE_VARIANTS] = {"call", "other_schedule", "experts_alone", "exchange_alone"};
        for (int v = 0; v < MOE_VARIANTS; v++)
            printf(",\"%s_s\":{\"median\":%.9f,\"min\":%.9f,\"max\":%.9f,\"spread_wide\":%s}", keys[v], sum[v].median,
                   sum[v].min, sum[v].max, cli_spread_wide(sum[v].min, sum[v].max) ? "true" : "false");
        /* exposed_s stays the bare difference of the medians (negative where noise made it so);
         * exposed_measurable says whether it is more than the spread */
        printf(",\"schedule\":\"%s\",\"exposed_s\":%.9f,\"exposed_measurable\":%s,\"busy\":%s,\"tokens_per_s\":%.1f,"
               "\"expert_rows_max\":%lld}\n", moe_schedule_name(schedule), call - experts, exposed_ok ? "true" : "false",
               busy ? "true" : "false", tokens / call, (long long)res->rows_max);
        return;
    }
    const char *other = moe_other_schedule(schedule) == A2AMM_SCHEDULE_FUSED ? "fused" : "unfused";
    printf("  perf: %d repetitions, each the slowest rank's time (median, min .. max); the call's schedule: %s\n",
           res->iters, moe_schedule_name(schedule));
    for (int v = 0; v < MOE_VARIANTS; v++)
        printf("    %-46s %9.3f ms  (%.3f .. %.3f)\n",
               v == MOE_V_OTHER ? (moe_other_schedule(schedule) == A2AMM_SCHEDULE_FUSED ? "the call, fused schedule"
                                                                                        : "the call, unfused schedule")
                                : moe_variant_names[v],
               sum[v].median * 1e3, sum[v].min * 1e3, sum[v].max * 1e3);
    char other_name[40];
    snprintf(other_name, sizeof other_name, "%s schedule", other);
    const char *spread_names[MOE_VARIANTS] = {"call", other_name, "experts alone", "exchange alone"};
    cli_print_spreads(spread_names, sum, MOE_VARIANTS);
    if (busy)
        printf("  a busy machine: a spread over 10%% (wide) means other work took the cores during these\n"
               "  repetitions; a difference within the spread is not measurable (compare with care)\n");
    const double ratio = call / experts;
    printf("  call / experts alone: %.2f (medians)%s\n", ratio,
           ratio >= 1.0 ? ""
           : !cli_difference_measurable(&sum[MOE_V_CALL], &sum[MOE_V_EXPERTS])
               ? "; below 1.0 within the spread: as fast as its experts alone"
               : "; below 1.0: the experts alone ran slower than the whole call (a busy machine)");
    char ex[200];
    cli_exposed_text_of(ex, sizeof ex, &sum[MOE_V_CALL], &sum[MOE_V_EXPERTS], "the experts alone's");
    printf("  exposed, median call - median experts alone: %s\n", ex);
    const double d = sum[MOE_V_OTHER].median - call;
    if (!cli_difference_measurable(&sum[MOE_V_CALL], &sum[MOE_V_OTHER]))
        printf("  the call (%s) vs the %s schedule: no measurable difference (the medians differ by %.3f ms, "
               "within the spread)\n", moe_schedule_name(schedule), other, fabs(d) * 1e3);
    else
        printf("  the call (%s) vs the %s schedule: %s by %.3f ms (%.1f%%)%s\n", moe_schedule_name(schedule), other,
               d > 0 ? "faster" : "slower", fabs(d) * 1e3, 100.0 * fabs(d) / sum[MOE_V_OTHER].median,
               d < 0 && busy ? " on a busy machine (see the spreads)" : "");
    printf("  %.0f tokens/s over %lld tokens (median call); at most %lld expert rows (token, expert) on a rank\n",
           tokens / call, (long long)tokens, (long long)res->rows_max);
}

int cmd_run_moe(int argc, char **argv)
{
    moe_run_options o = {.mode = RUN_PRECISION, .iters = 10, .warmup = 1, .timeout_s = 60};
    moe_args a = {0};
    const char *dir = ".";
    int json = 0, quiet = 0, modes = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        int64_t x;
        if (cli_is_help(argv[i])) { run_usage(stdout); return 0; }
        if ((m = shape_option(argc, argv, &i, &a))) { if (m < 0) return 2; }
        else if ((m = cli_option(argc, argv, &i, "--dir", &v))) { if (m < 0) return 2; dir = v; }
        else if ((m = cli_option(argc, argv, &i, "--op", &v))) { /* each checked, the last one wins */
            op_kind k;
            if (m < 0 || cli_parse_op("run", v, &k)) return 2;
        }
        else if ((m = cli_option(argc, argv, &i, "--threads", &v))) {
            if (m < 0 || cli_parse_i64("run", "--threads", v, 1, 1024, &x)) return 2;
            o.threads = (int)x;
        } else if ((m = cli_option(argc, argv, &i, "--iters", &v))) {
            if (m < 0 || cli_parse_i64("run", "--iters", v, 1, 100000, &x)) return 2;
            o.iters = (int)x;
        } else if ((m = cli_option(argc, argv, &i, "--warmup", &v))) {
            if (m < 0 || cli_parse_i64("run", "--warmup", v, 0, 1000, &x)) return 2;
            o.warmup = (int)x;
        } else if ((m = cli_option(argc, argv, &i, "--timeout", &v))) {
            if (m < 0 || cli_parse_double("run", "--timeout", v, 0.001, 86400, &o.timeout_s)) return 2;
        } else if ((m = cli_option(argc, argv, &i, "--transport", &v))) {
            if (m < 0) return 2;
            if (strcmp(v, "shm") && strcmp(v, "mpi")) {
                fprintf(stderr, "a2amm run: --transport must be shm or mpi, got '%s'\n", v);
                return 2;
            }
            o.transport = !strcmp(v, "mpi") ? RUN_MPI : RUN_SHM;
        } else if ((m = cli_option(argc, argv, &i, "--trace", &v))) {
            if (m < 0) return 2;
            o.trace_path = v;
        } else if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--quiet")) quiet = 1;
        else if (!strcmp(argv[i], "--unfused") || !strcmp(argv[i], "--overlap")) {
            a2amm_schedule asked = argv[i][2] == 'u' ? A2AMM_SCHEDULE_UNFUSED : A2AMM_SCHEDULE_OVERLAP;
            if (o.schedule != A2AMM_SCHEDULE_FUSED && o.schedule != asked) {
                fprintf(stderr, "a2amm run: --unfused and --overlap: one schedule, not both\n");
                return 2;
            }
            o.schedule = asked;
        }
        else if ((!strcmp(argv[i], "precision") || !strcmp(argv[i], "perf")) && a.npos == 4) {
            int mode = (int)o.mode;
            if (cli_mode_word("run", argv[i], &modes, &mode)) return 2;
            o.mode = (run_mode)mode;
        }
        else if (argv[i][0] == '-' && argv[i][1] && !(argv[i][1] >= '0' && argv[i][1] <= '9')) {
            fprintf(stderr, "a2amm run: unknown option '%s' for --op moe (see a2amm run --op moe --help)\n", argv[i]);
            return 2;
        } else if (a.npos < 4) a.pos[a.npos++] = argv[i];
        else {
            fprintf(stderr, "a2amm run: unexpected '%s': after T H I R comes precision or perf\n", argv[i]);
            return 2;
        }
    }
    if (cli_perf_only_options("run", argc, argv, o.mode == RUN_PERF)) return 2;
    if (a.npos != 4) {
        fprintf(stderr, "a2amm run: --op moe: expected T H I R, got %d of them\n", a.npos);
        run_usage(stderr);
        return 2;
    }
    if (a.route) {
        fprintf(stderr, "a2amm run: --route is gen's: the routing is in the files\n");
        return 2;
    }
    moe_io_shape s;
    if (cli_dir_existing("run", dir)) return 2;
    int held = shape_of_dir("run", dir, &a, &s);
    if (held) return held;
    if (o.transport == RUN_MPI && !run_under_mpirun()) {
        fprintf(stderr, "a2amm run: --transport mpi: this process is not part of an MPI job. Launch every rank with "
                "mpirun:\n  mpirun --allow-run-as-root --oversubscribe -np %d a2amm run %s %s %s %s --op moe "
                "--transport mpi --dir %s\n", s.R, a.pos[0], a.pos[1], a.pos[2], a.pos[3], dir);
        return 2;
    }
    a2amm_error terr = {0, ""};
    if (o.trace_path && cli_check_output("--trace", o.trace_path, dir, s.R, &terr)) {
        cli_print_error("run", &terr);
        return 2;
    }
    if (o.transport != RUN_MPI && cli_dir_lock("run", dir, 0) < 0) return 1;
    if (o.transport != RUN_MPI) o.stop = cli_catch_stop_signals();
    o.progress = !quiet && !json && o.transport != RUN_MPI; /* perf mode's progress (progress.h) */
    if (o.transport == RUN_MPI && run_mpi_rank() > 0 && !freopen("/dev/null", "w", stdout)) return 1;
    if (!json) {
        print_shape("run", &s);
        printf("  %s mode, transport %s, %s schedule\n", o.mode == RUN_PERF ? "perf" : "precision",
               o.transport == RUN_MPI ? "mpi" : "shm", moe_schedule_name(o.schedule));
    }
    fflush(stdout);
    moe_run_result res;
    a2amm_error err = {0, ""};
    double t0 = cli_now();
    int rc = moe_run_files(dir, &s, &o, &res, &err);
    double wall = cli_now() - t0;
    if (o.transport == RUN_MPI) run_mpi_finalize();
    if (json && o.mode == RUN_PRECISION) { /* one object, as the matmul ops' run --json prints */
        print_precision_json(dir, &s, &o, &res, rc, &err, wall);
        moe_run_result_free(&res);
        if (rc == A2AMM_E_INTERRUPTED && cli_exit_code_for_stop()) return cli_exit_code_for_stop();
        return rc ? 1 : 0;
    }
    if (rc) {
        /* (over MPI each rank is mpirun's process: the launcher's reports are of shared memory's ranks) */
        for (int r = 0; o.transport != RUN_MPI && res.ranks && r < s.R; r++) rank_report_print(r, &res.ranks[r]);
        cli_print_error("run", &err);
        printf("All workers finished. Status: FAILURE\n");
        moe_run_result_free(&res);
        if (rc == A2AMM_E_INTERRUPTED && cli_exit_code_for_stop()) return cli_exit_code_for_stop();
        return 1;
    }
    if (o.mode == RUN_PERF) print_perf(&s, &res, o.schedule, json);
    else if (!json)
        printf("  %d compute thread%s a rank, kernel %s\n  wrote %s/output/<0..%d>/npu_out.bin (bf16 [T_r, %lld] "
               "each) in %.3f s (whole run: load, prepare, call, write)\n", res.threads, res.threads == 1 ? "" : "s",
               res.kernel, dir, s.R - 1, (long long)s.H, wall);
    if (!json && o.trace_path)
        printf("  trace: %s (draw it: a2amm timeline %s)\n", o.trace_path, o.trace_path);
    if (!json) printf("All workers finished. Status: SUCCESS\n");
    moe_run_result_free(&res);
    return 0;
}

/* ---- verify ------------------------------------------------------------------------- */

static void verify_usage(FILE *f)
{
    fprintf(f,
            "usage: a2amm verify T H I R --op moe [--dir DIR] [options]\n"
            "\n"
            "Checks every rank's DIR/output/<r>/npu_out.bin (bf16 [T_r, H]) against the MoE\n"
            "op's rules: the fp64 value of the formulas, computed here from every rank's\n"
            "inputs, within the tolerance docs/op-contract.md derives from the op's rounding\n"
            "steps (one bound per value: a bf16 rounding of the value, plus a's, the\n"
            "partials' and the fp32 sums' roundings over the sizes of their terms, and the\n"
            "same roundings' absolute errors below the smallest normal numbers). Where the\n"
            "op's fp32 or bf16 steps may overflow, the Inf of the value's sign passes too\n"
            "(the contract's overflow rule). Prints per rank the worst error as a fraction\n"
            "of its bound (1 or less passes), the first value out of it (token and column),\n"
            "and the seed's figures against cpu_output.bin (gen's golden, torch.allclose's\n"
            "rule, for information; large gaps in ulps are expected where terms cancel).\n"
            "Exit 0 only if every rank passes.\n"
            "\n"
            "options:\n"
            "  --dir DIR   the folder gen and run used (default: .)\n"
            "  --experts E, --topk K, --tokens T0,T1,..., --a-type, --b-type\n"
            "              held to what gen recorded, as run\n"
            "\n"
            "example:\n"
            "  a2amm verify 64 256 128 2 --op moe --dir /tmp/a2amm-moe\n");
}

/* Rank r's check; 1 pass, 0 fail, -1 its output could not be read (said). */
static int verify_rank(const char *dir, const moe_io_shape *s, int r, const moe_refs *m)
{
    const int64_t n = s->tokens[r] * s->H;
    const double *ref = m->ref[r], *bound = m->bound[r], *reach = m->reach[r];
    uint16_t *out = malloc(2 * (size_t)n + 2), *golden = malloc(2 * (size_t)n + 2);
    char path[IO_PATH_MAX];
    a2amm_error err = {0, ""};
    int rc = out && golden ? A2AMM_OK : a2amm_fail(&err, A2AMM_E_NOMEM, "out of memory");
    if (!rc) rc = io_rank_path(path, sizeof path, dir, "output", r, "npu_out.bin", &err);
    if (!rc) rc = io_read_exact(path, out, 2 * (size_t)n, &err);
    if (rc) {
        printf("[FAIL] Rank %d: %s\n", r, err.msg);
        free(out), free(golden);
        return -1;
    }
    int64_t off = 0, first = -1, worst_at = -1, overflowed = 0;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        int ok = ref_moe_close(out[i], ref[i], bound[i], reach[i]);
        if (ok && ref_moe_overflow_allowed(out[i], ref[i], reach[i])) { /* the overflow rule's Inf: no error figure */
            overflowed++;
            continue;
        }
        double ratio = isfinite(ref[i]) ? fabs((double)mx_bf16_to_f32(out[i]) - ref[i]) / bound[i] : ok ? 0 : INFINITY;
        if (isnan(ratio)) ratio = INFINITY; /* a NaN output where the value is finite: the worst there is */
        if (!ok && off++ == 0) first = i;
        if (ratio > worst || worst_at < 0) worst = ratio, worst_at = i;
    }
    printf("\n[Rank %d] [verify] tokens=%lld, H=%lld, values=%lld\n", r, (long long)s->tokens[r], (long long)s->H,
           (long long)n);
    if (worst_at >= 0)
        printf("  worst |out - ref| / bound: %.4f at token %lld, column %lld (out %.8g, ref %.10g, bound %.3g; the "
               "contract's bound for that value, so 1 or less passes)\n", worst, (long long)(worst_at / s->H),
               (long long)(worst_at % s->H), (double)mx_bf16_to_f32(out[worst_at]), ref[worst_at], bound[worst_at]);
    if (overflowed)
        printf("  %lld values are Inf of the value's sign where the op's fp32 or bf16 steps may overflow (the "
               "contract's overflow rule): accepted\n", (long long)overflowed);
    a2amm_error gerr = {0, ""};
    if (!io_rank_path(path, sizeof path, dir, "output", r, "cpu_output.bin", &gerr) &&
        !io_read_exact(path, golden, 2 * (size_t)n, &gerr)) {
        verify_stats st;
        verify_compare(golden, out, n, VERIFY_TOL, VERIFY_TOL, &st);
        if (n)
            printf("  against cpu_output.bin (gen's golden: ref rounded to bf16; for information, not the check): "
                   "abs_err max=%.6e mean=%.6e, allclose(1e-2): %s\n", st.abs_max, st.abs_mean, st.pass ? "yes" : "no");
        if (n && st.ulp_max_index >= 0) {
            const int64_t u = st.ulp_max_index;
            printf("    largest gap in bf16 steps: %u ulp at token %lld, column %lld (out %.6g, golden %.6g; |out - ref| "
                   "there is %.3g of its bound). An ulp is a step of the value's own size: where a value is small "
                   "because its terms cancel, the terms' roundings are many of its ulps, and the bound (above) is "
                   "set by the terms' sizes, not the value's\n", st.ulp_max, (long long)(u / s->H),
                   (long long)(u % s->H), (double)mx_bf16_to_f32(out[u]), (double)mx_bf16_to_f32(golden[u]),
                   bound[u] > 0 ? fabs((double)mx_bf16_to_f32(out[u]) - ref[u]) / bound[u] : 0.0);
        }
    } else if (access(path, F_OK) != 0 && errno == ENOENT)
        printf("  cpu_output.bin not compared: there is no golden (gen --no-golden writes none); the check above "
               "does not need it\n");
    else
        printf("  cpu_output.bin not compared (it is for information; the check above does not need it): %s\n",
               gerr.msg);
    if (n) cli_print_corner("npu output", out, s->tokens[r], s->H, 4, 4);
    if (!off) printf("[PASS] Rank %d: every value within the contract's bound\n", r);
    else {
        const double g = mx_bf16_to_f32(out[first]);
        printf("[FAIL] Rank %d: %lld values out of the contract's bound; first at token %lld, column %lld: output "
               "%.8g (0x%04x), reference %.10g, bound %.3g\n", r, (long long)off, (long long)(first / s->H),
               (long long)(first % s->H), g, out[first], ref[first], bound[first]);
        if (isinf(g) && isfinite(ref[first]))
            printf("  (an Inf is accepted only with the value's sign where the op's steps may reach %.5g, bf16's "
                   "overflow: there they reach at most %.5g)\n", REF_MOE_OMEGA, reach[first]);
    }
    free(out), free(golden);
    return off == 0;
}

int cmd_verify_moe(int argc, char **argv)
{
    moe_args a = {0};
    const char *dir = ".";
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        if (cli_is_help(argv[i])) { verify_usage(stdout); return 0; }
        if ((m = shape_option(argc, argv, &i, &a))) { if (m < 0) return 2; }
        else if ((m = cli_option(argc, argv, &i, "--dir", &v))) { if (m < 0) return 2; dir = v; }
        else if ((m = cli_option(argc, argv, &i, "--op", &v))) { /* each checked, the last one wins */
            op_kind k;
            if (m < 0 || cli_parse_op("verify", v, &k)) return 2;
        }
        else if (argv[i][0] == '-' && argv[i][1] && !(argv[i][1] >= '0' && argv[i][1] <= '9')) {
            fprintf(stderr, "a2amm verify: unknown option '%s' for --op moe (see a2amm verify --op moe --help)\n",
                    argv[i]);
            return 2;
        } else if (a.npos < 4) a.pos[a.npos++] = argv[i];
        else {
            fprintf(stderr, "a2amm verify: too many arguments at '%s' (expected T H I R)\n", argv[i]);
            return 2;
        }
    }
    if (a.npos != 4) {
        fprintf(stderr, "a2amm verify: --op moe: expected T H I R, got %d of them\n", a.npos);
        verify_usage(stderr);
        return 2;
    }
    if (a.route) {
        fprintf(stderr, "a2amm verify: --route is gen's: the routing is in the files\n");
        return 2;
    }
    moe_io_shape s;
    if (cli_dir_existing("verify", dir)) return 2;
    int held = shape_of_dir("verify", dir, &a, &s);
    if (held) return held;
    char marker[IO_PATH_MAX];
    if (io_set_pending(dir, marker, sizeof marker) || io_staged_left(dir, marker, sizeof marker)) {
        fprintf(stderr, "a2amm verify: %s: a run is writing its outputs, or one was killed while doing so: run "
                "again (or wait for it)\n", marker);
        return 1;
    }
    moe_io_rank *data = calloc((size_t)s.R, sizeof *data);
    a2amm_error err = {0, ""};
    int rc = data ? A2AMM_OK : a2amm_fail(&err, A2AMM_E_NOMEM, "out of memory");
    for (int r = 0; !rc && r < s.R; r++) {
        rc = moe_io_rank_alloc(&s, r, &data[r], &err);
        if (!rc) rc = moe_io_rank_load(dir, &s, r, &data[r], &err);
    }
    if (rc) {
        cli_print_error("verify", &err);
        free_all(data, s.R);
        return 1;
    }
    moe_refs refs = {0};
    int no_ref = references("verify", &s, data, &refs);
    free_all(data, s.R);
    if (no_ref) return 1;
    printf("============================================================\n");
    printf("Verifying the MoE op's outputs for %d ranks in %s/output\n", s.R, dir);
    printf("============================================================\n");
    signed char *status = calloc((size_t)s.R, 1);
    int passed = 0;
    if (!status) fprintf(stderr, "a2amm verify: out of memory\n");
    for (int r = 0; status && r < s.R; r++) status[r] = (signed char)verify_rank(dir, &s, r, &refs);
    if (status)
        passed = verify_print_summary(status, s.R, "are out of the contract's bound",
                                      "an output missing or of another size");
    free(status);
    free_refs(&refs, s.R);
    return passed ? 0 : 1;
}
