/* Parsing the pipeline options that run and bench op share. */
#ifndef A2AMM_CLI_OP_ARGS_H
#define A2AMM_CLI_OP_ARGS_H

#include "cli/runner.h"

/*
 * If argv[*i] is one of --tile-m, --depth, --threads, --iters, --path,
 * --transport or --timeout (with its value), sets it in *o, advances *i and returns 1; 0
 * when argv[*i] is something else; -1 after printing a message naming the
 * option when its value is bad. `cmd` names the command in messages.
 */
int cli_op_option(const char *cmd, int argc, char **argv, int *i, run_options *o);

#endif
