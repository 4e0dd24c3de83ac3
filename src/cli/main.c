/* The a2amm command: dispatches to the subcommands. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"

static void main_usage(FILE *f)
{
    fprintf(f,
            "a2amm: the fused AllToAll + MXFP8 quantized matmul across R ranks, on CPUs.\n"
            "\n"
            "usage: a2amm COMMAND [args]   (a2amm COMMAND --help for each)\n"
            "\n"
            "commands:\n"
            "  gen M K N R      write every rank's MXFP8 inputs in the seed's layout and the golden\n"
            "  run M K N R      the fused AllToAll + matmul over R processes (precision|perf);\n"
            "                   --op matmul-alltoall: the reverse, matmul then AllToAll;\n"
            "                   --op moe (T H I R): MoE expert parallelism (each for gen, run, verify)\n"
            "  M K N R [mode]   the seed's form of run (E4M3 x E4M3 where no meta file records the types)\n"
            "  verify M N R     check every rank's npu_out.bin against its golden (the seed's test)\n"
            "  bench NAME ...   benchmarks against peers: gemm, op, api, moe, grouped (a2amm bench --help)\n"
            "  cpu              what a2amm finds on this CPU: features, kernel levels, the one it uses\n"
            "  timeline TRACE   draw a --trace file as SVG: ranks as rows, time across, stalls in red\n"
            "\n"
            "environment:\n"
            "  A2AMM_ISA=ref|avx2|avx512|amx   force a kernel level (default: the best this CPU runs)\n"
            "  A2AMM_CPU_HIDE=amx,avx512,...   hide CPU features, as on a CPU without them (a2amm cpu --help)\n"
            "\n"
            "example (the seed's flow):\n"
            "  a2amm gen 700 256 96 2 --dir /tmp/a2amm-demo\n"
            "  a2amm run 700 256 96 2 --dir /tmp/a2amm-demo\n"
            "  a2amm verify 700 96 2 --dir /tmp/a2amm-demo\n");
}

static int dispatch(int argc, char **argv)
{
    if (argc < 2 || cli_is_help(argv[1])) {
        main_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    cli_set_command(argv[1][0] >= '0' && argv[1][0] <= '9' ? "run" : argv[1]);
    if (!strcmp(argv[1], "gen")) return cmd_gen(argc - 1, argv + 1);
    if (!strcmp(argv[1], "verify")) return cmd_verify(argc - 1, argv + 1);
    if (!strcmp(argv[1], "timeline")) return cmd_timeline(argc - 1, argv + 1);
    int forks = !strcmp(argv[1], "run") || (argv[1][0] >= '0' && argv[1][0] <= '9') ||
                (!strcmp(argv[1], "bench") && argc > 2 && !strcmp(argv[2], "op"));
    if (forks) cli_without_blas_threads(argv);
    if (!strcmp(argv[1], "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(argv[1], "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(argv[1], "cpu")) return cmd_cpu(argc - 1, argv + 1);
    /* the seed's own form: a2amm M K N R [precision|perf] */
    if (argv[1][0] >= '0' && argv[1][0] <= '9') return cmd_run_seed(argc, argv);
    fprintf(stderr, "a2amm: unknown command '%s' (try a2amm --help)\n", argv[1]);
    return 2;
}

int main(int argc, char **argv)
{
    int rc = dispatch(argc, argv);
    /* what was printed must have reached its file: a full disk or a closed pipe is a failure too */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "a2amm: writing the standard output failed%s%s\n", errno ? ": " : "", errno ? strerror(errno) : "");
        return rc ? rc : 1;
    }
    return rc;
}
