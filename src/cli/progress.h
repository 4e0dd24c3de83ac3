/*
 * Progress of long work, on stderr, unless the user asked for quiet or JSON
 * output. On a terminal: one line rewritten in place ("\r...", cleared at the
 * end). Elsewhere (a file, a pipe), for the work that asks for it
 * (cli_progress_start_lines): plain lines, the first at once and then at most
 * one every CLI_PROGRESS_PERIOD_S seconds, so that a log shows a long
 * benchmark's pace without a line per step.
 */
#ifndef A2AMM_CLI_PROGRESS_H
#define A2AMM_CLI_PROGRESS_H

#include <pthread.h>

#define CLI_PROGRESS_PERIOD_S 5.0

typedef struct cli_progress {
    int on;            /* 0: off; 1: a terminal's line; 2: plain lines */
    double start;      /* when it started */
    double last_line;  /* plain lines: when the last one was written (< 0: none yet) */
    double pace_start; /* cli_progress_count: when it was first called, and how many were done then */
    int pace_done;
    int last_done;     /* plain lines: the count of the last line written */
} cli_progress;

/* On when stderr is a terminal and neither quiet nor json. */
void cli_progress_start(cli_progress *p, int quiet, int json);
/* On unless quiet or json: a terminal's line, else plain lines. */
void cli_progress_start_lines(cli_progress *p, int quiet, int json);
/* Rewrites the line: the text and the seconds since the start (plain lines: at most one a period). */
void cli_progress_say(cli_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "WHAT SHOWN of TOTAL (T s, about R left)": `done` of `total` steps finished, the time left from the
 * pace since the first call; plain lines: also a line when the last step is done. */
void cli_progress_count(cli_progress *p, const char *what, int shown, int done, int total);
/* Clears the line. */
void cli_progress_end(cli_progress *p);

/*
 * A thread that draws the progress of ranks the caller launches (plain
 * lines off a terminal): poll(arg, p) every 0.1 s, and once more after
 * cli_watch_stop, for the last step's line. A rank forked while another
 * thread of the launcher holds a lock (its runtime's, the allocator's)
 * inherits it held for ever, so cli_watch_start returns only once the thread
 * runs, and the thread's drawing is held off while the process forks
 * (pthread_atfork); between draws it only reads memory and sleeps.
 */
typedef struct cli_watch {
    void (*poll)(void *arg, cli_progress *p);
    void *arg;
    pthread_t tid;
    _Atomic int state; /* 0: starting; 1: running; 2: asked to stop */
    int started;
} cli_watch;

void cli_watch_start(cli_watch *w, void (*poll)(void *arg, cli_progress *p), void *arg);
/* Stops and joins the thread (nothing where none started). */
void cli_watch_stop(cli_watch *w);

#endif
