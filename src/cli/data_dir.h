/*
 * The data folder that gen, run and verify share (--dir): refusing an empty
 * path, and holding the command line to what gen recorded in its meta file.
 */
#ifndef A2AMM_CLI_DATA_DIR_H
#define A2AMM_CLI_DATA_DIR_H

#include <signal.h>

#include "a2amm.h"
#include "common/shape.h"

/* A usable --dir: not empty. Prints why not; 0 or -1. */
int cli_dir_check(const char *cmd, const char *dir);
/* cli_dir_check, and the folder exists (what run and verify read): prints why not; 0 or -1. */
int cli_dir_existing(const char *cmd, const char *dir);

/* Room for bytes more in dir's file system (dir, or the nearest folder above it that exists): prints why
 * not, naming both sizes; 0 or -1. Where the free space cannot be read, 0 (the writes will say). */
int cli_space_check(const char *cmd, const char *dir, double bytes, const char *what);

/* What a command needs of the element types when there is no meta file. */
typedef enum cli_types_rule {
    CLI_TYPES_UNUSED, /* verify: it needs none */
    CLI_TYPES_NAMED,  /* run: both named with --a-type and --b-type */
    CLI_TYPES_SEED    /* the seed's form: those not named are the seed's E4M3, said on stderr */
} cli_types_rule;

/*
 * The op a command works on (run, verify: before the shape's rules, which
 * depend on it): `given` (--op's value, or NULL) held to the op
 * DIR/input/a2amm-meta.txt records (a meta file without an op line, as
 * versions before the reverse op wrote, records alltoall-matmul). A given
 * op that contradicts it is refused naming both; without --op, the
 * recorded op; without a meta file (or one that cannot be read, which
 * cli_meta_hold reports), the given op or alltoall-matmul. Prints why;
 * 0 or 2.
 */
int cli_op_hold(const char *cmd, const char *dir, const char *given, op_kind *kind);

/*
 * Holds the command line's shape (and, for run, its --a-type/--b-type: NULL
 * when not given) to DIR/input/a2amm-meta.txt and fills s's types:
 * - a meta file that cannot be read or breaks a rule is refused (naming the
 *   file, the line and the rule);
 * - a shape or a type that contradicts it is refused;
 * - without a meta file, `rule` says what the types are (see cli_types_rule).
 * s->K == 0 means the command has no K (verify). Prints why; 0, or the
 * process exit code (1 for a bad file, 2 for a contradiction).
 */
int cli_meta_hold(const char *cmd, const char *dir, op_shape *s, const char *at, const char *bt,
                  cli_types_rule rule);

/*
 * Takes the folder's lock (flock on DIR itself, created when create is set)
 * for a command that writes in it (gen, run): a second one on the same
 * folder is refused, naming it, instead of mixing two sets of files (after
 * 2 s, the time a killed run's guard may take to clean up and let go). Then
 * puts right what interrupted writers left (io_remove_stale: completes a
 * run's commit of its outputs, removes temporary files), saying so.
 * Returns the descriptor that holds the lock (closed at exit), or -1 after
 * printing why.
 */
int cli_dir_lock(const char *cmd, const char *dir, int create);

/*
 * SIGINT and SIGTERM set *cli_stop_signal() to the signal's number (instead
 * of ending the process), for op_options.stop; cli_exit_code_for_stop gives
 * 128 + that number (130, 143) once the command has cleaned up.
 */
const volatile sig_atomic_t *cli_catch_stop_signals(void);
int cli_exit_code_for_stop(void);

#endif
