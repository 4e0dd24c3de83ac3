/*
 * a2amm-bench: the benchmarks (never tests), a binary of their own so that
 * neither the library nor the a2amm command links their peers (oneDNN);
 * `a2amm bench ...` runs it. Each benchmark is in its own file: gemm
 * (bench_gemm.c) and op (bench_op.c). This file dispatches.
 */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "bench/bench.h"

/* ======================================================================
 * The `bench` command: dispatch to one benchmark.
 * ====================================================================== */

typedef struct bench_entry {
    const char *name, *args, *what;
    int (*fn)(int argc, char **argv);
} bench_entry;

static const bench_entry BENCHES[] = {
    {"gemm", "M N K", "the MXFP8 matmul against the machine's ceiling, oneDNN bf16 and OpenBLAS sgemm", cmd_bench_gemm},
    /* bench_op.c */
    {"op", "M K N R", "the fused run against the unfused run, the matmuls alone and the oneDNN baseline",
     cmd_bench_op},
    {"api", "M K N R", "the public API's in-memory call against a2amm run, and setting weights", cmd_bench_api},
    {"moe", "R T H I E K", "the MoE op against its experts alone and the gather + reduce-scatter way", cmd_bench_moe},
    {"grouped", "E M H I", "E experts of M rows each as the MoE op runs them, against a read of their weights",
     cmd_bench_grouped},
    /* a new benchmark: one line here, its own file, its declaration in bench.h */
};
#define NBENCH (int)(sizeof BENCHES / sizeof BENCHES[0])

static void bench_usage(FILE *f)
{
    fprintf(f,
            "usage: a2amm bench BENCHMARK [args]   (a2amm bench BENCHMARK --help for each)\n"
            "\n"
            "Benchmarks, not tests: each prints a table (or, with --json, one JSON object) of\n"
            "medians over repetitions, measured in one run so that the ratios are comparable.\n"
            "\n"
            "benchmarks:\n");
    for (int i = 0; i < NBENCH; i++)
        fprintf(f, "  %-7s %-11s %s\n", BENCHES[i].name, BENCHES[i].args, BENCHES[i].what);
    fprintf(f,
            "\n"
            "example:\n"
            "  a2amm bench gemm 256 256 256 --iters 3\n");
}

int main(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "op") || !strcmp(argv[1], "api") || !strcmp(argv[1], "moe")))
        cli_without_blas_threads(argv); /* they fork ranks */
    if (argc < 2 || cli_is_help(argv[1])) {
        bench_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (int i = 0; i < NBENCH; i++)
        if (!strcmp(argv[1], BENCHES[i].name)) return BENCHES[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "a2amm bench: unknown benchmark '%s' (expected one of:", argv[1]);
    for (int i = 0; i < NBENCH; i++) fprintf(stderr, " %s", BENCHES[i].name);
    fprintf(stderr, ")\n");
    return 2;
}
