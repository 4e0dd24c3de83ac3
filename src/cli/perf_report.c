/* Printing perf-mode figures: the table and the JSON object. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/perf_report.h"
#include "cli/json.h"
#include "cli/run_rank.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

cli_summary cli_summarize(const double *v, int n)
{
    double *t = malloc((size_t)n * sizeof *t);
    cli_summary s = {NAN, NAN, NAN};
    if (!t) return s;
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    s.min = t[0];
    s.max = t[n - 1];
    s.median = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    free(t);
    return s;
}

int cli_spread_wide(double fastest, double slowest) { return fastest < 0.9 * slowest; }

int cli_difference_measurable(const cli_summary *a, const cli_summary *b)
{
    return fabs(a->median - b->median) > fmax(a->max - a->min, b->max - b->min);
}

void cli_exposed_text_of(char *buf, size_t size, const cli_summary *run, const cli_summary *alone,
                         const char *alone_name)
{
    double d = run->median - alone->median;
    if (d > 0 && cli_difference_measurable(run, alone))
        snprintf(buf, size, "%.3f ms, %.1f%% of the run", d * 1e3, 100.0 * d / run->median);
    else if (d > 0)
        snprintf(buf, size, "none measurable (the medians differ by %.3f ms, within the spread of %.3f ms)", d * 1e3,
                 fmax(run->max - run->min, alone->max - alone->min) * 1e3);
    else
        snprintf(buf, size, "none measurable (the run's median is not above %s)", alone_name);
}

void cli_exposed_text(char *buf, size_t size, const cli_summary *run, const cli_summary *alone)
{
    cli_exposed_text_of(buf, size, run, alone, "the matmul alone's");
}

int cli_print_spreads(const char *const *names, const cli_summary *v, int n)
{
    int busy = 0;
    printf("  spread, (max - min) / max:");
    for (int i = 0; i < n; i++) {
        int wide = cli_spread_wide(v[i].min, v[i].max);
        busy |= wide;
        printf("%s %s %.0f%%%s", i ? "," : "", names[i], v[i].max > 0 ? 100.0 * (v[i].max - v[i].min) / v[i].max : 0.0,
               wide ? " (wide)" : "");
    }
    printf("\n");
    return busy;
}

/* Per rank, where a timed call of the configured op went (means over the repetitions). */
static void print_breakdown(const run_perf *p, int R, const char *name)
{
    if (!p->ranks) return;
    printf("  per rank, one %s call (mean of the timed ones); besides mm = call - matmul: the call's time not\n"
           "  multiplying (waits, sends, barriers; on a busy machine also time without a core), not the exposed\n"
           "  communication above, which compares the whole call with the matmul alone\n", name);
    printf("    %4s %10s %10s %10s %10s %10s %10s   %s\n", "rank", "call ms", "matmul ms", "waits ms", "sends ms",
           "barrier ms", "besides mm", "waits by source (ms)");
    for (int r = 0; r < R; r++) {
        const struct run_rank_breakdown *b = &p->ranks[r];
        printf("    %4d %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f  ", r, b->call_s * 1e3, b->matmul_s * 1e3,
               b->wait_s * 1e3, b->send_s * 1e3, b->barrier_s * 1e3, fmax(0.0, b->call_s - b->matmul_s) * 1e3);
        int any = 0;
        for (int src = 0; src < R && R <= 16; src++)
            if (src != r) printf(" %d: %.3f", src, b->wait_from_s[src] * 1e3), any = 1;
        printf("%s\n", any ? "" : (R > 16 ? " (in --json)" : " -"));
    }
}

static void print_breakdown_json(const run_perf *p, int R)
{
    if (!p->ranks) return;
    printf(",\"ranks\":[");
    for (int r = 0; r < R; r++) {
        const struct run_rank_breakdown *b = &p->ranks[r];
        printf("%s{\"rank\":%d,\"call_s\":%.9f,\"matmul_s\":%.9f,\"wait_s\":%.9f,\"send_s\":%.9f,"
               "\"barrier_s\":%.9f,\"exposed_s\":%.9f,\"wait_from_s\":[",
               r ? "," : "", r, b->call_s, b->matmul_s, b->wait_s, b->send_s, b->barrier_s, b->call_s - b->matmul_s);
        for (int src = 0; src < R; src++) printf("%s%.9f", src ? "," : "", b->wait_from_s[src]);
        printf("]}");
    }
    printf("]");
}

void cli_print_op_perf(const op_shape *s, const run_options *o, const run_result *res, int json)
{
    const run_perf *p = &res->perf;
    double flops = 2.0 * (double)s->M * (double)s->N * (double)s->K * (double)s->R; /* all ranks */
    int nv = p->t[RUN_V_BASELINE] ? RUN_VARIANTS : RUN_V_BASELINE;
    cli_summary v[RUN_VARIANTS];
    for (int i = 0; i < nv; i++) v[i] = cli_summarize(p->t[i], p->iters);
    const char *names[RUN_VARIANTS] = {o->unfused ? "unfused (as asked)" : "fused", "unfused", "matmul alone",
                                       "alltoall alone", "baseline"};
    double exposed = v[0].median - v[2].median;
    int busy = 0;
    for (int i = 0; i < nv; i++) busy |= cli_spread_wide(v[i].min, v[i].max);
    const int exposed_ok = exposed > 0 && cli_difference_measurable(&v[0], &v[2]);
    const cli_summary *slower_alone = v[2].median >= v[3].median ? &v[2] : &v[3];
    if (json) { /* "schedule", not "unfused", which names the unfused variant's figures */
        printf("{\"M\":%lld,\"K\":%lld,\"N\":%lld,\"R\":%lld,\"op\":\"%s\",\"a_type\":\"%s\",\"b_type\":\"%s\","
               "\"path\":\"%s\",\"schedule\":\"%s\",\"tile_m\":%lld,\"depth\":%d,\"threads\":%d,\"isa\":\"%s\","
               "\"iters\":%d,\"warmup\":%d,\"flush_bytes_per_rank\":%.0f,\"prepare_s\":%.6f",
               (long long)s->M, (long long)s->K, (long long)s->N, (long long)s->R, op_kind_name(s->kind),
               a2amm_fp8_type_name(s->a_type),
               a2amm_fp8_type_name(s->b_type), run_path_name(o->path), o->unfused ? "unfused" : "fused",
               (long long)o->tile_m, o->depth, res->threads, res->kernel, p->iters, o->warmup,
               p->flush_bytes, p->prepare_s);
        const char *keys[RUN_VARIANTS] = {"run", "unfused", "matmul", "alltoall", "baseline"};
        for (int i = 0; i < nv; i++)
            printf(",\"%s\":{\"min_s\":%.6f,\"median_s\":%.6f,\"max_s\":%.6f,\"tflops\":%.4f,\"spread_wide\":%s}",
                   keys[i], v[i].min, v[i].median, v[i].max, flops / v[i].median / 1e12,
                   cli_spread_wide(v[i].min, v[i].max) ? "true" : "false");
        /* exposed_comm_s stays the bare difference of the medians (negative where noise made it so);
         * exposed_comm_measurable says whether it is more than the spread */
        printf(",\"busy\":%s,\"exposed_comm_measurable\":%s", busy ? "true" : "false",
               exposed_ok ? "true" : "false");
        if (p->t[RUN_V_BASELINE]) cli_json_key_str("baseline_what", p->baseline_what);
        print_breakdown_json(p, (int)s->R);
        printf(",\"run_with_prepare_s\":%.6f,\"exposed_comm_s\":%.6f,\"exposed_comm_fraction\":%.4f,"
               "\"fused_over_max_alone\":%.4f}\n",
               v[0].median + p->prepare_s, exposed, exposed / v[0].median, v[0].median / fmax(v[2].median, v[3].median));
        return;
    }
    printf("perf: %d repetitions after %d warm-up, each after a pass over %.0f MB per rank to flush the caches;\n"
           "      a repetition's time is the slowest rank's. %.1f GFLOP per repetition (all ranks).\n",
           p->iters, o->warmup, p->flush_bytes / 1e6, flops / 1e9);
    printf("  %-20s %10s %10s %10s %10s %10s\n", "", "min ms", "median ms", "max ms", "TFLOP/s", "vs first");
    for (int i = 0; i < nv; i++) {
        char tf[32] = "-"; /* the AllToAll alone does no arithmetic */
        if (i != RUN_V_ALLTOALL) snprintf(tf, sizeof tf, "%.4f", flops / v[i].median / 1e12);
        printf("  %-20s %10.3f %10.3f %10.3f %10s %9.2fx\n", names[i], v[i].min * 1e3, v[i].median * 1e3,
               v[i].max * 1e3, tf, v[i].median / v[0].median);
    }
    const run_perf_op *kind = run_perf_op_of(s->kind);
    kind->print_alone(s);
    printf("  spread, (max - min) / max:");
    for (int i = 0; i < nv; i++)
        printf("%s %s %.0f%%%s", i ? "," : "", i ? names[i] : (o->unfused ? "unfused" : "fused"),
               100.0 * (v[i].max - v[i].min) / v[i].max, cli_spread_wide(v[i].min, v[i].max) ? " (wide)" : "");
    printf("\n");
    if (busy)
        printf("  a busy machine: a spread over 10%% (wide) means other work took the cores during these\n"
               "  repetitions; a difference within the spread is not measurable (compare with care)\n");
    double ratio = v[0].median / slower_alone->median;
    printf("  %s / max(matmul alone, alltoall alone) = %.3f (1.0: the exchange fully hidden)%s\n",
           o->unfused ? "unfused" : "fused", ratio,
           ratio >= 1.0 ? "" : !cli_difference_measurable(&v[0], slower_alone)
                                   ? "; below 1.0 within the spread: as fast as its slower part alone"
                                   : "; below 1.0: the parts alone ran slower than the whole (a busy machine)");
    if (!o->unfused) {
        double d = v[1].median - v[0].median;
        if (!cli_difference_measurable(&v[0], &v[1]))
            printf("  fused vs unfused: no measurable difference (the medians differ by %.3f ms, within the "
                   "spread)\n", fabs(d) * 1e3);
        else if (d > 0)
            printf("  fused vs unfused: fused faster by %.3f ms (%.1f%%)\n", d * 1e3, 100.0 * d / v[1].median);
        else
            printf("  fused vs unfused: fused slower by %.3f ms (%.1f%%)%s\n", -d * 1e3, -100.0 * d / v[1].median,
                   busy ? " on a busy machine (see the spreads)"
                        : ": the overlap hides less here than the pipeline's tile-by-tile steps cost");
    }
    if (p->t[RUN_V_BASELINE]) printf("  baseline: %s: %s\n", kind->baseline_steps, p->baseline_what);
    char ex[200];
    cli_exposed_text(ex, sizeof ex, &v[0], &v[2]);
    printf("  exposed communication, median %s - median matmul alone: %s\n", names[0], ex);
    printf("  B preparation, once per rank before the repetitions: %.3f ms (slowest rank)\n", p->prepare_s * 1e3);
    printf("  %s with B prepared on every call instead: %.3f ms, %.1f GFLOP/s (median + preparation)\n", names[0],
           (v[0].median + p->prepare_s) * 1e3, flops / (v[0].median + p->prepare_s) / 1e9);
    printf("  time %.3f ms, %.1f GFLOP/s (median %s)\n", v[0].median * 1e3, flops / v[0].median / 1e9, names[0]);
    print_breakdown(p, (int)s->R, names[0]);
}

