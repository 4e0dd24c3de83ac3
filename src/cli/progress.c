/* The progress line (see progress.h). */
#include "cli/progress.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "cli/args.h"

/* Held while a line is made and written, and by a thread that forks (pthread_atfork), so that no fork
 * happens in the middle of a draw from another thread (cli_watch). */
static pthread_mutex_t draw_lock = PTHREAD_MUTEX_INITIALIZER;
static void draw_hold(void) { pthread_mutex_lock(&draw_lock); }
static void draw_release(void) { pthread_mutex_unlock(&draw_lock); }
static pthread_once_t fork_guard_once = PTHREAD_ONCE_INIT;
static void fork_guard(void) { pthread_atfork(draw_hold, draw_release, draw_release); }

static void start(cli_progress *p, int on)
{
    *p = (cli_progress){.on = on, .start = cli_now(), .last_line = -1.0, .pace_start = -1.0, .last_done = -1};
}

void cli_progress_start(cli_progress *p, int quiet, int json)
{
    start(p, !quiet && !json && isatty(STDERR_FILENO));
}

void cli_progress_start_lines(cli_progress *p, int quiet, int json)
{
    start(p, quiet || json ? 0 : isatty(STDERR_FILENO) ? 1 : 2);
}

/* One write(2) of the whole line: no stdio lock and no allocation, since
 * `run perf` draws the line from a thread that is running while the
 * launcher forks the ranks (a lock held at fork would stay held in them). */
static void put_line(const char *line, int n)
{
    if (n <= 0) return;
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}

/* The text as the mode writes it; plain lines only when `due`. */
static void show(cli_progress *p, const char *text, int due)
{
    double now = cli_now();
    char line[320];
    int n;
    if (p->on == 1) n = snprintf(line, sizeof line, "\r%s (%.1f s)\033[K", text, now - p->start);
    else if (due || p->last_line < 0 || now - p->last_line >= CLI_PROGRESS_PERIOD_S)
        n = snprintf(line, sizeof line, "%s (%.0f s)\n", text, now - p->start), p->last_line = now;
    else return;
    put_line(line, n < (int)sizeof line ? n : (int)sizeof line - 1);
}

void cli_progress_say(cli_progress *p, const char *fmt, ...)
{
    if (!p->on) return;
    char text[200];
    draw_hold();
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    show(p, text, 0);
    draw_release();
}

/* cli_progress_count, under the draw lock. */
static void count(cli_progress *p, const char *what, int shown, int done, int total)
{
    double now = cli_now();
    if (p->pace_start < 0 || done < p->pace_done) p->pace_start = now, p->pace_done = done; /* a new count */
    char text[240];
    int n = snprintf(text, sizeof text, "%s %d of %d", what, shown, total);
    if (done > p->pace_done && done < total && n > 0 && n < (int)sizeof text) {
        double left = (now - p->pace_start) / (double)(done - p->pace_done) * (double)(total - done);
        if (left < 120) snprintf(text + n, sizeof text - (size_t)n, ", about %.0f s left", left);
        else snprintf(text + n, sizeof text - (size_t)n, ", about %.0f min left", left / 60.0);
    }
    /* plain lines: the step count changed, and the period passed or the last step is done */
    if (p->on == 2 && done == p->last_done) return;
    int due = p->on == 2 && done >= total && p->last_done < total;
    double before = p->last_line;
    show(p, text, due);
    if (p->last_line != before) p->last_done = done;
}

void cli_progress_count(cli_progress *p, const char *what, int shown, int done, int total)
{
    if (!p->on) return;
    draw_hold();
    count(p, what, shown, done, total);
    draw_release();
}

void cli_progress_end(cli_progress *p)
{
    if (p->on != 1) return;
    draw_hold();
    put_line("\r\033[K", 4);
    draw_release();
}

static void *watch_main(void *arg)
{
    cli_watch *w = arg;
    cli_progress p;
    cli_progress_start_lines(&p, 0, 0); /* the caller decided it is wanted */
    atomic_store(&w->state, 1);
    for (int last = 0; !last;) {
        last = atomic_load(&w->state) == 2; /* once more after the stop: the last step's line */
        w->poll(w->arg, &p);
        struct timespec pause = {0, 100000000};
        if (!last) nanosleep(&pause, NULL);
    }
    cli_progress_end(&p);
    return NULL;
}

void cli_watch_start(cli_watch *w, void (*poll)(void *arg, cli_progress *p), void *arg)
{
    pthread_once(&fork_guard_once, fork_guard);
    w->poll = poll, w->arg = arg;
    atomic_store(&w->state, 0);
    w->started = pthread_create(&w->tid, NULL, watch_main, w) == 0;
    struct timespec pause = {0, 1000000};
    while (w->started && atomic_load(&w->state) == 0) nanosleep(&pause, NULL);
}

void cli_watch_stop(cli_watch *w)
{
    if (!w->started) return;
    atomic_store(&w->state, 2);
    pthread_join(w->tid, NULL);
    w->started = 0;
}
