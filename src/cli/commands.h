/* The a2amm subcommands; each takes its own argv (argv[0] is its name) and
 * returns the process exit code. */
#ifndef A2AMM_CLI_COMMANDS_H
#define A2AMM_CLI_COMMANDS_H

int cmd_gen(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_run(int argc, char **argv);

#endif
