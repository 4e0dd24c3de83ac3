/* The a2amm subcommands; each takes its own argv (argv[0] is its name) and
 * returns the process exit code. */
#ifndef A2AMM_CLI_COMMANDS_H
#define A2AMM_CLI_COMMANDS_H

int cmd_gen(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_run_seed(int argc, char **argv); /* the seed's form, a2amm M K N R [mode] (argv[0]: the program) */
int cmd_bench(int argc, char **argv); /* runs a2amm-bench, the benchmarks' own binary (cmd_bench.c) */
int cmd_cpu(int argc, char **argv);   /* what this CPU runs (cmd_cpu.c) */
int cmd_timeline(int argc, char **argv); /* a trace drawn as SVG (cmd_timeline.c) */

/* gen, run and verify of the MoE op (cmd_moe.c), which gen, run and verify hand over to when
 * cli_moe_wanted: --op moe given, or (from_meta, run and verify) no --op and the folder's meta file says
 * op moe. */
int cmd_gen_moe(int argc, char **argv);
int cmd_run_moe(int argc, char **argv);
int cmd_verify_moe(int argc, char **argv);
int cli_moe_wanted(int argc, char **argv, int from_meta);

#endif
