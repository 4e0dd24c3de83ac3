/* What the benchmarks share: cache flushes, timed repetitions, JSON output. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/error.h"
#include "util/llc.h"

#include "cli/args.h"
#include "cli/measure.h"
#include "cli/progress.h"

size_t measure_flush_bytes(int sharers)
{
    size_t share = llc_bytes() * 2 / (size_t)(sharers > 0 ? sharers : 1);
    return share < (8u << 20) ? (8u << 20) : share;
}

int measure_flusher_init(measure_flusher *f, pool *workers, size_t bytes, a2amm_error *err)
{
    *f = (measure_flusher){workers, NULL, bytes};
    if (bytes && !(f->buf = calloc(bytes, 1)))
        return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the %.0f MB cache-flush buffer", (double)bytes / 1e6);
    return A2AMM_OK;
}

void measure_flusher_free(measure_flusher *f)
{
    free((void *)f->buf);
    f->buf = NULL;
}

static void flush_task(void *arg, int task)
{
    const measure_flusher *f = arg;
    int n = f->pool ? pool_threads(f->pool) : 1;
    size_t slice = (f->bytes / (size_t)n) & ~(size_t)63;
    size_t end = task == n - 1 ? f->bytes : (size_t)(task + 1) * slice;
    for (size_t i = (size_t)task * slice; i < end; i += 64) f->buf[i] = (uint8_t)(f->buf[i] + 1);
}

void measure_flush(measure_flusher *f)
{
    if (!f->bytes) return;
    if (f->pool) pool_run(f->pool, flush_task, f, pool_threads(f->pool));
    else flush_task(f, 0);
}


static struct cli_progress *shown;
static const char *shown_what;

void measure_show_progress(struct cli_progress *p, const char *what) { shown = p, shown_what = what; }

void measure_interleaved(measure_contender *c, int n, int warmup, int iters, measure_flusher *fl)
{
    for (int i = 0; i < n; i++)
        for (int w = 0; w < warmup && !c[i].rc; w++) {
            c[i].rc = c[i].run(c[i].ctx, &c[i].err);
            if (c[i].after) c[i].after(c[i].ctx);
        }
    char label[160];
    snprintf(label, sizeof label, "%s: repetition", shown_what ? shown_what : "a2amm");
    for (int it = 0; it < iters; it++)
        for (int k = 0; k < n; k++) {
            if (shown && k == 0) cli_progress_count(shown, label, it + 1, it, iters);
            measure_contender *x = &c[(it + k) % n];
            if (x->rc) continue;
            measure_flush(fl);
            double t0 = cli_now();
            x->rc = x->run(x->ctx, &x->err);
            x->t[it] = cli_now() - t0;
            if (x->after) x->after(x->ctx);
        }
    if (shown) cli_progress_count(shown, label, iters, iters, iters);
}

int measure_runs(measure_fn run, measure_after_fn reset, void *ctx, int warmup, int iters, measure_flusher *fl,
                    double *t, a2amm_error *err)
{
    measure_contender c = {run, reset, ctx, t, A2AMM_OK, {0, ""}};
    measure_interleaved(&c, 1, warmup, iters, fl);
    if (c.rc) *err = c.err;
    return c.rc;
}

