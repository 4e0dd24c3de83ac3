/*
 * The API under misuse, two ranks under a2amm_launch: what one rank does
 * differently from the other must be an error on every rank, named, within
 * seconds (never a wrong result, a crash or a wait to the deadline), and
 * what the header allows must work.
 *
 *  - a2amm_comm_alltoall with another block size on each rank;
 *  - ops destroyed in a different order on each rank (then made and run:
 *    the same bits as before); an op one rank destroyed while the other
 *    still calls it;
 *  - two identically configured ops called in swapped order (direct and
 *    put paths, fused and unfused);
 *  - two threads in one op at once, and in two collective calls;
 *  - a rank that returns 0 without the call the other waits in;
 *  - timeouts: NaN refused, a different timeout_s refused, a different
 *    threads allowed;
 *  - a2amm_comm_status before and after a failure;
 *  - one rank's refusal of its own arguments in a2amm_op_create,
 *    a2amm_moe_create and a2amm_moe_dispatch: the other rank's call returns
 *    A2AMM_E_PEER naming the rank and its reason;
 *  - a rank that returns a local call's error: the launch names the error.
 *
 * Ranks are processes: each writes what it saw into a shared report, and
 * the checks are made here, in the test's own process.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "a2amm.h"
#include "check.h"

enum { R = 2, M = 8, KR = 64, K = R * KR, N = 16 };

/* What each rank saw. */
typedef struct rank_report {
    int rc[4];          /* the statuses of the case's calls, in its order */
    double seconds;     /* how long the call that should fail took */
    int same;           /* outputs that should match did */
    int local_rc[2];    /* two threads: a2amm_op_use_weights and a2amm_op_set_observer during a call */
    char msg[4][1100];  /* the messages of those calls */
} rank_report;

typedef struct report {
    rank_report rank[R];
    int launch_rc;
    char launch_msg[1100];
} report;

static report *rep; /* shared with the ranks */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A rank's data: its A [R*M, KR] with scales, and its B [N, K] with scales. */
typedef struct rank_data {
    uint8_t a[R * M * KR], sa[R * M * KR / 32], b[N * K], sb[N * K / 32];
} rank_data;

static void fill(rank_data *d, int me)
{
    for (size_t i = 0; i < sizeof d->a; i++) d->a[i] = (uint8_t)((i * 13 + (size_t)me * 7) % 110);
    for (size_t i = 0; i < sizeof d->b; i++) d->b[i] = (uint8_t)((i * 7 + (size_t)me) % 120);
    memset(d->sa, 126, sizeof d->sa);
    memset(d->sb, 127, sizeof d->sb);
}

static a2amm_op_config config(a2amm_path path, a2amm_schedule schedule, double timeout_s)
{
    return (a2amm_op_config){.size = sizeof(a2amm_op_config), .max_m = M, .k = K, .n = N, .a_type = A2AMM_E4M3, .b_type = A2AMM_E4M3, .tile_m = 4,
                             .depth = 2, .threads = 1, .path = path, .timeout_s = timeout_s, .schedule = schedule};
}

/* Makes an op with this rank's weights; 0 or the status (err filled). */
static int make(a2amm_comm *comm, const a2amm_op_config *cfg, const rank_data *d, a2amm_op **op, a2amm_error *err)
{
    int rc = a2amm_op_create(comm, cfg, op, err);
    if (!rc) rc = a2amm_op_set_weights(*op, d->b, d->sb, K / 32, err);
    return rc;
}

/* Records a call's status and message as the report's entry i. */
static void note(rank_report *r, int i, int rc, const a2amm_error *err)
{
    r->rc[i] = rc;
    snprintf(r->msg[i], sizeof r->msg[i], "%s", rc ? err->msg : "");
}

/* Runs fn on R ranks (heap 16 MiB, the given launch timeout) into a fresh report. */
static void launch(a2amm_rank_fn fn, void *arg)
{
    memset(rep, 0, sizeof *rep);
    a2amm_error err = {0, ""};
    rep->launch_rc = a2amm_launch(R, fn, arg, &(a2amm_launch_options){.size = sizeof(a2amm_launch_options), .heap_bytes = 16u << 20, .timeout_s = 120},
                                  &err);
    snprintf(rep->launch_msg, sizeof rep->launch_msg, "%s", err.msg);
}

/* ---- a2amm_comm_alltoall with another block size on each rank ------------- */

static int rank_alltoall_sizes(a2amm_comm *comm, void *arg)
{
    (void)arg;
    int me = a2amm_comm_rank(comm);
    rank_report *r = &rep->rank[me];
    a2amm_error err = {0, ""};
    static uint8_t send[R * 128], recv[R * 128];
    memset(send, 0x5A, sizeof send);
    note(r, 0, a2amm_comm_status(comm, &err), &err);
    double t0 = now_s();
    note(r, 1, a2amm_comm_alltoall(comm, send, recv, me == 0 ? 64 : 128, 20, &err), &err);
    r->seconds = now_s() - t0;
    note(r, 2, a2amm_comm_status(comm, &err), &err); /* the first failure, for a caller to print */
    t0 = now_s();
    note(r, 3, a2amm_comm_barrier(comm, 20, &err), &err); /* a later collective call: the failure at once */
    r->seconds += now_s() - t0;
    return A2AMM_OK;
}

static void test_alltoall_sizes(void)
{
    launch(rank_alltoall_sizes, NULL);
    for (int k = 0; k < R; k++) {
        const rank_report *r = &rep->rank[k];
        CHECK(r->rc[0] == A2AMM_OK, "rank %d: a2amm_comm_status before any failure: %d %s", k, r->rc[0], r->msg[0]);
        CHECK(r->rc[1] != A2AMM_OK && strstr(r->msg[1], "block_bytes = ") && strstr(r->msg[1], "64") &&
                  strstr(r->msg[1], "128"),
              "alltoall of 64 and 128 bytes, rank %d: an error naming both sizes (got %d: %s)", k, r->rc[1],
              r->msg[1]);
        CHECK(r->seconds < 10, "rank %d: the alltoall's error took %.1f s", k, r->seconds);
        CHECK(r->rc[2] == A2AMM_E_INVAL && strstr(r->msg[2], "block_bytes = ") && strstr(r->msg[2], "128"),
              "rank %d: a2amm_comm_status after: the first failure (got %d: %s)", k, r->rc[2], r->msg[2]);
        CHECK(r->rc[3] == A2AMM_E_PEER && strstr(r->msg[3], "block_bytes = "),
              "rank %d: a collective call after the failure returns it (got %d: %s)", k, r->rc[3], r->msg[3]);
    }
}

/* ---- destroy order --------------------------------------------------------- */

enum destroy_case { DESTROY_SKEWED, DESTROY_WHILE_CALLED };

static int rank_destroy_order(a2amm_comm *comm, void *arg)
{
    enum destroy_case c = *(const enum destroy_case *)arg;
    int me = a2amm_comm_rank(comm);
    rank_report *r = &rep->rank[me];
    a2amm_error err = {0, ""};
    static rank_data d;
    fill(&d, me);
    a2amm_op_config cfg = config(A2AMM_PATH_DIRECT, A2AMM_SCHEDULE_FUSED, 20);
    uint16_t want[M * N], got[M * N];
    a2amm_op *a = NULL, *b = NULL, *c3 = NULL;
    int rc = make(comm, &cfg, &d, &a, &err);
    if (!rc) rc = make(comm, &cfg, &d, &b, &err);
    if (!rc) rc = a2amm_op_run(a, M, d.a, d.sa, want, &err);
    if (!rc) rc = a2amm_op_run(b, M, d.a, d.sa, got, &err);
    note(r, 0, rc, &err);
    if (rc) return rc;
    double t0 = now_s();
    if (c == DESTROY_SKEWED) {
        /* rank 0 destroys B before making C, rank 1 after */
        if (me == 0) a2amm_op_destroy(b);
        rc = make(comm, &cfg, &d, &c3, &err);
        if (me == 1) a2amm_op_destroy(b);
        note(r, 1, rc, &err);
        memset(got, 0, sizeof got);
        if (!rc) rc = a2amm_op_run(c3, M, d.a, d.sa, got, &err);
        note(r, 2, rc, &err);
        r->same = !rc && !memcmp(want, got, sizeof got);
        memset(got, 0, sizeof got);
        if (!rc) rc = a2amm_op_run(a, M, d.a, d.sa, got, &err);
        note(r, 3, rc, &err);
        r->same &= !rc && !memcmp(want, got, sizeof got);
    } else {
        /* rank 0 destroys B and makes C while rank 1 still calls B */
        if (me == 0) {
            a2amm_op_destroy(b);
            rc = make(comm, &cfg, &d, &c3, &err);
        } else {
            rc = a2amm_op_run(b, M, d.a, d.sa, got, &err);
            a2amm_op_destroy(b);
        }
        note(r, 1, rc, &err);
    }
    r->seconds = now_s() - t0;
    a2amm_op_destroy(c3);
    a2amm_op_destroy(a);
    return A2AMM_OK;
}

static void test_destroy_order(void)
{
    enum destroy_case c = DESTROY_SKEWED;
    launch(rank_destroy_order, &c);
    for (int k = 0; k < R; k++) {
        const rank_report *r = &rep->rank[k];
        CHECK(r->rc[0] == 0, "rank %d: two ops: %s", k, r->msg[0]);
        CHECK(r->rc[1] == 0, "rank %d: an op made after ops destroyed in another order on each rank: %s", k,
              r->msg[1]);
        CHECK(r->rc[2] == 0 && r->rc[3] == 0, "rank %d: its calls: %s / %s", k, r->msg[2], r->msg[3]);
        CHECK(r->same, "rank %d: the new op and the old one give other bits than before", k);
    }
    CHECK(rep->launch_rc == 0, "destroy order: the launch: %s", rep->launch_msg);

    c = DESTROY_WHILE_CALLED;
    launch(rank_destroy_order, &c);
    for (int k = 0; k < R; k++) {
        const rank_report *r = &rep->rank[k];
        CHECK(r->rc[1] != 0 && strstr(r->msg[1], "a2amm_op_run on op 2") && strstr(r->msg[1], "a2amm_op_create of op 3"),
              "rank %d: rank 0 makes op 3 while rank 1 still calls op 2, which rank 0 destroyed: an error naming "
              "both (got %d: %s)", k, r->rc[1], r->msg[1]);
        CHECK(r->seconds < 10, "rank %d: it took %.1f s", k, r->seconds);
    }
}

/* ---- two identical ops called in swapped order ----------------------------- */

static int rank_swapped(a2amm_comm *comm, void *arg)
{
    const a2amm_op_config *cfg = arg;
    int me = a2amm_comm_rank(comm);
    rank_report *r = &rep->rank[me];
    a2amm_error err = {0, ""};
    static rank_data d;
    fill(&d, me);
    uint16_t out[M * N];
    a2amm_op *x = NULL, *y = NULL;
    int rc = make(comm, cfg, &d, &x, &err);
    if (!rc) rc = make(comm, cfg, &d, &y, &err);
    note(r, 0, rc, &err);
    double t0 = now_s();
    if (!rc) note(r, 1, a2amm_op_run(me == 0 ? x : y, M, d.a, d.sa, out, &err), &err);
    if (!rc) note(r, 2, a2amm_op_run(me == 0 ? y : x, M, d.a, d.sa, out, &err), &err);
    r->seconds = now_s() - t0;
    a2amm_op_destroy(x);
    a2amm_op_destroy(y);
    return A2AMM_OK;
}

static void test_swapped_ops(void)
{
    static const struct {
        a2amm_path path;
        a2amm_schedule schedule;
        const char *name;
    } kinds[] = {{A2AMM_PATH_DIRECT, A2AMM_SCHEDULE_FUSED, "direct fused"},
                 {A2AMM_PATH_DIRECT, A2AMM_SCHEDULE_UNFUSED, "direct unfused"},
                 {A2AMM_PATH_PUT, A2AMM_SCHEDULE_FUSED, "put fused"},
                 {A2AMM_PATH_PUT, A2AMM_SCHEDULE_UNFUSED, "put unfused"}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        a2amm_op_config cfg = config(kinds[i].path, kinds[i].schedule, 30);
        launch(rank_swapped, &cfg);
        for (int k = 0; k < R; k++) {
            const rank_report *r = &rep->rank[k];
            CHECK(r->rc[0] == 0, "%s, rank %d: two ops: %s", kinds[i].name, k, r->msg[0]);
            CHECK(r->rc[1] != 0 && strstr(r->msg[1], "on op 1") && strstr(r->msg[1], "on op 2"),
                  "%s, rank %d: ops called in swapped order: an error naming both ops (got %d: %s)", kinds[i].name, k,
                  r->rc[1], r->msg[1]);
            CHECK(r->rc[2] != 0, "%s, rank %d: the second call fails too (got %d)", kinds[i].name, k, r->rc[2]);
            CHECK(r->seconds < 10, "%s, rank %d: the errors took %.1f s (timeout 30 s)", kinds[i].name, k, r->seconds);
        }
    }
}

/* ---- threads ------------------------------------------------------------- */

/* Rank 0's second thread, while its first is inside a call of the op. */
typedef struct intruder {
    a2amm_comm *comm;
    a2amm_op *op;
    rank_data *d;
    a2amm_weights *w;
    _Atomic int in_call, done;
} intruder;

/* The first thread's observer: at the call's first tile it lets the second thread try, and waits for it. */
static int hold_the_call(void *arg, const a2amm_event *ev)
{
    intruder *in = arg;
    if (ev->kind != A2AMM_EVENT_TILE || ev->tile != 0) return 0;
    atomic_store(&in->in_call, 1);
    double end = now_s() + 20;
    while (!atomic_load(&in->done) && now_s() < end) usleep(1000);
    return 0;
}

static void *intrude(void *arg)
{
    intruder *in = arg;
    rank_report *r = &rep->rank[0];
    a2amm_error err = {0, ""};
    uint16_t out[M * N];
    double end = now_s() + 20;
    while (!atomic_load(&in->in_call) && now_s() < end) usleep(1000);
    note(r, 1, a2amm_op_run(in->op, M, in->d->a, in->d->sa, out, &err), &err);
    note(r, 2, a2amm_op_set_weights(in->op, in->d->b, in->d->sb, K / 32, &err), &err);
    note(r, 3, a2amm_comm_barrier(in->comm, 5, &err), &err);
    r->local_rc[0] = a2amm_op_use_weights(in->op, in->w, &err);
    r->local_rc[1] = a2amm_op_set_observer(in->op, NULL, NULL, NULL);
    atomic_store(&in->done, 1);
    return NULL;
}

static int rank_two_threads(a2amm_comm *comm, void *arg)
{
    (void)arg;
    int me = a2amm_comm_rank(comm);
    rank_report *r = &rep->rank[me];
    a2amm_error err = {0, ""};
    static rank_data d;
    fill(&d, me);
    a2amm_op_config cfg = config(A2AMM_PATH_PUT, A2AMM_SCHEDULE_FUSED, 30);
    uint16_t out[M * N], again[M * N];
    a2amm_op *op = NULL;
    int rc = make(comm, &cfg, &d, &op, &err);
    static intruder in;
    in = (intruder){comm, op, &d, NULL, 0, 0};
    pthread_t t;
    int started = 0;
    if (!rc && me == 0) rc = a2amm_weights_create(d.b, d.sb, N, K, K / 32, A2AMM_E4M3, 1, &in.w, &err);
    if (!rc && me == 0) {
        rc = a2amm_op_set_observer(op, hold_the_call, &in, &err);
        started = !rc && pthread_create(&t, NULL, intrude, &in) == 0;
    }
    if (!rc) rc = a2amm_op_run(op, M, d.a, d.sa, out, &err);
    if (started) pthread_join(t, NULL);
    note(r, 0, rc, &err);
    /* the op and the communicator still work, with the same bits */
    if (!rc && me == 0) rc = a2amm_op_set_observer(op, NULL, NULL, &err);
    if (!rc) rc = a2amm_op_run(op, M, d.a, d.sa, again, &err);
    r->same = !rc && !memcmp(out, again, sizeof out);
    a2amm_op_destroy(op);
    a2amm_weights_destroy(in.w);
    return rc;
}

static void test_two_threads(void)
{
    launch(rank_two_threads, NULL);
    const rank_report *r = &rep->rank[0];
    CHECK(rep->launch_rc == 0, "two threads in one op: the launch: %d %s", rep->launch_rc, rep->launch_msg);
    CHECK(r->rc[0] == 0 && rep->rank[1].rc[0] == 0, "the first thread's call, and rank 1's: %s / %s", r->msg[0],
          rep->rank[1].msg[0]);
    CHECK(r->rc[1] == A2AMM_E_INVAL && strstr(r->msg[1], "op 1 is busy") && strstr(r->msg[1], "a2amm_op_run"),
          "a second thread's a2amm_op_run on the op is refused (got %d: %s)", r->rc[1], r->msg[1]);
    CHECK(r->rc[2] == A2AMM_E_INVAL && strstr(r->msg[2], "op 1 is busy"),
          "a2amm_op_set_weights during a call is refused (got %d: %s)", r->rc[2], r->msg[2]);
    CHECK(r->local_rc[0] == A2AMM_E_INVAL && r->local_rc[1] == A2AMM_E_INVAL,
          "a2amm_op_use_weights and a2amm_op_set_observer during a call are refused (got %d and %d)", r->local_rc[0],
          r->local_rc[1]);
    CHECK(r->rc[3] == A2AMM_E_INVAL && strstr(r->msg[3], "another thread is inside a collective call"),
          "a second thread's collective call on the communicator is refused (got %d: %s)", r->rc[3], r->msg[3]);
    CHECK(r->same && rep->rank[1].same, "after the refusals the op gives the same bits");
}

/* ---- a rank that returns without the call the other waits in -------------- */

static int rank_returns_early(a2amm_comm *comm, void *arg)
{
    (void)arg;
    int me = a2amm_comm_rank(comm);
    rank_report *r = &rep->rank[me];
    a2amm_error err = {0, ""};
    static rank_data d;
    fill(&d, me);
    a2amm_op_config cfg = config(A2AMM_PATH_DIRECT, A2AMM_SCHEDULE_FUSED, 30);
    uint16_t out[M * N];
    a2amm_op *op = NULL;
    int rc = make(comm, &cfg, &d, &op, &err);
    note(r, 0, rc, &err);
    if (!rc && me == 0) {
        double t0 = now_s();
        note(r, 1, a2amm_op_run(op, M, d.a, d.sa, out, &err), &err);
        r->seconds = now_s() - t0;
    }
    a2amm_op_destroy(op);
    return A2AMM_OK; /* rank 1: without the call */
}

static void test_returns_early(void)
{
    launch(rank_returns_early, NULL);
    const rank_report *r = &rep->rank[0];
    CHECK(r->rc[0] == 0 && rep->rank[1].rc[0] == 0, "the op: %s / %s", r->msg[0], rep->rank[1].msg[0]);
    CHECK(r->rc[1] == A2AMM_E_PEER && strstr(r->msg[1], "rank 1 ended (its function returned 0)"),
          "rank 1 returned without the call: rank 0 hears of it (got %d: %s)", r->rc[1], r->msg[1]);
    CHECK(r->seconds < 10, "rank 0 heard after %.1f s (the op's timeout is 30 s)", r->seconds);
    CHECK(strstr(r->msg[1], "rank 1 said last: a2amm_op_create of op 1: done") &&
              !strstr(r->msg[1], "rank 1 said last: a2amm_op_create of op 1: waiting"),
          "what rank 1 did last is not stale: %s", r->msg[1]);
    CHECK(rep->launch_rc == A2AMM_E_PEER && strstr(rep->launch_msg, "rank 1 ended"),
          "the launch fails naming rank 1: %d %s", rep->launch_rc, rep->launch_msg);
}

/* ---- one rank's refusal in a create or a MoE call: the other hears why, at once ---- */

enum refused_create { REFUSE_OP_CREATE, REFUSE_MOE_CREATE, REFUSE_MOE_DISPATCH, REFUSED_CREATES };

static int rank_refused_create(a2amm_comm *comm, void *arg)
{
    enum refused_create c = *(const enum refused_create *)arg;
    int me = a2amm_comm_rank(comm);
    rank_report *r = &rep->rank[me];
    a2amm_error err = {0, ""};
    a2amm_op_config cfg = config(A2AMM_PATH_DIRECT, A2AMM_SCHEDULE_FUSED, 30);
    a2amm_moe_config mc = A2AMM_MOE_CONFIG_INIT;
    mc.experts = 2, mc.topk = 1, mc.hidden = 64, mc.inter = 32, mc.max_tokens = 4, mc.threads = 1, mc.timeout_s = 30;
    a2amm_op *op = NULL;
    a2amm_moe *moe = NULL;
    a2amm_moe_batch *batch = NULL;
    double t0 = now_s();
    if (c == REFUSE_OP_CREATE) note(r, 0, a2amm_op_create(comm, me == 0 ? NULL : &cfg, &op, &err), &err);
    if (c == REFUSE_MOE_CREATE) note(r, 0, a2amm_moe_create(comm, me == 0 ? NULL : &mc, &moe, &err), &err);
    if (c == REFUSE_MOE_DISPATCH) {
        int rc = a2amm_moe_create(comm, &mc, &moe, &err);
        note(r, 1, rc, &err);
        if (!rc)
            note(r, 0, a2amm_moe_dispatch(moe, 0, NULL, NULL, 2, NULL, NULL, me == 0 ? NULL : &batch, &err), &err);
    }
    r->seconds = now_s() - t0;
    if (me == 0) note(r, 2, a2amm_comm_barrier(comm, 30, &err), &err); /* its next collective call */
    a2amm_moe_batch_destroy(batch);
    a2amm_moe_destroy(moe);
    a2amm_op_destroy(op);
    return A2AMM_OK;
}

static void test_refused_creates(void)
{
    static const char *const reason[REFUSED_CREATES] = {
        "rank 0: a2amm_op_create: comm, config and op must not be NULL (config is)",
        "rank 0: a2amm_moe_create: comm, config and moe must not be NULL (config is)",
        "rank 0: a2amm_moe_dispatch: rank 0: batch must not be NULL",
    };
    for (int c = 0; c < REFUSED_CREATES; c++) {
        launch(rank_refused_create, &c);
        const rank_report *r0 = &rep->rank[0], *r1 = &rep->rank[1];
        CHECK(r0->rc[0] == A2AMM_E_INVAL &&
                  strstr(r0->msg[0], reason[c] + strlen("rank 0: ")),
              "refusal %d: rank 0's own error (got %d: %s)", c, r0->rc[0], r0->msg[0]);
        CHECK(r1->rc[0] == A2AMM_E_PEER && strstr(r1->msg[0], reason[c]),
              "refusal %d: rank 1 gets A2AMM_E_PEER naming rank 0's reason (got %d: %s; expected: %s)", c, r1->rc[0],
              r1->msg[0], reason[c]);
        CHECK(r0->rc[2] == A2AMM_E_PEER, "refusal %d: rank 0's next collective call: %d %s", c, r0->rc[2], r0->msg[2]);
        CHECK(rep->launch_rc == A2AMM_E_INVAL && strstr(rep->launch_msg, reason[c]),
              "refusal %d: the launch names rank 0's reason: %d %s", c, rep->launch_rc, rep->launch_msg);
    }
}

/* ---- a rank that returns a local call's error: the launch says which ------ */

static int rank_local_error(a2amm_comm *comm, void *arg)
{
    int own = arg != NULL; /* rank 1 returns an error of its own, no library call's */
    a2amm_error err = {0, ""};
    if (a2amm_comm_rank(comm) == 1 && own) return A2AMM_E_INVAL;
    if (a2amm_comm_rank(comm) == 1) /* a local refusal, the communicator untouched: its function returns it */
        return a2amm_moe_set_weights(NULL, NULL, NULL, 0, NULL, NULL, 0, NULL);
    return a2amm_comm_barrier(comm, 30, &err) == A2AMM_E_PEER ? A2AMM_OK : A2AMM_E_INVAL;
}

static void test_local_error_named(void)
{
    launch(rank_local_error, NULL);
    CHECK(rep->launch_rc == A2AMM_E_INVAL && strstr(rep->launch_msg, "rank 1: returned -1 (invalid argument)") &&
              strstr(rep->launch_msg, "a2amm_moe_set_weights: moe and the four arrays must not be NULL"),
          "a rank that returned a local call's error: the launch names that error (got %d: %s)", rep->launch_rc,
          rep->launch_msg);
    /* an error of the launching thread is not the rank's: a rank returning its own error is not named with it */
    a2amm_error err = {0, ""};
    a2amm_moe_expert(NULL, 0, 0, NULL, NULL, 0, NULL, 0, &err);
    launch(rank_local_error, "own");
    CHECK(rep->launch_rc == A2AMM_E_INVAL && strstr(rep->launch_msg, "rank 1: returned -1 (invalid argument) while") &&
              !strstr(rep->launch_msg, "a2amm_moe_expert"),
          "a rank that returned an error of its own: not named with the launcher's last error (got %d: %s)",
          rep->launch_rc, rep->launch_msg);
}

/* ---- timeouts and threads across ranks ------------------------------------- */

enum config_case { TIMEOUT_DIFFERS, THREADS_DIFFER };

static int rank_configs(a2amm_comm *comm, void *arg)
{
    enum config_case c = *(const enum config_case *)arg;
    int me = a2amm_comm_rank(comm);
    rank_report *r = &rep->rank[me];
    a2amm_error err = {0, ""};
    static rank_data d;
    fill(&d, me);
    a2amm_op_config cfg = config(A2AMM_PATH_PUT, A2AMM_SCHEDULE_FUSED, 30);
    if (c == TIMEOUT_DIFFERS && me == 1) cfg.timeout_s = 40;
    if (c == THREADS_DIFFER && me == 1) cfg.threads = 2;
    uint16_t out[M * N], ref[M * N];
    a2amm_op *op = NULL, *one = NULL;
    int rc = make(comm, &cfg, &d, &op, &err);
    note(r, 0, rc, &err);
    if (!rc) rc = a2amm_op_run(op, M, d.a, d.sa, out, &err);
    cfg.threads = 1;
    if (!rc) rc = make(comm, &cfg, &d, &one, &err);
    if (!rc) rc = a2amm_op_run(one, M, d.a, d.sa, ref, &err);
    note(r, 1, rc, &err);
    r->same = !rc && !memcmp(out, ref, sizeof out);
    a2amm_op_destroy(op);
    a2amm_op_destroy(one);
    return A2AMM_OK;
}

static int rank_nan_timeout(a2amm_comm *comm, void *arg)
{
    (void)arg;
    int me = a2amm_comm_rank(comm);
    a2amm_error err = {0, ""};
    a2amm_op_config cfg = config(A2AMM_PATH_PUT, A2AMM_SCHEDULE_FUSED, NAN);
    a2amm_op *op = NULL;
    note(&rep->rank[me], 0, a2amm_op_create(comm, &cfg, &op, &err), &err);
    note(&rep->rank[me], 1, a2amm_comm_barrier(comm, NAN, &err), &err);
    a2amm_op_destroy(op);
    return A2AMM_OK;
}

static int rank_idle(a2amm_comm *comm, void *arg)
{
    (void)comm, (void)arg;
    return A2AMM_OK;
}

static void test_timeouts_and_threads(void)
{
    enum config_case c = TIMEOUT_DIFFERS;
    launch(rank_configs, &c);
    for (int k = 0; k < R; k++)
        CHECK(rep->rank[k].rc[0] != 0 && strstr(rep->rank[k].msg[0], "timeout_s = ") &&
                  strstr(rep->rank[k].msg[0], "30") && strstr(rep->rank[k].msg[0], "40"),
              "timeout_s 30 and 40, rank %d: an error naming both (got %d: %s)", k, rep->rank[k].rc[0],
              rep->rank[k].msg[0]);
    c = THREADS_DIFFER;
    launch(rank_configs, &c);
    for (int k = 0; k < R; k++) {
        CHECK(rep->rank[k].rc[0] == 0 && rep->rank[k].rc[1] == 0, "threads 1 and 2 (each rank's own), rank %d: %s %s",
              k, rep->rank[k].msg[0], rep->rank[k].msg[1]);
        CHECK(rep->rank[k].same, "threads 1 and 2, rank %d: the same bits as 1 thread everywhere", k);
    }

    launch(rank_nan_timeout, NULL);
    for (int k = 0; k < R; k++) {
        CHECK(rep->rank[k].rc[0] == A2AMM_E_INVAL && strstr(rep->rank[k].msg[0], "timeout_s"),
              "rank %d: an op with timeout_s NaN is refused (got %d: %s)", k, rep->rank[k].rc[0], rep->rank[k].msg[0]);
        CHECK(rep->rank[k].rc[1] == A2AMM_E_INVAL && strstr(rep->rank[k].msg[1], "timeout_s"),
              "rank %d: a barrier with timeout_s NaN is refused (got %d: %s)", k, rep->rank[k].rc[1],
              rep->rank[k].msg[1]);
    }
    a2amm_error err = {0, ""};
    double t0 = now_s();
    CHECK(a2amm_launch(R, rank_idle, NULL, &(a2amm_launch_options){.size = sizeof(a2amm_launch_options), .timeout_s = NAN}, &err) == A2AMM_E_INVAL &&
              strstr(err.msg, "timeout_s"), "a launch with timeout_s NaN is refused: %s", err.msg);
    CHECK(a2amm_launch(R, rank_idle, NULL, &(a2amm_launch_options){.size = sizeof(a2amm_launch_options), .stall_s = NAN}, &err) == A2AMM_E_INVAL &&
              strstr(err.msg, "stall_s"), "a launch with stall_s NaN is refused: %s", err.msg);
    CHECK(now_s() - t0 < 10, "the NaN launches took %.1f s", now_s() - t0);
}

int main(void)
{
    rep = mmap(NULL, sizeof *rep, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (rep == MAP_FAILED) return 1;
    test_alltoall_sizes();
    test_destroy_order();
    test_swapped_ops();
    test_two_threads();
    test_returns_early();
    test_timeouts_and_threads();
    test_refused_creates();
    test_local_error_named();
    munmap(rep, sizeof *rep);
    return check_summary("test_misuse");
}
