/* A fixed thread pool with a run-and-join call; the caller works too. */
#include "common/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/error.h"

struct pool {
    int nthreads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t start, done;
    unsigned long generation; /* bumped for every pool_run */
    int busy;                 /* workers still inside this generation */
    int quit;
    pool_task_fn fn;
    void *arg;
    int ntasks;
    atomic_int next;          /* next task to hand out */
};

static void run_tasks(pool *p)
{
    for (;;) {
        int t = atomic_fetch_add(&p->next, 1);
        if (t >= p->ntasks) return;
        p->fn(p->arg, t);
    }
}

static void *worker(void *vp)
{
    pool *p = vp;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->generation == seen) pthread_cond_wait(&p->start, &p->mu);
        if (p->quit) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        run_tasks(p);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int pool_create(int nthreads, pool **out, a2amm_error *err)
{
    *out = NULL;
    if (nthreads < 1) nthreads = 1;
    pool *p = calloc(1, sizeof *p);
    if (!p) return a2amm_fail(err, A2AMM_E_NOMEM, "thread pool: out of memory");
    p->nthreads = nthreads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start, NULL);
    pthread_cond_init(&p->done, NULL);
    p->threads = calloc((size_t)nthreads, sizeof *p->threads);
    if (!p->threads) {
        pool_destroy(p);
        return a2amm_fail(err, A2AMM_E_NOMEM, "thread pool: out of memory");
    }
    for (int i = 1; i < nthreads; i++) {
        if (pthread_create(&p->threads[i], NULL, worker, p) != 0) {
            p->nthreads = i; /* destroy joins the ones that started */
            pool_destroy(p);
            return a2amm_fail(err, A2AMM_E_SYS, "thread pool: cannot start thread %d of %d", i, nthreads);
        }
    }
    *out = p;
    return A2AMM_OK;
}

void pool_destroy(pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; p->threads && i < p->nthreads; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->start);
    pthread_cond_destroy(&p->done);
    free(p->threads);
    free(p);
}

int pool_threads(const pool *p) { return p->nthreads; }

void pool_run(pool *p, pool_task_fn fn, void *arg, int ntasks)
{
    if (ntasks <= 0) return;
    if (p->nthreads == 1 || ntasks == 1) {
        for (int t = 0; t < ntasks; t++) fn(arg, t);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->ntasks = ntasks;
    atomic_store(&p->next, 0);
    p->busy = p->nthreads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);
    run_tasks(p);
    pthread_mutex_lock(&p->mu);
    while (p->busy > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

int pool_cpu_count(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
