/*
 * Tests of the comm layer's shm transport: symmetric allocation, put / get
 * between every pair of ranks, put-with-signal ordering through a ring of
 * reused slots, concurrent signal_add, repeated barriers, timeouts, and the
 * launcher's handling of a rank that fails, exits early, is killed (kill -9)
 * or outlives the safety limit: messages, exit statuses, no process and no
 * /dev/shm entry left behind. Ranks report a broken expectation by failing
 * the world (RANK_REQUIRE) or, once it has failed, by a non-zero exit.
 */
#include "check.h"
#include "comm/comm.h"

#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RANK_REQUIRE(ctx, cond, ...)                                                     \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "rank %d: %s:%d: %s failed: ", comm_rank(ctx), __FILE__,     \
                    __LINE__, #cond);                                                    \
            fprintf(stderr, __VA_ARGS__);                                                \
            fputc('\n', stderr);                                                         \
            return comm_fail(ctx, A2AMM_E_MISMATCH, "%s:%d: %s failed", __FILE__,        \
                             __LINE__, #cond);                                           \
        }                                                                                \
    } while (0)

#define RANK_OK(ctx, call)                                                               \
    do {                                                                                 \
        a2amm_error e_;                                                                  \
        int s_ = (call);                                                                 \
        if (s_ != A2AMM_OK) {                                                            \
            fprintf(stderr, "rank %d: %s:%d: %s -> %d: %s\n", comm_rank(ctx), __FILE__,  \
                    __LINE__, #call, s_, e_.msg);                                        \
            return s_;                                                                   \
        }                                                                                \
    } while (0)

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static double seconds_since(int64_t start_ns) { return (double)(comm_now_ns() - start_ns) / 1e9; }

/* Creates a world, runs it, destroys it; checks every child is gone. */
static int run_world(int nranks, comm_rank_fn fn, void *arg, const comm_launch_options *opt,
                     comm_rank_outcome *outcomes, a2amm_error *err)
{
    comm_world *world;
    comm_rank_outcome local[16];
    if (!outcomes)
        outcomes = local;
    int status = comm_world_create(nranks, 1 << 20, &world, err);
    CHECK(status == A2AMM_OK, "comm_world_create(%d): %s", nranks, err->msg);
    if (status != A2AMM_OK)
        return status;
    status = comm_launch(world, fn, arg, opt, outcomes, err);
    comm_world_destroy(world);
    for (int r = 0; r < nranks; r++) {
        errno = 0;
        CHECK(outcomes[r].pid > 0 && kill(outcomes[r].pid, 0) == -1 && errno == ESRCH,
              "rank %d (pid %d) is still there after comm_launch returned", r,
              (int)outcomes[r].pid);
    }
    return status;
}

/* Runs on (at most) the first two CPUs of this process while `on`. */
static void limit_to_two_cpus(int on, cpu_set_t *saved)
{
    if (!on) {
        sched_setaffinity(0, sizeof *saved, saved);
        return;
    }
    sched_getaffinity(0, sizeof *saved, saved);
    cpu_set_t two;
    CPU_ZERO(&two);
    for (int cpu = 0, n = 0; cpu < CPU_SETSIZE && n < 2; cpu++)
        if (CPU_ISSET(cpu, saved)) {
            CPU_SET(cpu, &two);
            n++;
        }
    sched_setaffinity(0, sizeof two, &two);
}

/* ---- symmetric allocation, put and get ---------------------------------- */
#define BLOCK 1000

static uint8_t pattern(int src, int dst, size_t i)
{
    return (uint8_t)(src * 31 + dst * 7 + i * 13 + (i >> 8));
}

static int rank_put_get(comm_ctx *ctx, void *unused)
{
    (void)unused;
    int me = comm_rank(ctx), R = comm_nranks(ctx);
    int64_t deadline = comm_deadline_after(10);
    void *tiny, *eight, *page;
    uint64_t *table;
    uint8_t *inbox, *exposed, buf[BLOCK];
    RANK_OK(ctx, comm_alloc(ctx, 3, 1, &tiny, &e_));
    RANK_OK(ctx, comm_alloc(ctx, 100, 8, &eight, &e_));
    RANK_OK(ctx, comm_alloc(ctx, 64, 4096, &page, &e_));
    RANK_OK(ctx, comm_alloc(ctx, (size_t)R * 4 * sizeof *table, 0, (void **)&table, &e_));
    RANK_OK(ctx, comm_alloc(ctx, (size_t)R * BLOCK, 0, (void **)&inbox, &e_));
    RANK_OK(ctx, comm_alloc(ctx, BLOCK, 0, (void **)&exposed, &e_));
    uint64_t mine[4] = {comm_sym_offset(ctx, tiny), comm_sym_offset(ctx, eight),
                        comm_sym_offset(ctx, page), comm_sym_offset(ctx, inbox)};
    RANK_REQUIRE(ctx, mine[1] % 8 == 0 && mine[2] % 4096 == 0 && mine[2] > mine[1],
                 "offsets %llu %llu", (unsigned long long)mine[1], (unsigned long long)mine[2]);
    for (size_t i = 0; i < BLOCK; i++)
        exposed[i] = pattern(me, 99, i);
    for (int pe = 0; pe < R; pe++) {
        RANK_OK(ctx, comm_put(ctx, table + 4 * me, mine, sizeof mine, pe, &e_));
        for (size_t i = 0; i < BLOCK; i++)
            buf[i] = pattern(me, pe, i);
        RANK_OK(ctx, comm_put(ctx, inbox + (size_t)me * BLOCK, buf, BLOCK, pe, &e_));
    }
    RANK_OK(ctx, comm_barrier(ctx, deadline, &e_));
    for (int src = 0; src < R; src++) {
        RANK_REQUIRE(ctx, memcmp(table + 4 * src, mine, sizeof mine) == 0,
                     "rank %d's allocations are at other offsets than mine", src);
        for (size_t i = 0; i < BLOCK; i++)
            RANK_REQUIRE(ctx, inbox[src * BLOCK + i] == pattern(src, me, i),
                         "byte %zu from rank %d", i, src);
        RANK_OK(ctx, comm_get(ctx, buf, exposed, BLOCK, src, &e_));
        const uint8_t *direct = comm_ptr(ctx, exposed, src);
        RANK_REQUIRE(ctx, direct != NULL, "no direct pointer to rank %d", src);
        for (size_t i = 0; i < BLOCK; i++)
            RANK_REQUIRE(ctx, buf[i] == pattern(src, 99, i) && direct[i] == buf[i],
                         "byte %zu got from rank %d", i, src);
    }
    /* Wrong uses are refused with a message. */
    a2amm_error e;
    void *none;
    RANK_REQUIRE(ctx, comm_alloc(ctx, 2 << 20, 0, &none, &e) == A2AMM_E_NOMEM &&
                 strstr(e.msg, "heap full") && none == NULL, "%s", e.msg);
    RANK_REQUIRE(ctx, comm_alloc(ctx, 8, 24, &none, &e) == A2AMM_E_INVAL, "%s", e.msg);
    RANK_REQUIRE(ctx, comm_put(ctx, inbox, buf, 8, R, &e) == A2AMM_E_INVAL, "%s", e.msg);
    RANK_REQUIRE(ctx, comm_put(ctx, buf, buf, 8, 0, &e) == A2AMM_E_INVAL &&
                 strstr(e.msg, "not inside"), "%s", e.msg);
    RANK_REQUIRE(ctx, comm_ptr(ctx, buf, 0) == NULL, "a direct pointer to non-symmetric memory");
    return comm_barrier(ctx, deadline, NULL);
}

static void test_put_get(void)
{
    static const int counts[] = {1, 2, 3, 4, 8};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        int R = counts[i];
        cpu_set_t saved;
        if (R == 8)
            limit_to_two_cpus(1, &saved);
        a2amm_error err = {0};
        int status = run_world(R, rank_put_get, NULL, NULL, NULL, &err);
        if (R == 8)
            limit_to_two_cpus(0, &saved);
        CHECK(status == A2AMM_OK, "put/get with %d ranks: %s", R, err.msg);
    }
}

/* ---- put_signal through a ring of slots ---------------------------------- */
#define DEPTH 4
#define SLOT_WORDS 512
#define RING_ITEMS 3000

static int rank_ring(comm_ctx *ctx, void *unused)
{
    (void)unused;
    int me = comm_rank(ctx), R = comm_nranks(ctx);
    int next = (me + 1) % R, prev = (me + R - 1) % R;
    int64_t deadline = comm_deadline_after(15);
    uint64_t *slots, *ready, *released, buf[SLOT_WORDS];
    RANK_OK(ctx, comm_alloc(ctx, sizeof buf * DEPTH, 0, (void **)&slots, &e_));
    RANK_OK(ctx, comm_alloc(ctx, DEPTH * sizeof(uint64_t), 0, (void **)&ready, &e_));
    RANK_OK(ctx, comm_alloc(ctx, DEPTH * sizeof(uint64_t), 0, (void **)&released, &e_));
    for (uint64_t item = 0; item < RING_ITEMS; item++) {
        int slot = (int)(item % DEPTH);
        /* Send item to next, once next has released what was in the slot. */
        if (item >= DEPTH)
            RANK_OK(ctx, comm_signal_wait_until(ctx, &released[slot], COMM_CMP_GE,
                                                item - DEPTH + 1, deadline, NULL, &e_));
        for (int j = 0; j < SLOT_WORDS; j++)
            buf[j] = item * 1000003u + (uint64_t)j + ((uint64_t)me << 48);
        if (item % 2) /* both ways of moving ready[slot] to item + 1 */
            RANK_OK(ctx, comm_put_signal(ctx, slots + slot * SLOT_WORDS, buf, sizeof buf,
                                         &ready[slot], item + 1, COMM_SIGNAL_SET, next, &e_));
        else
            RANK_OK(ctx, comm_put_signal(ctx, slots + slot * SLOT_WORDS, buf, sizeof buf,
                                         &ready[slot], item < DEPTH ? item + 1 : DEPTH,
                                         COMM_SIGNAL_ADD, next, &e_));
        /* Receive item from prev, check all of it, release the slot. */
        comm_set_doing(ctx, "ring item %llu slot %d from rank %d", (unsigned long long)item,
                       slot, prev);
        RANK_OK(ctx, comm_signal_wait_until(ctx, &ready[slot], COMM_CMP_EQ, item + 1, deadline,
                                            NULL, &e_));
        const uint64_t *got = slots + slot * SLOT_WORDS;
        for (int j = 0; j < SLOT_WORDS; j++)
            RANK_REQUIRE(ctx, got[j] == item * 1000003u + (uint64_t)j + ((uint64_t)prev << 48),
                         "item %llu word %d is stale", (unsigned long long)item, j);
        RANK_OK(ctx, comm_signal_set(ctx, &released[slot], item + 1, prev, &e_));
    }
    return comm_barrier(ctx, deadline, NULL);
}

static void test_put_signal_ring(void)
{
    for (int R = 2; R <= 4; R += 2) {
        a2amm_error err = {0};
        int status = run_world(R, rank_ring, NULL, NULL, NULL, &err);
        CHECK(status == A2AMM_OK, "put_signal ring with %d ranks: %s", R, err.msg);
    }
}

/* ---- signal_add from every rank; repeated barriers ----------------------- */
#define ADDS 500
#define ROUNDS 300

static int rank_signal_add(comm_ctx *ctx, void *unused)
{
    (void)unused;
    int me = comm_rank(ctx), R = comm_nranks(ctx);
    int64_t deadline = comm_deadline_after(15);
    uint64_t *counter, expected = (uint64_t)ADDS * (uint64_t)(R * (R + 1) / 2), seen = 0;
    RANK_OK(ctx, comm_alloc(ctx, sizeof *counter, 8, (void **)&counter, &e_));
    for (int i = 0; i < ADDS; i++)
        for (int pe = 0; pe < R; pe++)
            RANK_OK(ctx, comm_signal_add(ctx, counter, (uint64_t)me + 1, (pe + me + i) % R, &e_));
    RANK_OK(ctx, comm_signal_wait_until(ctx, counter, COMM_CMP_GE, expected, deadline, &seen, &e_));
    RANK_OK(ctx, comm_barrier(ctx, deadline, &e_));
    RANK_REQUIRE(ctx, seen == expected && comm_signal_fetch(ctx, counter) == expected,
                 "counter %llu, expected %llu", (unsigned long long)seen,
                 (unsigned long long)expected);
    return A2AMM_OK;
}

static int rank_barriers(comm_ctx *ctx, void *unused)
{
    (void)unused;
    int me = comm_rank(ctx), R = comm_nranks(ctx);
    int64_t deadline = comm_deadline_after(15);
    uint64_t *table;
    RANK_OK(ctx, comm_alloc(ctx, (size_t)R * sizeof *table, 0, (void **)&table, &e_));
    for (uint64_t round = 1; round <= ROUNDS; round++) {
        for (int pe = 0; pe < R; pe++)
            RANK_OK(ctx, comm_put(ctx, &table[me], &round, sizeof round, pe, &e_));
        RANK_OK(ctx, comm_barrier(ctx, deadline, &e_));
        for (int r = 0; r < R; r++)
            RANK_REQUIRE(ctx, table[r] == round, "round %llu: rank %d's entry is %llu",
                         (unsigned long long)round, r, (unsigned long long)table[r]);
        RANK_OK(ctx, comm_barrier(ctx, deadline, &e_));
    }
    return A2AMM_OK;
}

static void test_signal_add_and_barriers(void)
{
    cpu_set_t saved;
    limit_to_two_cpus(1, &saved);
    a2amm_error err = {0};
    int status = run_world(8, rank_signal_add, NULL, NULL, NULL, &err);
    CHECK(status == A2AMM_OK, "signal_add from 8 ranks: %s", err.msg);
    status = run_world(8, rank_barriers, NULL, NULL, NULL, &err);
    CHECK(status == A2AMM_OK, "%d barriers of 8 ranks: %s", 2 * ROUNDS, err.msg);
    limit_to_two_cpus(0, &saved);
    status = run_world(3, rank_barriers, NULL, NULL, NULL, &err);
    CHECK(status == A2AMM_OK, "%d barriers of 3 ranks: %s", 2 * ROUNDS, err.msg);
}

/* ---- timeouts ----------------------------------------------------------- */
static int rank_timeouts(comm_ctx *ctx, void *unused)
{
    (void)unused;
    uint64_t *never, *release, seen = 99;
    RANK_OK(ctx, comm_alloc(ctx, 8, 8, (void **)&never, &e_));
    RANK_OK(ctx, comm_alloc(ctx, 8, 8, (void **)&release, &e_));
    if (comm_rank(ctx) == 1) { /* stays out of the barrier until rank 0 is done */
        comm_set_doing(ctx, "keeping out of the barrier");
        RANK_OK(ctx, comm_signal_wait_until(ctx, release, COMM_CMP_EQ, 1,
                                            comm_deadline_after(10), NULL, &e_));
        return A2AMM_OK;
    }
    a2amm_error e;
    comm_set_doing(ctx, "waiting for the signal nobody sends");
    int64_t start = comm_now_ns();
    int status = comm_signal_wait_until(ctx, never, COMM_CMP_GE, 5, comm_deadline_after(0.2),
                                        &seen, &e);
    double waited = seconds_since(start);
    RANK_REQUIRE(ctx, status == A2AMM_E_TIMEOUT && waited >= 0.19 && waited < 5.0 && seen == 0,
                 "status %d after %.3f s, seen %llu: %s", status, waited,
                 (unsigned long long)seen, e.msg);
    RANK_REQUIRE(ctx, strstr(e.msg, "rank 0:") && strstr(e.msg, "signal at heap offset 0x0 >= 5") &&
                 strstr(e.msg, "last seen 0") && strstr(e.msg, "nobody sends"), "%s", e.msg);

    start = comm_now_ns();
    status = comm_barrier(ctx, comm_deadline_after(0.2), &e);
    waited = seconds_since(start);
    RANK_REQUIRE(ctx, status == A2AMM_E_TIMEOUT && waited < 5.0, "status %d: %s", status, e.msg);
    RANK_REQUIRE(ctx, strstr(e.msg, "rank 0: barrier 1") && strstr(e.msg, "1 of 2 ranks") &&
                 strstr(e.msg, "rank 1 (keeping out of the barrier; blocked on signal"),
                 "%s", e.msg);
    return comm_signal_set(ctx, release, 1, 1, NULL);
}

static void test_timeouts(void)
{
    a2amm_error err = {0};
    int64_t start = comm_now_ns();
    int status = run_world(2, rank_timeouts, NULL, NULL, NULL, &err);
    CHECK(status == A2AMM_OK, "timeouts: %s", err.msg);
    CHECK(seconds_since(start) < 8.0, "the timeout test took %.2f s", seconds_since(start));
}

/* ---- failures ----------------------------------------------------------- */
/*
 * Bounds on wall-clock time, generous for a loaded 2-core machine: a failure
 * reaches every rank within FAILURE_SEEN_S, far below the deadline of the
 * waits it ends (WAITER_DEADLINE_S) and the 20 s a stubborn rank loops, so
 * a run within it was ended by the failure, not by a wait running out.
 */
#define FAILURE_SEEN_S 8.0
#define WAITER_DEADLINE_S 30
enum failure {
    FAIL_BY_COMM_FAIL, FAIL_BY_RETURN, FAIL_BY_EXIT, FAIL_BY_KILL, FAIL_BY_HANG, FAIL_BY_TIMEOUT
};
struct failure_test {
    enum failure how;
    int failing_rank, stubborn_rank; /* stubborn: ignores the failure */
};

static int rank_failure(comm_ctx *ctx, void *arg)
{
    const struct failure_test *t = arg;
    int me = comm_rank(ctx);
    uint64_t *never;
    int64_t *fail_time;
    RANK_OK(ctx, comm_alloc(ctx, 8, 8, (void **)&never, &e_));
    RANK_OK(ctx, comm_alloc(ctx, 8, 8, (void **)&fail_time, &e_));
    RANK_OK(ctx, comm_barrier(ctx, comm_deadline_after(10), &e_));
    if (me == t->failing_rank) {
        comm_set_doing(ctx, "failing on purpose, way %d", (int)t->how);
        sleep_ms(30);
        int64_t now = comm_now_ns();
        for (int pe = 0; pe < comm_nranks(ctx); pe++)
            RANK_OK(ctx, comm_put(ctx, fail_time, &now, sizeof now, pe, &e_));
        comm_quiet(ctx);
        switch (t->how) {
        case FAIL_BY_COMM_FAIL: return comm_fail(ctx, A2AMM_E_IO, "the test's disk is on fire");
        case FAIL_BY_RETURN: return A2AMM_E_FORMAT;
        case FAIL_BY_EXIT: _exit(0);
        case FAIL_BY_KILL: raise(SIGKILL); break;
        case FAIL_BY_HANG: break;
        case FAIL_BY_TIMEOUT:
            return comm_signal_wait_until(ctx, never, COMM_CMP_NE, 0, comm_deadline_after(0.1),
                                          NULL, NULL);
        }
    }
    if (me == t->stubborn_rank || (me == t->failing_rank && t->how == FAIL_BY_HANG)) {
        comm_set_doing(ctx, "ignoring everyone in a loop");
        for (int i = 0; i < 2000; i++)
            sleep_ms(10);
        return A2AMM_OK;
    }
    a2amm_error e;
    comm_set_doing(ctx, "waiting for the failure");
    int status =
        comm_signal_wait_until(ctx, never, COMM_CMP_NE, 0, comm_deadline_after(WAITER_DEADLINE_S), NULL, &e);
    double since_failure = (double)(comm_now_ns() - *fail_time) / 1e9;
    char rank_name[16];
    snprintf(rank_name, sizeof rank_name, "rank %d", t->failing_rank);
    if (status != A2AMM_E_PEER || since_failure > FAILURE_SEEN_S || !strstr(e.msg, rank_name) ||
        !strstr(e.msg, "stopped waiting until signal")) {
        fprintf(stderr, "rank %d: status %d %.3f s after the failure: %s\n", me, status,
                since_failure, e.msg);
        return A2AMM_E_MISMATCH; /* the world has failed already: the exit code tells */
    }
    return status;
}

/* Runs a 4-rank world where rank 2 fails `how`; returns the launch status. */
static int run_failure(enum failure how, int stubborn_rank, double timeout_s,
                       comm_rank_outcome *outcomes, a2amm_error *err, double *seconds)
{
    struct failure_test t = {how, 2, stubborn_rank};
    comm_launch_options opt = {timeout_s, 0.5, 0, NULL};
    int64_t start = comm_now_ns();
    int status = run_world(4, rank_failure, &t, &opt, outcomes, err);
    *seconds = seconds_since(start);
    return status;
}

/* The ranks other than skip1 and skip2 saw the failure and left; rank 2
 * alone is named as having failed first. */
static void check_waiters_left(const comm_rank_outcome *o, int skip1, int skip2, const char *what)
{
    for (int r = 0; r < 4; r++)
        CHECK(o[r].failed_first == (r == 2), "%s: rank %d failed_first is %d", what, r,
              o[r].failed_first);
    for (int r = 0; r < 4; r++)
        if (r != skip1 && r != skip2)
            CHECK(o[r].exit_code == -A2AMM_E_PEER && o[r].status == A2AMM_E_PEER &&
                  !o[r].killed_by_launcher, "%s: rank %d exit %d signal %d", what, r,
                  o[r].exit_code, o[r].term_signal);
}

static void test_failures(void)
{
    comm_rank_outcome o[4];
    a2amm_error err = {0};
    double took;

    int status = run_failure(FAIL_BY_COMM_FAIL, -1, 0, o, &err, &took);
    CHECK(status == A2AMM_E_IO && strstr(err.msg, "rank 2: the test's disk is on fire"),
          "comm_fail: status %d: %s", status, err.msg);
    CHECK(o[2].status == A2AMM_E_IO && o[2].exit_code == -A2AMM_E_IO, "comm_fail: rank 2 exit %d",
          o[2].exit_code);
    check_waiters_left(o, 2, -1, "comm_fail");
    CHECK(took < FAILURE_SEEN_S, "comm_fail: the run took %.2f s", took);

    status = run_failure(FAIL_BY_RETURN, -1, 0, o, &err, &took);
    CHECK(status == A2AMM_E_FORMAT && strstr(err.msg, "rank 2: returned -6 (bad file content) "
          "while failing on purpose, way 1"), "return: status %d: %s", status, err.msg);
    check_waiters_left(o, 2, -1, "return");

    status = run_failure(FAIL_BY_EXIT, -1, 0, o, &err, &took);
    CHECK(status == A2AMM_E_PEER && strstr(err.msg, "exited with code 0 before its rank function "
          "returned, while failing on purpose"), "exit: status %d: %s", status, err.msg);
    check_waiters_left(o, 2, -1, "exit");

    /* A rank's own wait times out and it returns that error as it is. */
    status = run_failure(FAIL_BY_TIMEOUT, -1, 0, o, &err, &took);
    CHECK(status == A2AMM_E_TIMEOUT && strstr(err.msg, "rank 2: timed out waiting until signal "
          "at heap offset 0x0 != 0 (last seen 0; waited 0.") &&
          strstr(err.msg, "while failing on purpose, way 5"), "timeout: status %d: %s", status,
          err.msg);
    CHECK(o[2].status == A2AMM_E_TIMEOUT, "timeout: rank 2's status is %d", o[2].status);
    check_waiters_left(o, 2, -1, "timeout");

    /* kill -9, with rank 3 ignoring it: the launcher must kill rank 3. */
    status = run_failure(FAIL_BY_KILL, 3, 0, o, &err, &took);
    CHECK(status == A2AMM_E_PEER && strstr(err.msg, "rank 2 (pid") &&
          strstr(err.msg, "was killed by signal 9 (Killed) while failing on purpose, way 3") &&
          strstr(err.msg, "rank 3 did not stop in time and was killed while ignoring everyone"),
          "kill: status %d: %s", status, err.msg);
    CHECK(o[2].term_signal == SIGKILL && !o[2].killed_by_launcher && o[2].exit_code == -1,
          "kill: rank 2 signal %d", o[2].term_signal);
    CHECK(o[3].term_signal == SIGKILL && o[3].killed_by_launcher, "kill: rank 3 was not killed");
    check_waiters_left(o, 2, 3, "kill");
    CHECK(took < FAILURE_SEEN_S, "kill: the run took %.2f s", took);

    /* Every rank waits or loops forever: the safety limit ends the run. */
    status = run_failure(FAIL_BY_HANG, -1, 0.3, o, &err, &took);
    CHECK(status == A2AMM_E_TIMEOUT && strstr(err.msg, "outlived its 0.3 s limit") &&
          strstr(err.msg, "rank 0: waiting for the failure; blocked on signal") &&
          strstr(err.msg, "rank 2: ignoring everyone"), "hang: status %d: %s", status, err.msg);
    CHECK(o[2].killed_by_launcher && !o[0].killed_by_launcher && o[0].status == A2AMM_E_PEER,
          "hang: rank 2 was not killed, or rank 0 was");
    for (int r = 0; r < 4; r++)
        CHECK(!o[r].failed_first, "hang: rank %d is named as the first failure", r);
    CHECK(took < FAILURE_SEEN_S, "hang: the run took %.2f s", took);
}

/* ---- the world's own checks --------------------------------------------- */
static void test_world_arguments(void)
{
    comm_world *world;
    a2amm_error err;
    CHECK(comm_world_create(0, 4096, &world, &err) == A2AMM_E_INVAL && world == NULL, "0 ranks");
    CHECK(comm_world_create(2, 0, &world, &err) == A2AMM_E_INVAL, "empty heap");
    CHECK(comm_world_create(2, (size_t)64 << 30, &world, &err) == A2AMM_OK,
          "64 GiB heaps (never touched) should map: %s", err.msg);
    CHECK(comm_world_nranks(world) == 2, "nranks");
    comm_world_destroy(world);
}

/* a2amm's entries in /dev/shm (it maps memfds, so there should be none):
 * what else is there belongs to others and may come and go. */
static int count_dev_shm(void)
{
    DIR *dir = opendir("/dev/shm");
    int n = 0;
    if (!dir)
        return 0;
    for (struct dirent *d; (d = readdir(dir));)
        n += strncmp(d->d_name, "a2amm", 5) == 0;
    closedir(dir);
    return n;
}

int main(void)
{
    int shm_before = count_dev_shm();
    test_world_arguments();
    test_put_get();
    test_put_signal_ring();
    test_signal_add_and_barriers();
    test_timeouts();
    test_failures();
    CHECK(count_dev_shm() == shm_before, "/dev/shm had %d a2amm entries, now %d", shm_before,
          count_dev_shm());
    return check_summary("test_comm");
}
