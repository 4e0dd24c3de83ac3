/*
 * A fixed thread pool with a run-and-join call; the caller works too.
 *
 * Workers and the caller spin briefly (POOL_SPIN_NS) before sleeping on the
 * condition variables: waking a sleeping thread costs tens of microseconds,
 * a tenth of a 512^3 matmul, while one tile's calls follow each other
 * closely. The spin is short enough to cost nothing when the pool idles.
 *
 * A sleeping worker woken by the caller tends to be queued on the caller's
 * own CPU (Linux's wake-affine placement), where it waits for the caller to
 * finish: measured on a 2-core VM, after a 3 ms pause both tasks of a
 * 0.5 ms two-task run ran on one CPU in 90 of 100 runs. So the workers may
 * run anywhere the process may except the CPU the caller last started a
 * run on (keep_off_callers_cpu; nothing changes where that leaves none).
 */
#include "common/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"

enum { POOL_SPIN_NS = 50000 };

struct pool {
    int nthreads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t start, done;
    atomic_ulong generation; /* bumped for every pool_run */
    atomic_int busy;         /* workers still inside this generation */
    atomic_int quit;
    pool_task_fn fn;
    void *arg;
    int ntasks;
    atomic_int next; /* next task to hand out */
    atomic_int started; /* workers that have taken their index */
    int kept_off;       /* the CPU the workers are kept off, or -1 */
    cpu_set_t allowed;  /* the creating thread's CPUs, which the workers inherit */
    int allowed_known;
};

static _Thread_local int thread_index; /* 0: not a worker */

int pool_thread_index(void) { return thread_index; }

static void run_tasks(pool *p)
{
    for (;;) {
        int t = atomic_fetch_add(&p->next, 1);
        if (t >= p->ntasks) return;
        p->fn(p->arg, t);
    }
}

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Spins up to POOL_SPIN_NS for a new generation (1) or gives up (0). */
static int spin_for_generation(atomic_ulong *generation, unsigned long seen)
{
    long long deadline = now_ns() + POOL_SPIN_NS;
    for (int i = 0;; i++) {
        if (atomic_load_explicit(generation, memory_order_acquire) != seen) return 1;
        if ((i & 63) == 63 && now_ns() > deadline) return 0;
        cpu_relax();
    }
}

/* Spins up to POOL_SPIN_NS for every worker to finish (1) or gives up (0). */
static int spin_for_idle(atomic_int *busy)
{
    long long deadline = now_ns() + POOL_SPIN_NS;
    for (int i = 0;; i++) {
        if (atomic_load_explicit(busy, memory_order_acquire) == 0) return 1;
        if ((i & 63) == 63 && now_ns() > deadline) return 0;
        cpu_relax();
    }
}

static void *worker(void *vp)
{
    pool *p = vp;
    thread_index = atomic_fetch_add(&p->started, 1) + 1;
    unsigned long seen = 0;
    for (;;) {
        if (!spin_for_generation(&p->generation, seen)) {
            pthread_mutex_lock(&p->mu);
            while (!atomic_load(&p->quit) && atomic_load(&p->generation) == seen)
                pthread_cond_wait(&p->start, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->quit)) break;
        seen = atomic_load(&p->generation);
        run_tasks(p);
        if (atomic_fetch_sub(&p->busy, 1) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

int pool_create(int nthreads, pool **out, a2amm_error *err)
{
    *out = NULL;
    if (nthreads < 1) nthreads = 1;
    pool *p = calloc(1, sizeof *p);
    if (!p) return a2amm_fail(err, A2AMM_E_NOMEM, "thread pool: out of memory");
    p->nthreads = nthreads;
    p->kept_off = -1;
    p->allowed_known = sched_getaffinity(0, sizeof p->allowed, &p->allowed) == 0;
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
    atomic_store(&p->quit, 1);
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

/*
 * Where the caller now runs on another CPU than at the last run: the
 * workers' affinity becomes the CPUs they started with less that one (one
 * syscall a worker, only when the caller moved). Where that leaves none,
 * or the caller runs outside them, the workers keep all of them.
 */
static void keep_off_callers_cpu(pool *p)
{
    const int cpu = sched_getcpu();
    if (!p->allowed_known || cpu < 0 || cpu >= CPU_SETSIZE || cpu == p->kept_off) return;
    cpu_set_t set = p->allowed;
    const int off = CPU_ISSET(cpu, &set) && CPU_COUNT(&set) >= 2;
    if (off) CPU_CLR(cpu, &set);
    else if (p->kept_off < 0) return; /* all of them already */
    for (int i = 1; i < p->nthreads; i++) pthread_setaffinity_np(p->threads[i], sizeof set, &set);
    p->kept_off = off ? cpu : -1;
}

void pool_run(pool *p, pool_task_fn fn, void *arg, int ntasks)
{
    if (ntasks <= 0) return;
    if (p->nthreads == 1 || ntasks == 1) {
        for (int t = 0; t < ntasks; t++) fn(arg, t);
        return;
    }
    keep_off_callers_cpu(p);
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->ntasks = ntasks;
    atomic_store(&p->next, 0);
    atomic_store(&p->busy, p->nthreads - 1);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);
    run_tasks(p);
    if (!spin_for_idle(&p->busy)) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->busy) > 0) pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
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
