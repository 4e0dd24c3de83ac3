/* How a2amm measures time, for perf mode and every benchmark alike: one
 * cache flusher, timed repetitions (the clock is cli_now, args.h). */
#ifndef A2AMM_CLI_MEASURE_H
#define A2AMM_CLI_MEASURE_H

#include <stddef.h>
#include <stdint.h>

#include "a2amm.h"
#include "common/pool.h"

/* A pass over `bytes` (twice the last-level cache), split over the pool's
 * threads (NULL: the caller's only) so every core's private caches are
 * evicted too. bytes == 0: no flushing. */
typedef struct measure_flusher {
    pool *pool;
    volatile uint8_t *buf;
    size_t bytes;
} measure_flusher;

/* The bytes a flush passes over when `sharers` processes flush at once
 * (each its share of twice the last-level cache, at least 8 MB). */
size_t measure_flush_bytes(int sharers);
/* A flusher of `bytes` over `workers` (may be NULL); A2AMM_E_NOMEM if its buffer cannot be had. */
int measure_flusher_init(measure_flusher *f, pool *workers, size_t bytes, a2amm_error *err);
void measure_flusher_free(measure_flusher *f);
void measure_flush(measure_flusher *f);

/* One timed call of a contender, and (optionally) what undoes it untimed. */
typedef int (*measure_fn)(void *ctx, a2amm_error *err);
typedef void (*measure_after_fn)(void *ctx);

/* `warmup` untimed calls, then `iters` calls each after a cache flush;
 * their times go to t[iters]. */
int measure_runs(measure_fn run, measure_after_fn reset, void *ctx, int warmup, int iters, measure_flusher *fl,
                    double *t, a2amm_error *err);

/* Progress for the timed loops below (see progress.h): "WHAT: repetition I of N" and the time
 * left; NULL turns it off. */
struct cli_progress;
void measure_show_progress(struct cli_progress *p, const char *what);

/* One contender of an interleaved timing: its call, its times [iters], and
 * its first failure (after which it is left out of the rounds). */
typedef struct measure_contender {
    measure_fn run;
    measure_after_fn after; /* or NULL: untimed, after each call (e.g. to stop a peer's spinning threads) */
    void *ctx;
    double *t;
    int rc;
    a2amm_error err;
} measure_contender;

/*
 * `warmup` untimed calls of each contender, then `iters` rounds, each
 * timing every contender still without failure once, after a cache flush,
 * starting with a different one every round. On a shared machine a slow
 * phase then hits every contender alike, and their ratios stay fair.
 */
void measure_interleaved(measure_contender *c, int n, int warmup, int iters, measure_flusher *fl);

#endif
