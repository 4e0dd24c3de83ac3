/* The benchmarks a2amm-bench dispatches to, each in its own file. */
#ifndef A2AMM_BENCH_H
#define A2AMM_BENCH_H

/* `a2amm bench gemm` (bench_gemm.c) and `a2amm bench op` (bench_op.c); each
 * takes its own argv (argv[0] is its name) and returns the exit code. */
int cmd_bench_gemm(int argc, char **argv);
int cmd_bench_op(int argc, char **argv);
int cmd_bench_api(int argc, char **argv); /* bench_api.c */
int cmd_bench_moe(int argc, char **argv); /* bench_moe.c */
int cmd_bench_grouped(int argc, char **argv); /* bench_grouped.c */

#endif
