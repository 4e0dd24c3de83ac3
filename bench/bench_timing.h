/* What the benchmarks share: cache flushes, timed repetitions, JSON output. */
#ifndef A2AMM_CLI_BENCH_TIMING_H
#define A2AMM_CLI_BENCH_TIMING_H

#include <stddef.h>
#include <stdint.h>

#include "a2amm.h"
#include "common/pool.h"

/* A pass over `bytes` (twice the last-level cache), split over the pool's
 * threads so every core's private caches are evicted too. bytes == 0: no
 * flushing. */
typedef struct bench_flusher {
    pool *pool;
    volatile uint8_t *buf;
    size_t bytes;
} bench_flusher;

void bench_flush_caches(bench_flusher *f);

/* One timed call of a contender, and (optionally) what undoes it untimed. */
typedef int (*bench_run_fn)(void *ctx, a2amm_error *err);
typedef void (*bench_reset_fn)(void *ctx);

/* `warmup` untimed calls, then `iters` calls each after a cache flush;
 * their times go to t[iters]. */
int bench_time_runs(bench_run_fn run, bench_reset_fn reset, void *ctx, int warmup, int iters, bench_flusher *fl,
                    double *t, a2amm_error *err);

/* One contender of an interleaved timing: its call, its times [iters], and
 * its first failure (after which it is left out of the rounds). */
typedef struct bench_contender {
    bench_run_fn run;
    bench_reset_fn after; /* or NULL: untimed, after each call (e.g. to stop a peer's spinning threads) */
    void *ctx;
    double *t;
    int rc;
    a2amm_error err;
} bench_contender;

/*
 * `warmup` untimed calls of each contender, then `iters` rounds, each
 * timing every contender still without failure once, after a cache flush,
 * starting with a different one every round. On a shared machine a slow
 * phase then hits every contender alike, and their ratios stay fair.
 */
void bench_time_interleaved(bench_contender *c, int n, int warmup, int iters, bench_flusher *fl);

#endif
