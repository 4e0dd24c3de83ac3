/*
 * `a2amm bench grouped E M H I`: the MoE op's experts as one grouped call:
 * E SwiGLU experts (gate and up [2I, H], down [H, I], MXFP8) with M rows
 * each, the experts shared out over the threads (each expert's weights read
 * once: the op's own expert computation, moe_experts), beside a read of the
 * same weights' bytes on the same threads, in turns: the fraction of the
 * read's speed the grouped call reaches is what a decode step can hope for
 * (issue 31's target: >= 0.6 at 64 experts x 4 rows, H = 2048, I = 1408).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "a2amm.h"
#include "bench/bench.h"
#include "bench/bench_data.h"
#include "cli/args.h"
#include "cli/perf_report.h"
#include "cli/progress.h"
#include "common/error.h"
#include "common/pool.h"
#include "op/moe.h"

typedef struct grouped {
    moe_shape s;
    moe_weights w;
    int64_t M;
    const uint8_t *x, *sx; /* [E * M, H], [E * M, H/32] */
    float *y;              /* [E * M, H] */
    const uint8_t *const *parts; /* what the read reads: w13, s13, w2, s2 */
    size_t part_bytes[4];
    int threads, failed;
    uint64_t sink[256];
} grouped;

static void expert_task(void *arg, int le)
{
    grouped *g = arg;
    const int64_t H = g->s.H, M = g->M;
    float *rows[256];
    for (int64_t i = 0; i < M && i < 256; i++) rows[i] = g->y + (le * M + i) * H;
    if (moe_expert_rows(&g->s, &g->w, le, g->x + le * M * H, g->sx + le * M * (H / 32), M, rows)) g->failed = 1;
}

/* Thread t reads its share (1/threads) of every part, 8 bytes at a time. */
static void read_task(void *arg, int t)
{
    grouped *g = arg;
    uint64_t sum = 0;
    for (int p = 0; p < 4; p++) {
        size_t words = g->part_bytes[p] / 8, lo = words * (size_t)t / (size_t)g->threads;
        size_t hi = words * (size_t)(t + 1) / (size_t)g->threads;
        const uint64_t *w = (const uint64_t *)g->parts[p];
        for (size_t i = lo; i < hi; i++) sum += w[i];
    }
    g->sink[t % 256] += sum;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: a2amm bench grouped E M H I [--threads T] [--iters N] [--quiet]\n"
            "\n"
            "E experts of the MoE op (SwiGLU: gate and up [2I, H], down [H, I], MXFP8 E4M3 of\n"
            "floats uniform in [-1, 1], as ggml's tests draw them) with M rows each, computed\n"
            "as the op computes them (the experts shared out over T threads, each expert's\n"
            "weights read once), beside a read of the same weights' bytes on the same\n"
            "threads, in turns; prints both, their GB/s of weights and the fraction of the\n"
            "read's speed the experts reach: of the medians, and paired by repetition (each\n"
            "call against the read right after it, which meets the same phase of the host).\n"
            "\n"
            "options:\n"
            "  --threads T   threads, 1 to 1024 (default: every core)\n"
            "  --iters N     repetitions (default 10)\n"
            "  --quiet       no progress on stderr (see Time)\n"
            "\n"
            "Time: the weights made and prepared, a warm-up, then --iters repetitions of the\n"
            "experts and the read; it grows with E x H x I (x M for the experts): about 3 s at\n"
            "the example's shape on a 2-core machine. Progress goes to stderr: the preparation,\n"
            "then the repetitions done and about how long is left (on a terminal a line\n"
            "rewritten in place, else a line every few seconds); --quiet: none.\n"
            "\n"
            "example:\n"
            "  a2amm bench grouped 64 4 2048 1408      (DeepSeek-V2-Lite's experts, 4 rows each)\n");
}

int cmd_bench_grouped(int argc, char **argv)
{
    int iters = 10, threads = pool_cpu_count();
    char *pos[4];
    int npos = 0, quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        int64_t x;
        if (cli_is_help(argv[i])) {
            usage(stdout);
            return 0;
        }
        if ((m = cli_option(argc, argv, &i, "--iters", &v))) {
            if (m < 0 || cli_parse_i64("bench grouped", "--iters", v, 1, 1000, &x)) return 2;
            iters = (int)x;
        } else if ((m = cli_option(argc, argv, &i, "--threads", &v))) {
            if (m < 0 || cli_parse_i64("bench grouped", "--threads", v, 1, 1024, &x)) return 2;
            threads = (int)x;
        } else if (!strcmp(argv[i], "--quiet")) {
            quiet = 1;
        } else if (argv[i][0] == '-' && argv[i][1] && !(argv[i][1] >= '0' && argv[i][1] <= '9')) {
            fprintf(stderr, "a2amm bench grouped: unknown option '%s' (see a2amm bench grouped --help)\n", argv[i]);
            return 2;
        } else if (npos < 4) {
            pos[npos++] = argv[i];
        } else {
            fprintf(stderr, "a2amm bench grouped: too many arguments at '%s' (expected E M H I)\n", argv[i]);
            return 2;
        }
    }
    if (npos != 4) {
        fprintf(stderr, "a2amm bench grouped: expected E M H I, got %d of them\n", npos);
        usage(stderr);
        return 2;
    }
    int64_t v[4];
    static const char *const names[4] = {"E", "M", "H", "I"};
    static const int64_t lo[4] = {1, 1, 32, 32}, hi[4] = {1024, 256, 1 << 16, 1 << 16};
    for (int i = 0; i < 4; i++)
        if (cli_parse_i64("bench grouped", names[i], pos[i], lo[i], hi[i], &v[i])) return 2;
    const int E = (int)v[0];
    const int64_t M = v[1], H = v[2], I = v[3];
    if (H % 32 || I % 32) {
        fprintf(stderr, "a2amm bench grouped: H and I must be multiples of 32 (got H=%lld I=%lld)\n", (long long)H,
                (long long)I);
        return 2;
    }
    grouped g = {.s = {1, 0, E, E, 1, H, I, A2AMM_E4M3, A2AMM_E4M3}, .M = M, .threads = threads};
    const size_t n13 = (size_t)E * (size_t)(2 * I * H), n2 = (size_t)E * (size_t)(H * I);
    uint8_t *w13 = malloc(n13), *s13 = malloc(n13 / 32), *w2 = malloc(n2), *s2 = malloc(n2 / 32);
    uint8_t *x = malloc((size_t)(E * M * H)), *sx = malloc((size_t)(E * M * H / 32));
    g.y = malloc(sizeof *g.y * (size_t)(E * M * H));
    double *t_call = malloc(sizeof(double) * (size_t)iters), *t_read = malloc(sizeof(double) * (size_t)iters);
    a2amm_error err = {0, ""};
    pool *workers = NULL;
    gemm_isa isa;
    int rc = w13 && s13 && w2 && s2 && x && sx && g.y && t_call && t_read ? A2AMM_OK
                                                                          : a2amm_fail(&err, A2AMM_E_NOMEM, "out of memory");
    cli_progress progress;
    cli_progress_start_lines(&progress, quiet, 0);
    cli_progress_say(&progress, "a2amm bench grouped: making and preparing %d experts' weights", E);
    uint64_t st = 0x9E3779B97F4A7C15ull;
    if (!rc) rc = bench_uniform_mx(&st, (int64_t)E * 2 * I, H, w13, s13, &err);
    if (!rc) rc = bench_uniform_mx(&st, (int64_t)E * H, I, w2, s2, &err);
    if (!rc) rc = bench_uniform_mx(&st, (int64_t)E * M, H, x, sx, &err);
    if (!rc) rc = gemm_isa_select(&isa, &err);
    if (!rc) rc = moe_weights_prepare(&g.s, isa, M, w13, s13, H / 32, w2, s2, I / 32, &g.w, &err);
    if (!rc) rc = pool_create(threads, &workers, &err);
    const uint8_t *parts[4] = {w13, s13, w2, s2};
    g.parts = parts, g.x = x, g.sx = sx;
    g.part_bytes[0] = n13, g.part_bytes[1] = n13 / 32, g.part_bytes[2] = n2, g.part_bytes[3] = n2 / 32;
    if (!rc) pool_run(workers, expert_task, &g, E); /* warm-up */
    for (int it = 0; !rc && it < iters; it++) {
        cli_progress_count(&progress, "a2amm bench grouped: repetition", it + 1, it, iters);
        double t0 = cli_now();
        pool_run(workers, expert_task, &g, E);
        t_call[it] = cli_now() - t0;
        t0 = cli_now();
        pool_run(workers, read_task, &g, threads);
        t_read[it] = cli_now() - t0;
    }
    if (!rc) cli_progress_count(&progress, "a2amm bench grouped: repetition", iters, iters, iters);
    cli_progress_end(&progress);
    if (!rc && g.failed) rc = a2amm_fail(&err, A2AMM_E_NOMEM, "an expert ran out of memory");
    if (!rc) {
        const char *kernel = "?";
        a2amm_kernel(&kernel, NULL);
        double bytes = (double)(n13 + n13 / 32 + n2 + n2 / 32);
        cli_summary c = cli_summarize(t_call, iters), r = cli_summarize(t_read, iters);
        printf("a2amm bench grouped: %d experts x %lld rows, H=%lld I=%lld, E4M3, %d thread%s, kernel %s, %d "
               "repetitions\n", E, (long long)M, (long long)H, (long long)I, threads, threads == 1 ? "" : "s", kernel,
               iters);
        printf("  the experts' fp8 weights: %.1f MB\n", bytes / 1e6);
        printf("  %-36s %10s %10s %10s %10s\n", "", "min ms", "median ms", "max ms", "GB/s");
        printf("  %-36s %10.3f %10.3f %10.3f %10.2f\n", "a2amm grouped experts (gate+up, down)", c.min * 1e3,
               c.median * 1e3, c.max * 1e3, bytes / c.median / 1e9);
        printf("  %-36s %10.3f %10.3f %10.3f %10.2f\n", "read of the same bytes", r.min * 1e3, r.median * 1e3,
               r.max * 1e3, bytes / r.median / 1e9);
        printf("  experts / read: %.3f of the read's speed (medians)\n", r.median / c.median);
        /* each call against the read right after it: the host's read speed moves by 1.5x between runs and
         * phases, and a pair meets the same phase */
        for (int it = 0; it < iters; it++) t_read[it] /= t_call[it];
        cli_summary p = cli_summarize(t_read, iters);
        printf("  paired by repetition (each call against the read after it): median %.3f, %.3f-%.3f\n", p.median,
               p.min, p.max);
    }
    if (rc) fprintf(stderr, "a2amm bench grouped: %s\n", err.msg);
    moe_weights_free(&g.s, &g.w);
    pool_destroy(workers);
    free(w13), free(s13), free(w2), free(s2), free(x), free(sx), free(g.y), free(t_call), free(t_read);
    return rc ? 1 : 0;
}
