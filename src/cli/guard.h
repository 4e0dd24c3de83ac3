/*
 * The guard of a command that writes in a data folder (gen, run): a small
 * child process that puts the folder right when the command is killed,
 * SIGKILL included, which no process can catch for itself.
 *
 * It waits for the end of a pipe whose write end the command holds and
 * every process it forks inherits (the ranks, which die with their
 * launcher): the end comes only once the command and all its ranks are
 * gone, so nothing it cleans can be written again after it. Then it calls
 * clean(arg) and exits. On the command's own way out, cli_guard_stop ends
 * it unused. It leaves the command's process group (a kill of the whole
 * group reaches the command and its ranks, not the one that cleans after
 * them) and holds the folder's lock (an inherited descriptor) until it is
 * done. It is named "a2amm-guard" (ps, pgrep). Its wait has no deadline of
 * its own: it lasts as long as the command, whose deadlines bound it.
 */
#ifndef A2AMM_CLI_GUARD_H
#define A2AMM_CLI_GUARD_H

#include "a2amm.h"

typedef struct cli_guard {
    int pid; /* 0: none */
    int fd;  /* the pipe's write end */
} cli_guard;

/* Starts the guard; A2AMM_E_SYS with the reason when it cannot (a fork that fails). */
int cli_guard_start(cli_guard *g, void (*clean)(void *arg), void *arg, a2amm_error *err);
/* Ends it without cleaning (the command finished its writes itself) and reaps it. */
void cli_guard_stop(cli_guard *g);

#endif
