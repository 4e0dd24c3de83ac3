/*
 * `a2amm bench gemm M N K`: a2amm's MXFP8 matmul, the machine's ceiling and
 * the peers a user would pick instead (oneDNN bf16, OpenBLAS sgemm) on the
 * same values, all in one run, so that the ratios are comparable on a noisy
 * shared machine.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "bench/bench_ceiling.h"
#include "bench/bench_peers.h"
#include "cli/measure.h"
#include "cli/json.h"
#include "bench/bench.h"
#include "cli/perf_report.h"
#include "cli/progress.h"
#include "common/error.h"
#include "common/hugemem.h"
#include "util/llc.h"
#include "common/pool.h"
#include "gemm/gemm.h"
#include "gen/gen.h"
#include "io/io.h"
#include "mx/mx.h"

/* ======================================================================
 * bench gemm
 * ====================================================================== */

#define GEMM_SEED 1
/* Seconds each ceiling probe (bf16, FMA) runs, twice per benchmark. */
#define CEILING_PROBE_S 0.2
#define ROUND_PROBE_S 0.03
#define CHECK_SAMPLES 256
/* Every contender multiplies exact products (fp8 values are exact in bf16
 * and fp32) and accumulates in fp32, in its own order: their difference,
 * relative to sum_k |a*b|, stays far below this. */
#define CHECK_LIMIT 1e-3
/* oneDNN's bf16 output against a2amm's: two roundings of nearly the same sums can be one bf16 ulp
 * (2^-8 relative) apart; a wrong result is off by far more. */
#define CHECK_LIMIT_BF16 8e-3

static void gemm_usage(FILE *f)
{
    fprintf(f,
            "usage: a2amm bench gemm M N K [options]\n"
            "\n"
            "Times C[M,N] = A[M,K] x B[K,N] on MXFP8 inputs (e4m3, E8M0 scales per 32 values\n"
            "of K, deterministic: Gaussian values, seed %d) and, in the same run and on\n"
            "the same values dequantized, the peers and the machine's ceiling:\n"
            "  a2amm MXFP8, prepared B   B packed once, then gemm_multiply_store over all of\n"
            "                            K, bf16 out (threads split as the operator splits a\n"
            "                            tile: by rows when tall, else by 64-column panels)\n"
            "  a2amm incl. B preparation as if B were prepared on every call: the medians of\n"
            "                            the matmul and of B's preparation (timed apart), added\n"
            "  oneDNN bf16, packed B     oneDNN's matmul, weights reordered into its packed\n"
            "                            layout once (untimed), bf16 output as a2amm's; where\n"
            "                            oneDNN has no bf16 matmul for the CPU (no AVX-512),\n"
            "                            \"oneDNN fp32, packed B\" instead, on the fp32 values\n"
            "  OpenBLAS sgemm fp32       cblas_sgemm on the dequantized fp32 values\n"
            "  AMX bf16 / bf16 / fp32    a built-in probe: AMX tdpbf16ps on 4 tiles, vdpbf16ps\n"
            "  FMA ceiling               and vfmadd231ps with 24 independent accumulators on\n"
            "                            every thread (those this CPU has), run before and\n"
            "                            after the others and briefly in every round; the\n"
            "                            best counts (a busy moment only slows a probe).\n"
            "                            a2amm's fraction is of its own level's ceiling: AMX\n"
            "                            for amx, bf16 for avx512, fp32 FMA for avx2 (on ymm,\n"
            "                            the registers it uses) and ref;\n"
            "                            also paired by round: each a2amm call over the probe\n"
            "                            of its own round, which a slow phase of the host\n"
            "                            slows alike (the steadiest figure on a shared host)\n"
            "  AMX fed from L2           with AMX, the probe's step again with its 4 tiles\n"
            "                            loaded every time from operands held in L2 (a2amm's\n"
            "                            layouts): the most a kernel fed from L2 reaches here\n"
            "  memory (the line below)   a streaming read probe: every thread reads its part\n"
            "                            of a buffer twice the last-level cache (512 MiB at\n"
            "                            least), with the other probes; B's fp8 bytes (codes\n"
            "                            and scales) over a2amm's call, as a fraction of it,\n"
            "                            also paired by round: where M is small the matmul is\n"
            "                            a read of B, and this is the most it can reach\n"
            "The contenders run in rounds: each round times a2amm, oneDNN and OpenBLAS once\n"
            "(the first changing every round, the peers' threads made idle after their\n"
            "calls), so that a slow phase of a shared machine hits them alike; each row\n"
            "gives the median, min and max of its calls. The last column is a2amm's\n"
            "GFLOP/s over the row's: its speed-up over a peer, its fraction of a ceiling.\n"
            "Each result is checked against a2amm's on a sample.\n"
            "\n"
            "Rules: M, N, K from 1 to 2147483647; K a multiple of 32 (one scale per 32 values).\n"
            "\n"
            "options:\n"
            "  --threads T   threads for every contender, 1 to 1024 (default: all cores, here %d)\n"
            "  --iters N     rounds: timed calls of each contender (default 10)\n"
            "  --warmup N    untimed runs of each before them (default 1)\n"
            "  --no-flush    do not flush the caches before each repetition\n"
            "  --probe S     seconds each ceiling probe runs before and after the contenders, 0.001\n"
            "                to 10 (default 0.2; shorter: a quicker run, a noisier ceiling)\n"
            "  --json        print the figures as one JSON object, nothing else on stdout\n"
            "  --sweep       M = 1, 2, 4, 8, 16, 32, 64 and 128 in turn at N K (default the seed's\n"
            "                3584 8192; give N K only): a line each, a2amm against oneDNN and B's\n"
            "                fp8 bytes against the streaming read (a2amm bench gemm --sweep)\n"
            "  --quiet       no progress on stderr (the rounds done and the time left: on a\n"
            "                terminal a line rewritten in place, else a line every few seconds)\n"
            "\n"
            "A2AMM_ISA=ref|avx2|avx512|amx forces a2amm's kernel level (default: the best this CPU\n"
            "runs). A2AMM_CPU_HIDE=amx,avx512bf16,avx512,avx2 hides CPU features as on a CPU\n"
            "without them (a2amm cpu --help): a2amm, its ceiling rows (n/a, saying why) and\n"
            "oneDNN (its ISA capped to match) all run as there. OpenBLAS picks its kernel from\n"
            "OPENBLAS_CORETYPE when set (hiding does not reach it); the table says which ran.\n"
            "\n"
            "example:\n"
            "  a2amm bench gemm 256 256 256 --iters 3\n",
            GEMM_SEED, pool_cpu_count());
}

typedef struct gemm_opts {
    int64_t M, N, K;
    int threads, iters, warmup, flush, json, quiet, sweep;
    double probe_s; /* each ceiling probe before and after the contenders */
} gemm_opts;

/* --sweep: these M at one N and K (the seed's, 3584 and 8192, unless given). */
static const int64_t SWEEP_M[] = {1, 2, 4, 8, 16, 32, 64, 128};
#define SWEEP_COUNT (int)(sizeof SWEEP_M / sizeof SWEEP_M[0])

/* Parses the arguments; 0 to go on, else the exit code (0 after --help). */
static int gemm_parse(int argc, char **argv, gemm_opts *o, int *exit_code)
{
    const char *pos[3];
    int npos = 0;
    *o = (gemm_opts){0, 0, 0, pool_cpu_count(), 10, 1, 1, 0, 0, 0, CEILING_PROBE_S};
    *exit_code = 2;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        int64_t x;
        if (cli_is_help(argv[i])) {
            gemm_usage(stdout);
            *exit_code = 0;
            return -1;
        }
        if ((m = cli_option(argc, argv, &i, "--threads", &v))) {
            if (m < 0 || cli_parse_i64("bench gemm", "--threads", v, 1, 1024, &x)) return -1;
            o->threads = (int)x;
        } else if ((m = cli_option(argc, argv, &i, "--iters", &v))) {
            if (m < 0 || cli_parse_i64("bench gemm", "--iters", v, 1, 100000, &x)) return -1;
            o->iters = (int)x;
        } else if ((m = cli_option(argc, argv, &i, "--warmup", &v))) {
            if (m < 0 || cli_parse_i64("bench gemm", "--warmup", v, 0, 1000, &x)) return -1;
            o->warmup = (int)x;
        } else if ((m = cli_option(argc, argv, &i, "--probe", &v))) {
            if (m < 0 || cli_parse_double("bench gemm", "--probe", v, 0.001, 10, &o->probe_s)) return -1;
        } else if (!strcmp(argv[i], "--no-flush")) o->flush = 0;
        else if (!strcmp(argv[i], "--json")) o->json = 1;
        else if (!strcmp(argv[i], "--quiet")) o->quiet = 1;
        else if (!strcmp(argv[i], "--sweep")) o->sweep = 1;
        else if (argv[i][0] == '-' && argv[i][1] != '\0' && !(argv[i][1] >= '0' && argv[i][1] <= '9')) {
            fprintf(stderr, "a2amm bench gemm: unknown option '%s' (see a2amm bench gemm --help)\n", argv[i]);
            return -1;
        } else if (npos < 3) pos[npos++] = argv[i];
        else {
            fprintf(stderr, "a2amm bench gemm: too many arguments at '%s' (expected M N K)\n", argv[i]);
            return -1;
        }
    }
    if (o->sweep && npos != 0 && npos != 2) {
        fprintf(stderr, "a2amm bench gemm --sweep: expected N K or nothing (the seed's 3584 8192), got %d "
                        "numbers\n", npos);
        return -1;
    }
    if (!o->sweep && npos != 3) {
        fprintf(stderr, "a2amm bench gemm: expected M N K, got %d of them\n", npos);
        gemm_usage(stderr);
        return -1;
    }
    static const char *names[3] = {"M", "N", "K"};
    int64_t d[3] = {SWEEP_M[SWEEP_COUNT - 1], 3584, 8192};
    for (int i = 0; i < npos; i++)
        if (cli_parse_i64("bench gemm", names[i + (o->sweep ? 1 : 0)], pos[i], 1, INT32_MAX, &d[i + (o->sweep ? 1 : 0)]))
            return -1;
    o->M = d[0], o->N = d[1], o->K = d[2];
    if (o->K % 32 != 0) {
        fprintf(stderr,
                "a2amm bench gemm: K must be a multiple of 32 (MXFP8 has one scale per 32 values of K); "
                "got K = %lld\n",
                (long long)o->K);
        return -1;
    }
    size_t mk, nk, mn;
    if (__builtin_mul_overflow((size_t)o->M, (size_t)o->K * 4, &mk) ||
        __builtin_mul_overflow((size_t)o->N, (size_t)o->K * 4, &nk) ||
        __builtin_mul_overflow((size_t)o->M, (size_t)o->N * 4, &mn) || mk > SIZE_MAX / 8 || nk > SIZE_MAX / 8 ||
        mn > SIZE_MAX / 8) {
        fprintf(stderr, "a2amm bench gemm: M=%lld N=%lld K=%lld is too large: its buffer sizes overflow\n",
                (long long)o->M, (long long)o->N, (long long)o->K);
        return -1;
    }
    *exit_code = 0;
    return 0;
}

/* What every contender needs: MXFP8 inputs and their dequantized values. */
typedef struct gemm_inputs {
    op_sizes z;
    io_rank_inputs q; /* a [M, K], sa [M, ska]; b = B^T [N, K], sb [N, sk] */
    float *af, *bf;   /* dequantized A [M, K] and B^T [N, K] (exact) */
} gemm_inputs;

/* Bytes this run holds at its peak, roughly: to refuse before swapping. */
static double gemm_peak_bytes(const gemm_opts *o, size_t flush_bytes)
{
    double mk = (double)o->M * (double)o->K, nk = (double)o->N * (double)o->K, mn = (double)o->M * (double)o->N;
    /* fp8 + fp32 + bf16 (oneDNN's copies and packed B) of A and B; C of
     * a2amm (fp32 + bf16), oneDNN and OpenBLAS; a2amm's packed B (bf16) */
    return (mk + nk) * (1.0 + 4.0 + 2.0 + 2.0) + nk * 2.0 + mn * (4.0 + 2.0 + 4.0 + 4.0) + (double)flush_bytes;
}

static int gemm_inputs_make(const gemm_opts *o, gemm_inputs *in, a2amm_error *err)
{
    op_shape s = {o->M, o->K, o->N, 1, A2AMM_E4M3, A2AMM_E4M3, OP_ALLTOALL_MATMUL};
    gen_options g = {GEN_DIST_NORMAL, GEMM_SEED, MX_SCALE_FLOOR};
    memset(in, 0, sizeof *in);
    int rc = op_shape_check(&s, &in->z, err);
    if (!rc) rc = io_rank_inputs_alloc(&in->z, &in->q, err);
    if (!rc) rc = gen_rank_inputs(&s, &in->z, &g, 0, &in->q, err);
    if (rc) return rc;
    in->af = malloc((size_t)(o->M * o->K) * sizeof *in->af);
    in->bf = malloc((size_t)(o->N * o->K) * sizeof *in->bf);
    if (!in->af || !in->bf)
        return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate %.1f MB for the dequantized inputs",
                          (double)((o->M + o->N) * o->K) * 4.0 / 1e6);
    for (int64_t i = 0; i < o->M; i++)
        for (int64_t t = 0; t < o->K; t++)
            in->af[i * o->K + t] = (float)mx_dequant(in->q.a[i * o->K + t], in->q.sa[i * in->z.ska + t / 32], s.a_type);
    for (int64_t n = 0; n < o->N; n++)
        for (int64_t t = 0; t < o->K; t++)
            in->bf[n * o->K + t] = (float)mx_dequant(in->q.b[n * o->K + t], in->q.sb[n * in->z.sk + t / 32], s.b_type);
    return A2AMM_OK;
}

static void gemm_inputs_free(gemm_inputs *in)
{
    io_rank_inputs_free(&in->q);
    free(in->af);
    free(in->bf);
    in->af = in->bf = NULL;
}

/* bf16 copies of n fp32 values; counts the ones that change. */
static uint16_t *to_bf16(const float *x, size_t n, int64_t *inexact)
{
    uint16_t *h = malloc(n * sizeof *h);
    for (size_t i = 0; h && i < n; i++) {
        h[i] = mx_f32_to_bf16(x[i]);
        float back = mx_bf16_to_f32(h[i]);
        if (back != x[i] && !(isnan(back) && isnan(x[i]))) ++*inexact;
    }
    return h;
}

/* ---- a2amm: the matmul over the pool, and B's preparation -------------- */

typedef struct a2amm_run {
    pool *pool;
    const gemm_b *b;
    gemm_a_slab slab;
    int64_t M, N, K;
    int threads, ntasks;
    float *c;
    uint16_t *out;
    int fp32; /* instead: C = A*B in fp32 (gemm_multiply), for the check */
} a2amm_run;

/* One thread's share (gemm_split_task, as the op splits): bf16(A*B) over all
 * of K (gemm_multiply_store: the last K chunk rounds its sums straight to
 * bf16); or, for the check, C = A*B in fp32 (untimed). */
static void a2amm_task(void *arg, int task)
{
    const a2amm_run *r = arg;
    gemm_split p = gemm_split_task(r->M, r->N, r->K, r->threads, task);
    gemm_a_slab slab = r->slab;
    slab.a += p.r0 * slab.lda;
    slab.sa += p.r0 * slab.ldsa;
    float *c = r->c + p.r0 * r->N;
    if (r->fp32) gemm_multiply(r->b, &slab, p.r1 - p.r0, 0, r->K, p.n0, p.n1, c, r->N);
    else gemm_multiply_store(r->b, &slab, p.r1 - p.r0, 0, r->K, p.n0, p.n1, c, r->N, r->out + p.r0 * r->N, r->N);
}

static int a2amm_matmul_timed(void *ctx, a2amm_error *err)
{
    (void)err;
    a2amm_run *r = ctx;
    pool_run(r->pool, a2amm_task, r, r->ntasks);
    return A2AMM_OK;
}

typedef struct a2amm_prep {
    pool *workers;
    gemm_isa isa;
    const gemm_inputs *in;
    int64_t N, K;
    gemm_b *b;
} a2amm_prep;

static int a2amm_prepare(void *ctx, a2amm_error *err)
{
    a2amm_prep *p = ctx;
    return gemm_b_prepare_on(p->workers, p->isa, p->in->q.b, p->in->q.sb, p->N, p->K, p->in->z.sk, A2AMM_E4M3, &p->b,
                             err);
}

static void a2amm_unprepare(void *ctx)
{
    a2amm_prep *p = ctx;
    gemm_b_free(p->b);
    p->b = NULL;
}

static int onednn_run(void *ctx, a2amm_error *err) { return bench_onednn_run(ctx, err); }
static int openblas_run(void *ctx, a2amm_error *err) { return bench_openblas_run(ctx, err); }

/* ---- The figures ---------------------------------------------------------- */

enum { ROW_A2AMM, ROW_A2AMM_PREP, ROW_ONEDNN, ROW_OPENBLAS, ROW_AMX, ROW_AMX_L2, ROW_BF16, ROW_FMA, ROW_COUNT };
enum { CONTENDERS = 4 }; /* in rounds: a2amm, oneDNN, OpenBLAS, and a short probe of the ceiling */

typedef struct gemm_row {
    char label[64];
    const char *key;
    int timed;          /* has times (not a ceiling) */
    int ok;             /* measured */
    char why[256];      /* when not */
    cli_summary t;
    double gflops;
    double err;         /* max |x - a2amm| / sum|a*b| on the sample (peers) */
    double limit;       /* what err may be */
} gemm_row;

typedef struct gemm_report {
    gemm_opts o;
    double flop;
    size_t flush_bytes;
    gemm_isa isa;
    int isa_forced;
    cli_summary prep;
    gemm_row rows[ROW_COUNT];
    bench_ceiling ceil_first, ceil_last; /* measured before and after the contenders */
    bench_ceiling ceil_rounds;           /* the peak of a short probe in every round */
    int ceil_rounds_n;
    double *round_ceiling;               /* [warmup + iters]: a2amm's level's ceiling by each round's probe */
    double *round_read;                  /* [warmup + iters]: the streaming read by each round's probe, GB/s */
    cli_summary paired;                  /* over the rounds: a2amm's GFLOP/s over its own round's probe */
    cli_summary paired_read;             /* over the rounds: B's fp8 bytes a second over its round's read */
    bench_ceiling ceil;                  /* their peak */
    int onednn_threads, onednn_f32;
    char onednn_impl[128], onednn_threads_how[64], onednn_bf16_why[160];
    const char *onednn_cap; /* the ISA cap A2AMM_CPU_HIDE set on oneDNN, or NULL */
    double a2amm_vs_fp64; /* a2amm's own max error vs an fp64 reference on the sample */
    int samples;
    int64_t bf16_inexact;
} gemm_report;

static double ratio(const gemm_report *r, int row)
{
    const gemm_row *x = &r->rows[row];
    return x->ok && r->rows[ROW_A2AMM].ok ? r->rows[ROW_A2AMM].gflops / x->gflops : NAN;
}

/* The ceiling a2amm's level is bounded by: AMX tiles for amx, bf16 dot
 * products for avx512, fp32 FMA otherwise. */
static int ceiling_row(const gemm_report *r)
{
    return r->isa == GEMM_ISA_AMX ? ROW_AMX : r->isa == GEMM_ISA_AVX512 ? ROW_BF16 : ROW_FMA;
}

/* A ceiling row's name in the text and the JSON. */
static const char *ceiling_name(int row)
{
    return row == ROW_AMX ? "AMX bf16" : row == ROW_AMX_L2 ? "L2-fed AMX" : row == ROW_BF16 ? "bf16" : "fp32 FMA";
}
static const char *ceiling_key(int row)
{
    return row == ROW_AMX ? "amx" : row == ROW_AMX_L2 ? "amx_l2" : row == ROW_BF16 ? "bf16" : "fma";
}

/* What a ceiling row's probe ran, or why it did not. */
static const char *ceiling_what(const bench_ceiling *c, int row)
{
    return row == ROW_AMX      ? c->amx_what
           : row == ROW_AMX_L2 ? c->amx_l2_what
           : row == ROW_BF16   ? c->bf16_what
                               : c->fma_what;
}

/* One ceiling of a probe's measurement, by row. */
static double ceiling_of(const bench_ceiling *c, int row)
{
    return row == ROW_AMX      ? c->amx_gflops
           : row == ROW_AMX_L2 ? c->amx_l2_gflops
           : row == ROW_BF16   ? c->bf16_gflops
                               : c->fma_gflops;
}

/* a2amm's best repetition over the ceiling (itself the best of its probes). */
static double best_fraction(const gemm_report *r)
{
    const gemm_row *a = &r->rows[ROW_A2AMM], *c = &r->rows[ceiling_row(r)];
    return a->ok && c->ok && a->t.min > 0 ? r->flop / a->t.min / 1e9 / c->gflops : NAN;
}

static int agrees(const gemm_row *x) { return !x->ok || x->err <= x->limit; }

/* B as the inputs hold it: its fp8 codes and its E8M0 scales, one per 32 of K. */
static double b_fp8_bytes(const gemm_opts *o) { return (double)o->N * (double)o->K * (1.0 + 1.0 / 32.0); }

/* B's fp8 bytes over a2amm's median call, GB/s (what a matmul that reads B once in fp8 would need). */
static double b_fp8_gbs(const gemm_report *r)
{
    const gemm_row *a = &r->rows[ROW_A2AMM];
    return a->ok && a->t.median > 0 ? b_fp8_bytes(&r->o) / a->t.median / 1e9 : NAN;
}

/* The memory line: the streaming read probe, and B's fp8 bytes over a2amm's call against it. */
static void print_read(const gemm_report *r)
{
    if (!isfinite(r->ceil.read_gbs)) {
        printf("  memory: no streaming read measured (%s)\n", r->ceil.read_what);
        return;
    }
    printf("  memory: a streaming read probe runs at %.1f GB/s (%d threads, %s);\n"
           "          B in fp8 (codes and scales, %.1f MB) over a2amm's median call: %.1f GB/s, %.2f of\n"
           "          the probe (paired by round: median %.2f, %.2f-%.2f); where M is small the matmul\n"
           "          is a read of B\n",
           r->ceil.read_gbs, r->ceil.threads, r->ceil.read_what, b_fp8_bytes(&r->o) / 1e6, b_fp8_gbs(r),
           b_fp8_gbs(r) / r->ceil.read_gbs, r->paired_read.median, r->paired_read.min, r->paired_read.max);
}

static void print_lines_below(const gemm_report *r);

static void print_table(const gemm_report *r)
{
    printf("  %-40s %10s %10s %10s %10s %10s\n", "contender", "median ms", "min ms", "max ms", "GFLOP/s",
           "a2amm/row");
    for (int i = 0; i < ROW_COUNT; i++) {
        const gemm_row *x = &r->rows[i];
        printf("  %-40s ", x->label);
        if (!x->ok) {
            printf("%10s   %s\n", "n/a", x->why);
            continue;
        }
        if (x->timed) printf("%10.3f %10.3f %10.3f ", x->t.median * 1e3, x->t.min * 1e3, x->t.max * 1e3);
        else printf("%10s %10s %10s ", "-", "-", "-");
        printf("%10.1f %10.2f%s\n", x->gflops, ratio(r, i), i == ceiling_row(r) ? "  <- a2amm's fraction" : "");
    }
    printf("  (a2amm/row: a2amm's GFLOP/s over the row's; above 1 a2amm is faster; on a ceiling, its fraction)\n\n");
    printf("  a2amm: ISA %s (%s; A2AMM_ISA=ref|avx2|avx512|amx forces one)\n", gemm_isa_name(r->isa),
           r->isa_forced ? "forced by A2AMM_ISA" : "the best this CPU runs");
    if (!r->rows[ceiling_row(r)].ok) {
        printf("         no %s ceiling to hold it against here (%s); B preparation %.3f ms (median)\n",
               ceiling_name(ceiling_row(r)), r->rows[ceiling_row(r)].why, r->prep.median * 1e3);
        print_read(r);
        print_lines_below(r);
        return;
    }
    printf("         %.2f of the %s ceiling; B preparation %.3f ms (median), once per weights\n",
           ratio(r, ceiling_row(r)), ceiling_name(ceiling_row(r)), r->prep.median * 1e3);
    double first = ceiling_of(&r->ceil_first, ceiling_row(r)), last = ceiling_of(&r->ceil_last, ceiling_row(r));
    double rounds = ceiling_of(&r->ceil_rounds, ceiling_row(r));
    printf("         the ceiling: the best of the probes, %.1f GFLOP/s before the contenders, %.1f after,\n"
           "         %.1f in the rounds (one short probe each)%s\n",
           first, last, rounds,
           cli_spread_wide(fmin(first, last), fmax(first, last)) ? " (a busy machine: compare with care)" : "");
    printf("         at its best repetition %.2f of the ceiling (both then the least disturbed moments)\n",
           best_fraction(r));
    printf("         paired by round (each call over its own round's probe): median %.2f, %.2f-%.2f\n",
           r->paired.median, r->paired.min, r->paired.max);
    print_read(r);
    print_lines_below(r);
}

/* The table's lines on threads, the peers' setup and the agreement. */
static void print_lines_below(const gemm_report *r)
{
    const gemm_opts *o = &r->o;
    printf("  threads: %d in each: a2amm's pool, the ceiling probe (a loop per thread), OpenBLAS\n"
           "           (openblas_set_num_threads: %d), oneDNN (OpenMP via %s: %d)\n",
           o->threads, bench_openblas_threads(), r->onednn_threads_how[0] ? r->onednn_threads_how : "-",
           r->onednn_threads);
    printf("  oneDNN: %s, implementation %s, ISA %s%s; weights reordered into its packed layout once, untimed\n",
           bench_onednn_version(), r->onednn_impl[0] ? r->onednn_impl : "-", bench_onednn_isa(),
           r->onednn_cap ? " (capped so by A2AMM_CPU_HIDE)" : "");
    if (r->onednn_f32) printf("          fp32 in and out: %s\n", r->onednn_bf16_why);
    const char *env = bench_openblas_coretype_env();
    printf("  OpenBLAS: core %s (OPENBLAS_CORETYPE=%s); %s\n", bench_openblas_corename(), env ? env : "(unset)",
           bench_openblas_config());
    printf("  agreement on %d sampled elements, max |x - a2amm| / sum_k |a*b| (limit):\n   ", r->samples);
    for (int i = ROW_ONEDNN; i <= ROW_OPENBLAS; i++) {
        const gemm_row *x = &r->rows[i];
        const char *name = i == ROW_OPENBLAS ? "OpenBLAS vs a2amm fp32"
                           : r->onednn_f32   ? "oneDNN fp32 vs a2amm fp32"
                                             : "oneDNN bf16 vs a2amm bf16";
        if (x->ok) printf(" %s %.1e (%.0e) %s,", name, x->err, x->limit, agrees(x) ? "ok" : "DISAGREES");
        else printf(" %s n/a,", name);
    }
    printf("\n    a2amm fp32 vs fp64 %.1e (%.0e) %s\n", r->a2amm_vs_fp64, CHECK_LIMIT,
           r->a2amm_vs_fp64 <= CHECK_LIMIT ? "ok" : "DISAGREES");
    if (r->bf16_inexact)
        printf("  WARNING: %lld dequantized values are not exact in bf16: oneDNN ran on rounded values\n",
               (long long)r->bf16_inexact);
    for (int i = ROW_ONEDNN; i <= ROW_OPENBLAS; i++)
        if (!agrees(&r->rows[i]))
            printf("  WARNING: %s's result disagrees with a2amm's (%.1e > %.0e): one of them is wrong\n",
                   r->rows[i].label, r->rows[i].err, r->rows[i].limit);
    if (!(r->a2amm_vs_fp64 <= CHECK_LIMIT))
        printf("  WARNING: a2amm's result disagrees with an fp64 reference (%.1e > %.0e)\n", r->a2amm_vs_fp64,
               CHECK_LIMIT);
}

static void json_row(const gemm_report *r, int i)
{
    const gemm_row *x = &r->rows[i];
    printf("\"%s\":{\"available\":%s", x->key, x->ok ? "true" : "false");
    if (!x->ok) {
        cli_json_key_str("error", x->why);
    } else {
        if (x->timed) {
            cli_json_key_num("median_s", "%.6g", x->t.median);
            cli_json_key_num("min_s", "%.6g", x->t.min);
            cli_json_key_num("max_s", "%.6g", x->t.max);
        }
        cli_json_key_num("gflops", "%.6g", x->gflops);
        cli_json_key_num("ratio", "%.6g", ratio(r, i));
    }
    if (i == ROW_ONEDNN || i == ROW_OPENBLAS) {
        cli_json_key_num("max_rel_err", "%.3g", x->ok ? x->err : NAN);
        printf(",\"limit\":%g,\"agrees\":%s", x->limit, x->ok ? (agrees(x) ? "true" : "false") : "null");
    }
}

static void print_json(const gemm_report *r)
{
    const gemm_opts *o = &r->o;
    printf("{\"command\":\"bench gemm\",\"M\":%lld,\"N\":%lld,\"K\":%lld,\"gflop\":%.6g,\"threads\":%d,"
           "\"iters\":%d,\"warmup\":%d,\"flush_bytes\":%zu,\"isa\":\"%s\",\"isa_forced\":%s,",
           (long long)o->M, (long long)o->N, (long long)o->K, r->flop / 1e9, o->threads, o->iters, o->warmup,
           r->flush_bytes, gemm_isa_name(r->isa), r->isa_forced ? "true" : "false");
    json_row(r, ROW_A2AMM);
    printf("},\"a2amm_prepare\":{\"median_s\":%.6g,\"min_s\":%.6g,\"max_s\":%.6g},", r->prep.median, r->prep.min,
           r->prep.max);
    json_row(r, ROW_A2AMM_PREP);
    printf("},");
    json_row(r, ROW_ONEDNN);
    cli_json_key_str("version", bench_onednn_version());
    cli_json_key_str("impl", r->onednn_impl);
    cli_json_key_str("dtype", r->onednn_f32 ? "f32" : "bf16");
    cli_json_key_str("bf16_why_not", r->onednn_f32 ? r->onednn_bf16_why : NULL);
    cli_json_key_str("isa", bench_onednn_isa());
    cli_json_key_str("isa_cap", r->onednn_cap);
    printf(",\"threads\":%d", r->onednn_threads);
    cli_json_key_str("threads_how", r->onednn_threads_how);
    printf("},");
    json_row(r, ROW_OPENBLAS);
    printf(",\"threads\":%d", bench_openblas_threads());
    cli_json_key_str("corename", bench_openblas_corename());
    cli_json_key_str("coretype_env", bench_openblas_coretype_env());
    cli_json_key_str("config", bench_openblas_config());
    printf("},\"ceiling\":{\"threads\":%d,\"probe_s\":%.3f", r->ceil.threads, r->ceil.seconds);
    for (int row = ROW_AMX; row <= ROW_FMA; row++) {
        static const char *const SUFFIX[4] = {"", "_first", "_last", "_rounds"};
        const bench_ceiling *from[4] = {&r->ceil, &r->ceil_first, &r->ceil_last, &r->ceil_rounds};
        char key[48];
        for (int k = 0; k < 4; k++) {
            snprintf(key, sizeof key, "%s_gflops%s", ceiling_key(row), SUFFIX[k]);
            cli_json_key_num(key, "%.6g", ceiling_of(from[k], row));
        }
        snprintf(key, sizeof key, "%s_instruction", ceiling_key(row));
        cli_json_key_str(key, ceiling_what(&r->ceil, row));
    }
    cli_json_key_num("read_gbs", "%.6g", r->ceil.read_gbs);
    cli_json_key_num("read_gbs_first", "%.6g", r->ceil_first.read_gbs);
    cli_json_key_num("read_gbs_last", "%.6g", r->ceil_last.read_gbs);
    cli_json_key_num("read_gbs_rounds", "%.6g", r->ceil_rounds.read_gbs);
    cli_json_key_num("read_bytes", "%.6g", r->ceil.read_bytes);
    cli_json_key_str("read_instruction", r->ceil.read_what);
    printf("},\"b_fp8_bytes\":%.6g", b_fp8_bytes(o));
    cli_json_key_num("b_fp8_gbs", "%.6g", b_fp8_gbs(r));
    cli_json_key_num("fraction_of_read", "%.4g", b_fp8_gbs(r) / r->ceil.read_gbs);
    printf(",\"paired_fraction_of_read\":{\"median\":");
    cli_json_num("%.4g", r->paired_read.median);
    cli_json_key_num("min", "%.4g", r->paired_read.min);
    cli_json_key_num("max", "%.4g", r->paired_read.max);
    printf("},\"fraction_of_ceiling\":");
    cli_json_num("%.4g", ratio(r, ceiling_row(r)));
    cli_json_key_num("best_fraction_of_ceiling", "%.4g", best_fraction(r));
    printf(",\"paired_fraction_of_ceiling\":{\"median\":");
    cli_json_num("%.4g", r->paired.median);
    cli_json_key_num("min", "%.4g", r->paired.min);
    cli_json_key_num("max", "%.4g", r->paired.max);
    printf("}");
    printf(",\"fraction_of\":\"%s\",\"check\":{\"samples\":%d,\"limit\":%g,\"a2amm_vs_fp64\":", 
           ceiling_key(ceiling_row(r)), r->samples, CHECK_LIMIT);
    cli_json_num("%.3g", r->a2amm_vs_fp64);
    printf(",\"bf16_inexact\":%lld}}\n", (long long)r->bf16_inexact);
}

/* ---- The agreement check ------------------------------------------------ */

/* The sampled element s of CHECK_SAMPLES (all of C when it is smaller),
 * spread over rows and columns, the last element included. */
static void sample_at(int64_t M, int64_t N, int s, int count, int64_t *i, int64_t *j)
{
    if (M * N <= CHECK_SAMPLES) {
        *i = s / N, *j = s % N;
        return;
    }
    if (s == count - 1) {
        *i = M - 1, *j = N - 1;
        return;
    }
    *i = (int64_t)s * M / count;
    *j = (int64_t)((s * 97 + 31) % count) * N / count;
}

static double rel_err(double x, double y, double mag)
{
    if (isnan(x) || isnan(y)) return isnan(x) && isnan(y) ? 0.0 : INFINITY;
    double d = fabs(x - y);
    return d == 0.0 ? 0.0 : mag > 0.0 ? d / mag : INFINITY;
}

/* Max error of `c` (a peer's C) against a2amm's C on the sample; with c ==
 * NULL, a2amm's own against an fp64 reference. */
/*
 * Max relative error of a peer's result against a2amm's on the sample. The
 * results come as fp32 (ca, c) or bf16 (cab, cb) arrays [M, N]; with neither
 * c nor cb, a2amm's against an fp64 reference.
 */
static double check_against(const gemm_inputs *in, const gemm_opts *o, const float *ca, const uint16_t *cab,
                            const float *c, const uint16_t *cb, int *samples)
{
    int count = o->M * o->N <= CHECK_SAMPLES ? (int)(o->M * o->N) : CHECK_SAMPLES;
    double worst = 0.0;
    for (int s = 0; s < count; s++) {
        int64_t i, j;
        sample_at(o->M, o->N, s, count, &i, &j);
        double ref = 0.0, mag = 0.0;
        for (int64_t t = 0; t < o->K; t++) {
            double p = (double)in->af[i * o->K + t] * (double)in->bf[j * o->K + t];
            ref += p;
            mag += fabs(p);
        }
        int64_t at = i * o->N + j;
        double x = c ? (double)c[at] : cb ? (double)mx_bf16_to_f32(cb[at]) : ref;
        double y = ca ? (double)ca[at] : (double)mx_bf16_to_f32(cab[at]);
        double e = rel_err(x, y, mag);
        worst = e > worst || isnan(e) ? e : worst;
    }
    *samples = count;
    return worst;
}

/* ---- The run ------------------------------------------------------------ */

static const char *const ROW_LABELS[ROW_COUNT] = {"a2amm MXFP8, prepared B", "a2amm incl. B preparation",
                                                  "oneDNN bf16, packed B",   "OpenBLAS sgemm fp32",
                                                  "AMX bf16 ceiling",        "AMX fed from L2",     
                                                  "bf16 ceiling",            "fp32 FMA ceiling"};
static const char *const ROW_KEYS[ROW_COUNT] = {"a2amm",       "a2amm_incl_prepare", "onednn",       "openblas",
                                                "ceiling_amx", "ceiling_amx_l2",     "ceiling_bf16", "ceiling_fma"};

/* Everything one `bench gemm` run holds. */
typedef struct gemm_bench {
    gemm_report r;
    gemm_inputs in;
    pool *pool;
    measure_flusher fl;
    double *t; /* the contenders' times [CONTENDERS][iters] */
    a2amm_run run;
    float *c; /* a2amm's C [M, N] fp32 (kept for the check) */
    uint16_t *out;
    gemm_b *b;
    bench_onednn *dn;
    bench_openblas *ob;
} gemm_bench;

static void row_set(gemm_row *x, const gemm_report *r, const double *t)
{
    x->ok = 1;
    x->t = cli_summarize(t, r->o.iters);
    x->gflops = r->flop / x->t.median / 1e9;
}

static void row_fail(gemm_row *x, const a2amm_error *err)
{
    x->ok = 0;
    snprintf(x->why, sizeof x->why, "%.255s", err->msg[0] ? err->msg : a2amm_strerror(err->code));
}

/* What every contender needs: the ISA, the pool, the flush buffer, inputs. */
static int gemm_setup(gemm_bench *g, a2amm_error *err)
{
    gemm_report *r = &g->r;
    const gemm_opts *o = &r->o;
    r->flop = 2.0 * (double)o->M * (double)o->N * (double)o->K;
    r->flush_bytes = o->flush ? measure_flush_bytes(1) : 0;
    for (int i = 0; i < ROW_COUNT; i++) {
        gemm_row *x = &r->rows[i];
        snprintf(x->label, sizeof x->label, "%s", ROW_LABELS[i]);
        x->key = ROW_KEYS[i];
        x->timed = i < ROW_AMX;
        x->gflops = x->err = NAN;
        x->limit = i == ROW_ONEDNN ? CHECK_LIMIT_BF16 : CHECK_LIMIT;
    }
    double need = gemm_peak_bytes(o, r->flush_bytes);
    double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (phys > 0 && need > phys)
        return a2amm_fail(err, A2AMM_E_NOMEM, "M=%lld N=%lld K=%lld needs about %.1f GB; this machine has %.1f GB",
                          (long long)o->M, (long long)o->N, (long long)o->K, need / 1e9, phys / 1e9);
    const char *forced = getenv("A2AMM_ISA");
    r->isa_forced = forced && *forced;
    int rc = gemm_isa_select(&r->isa, err);
    if (rc) return rc;
    r->onednn_cap = bench_onednn_cap_isa(); /* before oneDNN runs anything */
    rc = pool_create(o->threads, &g->pool, err);
    if (rc) return rc;
    int frc = measure_flusher_init(&g->fl, g->pool, r->flush_bytes, err);
    if (frc) return frc;
    if (!(g->t = calloc((size_t)(CONTENDERS * o->iters), sizeof *g->t)) ||
        !(r->round_ceiling = calloc((size_t)(o->warmup + o->iters), sizeof *r->round_ceiling)) ||
        !(r->round_read = calloc((size_t)(o->warmup + o->iters), sizeof *r->round_read)))
        return a2amm_fail(err, A2AMM_E_NOMEM, "out of memory");
    return gemm_inputs_make(o, &g->in, err);
}

static void gemm_print_header(const gemm_report *r)
{
    const gemm_opts *o = &r->o;
    printf("a2amm bench gemm: M=%lld N=%lld K=%lld, %.3f GFLOP per matmul, %d thread%s\n", (long long)o->M,
           (long long)o->N, (long long)o->K, r->flop / 1e9, o->threads, o->threads == 1 ? "" : "s");
    printf("  inputs: MXFP8 e4m3 x e4m3, Gaussian, seed %d; the peers run on the same values dequantized\n",
           GEMM_SEED);
    if (o->threads > pool_cpu_count())
        printf("  WARNING: %d threads on %d cores: every contender shares cores, the figures say little\n",
               o->threads, pool_cpu_count());
    printf("  %d rounds after %d warm-up of each: a round times every contender once, the first one\n"
           "  changing from round to round, so that a slow phase of the machine hits them alike;\n",
           o->iters, o->warmup);
    if (r->flush_bytes)
        printf("  each call after a pass over %.0f MiB to flush the caches\n\n", (double)r->flush_bytes / 1048576.0);
    else
        printf("  caches not flushed (--no-flush)\n\n");
    fflush(stdout);
}

/* a2amm: B's preparation timed on its own, then B prepared once for the
 * matmul's rounds. A failure here ends the run. */
static int gemm_setup_a2amm(gemm_bench *g, a2amm_error *err)
{
    gemm_report *r = &g->r;
    const gemm_opts *o = &r->o;
    g->c = hugemem_alloc((size_t)(o->M * o->N) * sizeof *g->c); /* as the op's C */
    g->out = malloc((size_t)(o->M * o->N) * sizeof *g->out);
    if (!g->c || !g->out)
        return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate C (%.1f MB)", (double)(o->M * o->N) * 6.0 / 1e6);
    a2amm_prep prep = {g->pool, r->isa, &g->in, o->N, o->K, NULL};
    int rc = measure_runs(a2amm_prepare, a2amm_unprepare, &prep, o->warmup, o->iters, &g->fl, g->t, err);
    if (rc) return rc;
    r->prep = cli_summarize(g->t, o->iters);
    rc = gemm_b_prepare_on(g->pool, r->isa, g->in.q.b, g->in.q.sb, o->N, o->K, g->in.z.sk, A2AMM_E4M3, &g->b, err);
    if (rc) return rc;
    g->run = (a2amm_run){g->pool, g->b, {g->in.q.a, g->in.q.sa, o->K, g->in.z.ska, A2AMM_E4M3}, o->M, o->N, o->K,
                         o->threads, gemm_split_count(o->M, o->N, o->K, o->threads), g->c, g->out, 0};
    return A2AMM_OK;
}

/* After the rounds: a2amm's rows, and the fp32 sums the check compares (the
 * timed bf16 output must be exactly them rounded). */
static int gemm_finish_a2amm(gemm_bench *g, const double *t, a2amm_error *err)
{
    gemm_report *r = &g->r;
    const gemm_opts *o = &r->o;
    g->run.fp32 = 1;
    pool_run(g->pool, a2amm_task, &g->run, g->run.ntasks);
    for (int64_t i = 0; i < o->M * o->N; i++)
        if (g->out[i] != mx_f32_to_bf16(g->c[i]))
            return a2amm_fail(err, A2AMM_E_MISMATCH,
                              "a2amm's bf16 output at row %lld column %lld is 0x%04x, its fp32 sum %g rounds to 0x%04x",
                              (long long)(i / o->N), (long long)(i % o->N), g->out[i], (double)g->c[i],
                              mx_f32_to_bf16(g->c[i]));
    const gemm_row *m = &r->rows[ROW_A2AMM];
    row_set(&r->rows[ROW_A2AMM], r, t);
    gemm_row *x = &r->rows[ROW_A2AMM_PREP];
    x->ok = 1;
    x->t = (cli_summary){m->t.min + r->prep.min, m->t.median + r->prep.median, m->t.max + r->prep.max};
    x->gflops = r->flop / x->t.median / 1e9;
    return A2AMM_OK;
}

/* oneDNN on bf16 copies of the same values. A failure is reported in its
 * row; the run goes on. */
static int gemm_setup_onednn(gemm_bench *g, a2amm_error *err)
{
    gemm_report *r = &g->r;
    const gemm_opts *o = &r->o;
    uint16_t *abf = to_bf16(g->in.af, (size_t)(o->M * o->K), &r->bf16_inexact);
    uint16_t *bbf = to_bf16(g->in.bf, (size_t)(o->N * o->K), &r->bf16_inexact);
    int rc = abf && bbf ? bench_onednn_create(abf, bbf, g->in.af, g->in.bf, o->M, o->N, o->K, o->threads, &g->dn, err)
                        : a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the bf16 inputs");
    free(abf);
    free(bbf);
    if (!rc) {
        snprintf(r->onednn_impl, sizeof r->onednn_impl, "%s", bench_onednn_impl(g->dn));
        snprintf(r->onednn_threads_how, sizeof r->onednn_threads_how, "%s", bench_onednn_threads_how(g->dn));
        r->onednn_threads = bench_onednn_threads(g->dn);
        r->onednn_f32 = bench_onednn_is_f32(g->dn);
        if (r->onednn_f32) {
            /* the fp32 fallback: its own label, and the fp32 check's limit */
            snprintf(r->rows[ROW_ONEDNN].label, sizeof r->rows[ROW_ONEDNN].label, "oneDNN fp32, packed B");
            snprintf(r->onednn_bf16_why, sizeof r->onednn_bf16_why, "%s", bench_onednn_bf16_why_not(g->dn));
            r->rows[ROW_ONEDNN].limit = CHECK_LIMIT;
            if (r->bf16_inexact) r->bf16_inexact = 0; /* oneDNN ran on the fp32 values, not on bf16 copies */
        }
    }
    return rc;
}

/* OpenBLAS sgemm on the fp32 values; like oneDNN, a failure stays in its row. */
static int gemm_setup_openblas(gemm_bench *g, a2amm_error *err)
{
    const gemm_opts *o = &g->r.o;
    return bench_openblas_create(g->in.af, g->in.bf, o->M, o->N, o->K, o->threads, &g->ob, err);
}

/*
 * a2amm's fraction of the ceiling round by round: its call over the probe
 * of the same round (the probes' last `iters` calls are the timed rounds'),
 * so that a phase of the host that slows both cancels out.
 */
static void paired_fractions(gemm_report *r, const double *a2amm_t)
{
    const int iters = r->o.iters, first = r->ceil_rounds_n - iters;
    double *f = malloc((size_t)iters * sizeof *f);
    r->paired = r->paired_read = (cli_summary){NAN, NAN, NAN};
    if (!f) return;
    for (int i = 0; i < iters; i++)
        f[i] = first >= 0 && a2amm_t[i] > 0 ? r->flop / a2amm_t[i] / 1e9 / r->round_ceiling[first + i] : NAN;
    r->paired = cli_summarize(f, iters);
    for (int i = 0; i < iters; i++)
        f[i] = first >= 0 && a2amm_t[i] > 0 ? b_fp8_bytes(&r->o) / a2amm_t[i] / 1e9 / r->round_read[first + i] : NAN;
    r->paired_read = cli_summarize(f, iters);
    free(f);
}

/* The ceiling probe for this run: the FMA loop on ymm for the avx2 level, which uses no zmm. */
static int measure_ceiling(const gemm_report *r, double seconds, bench_ceiling *out, a2amm_error *err)
{
    return bench_ceiling_measure(r->o.threads, seconds, r->isa == GEMM_ISA_AVX2, out, err);
}

/* A short probe of the ceiling in every round: a probe that a busy moment
 * slows would understate the ceiling; the best of many does not. */
static int round_probe_run(void *ctx, a2amm_error *err)
{
    gemm_report *r = ctx;
    bench_ceiling c;
    int rc = measure_ceiling(r, ROUND_PROBE_S, &c, err);
    if (rc) return rc;
    r->round_ceiling[r->ceil_rounds_n] = ceiling_of(&c, ceiling_row(r));
    r->round_read[r->ceil_rounds_n] = c.read_gbs;
    r->ceil_rounds = r->ceil_rounds_n++ ? bench_ceiling_peak(&r->ceil_rounds, &c) : c;
    return A2AMM_OK;
}

/*
 * The contenders, timed in interleaved rounds (each round one call of each,
 * after a flush), so that a slow phase of the shared machine hits them
 * alike. A peer that cannot be set up or fails keeps its reason in its row;
 * a2amm's failure ends the run.
 */
static int gemm_time_contenders(gemm_bench *g, a2amm_error *err)
{
    gemm_report *r = &g->r;
    const gemm_opts *o = &r->o;
    int rc = gemm_setup_a2amm(g, err);
    if (rc) return rc;
    measure_contender c[CONTENDERS] = {{a2amm_matmul_timed, NULL, &g->run, g->t, 0, {0, ""}},
                                     {onednn_run, bench_onednn_idle, NULL, g->t + o->iters, 0, {0, ""}},
                                     {openblas_run, bench_openblas_idle, NULL, g->t + 2 * o->iters, 0, {0, ""}},
                                     {round_probe_run, NULL, r, g->t + 3 * o->iters, 0, {0, ""}}};
    c[1].rc = gemm_setup_onednn(g, &c[1].err);
    c[1].ctx = g->dn;
    c[2].rc = gemm_setup_openblas(g, &c[2].err);
    c[2].ctx = g->ob;
    measure_interleaved(c, CONTENDERS, o->warmup, o->iters, &g->fl);
    for (int i = 0; i < CONTENDERS; i += 3) /* a2amm's or the probe's failure ends the run */
        if (c[i].rc) {
            *err = c[i].err;
            return c[i].rc;
        }
    paired_fractions(r, c[0].t);
    static const int ROW_OF[3] = {ROW_A2AMM, ROW_ONEDNN, ROW_OPENBLAS};
    for (int i = 1; i < 3; i++) {
        if (c[i].rc) row_fail(&r->rows[ROW_OF[i]], &c[i].err);
        else row_set(&r->rows[ROW_OF[i]], r, c[i].t);
    }
    return gemm_finish_a2amm(g, c[0].t, err);
}

/* The ceiling rows: the peak of the two probes. */
static void gemm_set_ceiling(gemm_report *r)
{
    r->ceil = bench_ceiling_peak(&r->ceil_first, &r->ceil_last);
    if (r->ceil_rounds_n) r->ceil = bench_ceiling_peak(&r->ceil, &r->ceil_rounds);
    for (int row = ROW_AMX; row <= ROW_FMA; row++) {
        gemm_row *x = &r->rows[row];
        x->gflops = ceiling_of(&r->ceil, row);
        x->ok = isfinite(x->gflops);
        if (x->ok) snprintf(x->label, sizeof x->label, "%s (%s)", ROW_LABELS[row], ceiling_what(&r->ceil, row));
        else snprintf(x->why, sizeof x->why, "%s", ceiling_what(&r->ceil, row));
    }
}

/* Each peer's C against a2amm's, and a2amm's against fp64, on the sample. */
static void gemm_check(gemm_bench *g)
{
    gemm_report *r = &g->r;
    r->a2amm_vs_fp64 = check_against(&g->in, &r->o, g->c, NULL, NULL, NULL, &r->samples);
    if (r->rows[ROW_ONEDNN].ok) {
        const void *cd = bench_onednn_result(g->dn);
        r->rows[ROW_ONEDNN].err = !cd            ? INFINITY
                                  : r->onednn_f32 ? check_against(&g->in, &r->o, g->c, NULL, cd, NULL, &r->samples)
                                                  : check_against(&g->in, &r->o, NULL, g->out, NULL, cd, &r->samples);
    }
    if (r->rows[ROW_OPENBLAS].ok)
        r->rows[ROW_OPENBLAS].err =
            check_against(&g->in, &r->o, g->c, NULL, bench_openblas_result(g->ob), NULL, &r->samples);
}

/* Warnings also go to stderr, so that --json users see them too. */
static void gemm_warn(const gemm_report *r)
{
    if (r->o.json && r->o.threads > pool_cpu_count())
        fprintf(stderr, "a2amm bench gemm: warning: %d threads on %d cores: the figures say little\n", r->o.threads,
                pool_cpu_count());
    for (int i = ROW_ONEDNN; i <= ROW_OPENBLAS; i++) {
        const gemm_row *x = &r->rows[i];
        if (!agrees(x))
            fprintf(stderr, "a2amm bench gemm: warning: %s's result disagrees with a2amm's (%.1e > %.0e)\n",
                    x->label, x->err, x->limit);
        if (!x->ok && r->o.json)
            fprintf(stderr, "a2amm bench gemm: warning: %s not measured: %s\n", x->label, x->why);
    }
    if (!(r->a2amm_vs_fp64 <= CHECK_LIMIT))
        fprintf(stderr, "a2amm bench gemm: warning: a2amm's result disagrees with an fp64 reference (%.1e)\n",
                r->a2amm_vs_fp64);
}

static void gemm_teardown(gemm_bench *g)
{
    bench_openblas_free(g->ob);
    bench_onednn_free(g->dn);
    gemm_b_free(g->b);
    gemm_inputs_free(&g->in);
    free(g->c);
    free(g->out);
    measure_flusher_free(&g->fl);
    free(g->r.round_ceiling);
    free(g->r.round_read);
    pool_destroy(g->pool);
    free(g->t);
}

/* One whole run at g->r.o's shape: set-up, the ceiling before and after (or `known`'s, measured by a run
 * before), the contenders, the check. */
static int gemm_one(gemm_bench *g, int print_header, const bench_ceiling *known, a2amm_error *err)
{
    const gemm_opts *o = &g->r.o;
    int rc = gemm_setup(g, err);
    if (!rc && print_header && !o->json) gemm_print_header(&g->r);
    /* The ceiling before any library has threads of its own, and again at
     * the end: on a shared machine the less disturbed probe counts. */
    if (!rc && known) g->r.ceil_first = *known;
    else if (!rc) rc = measure_ceiling(&g->r, o->probe_s, &g->r.ceil_first, err);
    cli_progress progress;
    cli_progress_start_lines(&progress, o->quiet, o->json);
    measure_show_progress(progress.on ? &progress : NULL, "a2amm bench gemm");
    if (!rc) rc = gemm_time_contenders(g, err);
    measure_show_progress(NULL, NULL);
    cli_progress_end(&progress);
    if (!rc && known) g->r.ceil_last = *known;
    else if (!rc) rc = measure_ceiling(&g->r, o->probe_s, &g->r.ceil_last, err);
    if (!rc) {
        gemm_set_ceiling(&g->r);
        gemm_check(g);
    }
    return rc;
}

/* One M of a sweep: what its line shows. */
typedef struct sweep_line {
    int64_t M;
    double a2amm_s, peer_s, b_gbs, read_gbs, paired_read;
    int peer_ok, agree;
    char peer[64];
} sweep_line;

static sweep_line sweep_line_of(const gemm_report *r)
{
    const gemm_row *a = &r->rows[ROW_A2AMM], *d = &r->rows[ROW_ONEDNN];
    sweep_line l = {r->o.M, a->t.median, d->ok ? d->t.median : NAN, b_fp8_gbs(r), r->ceil.read_gbs,
                    r->paired_read.median, d->ok, agrees(d) && r->a2amm_vs_fp64 <= CHECK_LIMIT, ""};
    snprintf(l.peer, sizeof l.peer, "%s", d->ok ? d->label : "oneDNN (not measured)");
    return l;
}

static void print_sweep(const gemm_opts *o, const sweep_line *l, int n)
{
    if (o->json) {
        printf("{\"command\":\"bench gemm --sweep\",\"N\":%lld,\"K\":%lld,\"threads\":%d,\"rows\":[",
               (long long)o->N, (long long)o->K, o->threads);
        for (int i = 0; i < n; i++)
            printf("%s{\"M\":%lld,\"a2amm_median_s\":%.6g,\"onednn_median_s\":%.6g,\"speedup\":%.4g,"
                   "\"b_fp8_gbs\":%.4g,\"read_gbs\":%.4g,\"read_fraction\":%.4g,\"paired_read\":%.4g,"
                   "\"agrees\":%s}", i ? "," : "", (long long)l[i].M, l[i].a2amm_s, l[i].peer_s,
                   l[i].peer_s / l[i].a2amm_s, l[i].b_gbs, l[i].read_gbs, l[i].b_gbs / l[i].read_gbs,
                   l[i].paired_read, l[i].agree ? "true" : "false");
        printf("]}\n");
        return;
    }
    printf("\na2amm bench gemm --sweep: N=%lld K=%lld, %d threads; B in fp8 %.1f MB; medians of %d calls\n",
           (long long)o->N, (long long)o->K, o->threads, b_fp8_bytes(o) / 1e6, o->iters);
    printf("  %5s %11s %11s %9s %10s %10s %9s %8s  %s\n", "M", "a2amm ms", "oneDNN ms", "speed-up", "B GB/s",
           "read GB/s", "of read", "paired", "oneDNN as");
    for (int i = 0; i < n; i++)
        printf("  %5lld %11.3f %11.3f %8.2fx %10.1f %10.1f %9.2f %8.2f  %s%s\n", (long long)l[i].M,
               l[i].a2amm_s * 1e3, l[i].peer_s * 1e3, l[i].peer_s / l[i].a2amm_s, l[i].b_gbs, l[i].read_gbs,
               l[i].b_gbs / l[i].read_gbs, l[i].paired_read, l[i].peer, l[i].agree ? "" : " (RESULTS DISAGREE)");
    printf("  speed-up: oneDNN's median over a2amm's; of read: B's fp8 bytes over a2amm's median call against\n"
           "  the streaming read probe (the limit where M is small); paired: the same, each call over its own\n"
           "  round's probe\n");
}

static int bench_gemm_sweep(gemm_opts base)
{
    sweep_line lines[SWEEP_COUNT];
    int n = 0, rc = 0;
    a2amm_error err = {0, ""};
    bench_ceiling ceiling; /* the first M's probes before and after (their peak), for every M after it */
    for (int i = 0; !rc && i < SWEEP_COUNT; i++) {
        gemm_bench g;
        memset(&g, 0, sizeof g);
        g.r.o = base;
        g.r.o.M = SWEEP_M[i];
        if (!base.json && !base.quiet) fprintf(stderr, "a2amm bench gemm --sweep: M = %lld\n", (long long)SWEEP_M[i]);
        rc = gemm_one(&g, 0, i ? &ceiling : NULL, &err);
        if (!rc && i == 0) ceiling = bench_ceiling_peak(&g.r.ceil_first, &g.r.ceil_last);
        if (!rc) {
            lines[n++] = sweep_line_of(&g.r);
            gemm_warn(&g.r);
        }
        gemm_teardown(&g);
    }
    if (rc) {
        cli_print_error("bench gemm", &err);
        return 1;
    }
    print_sweep(&base, lines, n);
    return 0;
}

int cmd_bench_gemm(int argc, char **argv)
{
    gemm_bench g;
    memset(&g, 0, sizeof g);
    int code;
    if (gemm_parse(argc, argv, &g.r.o, &code)) return code;
    if (g.r.o.sweep) return bench_gemm_sweep(g.r.o);
    const gemm_opts *o = &g.r.o;
    a2amm_error err = {0, ""};
    int rc = gemm_one(&g, 1, NULL, &err);
    if (!rc) {
        if (o->json) print_json(&g.r);
        else print_table(&g.r);
        gemm_warn(&g.r);
    }
    gemm_teardown(&g);
    if (rc) {
        cli_print_error("bench gemm", &err);
        return 1;
    }
    return 0;
}
