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

void cli_progress_say(cli_progress *p, const char *fmt, ...)
{
    if (!p->on) return;
    char text[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\r%s (%.1f s)\033[K", text, cli_now() - p->start);
    fflush(stderr);
}

void cli_progress_end(cli_progress *p)
{
    if (!p->on) return;
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
}
