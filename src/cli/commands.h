/* The a2amm subcommands; each takes its own argv (argv[0] is its name) and
 * returns the process exit code. */
#ifndef A2AMM_CLI_COMMANDS_H
#define A2AMM_CLI_COMMANDS_H

int cmd_gen(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_cpu(int argc, char **argv); /* what this CPU runs (cmd_cpu.c) */ /* bench gemm | bench op (cmd_bench.c) */
/* `a2amm bench op` (bench_op.c), dispatched by `a2amm bench`. */
int cmd_bench_op(int argc, char **argv);
/* `a2amm bench gemm` (bench_gemm.c), dispatched by `a2amm bench`. */
int cmd_bench_gemm(int argc, char **argv);

#endif
