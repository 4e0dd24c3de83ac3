/* Command-line parsing helpers shared by the a2amm subcommands. They print
 * a message naming the argument and return -1 on bad input. */
#ifndef A2AMM_CLI_ARGS_H
#define A2AMM_CLI_ARGS_H

#include <stdint.h>

#include "a2amm.h"
#include "common/shape.h"

/* argv[*i] is `name VALUE` or `name=VALUE`: sets *value, advances *i past
 * it and returns 1; returns 0 when argv[*i] is another argument, -1 (after
 * printing) when the value is missing. */
int cli_option(int argc, char **argv, int *i, const char *name, const char **value);
/* The command whose options are parsed, named in cli_option's messages (main sets it). */
void cli_set_command(const char *name);

/* Parses a whole decimal integer within [min, max]; `what` names it in the
 * message ("M", "--seed"). */
int cli_parse_i64(const char *cmd, const char *what, const char *s, int64_t min, int64_t max,
                  int64_t *out);
int cli_parse_u64(const char *cmd, const char *what, const char *s, uint64_t *out);
/* gen's --scale-mode and --seed (both ops' gen): 1 taken into *scale_mode / *seed, 0 not one of them,
 * -1 a bad value (said on stderr). */
int cli_gen_option(int argc, char **argv, int *i, int *scale_mode, uint64_t *seed);
int cli_parse_double(const char *cmd, const char *what, const char *s, double min, double max,
                     double *out);
int cli_parse_type(const char *cmd, const char *what, const char *s, a2amm_fp8_type *out);

/* --op's value: alltoall-matmul or matmul-alltoall into *out; moe is taken too, leaving *out as it is (an
 * --op moe that a later --op overrides: as for every option given twice, the last one wins). */
int cli_parse_op(const char *cmd, const char *s, op_kind *out);

/* True for -h / --help. */
int cli_is_help(const char *arg);

/* Prints "a2amm CMD: <message>" for a library error, to stderr. */
void cli_print_error(const char *cmd, const a2amm_error *err);

/* Prints a rows x cols corner of a bf16 [rows_total, cols_total] matrix. */
void cli_print_corner(const char *title, const uint16_t *m, int64_t rows_total, int64_t cols_total,
                      int rows, int cols);

/*
 * For a command that forks rank processes: runs the program again with
 * OPENBLAS_NUM_THREADS=1 unless it is so already, so that fork never waits
 * on OpenBLAS's thread pool (it starts when the library loads). Returns
 * only when that is already so, or when exec fails.
 */
void cli_without_blas_threads(char **argv);

/* Monotonic seconds. */
double cli_now(void);



/* Parses M K N R from four strings and checks the shape's rules (printing
 * the rule that fails). Types are left as they are in *shape. */
int cli_parse_shape(const char *cmd, char **mknr, op_shape *shape, op_sizes *sizes);

/* run's mode word after M K N R ("precision" or "perf"), into *mode; a second one that contradicts the
 * first (*given counts them) is refused, saying so: 0 or -1. */
int cli_mode_word(const char *cmd, const char *word, int *given, int *mode);
/* The options that only perf mode uses (--iters, --warmup, --baseline) given in precision mode: refused,
 * saying so (they would be ignored): 0 or -1. */
int cli_perf_only_options(const char *cmd, int argc, char **argv, int perf);
#endif
