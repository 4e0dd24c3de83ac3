/* The progress line (see progress.h). */
#include "cli/progress.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "cli/args.h"

void cli_progress_start(cli_progress *p, int quiet, int json)
{
    p->on = !quiet && !json && isatty(STDERR_FILENO);
    p->start = cli_now();
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

void cli_progress_say(cli_progress *p, const char *fmt, ...)
{
    if (!p->on) return;
    char text[200], line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    int n = snprintf(line, sizeof line, "\r%s (%.1f s)\033[K", text, cli_now() - p->start);
    put_line(line, n < (int)sizeof line ? n : (int)sizeof line - 1);
}

void cli_progress_end(cli_progress *p)
{
    if (!p->on) return;
    put_line("\r\033[K", 4);
}
