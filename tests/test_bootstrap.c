/*
 * A communicator made through the bootstrap interface (a2amm_comm_create),
 * from processes this test starts itself with an engine of its own (an
 * allgather and a barrier over a shared page), as an MPI job or a
 * framework's workers would: the op gives the same bits as under the
 * embedded launcher on the same data; a process killed inside the
 * collective call makes every other rank's call return A2AMM_E_PEER within
 * seconds, naming it; bad bootstraps are refused, as are two processes
 * that claim one rank; a rank that leaves (a2amm_comm_destroy) while the
 * others wait in a collective call ends their waits at once, naming it.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "a2amm.h"
#include "check.h"
#include "gen/gen.h"
#include "io/io.h"

enum { R = 3, M = 40, K = 3 * 64, N = 24, SLOT = 256 };

/* ---- the test's own engine: a shared page, an allgather and a barrier ---- */
typedef struct engine {
    _Atomic unsigned arrived, generation;
    unsigned char slot[R][SLOT];
} engine;

typedef struct engine_rank {
    engine *e;
    int rank;
} engine_rank;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int engine_barrier(void *arg)
{
    engine *e = ((engine_rank *)arg)->e;
    unsigned gen = atomic_load(&e->generation);
    if (atomic_fetch_add(&e->arrived, 1) + 1 == R) {
        atomic_store(&e->arrived, 0);
        atomic_fetch_add(&e->generation, 1);
        return 0;
    }
    double end = now_s() + 20;
    while (atomic_load(&e->generation) == gen)
        if (now_s() > end) return -1;
    return 0;
}

static int engine_allgather(void *arg, const void *mine, void *all, size_t bytes)
{
    engine_rank *er = arg;
    if (bytes > SLOT) return -1;
    memcpy(er->e->slot[er->rank], mine, bytes);
    if (engine_barrier(arg)) return -1;
    for (int r = 0; r < R; r++) memcpy((char *)all + (size_t)r * bytes, er->e->slot[r], bytes);
    return engine_barrier(arg); /* nobody overwrites a slot before all have read it */
}

/* ---- the data, and what the ranks report ---- */
typedef struct shared {
    uint16_t out[2][R][M * N]; /* [0]: bootstrap, [1]: embedded launcher */
    int rc[R];
    double seconds[R];
    char msg[R][1100];
} shared;

static op_shape shape = {M, K, N, R, A2AMM_E4M3, A2AMM_E4M3, OP_ALLTOALL_MATMUL};
static op_sizes sizes;
static io_rank_inputs in[R];
static shared *sh;

/* Makes an op on comm, runs one call into sh->out[which][me]; kills itself at tile 1 when asked. */
static int kill_at_tile(void *arg, const a2amm_event *ev)
{
    (void)arg;
    if (ev->tile == 1) raise(SIGKILL);
    return 0;
}

static int one_call(a2amm_comm *comm, int which, int victim)
{
    int me = a2amm_comm_rank(comm);
    a2amm_error err = {0, ""};
    a2amm_op_config cfg = {.size = sizeof(a2amm_op_config), .max_m = M, .k = K, .n = N, .a_type = A2AMM_E4M3, .b_type = A2AMM_E4M3, .tile_m = 8,
                           .path = A2AMM_PATH_PUT, .depth = 2, .threads = 1, .timeout_s = 30};
    a2amm_op *op = NULL;
    int rc = a2amm_op_create(comm, &cfg, &op, &err);
    if (!rc) rc = a2amm_op_set_weights(op, in[me].b, in[me].sb, sizes.sk, &err);
    if (!rc && me == victim) a2amm_op_set_observer(op, kill_at_tile, NULL, NULL);
    double t0 = now_s();
    if (!rc) rc = a2amm_op_run(op, M, in[me].a, in[me].sa, sh->out[which][me], &err);
    sh->seconds[me] = now_s() - t0;
    sh->rc[me] = rc;
    snprintf(sh->msg[me], sizeof sh->msg[me], "%s", err.msg);
    a2amm_op_destroy(op);
    return rc;
}

static int launched_rank(a2amm_comm *comm, void *arg)
{
    (void)arg;
    return one_call(comm, 1, -1);
}

/* Starts R processes of our own; each joins through the bootstrap and makes one call. */
static void run_bootstrapped(int victim)
{
    engine *e = mmap(NULL, sizeof *e, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(e, 0, sizeof *e);
    pid_t pids[R];
    for (int r = 0; r < R; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            engine_rank er = {e, r};
            a2amm_bootstrap bs = {r, R, &er, engine_allgather, engine_barrier};
            a2amm_comm *comm = NULL;
            a2amm_error err = {0, ""};
            int rc = a2amm_comm_create(&bs, 64u << 20, &comm, &err);
            if (rc) {
                sh->rc[r] = rc;
                snprintf(sh->msg[r], sizeof sh->msg[r], "create: %s", err.msg);
                _exit(1);
            }
            if (a2amm_comm_rank(comm) != r || a2amm_comm_size(comm) != R) _exit(2);
            rc = one_call(comm, 0, victim);
            a2amm_comm_destroy(comm);
            _exit(rc ? 1 : 0);
        }
    }
    for (int r = 0; r < R; r++) waitpid(pids[r], NULL, 0);
    munmap(e, sizeof *e);
}

static void test_same_bits(void)
{
    memset(sh, 0, sizeof *sh);
    memset(sh->out, 0xEE, sizeof sh->out);
    run_bootstrapped(-1);
    for (int r = 0; r < R; r++) CHECK(sh->rc[r] == 0, "bootstrap rank %d: %s", r, sh->msg[r]);
    a2amm_error err = {0, ""};
    CHECK(a2amm_launch(R, launched_rank, NULL, &(a2amm_launch_options){.size = sizeof(a2amm_launch_options), .heap_bytes = 64u << 20}, &err) == 0,
          "launch: %s", err.msg);
    for (int r = 0; r < R; r++)
        CHECK(!memcmp(sh->out[0][r], sh->out[1][r], sizeof sh->out[0][r]),
              "rank %d: the bootstrapped op's bits differ from the launched op's", r);
}

static void test_peer_killed(void)
{
    memset(sh, 0, sizeof *sh);
    double t0 = now_s();
    run_bootstrapped(1);
    double took = now_s() - t0;
    for (int r = 0; r < R; r++) {
        if (r == 1) continue;
        CHECK(sh->rc[r] == A2AMM_E_PEER, "rank %d: expected A2AMM_E_PEER after rank 1 died, got %d (%s)", r, sh->rc[r],
              sh->msg[r]);
        CHECK(strstr(sh->msg[r], "rank 1 (pid") && strstr(sh->msg[r], "died"), "rank %d's message names rank 1: %s",
              r, sh->msg[r]);
        CHECK(sh->seconds[r] < 10, "rank %d: its call ended %.1f s after it began (the deadline is 30 s)", r,
              sh->seconds[r]);
    }
    CHECK(took < 15, "the whole killed run took %.1f s", took);
}

/* ---- misuse: ranks claimed twice, a rank that leaves while the others wait ---- */

/* Process p joins as rank claim[p], its engine's allgather putting its words in place slot[p];
 * after a successful create it runs body (if any) and records what that returned. */
static void run_claims(const int claim[R], const int slot[R], int (*body)(a2amm_comm *comm, a2amm_error *err))
{
    engine *e = mmap(NULL, sizeof *e, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(e, 0, sizeof *e);
    pid_t pids[R];
    for (int p = 0; p < R; p++) {
        pids[p] = fork();
        if (pids[p] == 0) {
            engine_rank er = {e, slot[p]};
            a2amm_bootstrap bs = {claim[p], R, &er, engine_allgather, engine_barrier};
            a2amm_comm *comm = NULL;
            a2amm_error err = {0, ""};
            double t0 = now_s();
            int rc = a2amm_comm_create(&bs, 16u << 20, &comm, &err);
            if (!rc && body) {
                t0 = now_s();
                rc = body(comm, &err);
            }
            sh->rc[p] = rc;
            sh->seconds[p] = now_s() - t0;
            snprintf(sh->msg[p], sizeof sh->msg[p], "%s", err.msg);
            a2amm_comm_destroy(comm);
            _exit(0);
        }
    }
    for (int p = 0; p < R; p++) waitpid(pids[p], NULL, 0);
    munmap(e, sizeof *e);
}

static void test_rank_claimed_twice(void)
{
    /* the engine places each process's words by its own rank; two processes say rank 0 */
    static const int claims[R] = {0, 0, 2}, engine_places[R] = {0, 1, 2}, claimed_places[R] = {0, 0, 2};
    memset(sh, 0, sizeof *sh);
    run_claims(claims, engine_places, NULL);
    for (int p = 0; p < R; p++)
        CHECK(sh->rc[p] == A2AMM_E_INVAL && strstr(sh->msg[p], "two processes claim rank 0 (pids"),
              "process %d: two processes claim rank 0: refused at create (got %d: %s)", p, sh->rc[p], sh->msg[p]);
    /* the engine places them by the rank they claim: rank 1's place stays empty */
    memset(sh, 0, sizeof *sh);
    run_claims(claims, claimed_places, NULL);
    for (int p = 0; p < R; p++)
        CHECK(sh->rc[p] == A2AMM_E_INVAL && (strstr(sh->msg[p], "no process claimed rank 1") ||
                                             strstr(sh->msg[p], "two processes claim rank 0")),
              "process %d: rank 0 twice, rank 1 never: refused at create (got %d: %s)", p, sh->rc[p], sh->msg[p]);
}

/* Rank 1 leaves at once; the others wait for it in a barrier. */
static int leave_or_wait(a2amm_comm *comm, a2amm_error *err)
{
    if (a2amm_comm_rank(comm) == 1) return A2AMM_OK;
    return a2amm_comm_barrier(comm, 20, err);
}

static void test_peer_leaves(void)
{
    static const int ranks[R] = {0, 1, 2};
    memset(sh, 0, sizeof *sh);
    run_claims(ranks, ranks, leave_or_wait);
    for (int p = 0; p < R; p++) {
        if (p == 1) continue;
        CHECK(sh->rc[p] == A2AMM_E_PEER && strstr(sh->msg[p], "rank 1 ended (it left the communicator)"),
              "rank %d: rank 1 left while it waited: it hears at once (got %d: %s)", p, sh->rc[p], sh->msg[p]);
        CHECK(sh->seconds[p] < 10, "rank %d: heard after %.1f s (the barrier's timeout is 20 s)", p, sh->seconds[p]);
    }
}

static void test_bad_bootstrap(void)
{
    a2amm_error err = {0, ""};
    a2amm_comm *comm = (a2amm_comm *)&err;
    CHECK(a2amm_comm_create(NULL, 0, &comm, &err) == A2AMM_E_INVAL && comm == NULL, "NULL bootstrap refused");
    engine_rank er = {NULL, 0};
    a2amm_bootstrap bs = {3, 3, &er, engine_allgather, engine_barrier};
    CHECK(a2amm_comm_create(&bs, 0, &comm, &err) == A2AMM_E_INVAL && strstr(err.msg, "rank 3 of size 3"),
          "rank out of range refused: %s", err.msg);
    bs = (a2amm_bootstrap){0, 1, &er, NULL, engine_barrier};
    CHECK(a2amm_comm_create(&bs, 0, &comm, &err) == A2AMM_E_INVAL, "missing allgather refused");
    a2amm_comm_destroy(NULL);
}

int main(void)
{
    a2amm_error err;
    if (op_shape_check(&shape, &sizes, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    gen_options g = {GEN_DIST_NORMAL, 7, MX_SCALE_FLOOR};
    for (int r = 0; r < R; r++) {
        io_rank_inputs_alloc(&sizes, &in[r], &err);
        gen_rank_inputs(&shape, &sizes, &g, r, &in[r], &err);
    }
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    test_same_bits();
    test_peer_killed();
    test_rank_claimed_twice();
    test_peer_leaves();
    test_bad_bootstrap();
    for (int r = 0; r < R; r++) io_rank_inputs_free(&in[r]);
    return check_summary("test_bootstrap");
}
