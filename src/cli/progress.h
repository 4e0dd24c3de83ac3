/*
 * A progress line for long work, on stderr, only when stderr is a terminal
 * and the user did not ask for quiet or JSON output: rewritten in place
 * ("\r...", cleared at the end), never in a pipe or a file.
 */
#ifndef A2AMM_CLI_PROGRESS_H
#define A2AMM_CLI_PROGRESS_H

typedef struct cli_progress {
    int on;
    double start;
} cli_progress;

/* On when stderr is a terminal and neither quiet nor json. */
void cli_progress_start(cli_progress *p, int quiet, int json);
/* Rewrites the line: the text and the seconds since the start. */
void cli_progress_say(cli_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Clears the line. */
void cli_progress_end(cli_progress *p);

#endif
