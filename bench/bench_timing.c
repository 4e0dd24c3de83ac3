/* What the benchmarks share: cache flushes, timed repetitions, JSON output. */
#include <math.h>
#include <stdio.h>

#include "cli/args.h"
#include "bench/bench_timing.h"

static void flush_task(void *arg, int task)
{
    const bench_flusher *f = arg;
    int n = pool_threads(f->pool);
    size_t slice = (f->bytes / (size_t)n) & ~(size_t)63;
    size_t end = task == n - 1 ? f->bytes : (size_t)(task + 1) * slice;
    for (size_t i = (size_t)task * slice; i < end; i += 64) f->buf[i] = (uint8_t)(f->buf[i] + 1);
}

void bench_flush_caches(bench_flusher *f)
{
    if (f->bytes) pool_run(f->pool, flush_task, f, pool_threads(f->pool));
}


void bench_time_interleaved(bench_contender *c, int n, int warmup, int iters, bench_flusher *fl)
{
    for (int i = 0; i < n; i++)
        for (int w = 0; w < warmup && !c[i].rc; w++) {
            c[i].rc = c[i].run(c[i].ctx, &c[i].err);
            if (c[i].after) c[i].after(c[i].ctx);
        }
    for (int it = 0; it < iters; it++)
        for (int k = 0; k < n; k++) {
            bench_contender *x = &c[(it + k) % n];
            if (x->rc) continue;
            bench_flush_caches(fl);
            double t0 = cli_now();
            x->rc = x->run(x->ctx, &x->err);
            x->t[it] = cli_now() - t0;
            if (x->after) x->after(x->ctx);
        }
}

int bench_time_runs(bench_run_fn run, bench_reset_fn reset, void *ctx, int warmup, int iters, bench_flusher *fl,
                    double *t, a2amm_error *err)
{
    bench_contender c = {run, reset, ctx, t, A2AMM_OK, {0, ""}};
    bench_time_interleaved(&c, 1, warmup, iters, fl);
    if (c.rc) *err = c.err;
    return c.rc;
}

