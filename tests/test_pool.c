/*
 * The thread pool: every task runs exactly once, on the caller or a worker;
 * and the workers are kept off the CPU the caller runs on (a worker woken
 * by the caller was otherwise queued behind it on its CPU: common/pool.c),
 * checked by pinning the calling thread to each CPU in turn and reading a
 * worker's own affinity and CPU from inside a task. That part needs two
 * CPUs: with fewer the test reports a skip.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "check.h"
#include "common/error.h"
#include "common/pool.h"

enum { TASKS = 100, RUNS = 50, SKIPPED = 77 };

static atomic_int ran[TASKS];

static void count_task(void *arg, int t)
{
    (void)arg;
    atomic_fetch_add(&ran[t], 1);
}

static void test_every_task_once(void)
{
    pool *p = NULL;
    a2amm_error err;
    CHECK(pool_create(3, &p, &err) == 0 && p, "pool_create: %s", err.msg);
    if (!p) return;
    for (int run = 0; run < RUNS; run++) {
        for (int t = 0; t < TASKS; t++) atomic_store(&ran[t], 0);
        pool_run(p, count_task, NULL, 1 + run % TASKS);
        for (int t = 0; t < TASKS; t++)
            CHECK(atomic_load(&ran[t]) == (t < 1 + run % TASKS), "run %d: task %d ran %d times", run, t,
                  atomic_load(&ran[t]));
    }
    pool_destroy(p);
}

/* What the worker saw from inside its task. */
typedef struct seen {
    atomic_int started; /* tasks begun */
    int worker_ran, worker_cpu;
    cpu_set_t worker_mask;
} seen;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Two tasks that each wait (2 s at most) for the other to begin: the caller,
 * busy in one, cannot take the other, so a worker runs it. */
static void meet_task(void *arg, int t)
{
    (void)t;
    seen *s = arg;
    atomic_fetch_add(&s->started, 1);
    if (pool_thread_index() != 0) {
        s->worker_ran = 1;
        s->worker_cpu = sched_getcpu();
        sched_getaffinity(0, sizeof s->worker_mask, &s->worker_mask);
    }
    const double deadline = now_s() + 2.0;
    while (atomic_load(&s->started) < 2 && now_s() < deadline) {
    }
}

static int test_workers_off_callers_cpu(void)
{
    cpu_set_t all;
    if (sched_getaffinity(0, sizeof all, &all) != 0 || CPU_COUNT(&all) < 2) return 0;
    pool *p = NULL;
    a2amm_error err;
    CHECK(pool_create(2, &p, &err) == 0 && p, "pool_create: %s", err.msg);
    if (!p) return 1;
    int tried = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && tried < 4; cpu++) {
        if (!CPU_ISSET(cpu, &all)) continue;
        tried++;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        CHECK(sched_setaffinity(0, sizeof one, &one) == 0, "pinning the caller to CPU %d", cpu);
        seen s = {0};
        pool_run(p, meet_task, &s, 2);
        CHECK(s.worker_ran, "caller on CPU %d: no worker ran a task", cpu);
        if (!s.worker_ran) continue;
        CHECK(!CPU_ISSET(cpu, &s.worker_mask) && CPU_COUNT(&s.worker_mask) == CPU_COUNT(&all) - 1,
              "caller on CPU %d: the worker may run on %d CPUs%s (expected the other %d)", cpu,
              CPU_COUNT(&s.worker_mask), CPU_ISSET(cpu, &s.worker_mask) ? ", the caller's among them" : "",
              CPU_COUNT(&all) - 1);
        CHECK(s.worker_cpu != cpu, "caller on CPU %d: the worker ran there too", cpu);
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (c != cpu && CPU_ISSET(c, &all))
                CHECK(CPU_ISSET(c, &s.worker_mask), "caller on CPU %d: the worker lost CPU %d", cpu, c);
    }
    CHECK(sched_setaffinity(0, sizeof all, &all) == 0, "restoring the caller's CPUs");
    pool_destroy(p);
    return 1;
}

int main(void)
{
    test_every_task_once();
    int affinity_checked = test_workers_off_callers_cpu();
    if (!affinity_checked && check_failed == 0) {
        check_summary("test_pool");
        printf("SKIP: the workers' placement off the caller's CPU: this process may run on fewer than 2 CPUs\n");
        return SKIPPED;
    }
    return check_summary("test_pool");
}
