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

/* Per rank, where a timed call of the configured op went (means over the repetitions). */
static void print_breakdown(const run_perf *p, int R, const char *name)
{
    if (!p->ranks) return;
    printf("  per rank, one %s call (mean of the timed ones): exposed = call - matmul\n", name);
    printf("    %4s %10s %10s %10s %10s %10s %10s   %s\n", "rank", "call ms", "matmul ms", "waits ms", "sends ms",
           "barrier ms", "exposed ms", "waits by source (ms)");
    for (int r = 0; r < R; r++) {
        const struct run_rank_breakdown *b = &p->ranks[r];
        printf("    %4d %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f  ", r, b->call_s * 1e3, b->matmul_s * 1e3,
               b->wait_s * 1e3, b->send_s * 1e3, b->barrier_s * 1e3, (b->call_s - b->matmul_s) * 1e3);
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
            printf(",\"%s\":{\"min_s\":%.6f,\"median_s\":%.6f,\"max_s\":%.6f,\"tflops\":%.4f}", keys[i], v[i].min,
                   v[i].median, v[i].max, flops / v[i].median / 1e12);
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
    printf("  fused / max(matmul alone, alltoall alone) = %.3f (1.0: the exchange fully hidden)\n",
           v[0].median / fmax(v[2].median, v[3].median));
    if (p->t[RUN_V_BASELINE]) printf("  baseline: %s: %s\n", kind->baseline_steps, p->baseline_what);
    printf("  exposed communication: %.3f ms (median %s - median matmul alone; %.1f%% of the run)\n",
           exposed * 1e3, names[0], 100.0 * exposed / v[0].median);
    printf("  B preparation, once per rank before the repetitions: %.3f ms (slowest rank)\n", p->prepare_s * 1e3);
    printf("  %s with B prepared on every call instead: %.3f ms, %.1f GFLOP/s (median + preparation)\n", names[0],
           (v[0].median + p->prepare_s) * 1e3, flops / (v[0].median + p->prepare_s) / 1e9);
    printf("  time %.3f ms, %.1f GFLOP/s (median %s)\n", v[0].median * 1e3, flops / v[0].median / 1e9, names[0]);
    print_breakdown(p, (int)s->R, names[0]);
}

