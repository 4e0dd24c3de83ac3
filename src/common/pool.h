/*
 * A small fixed thread pool: pool_run(fn, arg, ntasks) runs fn(arg, task)
 * for every task in 0..ntasks-1 over the pool's threads and the caller,
 * and returns when all are done. Which thread runs which task is not fixed,
 * so tasks must write disjoint memory; results must not depend on it.
 */
#ifndef A2AMM_COMMON_POOL_H
#define A2AMM_COMMON_POOL_H

#include "a2amm.h"

typedef struct pool pool;
typedef void (*pool_task_fn)(void *arg, int task);

/* A pool of nthreads workers in all (the caller counts as one: nthreads-1
 * threads are started). */
int pool_create(int nthreads, pool **out, a2amm_error *err);
void pool_destroy(pool *p);
int pool_threads(const pool *p);
void pool_run(pool *p, pool_task_fn fn, void *arg, int ntasks);

/* Which of its pool's threads runs this: 0 on the thread that calls
 * pool_run (and on any thread not a pool's), 1..nthreads-1 in the workers
 * (in the order they started). For traces of who ran what. */
int pool_thread_index(void);

/* The number of cores this process may run on. */
int pool_cpu_count(void);

#endif
