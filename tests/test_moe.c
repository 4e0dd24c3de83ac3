/*
 * The MoE op over shared memory (a2amm_launch): every rank's outputs
 * against the fp64 evaluation of the contract's formulas within its bound
 * (moe_cases.h), for R = 1 to 4, E/R = 1 to 4, k = 1 to 8, both fp8 types,
 * uniform, skewed and empty routes (a rank with no tokens, tokens with no
 * expert, unused slots), several calls of one op with different token
 * counts; outputs near 1e-32 (W2's scales lowered) held to the bound's absolute
 * part, not a floor; the same bits when run again; every bad argument refused on its
 * rank naming token and slot, the others told; rows over a rank's room
 * refused on every rank, outputs untouched.
 */
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "gemm/gemm.h"
#include "moe_cases.h"
#include "mx/expf.h"
#include "mx/mx.h"
#include "op/moe.h"

typedef struct case_run {
    moe_case c;
    int64_t max_recv;
    int bad;          /* bad_call's case on rank 0 (0: none) */
    int fault;        /* rank 1 before its calls: FAULT_EXIT ends its process, FAULT_STALL sleeps past the timeout */
    double seconds[8]; /* how long each rank's calls took */
    uint16_t *outs;   /* shared: [R][calls][max_tokens][H] */
    int rc[8], after[8]; /* after: a call of no tokens once the case's calls are over */
    char msg[8][1100];
    char launch_msg[1100]; /* the launch's message where it failed */
} case_run;

static size_t outs_bytes(const moe_case *c)
{
    return sizeof(uint16_t) * (size_t)c->R * (size_t)c->calls * (size_t)(c->max_tokens * c->H);
}

/* Rank 0's bad calls (the others make a good one): expected text of its refusal. */
static const char *const BAD_TEXT[] = {
    NULL,
    "token 3, slot 1: expert 4 is out of range: expected 0 .. 3, or -1",
    "token 3, slot 1: expert 2 is already in slot 0",
    "token 3, slot 1: the weight of expert 1 is nan",
    "tokens must be 0 to max_tokens = 12 (got 13)",
};

static int bad_call(a2amm_comm *comm, a2amm_moe *m, const moe_case *c, int bad, a2amm_error *err)
{
    int64_t T = bad == 4 ? c->max_tokens + 1 : 5;
    uint8_t *x = calloc((size_t)(T * c->H), 1), *sx = malloc((size_t)(T * c->H / 32));
    int32_t idx[64];
    float w[64];
    uint16_t *out = calloc((size_t)(T * c->H), 2);
    memset(sx, 127, (size_t)(T * c->H / 32));
    for (int i = 0; i < T * c->k; i++) idx[i] = i % c->k, w[i] = 0.5f;
    if (bad == 1) idx[3 * c->k + 1] = c->E;
    if (bad == 2) idx[3 * c->k + 0] = 2, idx[3 * c->k + 1] = 2;
    if (bad == 3) w[3 * c->k + 1] = NAN;
    int rc = a2amm_moe_run(m, T, x, sx, c->H / 32, idx, w, out, err);
    (void)comm;
    free(x), free(sx), free(out);
    return rc;
}

enum { FAULT_NONE, FAULT_EXIT, FAULT_STALL };
enum { STALL_TIMEOUT_S = 1, STALL_SLEEP_S = 4 };

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int rank_case(a2amm_comm *comm, void *arg)
{
    case_run *run = arg;
    const moe_case *c = &run->c;
    int r = a2amm_comm_rank(comm);
    a2amm_error err = {0, ""};
    a2amm_moe *m = NULL;
    int rc = mc_make(comm, c, run->max_recv, run->fault ? STALL_TIMEOUT_S : 30, &m, &err);
    if (!rc && run->fault && r == 1) {
        if (run->fault == FAULT_EXIT) _exit(3); /* a rank that dies: the others' calls end, naming it */
        sleep(STALL_SLEEP_S);                   /* one that stalls: theirs end at the timeout */
    }
    double t0 = seconds_now();
    if (!rc && run->bad && r == 0) rc = bad_call(comm, m, c, run->bad, &err);
    else if (!rc) rc = mc_run_calls(comm, m, c, run->outs + (size_t)r * (size_t)c->calls * (size_t)(c->max_tokens * c->H), &err);
    run->seconds[r] = seconds_now() - t0;
    a2amm_error err2 = {0, ""};
    run->after[r] = m && (!rc || rc == A2AMM_E_SIZE) ? a2amm_moe_run(m, 0, NULL, NULL, 0, NULL, NULL, NULL, &err2) : -99;
    a2amm_moe_destroy(m);
    run->rc[r] = rc;
    snprintf(run->msg[r], sizeof run->msg[r], "%s", rc ? err.msg : "");
    return 0; /* each rank's status is checked by the test, not the launch */
}

static case_run *launch_case_in(const moe_case *c, int64_t max_recv, int bad, int fault, size_t heap_bytes,
                                int *launch_rc)
{
    case_run *run = mmap(NULL, sizeof *run, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(run, 0, sizeof *run);
    run->c = *c, run->max_recv = max_recv, run->bad = bad, run->fault = fault;
    run->outs = mmap(NULL, outs_bytes(c), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(run->outs, 0xEE, outs_bytes(c));
    a2amm_error err = {0, ""};
    a2amm_launch_options lo = {.size = sizeof lo, .heap_bytes = heap_bytes};
    *launch_rc = a2amm_launch(c->R, rank_case, run, &lo, &err);
    snprintf(run->launch_msg, sizeof run->launch_msg, "%s", *launch_rc ? err.msg : "");
    return run;
}

static case_run *launch_case(const moe_case *c, int64_t max_recv, int bad, int fault)
{
    int rc = 0;
    case_run *run = launch_case_in(c, max_recv, bad, fault, 64u << 20, &rc);
    /* a refused call fails the communicator: then the launch says so too */
    CHECK(rc == 0 || bad || max_recv || fault, "the launch of R=%d: %s", c->R, run->launch_msg);
    return run;
}

static void free_run(case_run *run)
{
    munmap(run->outs, outs_bytes(&run->c));
    munmap(run, sizeof *run);
}

static void test_cases(void)
{
    for (size_t i = 0; i < MC_NCASES; i++) {
        const moe_case *c = &MC_CASES[i];
        case_run *run = launch_case(c, 0, 0, 0);
        for (int r = 0; r < c->R; r++) CHECK(run->rc[r] == 0, "case %zu, rank %d: %s", i, r, run->msg[r]);
        double worst = 0;
        int64_t off = mc_check_all(c, run->outs, &worst);
        CHECK(off == 0, "case %zu (R=%d E=%d k=%d H=%lld I=%lld): %lld values off the fp64 bound (worst %.2f of it)",
              i, c->R, c->E, c->k, (long long)c->H, (long long)c->I, (long long)off, worst);
        printf("case %zu: R=%d E=%d k=%d H=%lld I=%lld route %d: within the bound (worst %.3f of it)\n", i, c->R, c->E,
               c->k, (long long)c->H, (long long)c->I, (int)c->route, worst);
        if (i == 4 || i == 7 || i == MC_FIRST_CHUNKED) { /* the same bits again, on 1 and on 3 threads a rank (the
                                                            last with rows enough for the partials' and the
                                                            combine's tasks) */
            for (int threads = 1; threads <= 3; threads += 2) {
                moe_case other = *c;
                other.threads = threads;
                case_run *again = launch_case(&other, 0, 0, 0);
                CHECK(!memcmp(run->outs, again->outs, outs_bytes(c)), "case %zu: other bits on %d threads", i,
                      threads);
                free_run(again);
            }
        }
        free_run(run);
    }
}

/* W2's scales 2^-105 lower than the cases': outputs near 1e-32, within the bound; zeros in their place are out of
 * it, since the bound's absolute part is the contract's A (about 2^-133 a rounding), not a floor above them. */
static void test_tiny_outputs(void)
{
    moe_case c = MC_CASES[1];
    c.s2_lower = 105;
    case_run *run = launch_case(&c, 0, 0, 0);
    for (int r = 0; r < c.R; r++) CHECK(run->rc[r] == 0, "tiny outputs, rank %d: %s", r, run->msg[r]);
    double worst = 0, most = 0;
    int64_t off = mc_check_all(&c, run->outs, &worst), values = 0;
    CHECK(off == 0, "tiny outputs: %lld values off the fp64 bound (worst %.2f of it)", (long long)off, worst);
    for (int r = 0; r < c.R; r++)
        for (int call = 0; call < c.calls; call++) {
            uint16_t *o = run->outs + ((size_t)r * (size_t)c.calls + (size_t)call) * (size_t)(c.max_tokens * c.H);
            const int64_t n = mc_tokens(&c, r, call) * c.H;
            for (int64_t i = 0; i < n; i++) most = fmax(most, fabs((double)mc_bf16(o[i])));
            memset(o, 0, sizeof *o * (size_t)n); /* zeros where the op wrote its values */
            values += n;
        }
    CHECK(values > 0 && most > 0 && most < 1e-30, "tiny outputs: expected values under 1e-30, the largest is %g", most);
    worst = 0;
    off = mc_check_all(&c, run->outs, &worst);
    CHECK(off > values / 2, "tiny outputs: zeros in place of values up to %g: only %lld of %lld off the bound (worst "
          "%.3g of it)", most, (long long)off, (long long)values, worst);
    printf("tiny outputs (up to %.3g): within the bound; zeros in their place: %lld of %lld values off it\n", most,
           (long long)off, (long long)values);
    free_run(run);
}

/* The overlap schedule's chunks against the unfused schedule's one pass: the same bits (and both within the
 * bound: test_cases ran the overlap one). */
static void test_schedules(void)
{
    for (size_t i = MC_FIRST_CHUNKED; i < MC_NCASES; i++) {
        moe_case fused = MC_CASES[i], unfused = MC_CASES[i];
        unfused.schedule = A2AMM_SCHEDULE_UNFUSED;
        case_run *a = launch_case(&fused, 0, 0, 0), *b = launch_case(&unfused, 0, 0, 0);
        int64_t most = 0; /* the call of most tokens: several chunks */
        for (int r = 0; r < fused.R; r++)
            for (int call = 0; call < fused.calls; call++)
                if (mc_tokens(&fused, r, call) > most) most = mc_tokens(&fused, r, call);
        CHECK(most > 128, "case %zu: a call of %lld tokens at most: not three chunks", i, (long long)most);
        for (int r = 0; r < fused.R; r++) CHECK(a->rc[r] == 0 && b->rc[r] == 0, "case %zu rank %d: %s %s", i, r,
                                               a->msg[r], b->msg[r]);
        CHECK(!memcmp(a->outs, b->outs, outs_bytes(&fused)), "case %zu: the fused schedule's bits differ from the "
              "unfused one's", i);
        printf("case %zu: fused (calls of up to %lld tokens) and unfused: the same bits\n", i, (long long)most);
        free_run(a), free_run(b);
    }
}

static void test_bad_arguments(void)
{
    const moe_case *c = &MC_CASES[1]; /* R=2, E=4, k=2, max_tokens 12 */
    for (int bad = 1; bad <= 4; bad++) {
        case_run *run = launch_case(c, 0, bad, 0);
        CHECK(run->rc[0] == A2AMM_E_INVAL && strstr(run->msg[0], BAD_TEXT[bad]), "bad call %d on rank 0: status %d: "
              "%s (expected: %s)", bad, run->rc[0], run->msg[0], BAD_TEXT[bad]);
        CHECK(run->rc[1] == A2AMM_E_PEER && strstr(run->msg[1], "rank 0"), "bad call %d: rank 1 got %d: %s", bad,
              run->rc[1], run->msg[1]);
        free_run(run);
    }
}

static void test_room(void)
{
    /* skewed: every token's first slot on expert 0 (rank 0's); a room of 3 rows is short on rank 0 */
    moe_case c = {2, 2, 1, 32, 32, 9, ROUTE_SKEWED, A2AMM_E4M3, A2AMM_E4M3, 1, 11, 0, A2AMM_SCHEDULE_FUSED, 0};
    int64_t rows = 0; /* tokens with a slot on rank 0: the rows it would receive */
    for (int r = 0; r < 2; r++) {
        int64_t T = mc_tokens(&c, r, 0);
        uint8_t x[9 * 32], sx[9];
        int32_t idx[9];
        float w[9];
        mc_inputs(&c, r, 0, T, x, sx, idx, w);
        for (int64_t t = 0; t < T; t++) rows += idx[t] == 0;
    }
    case_run *run = launch_case(&c, 3, 0, 0);
    char want[120];
    snprintf(want, sizeof want, "rank 0 would receive %lld rows", (long long)rows);
    for (int r = 0; r < 2; r++)
        CHECK(rows > 3 && run->rc[r] == A2AMM_E_SIZE && strstr(run->msg[r], want) && strstr(run->msg[r], "max_recv = 3"),
              "rank %d with too little room: status %d: %s (expected %s)", r, run->rc[r], run->msg[r], want);
    for (int r = 0; r < 2; r++)
        CHECK(run->after[r] == 0, "rank %d: a call after the refused one: status %d", r, run->after[r]);
    size_t untouched = 0, n = outs_bytes(&c) / 2;
    for (size_t i = 0; i < n; i++) untouched += run->outs[i] == 0xEEEE;
    CHECK(untouched == n, "a refused call wrote %zu output values", n - untouched);
    free_run(run);
}

/* Shared weights (a2amm_moe_weights): a decode-sized op (max_tokens 12) and a chunked one (200) on one
 * preparation give the bits of ops with their own; a preparation for too few rows, or of another shape, is
 * refused naming both. Per rank: 1 when all of it held. */
typedef struct shared_report {
    int ok, rc;
    char msg[1100];
} shared_report;

static int rank_shared(a2amm_comm *comm, void *arg)
{
    shared_report *rep = (shared_report *)arg + a2amm_comm_rank(comm);
    const moe_case *big = &MC_CASES[MC_FIRST_CHUNKED]; /* R = 2, E = 8, k = 3, max_tokens 200 */
    moe_case small = *big;
    small.max_tokens = 12, small.schedule = A2AMM_SCHEDULE_UNFUSED;
    const int r = a2amm_comm_rank(comm), local = big->E / big->R;
    const int64_t H = big->H, I = big->I, n13 = 2 * I * H, n2 = H * I;
    uint8_t *w13 = malloc((size_t)(local * n13)), *s13 = malloc((size_t)(local * n13 / 32));
    uint8_t *w2 = malloc((size_t)(local * n2)), *s2 = malloc((size_t)(local * n2 / 32));
    for (int le = 0; le < local; le++)
        mc_expert(big, r * local + le, w13 + le * n13, s13 + le * n13 / 32, w2 + le * n2, s2 + le * n2 / 32);
    a2amm_error err = {0, ""}, e2 = {0, ""};
    a2amm_moe_weights *shared = NULL, *too_few = NULL;
    a2amm_moe *own_big = NULL, *own_small = NULL, *on_big = NULL, *on_small = NULL;
    const size_t nb = (size_t)big->calls * (size_t)(big->max_tokens * H), ns = (size_t)small.calls * (size_t)(12 * H);
    uint16_t *o1 = calloc(nb, 2), *o2 = calloc(nb, 2), *o3 = calloc(ns, 2), *o4 = calloc(ns, 2);
    int rc = a2amm_moe_weights_create(local, H, I, big->b_type, (int64_t)big->R * big->max_tokens, w13, s13, H / 32, w2,
                                      s2, I / 32, &shared, &err);
    if (!rc) rc = a2amm_moe_weights_create(local, H, I, big->b_type, 12, w13, s13, H / 32, w2, s2, I / 32, &too_few, &err);
    if (!rc) rc = mc_make(comm, big, 0, 30, &own_big, &err);
    if (!rc) rc = mc_make(comm, &small, 0, 30, &own_small, &err);
    a2amm_moe_config cfg = A2AMM_MOE_CONFIG_INIT;
    cfg.experts = big->E, cfg.topk = big->k, cfg.hidden = H, cfg.inter = I, cfg.max_tokens = big->max_tokens;
    cfg.a_type = big->a_type, cfg.b_type = big->b_type, cfg.timeout_s = 30, cfg.schedule = big->schedule;
    if (!rc) rc = a2amm_moe_create(comm, &cfg, &on_big, &err);
    /* refused: prepared for 12 rows an expert, the op may give one 400 */
    int refused = !rc && a2amm_moe_use_weights(on_big, too_few, &e2) == A2AMM_E_INVAL &&
                  strstr(e2.msg, "prepared for 12 rows an expert") && strstr(e2.msg, "max_rows >= 400");
    if (!rc) rc = a2amm_moe_use_weights(on_big, shared, &err);
    cfg.max_tokens = 12, cfg.schedule = A2AMM_SCHEDULE_UNFUSED;
    if (!rc) rc = a2amm_moe_create(comm, &cfg, &on_small, &err);
    if (!rc) rc = a2amm_moe_use_weights(on_small, shared, &err);
    if (!rc) rc = mc_run_calls(comm, own_big, big, o1, &err);
    if (!rc) rc = mc_run_calls(comm, on_big, big, o2, &err);
    if (!rc) rc = mc_run_calls(comm, own_small, &small, o3, &err);
    if (!rc) rc = mc_run_calls(comm, on_small, &small, o4, &err);
    /* another shape: refused naming both */
    a2amm_moe_weights *other = NULL;
    int other_refused = 0;
    uint8_t *x13 = calloc((size_t)(local * 2 * n13), 1), *xs13 = calloc((size_t)(local * 2 * n13 / 32), 1);
    uint8_t *x2 = calloc((size_t)(local * 2 * n2), 1), *xs2 = calloc((size_t)(local * 2 * n2 / 32), 1);
    if (!rc && x13 && xs13 && x2 && xs2 && /* twice the inner size: arrays of that shape */
        a2amm_moe_weights_create(local, H, 2 * I, big->b_type, 400, x13, xs13, H / 32, x2, xs2, 2 * I / 32, &other,
                                 &e2) == 0)
        other_refused = a2amm_moe_use_weights(on_big, other, &e2) == A2AMM_E_INVAL && strstr(e2.msg, "inter 64") &&
                        strstr(e2.msg, "inter 32");
    free(x13), free(xs13), free(x2), free(xs2);
    rep->ok = !rc && refused && other_refused && !memcmp(o1, o2, nb * 2) && !memcmp(o3, o4, ns * 2);
    rep->rc = rc;
    snprintf(rep->msg, sizeof rep->msg, "%s", rc ? err.msg : e2.msg);
    a2amm_moe_destroy(own_big), a2amm_moe_destroy(own_small), a2amm_moe_destroy(on_big), a2amm_moe_destroy(on_small);
    a2amm_moe_weights_destroy(shared), a2amm_moe_weights_destroy(too_few), a2amm_moe_weights_destroy(other);
    free(w13), free(s13), free(w2), free(s2), free(o1), free(o2), free(o3), free(o4);
    return rc;
}

static void test_shared_weights(void)
{
    shared_report *rep = mmap(NULL, 2 * sizeof *rep, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(rep, 0, 2 * sizeof *rep);
    a2amm_error err = {0, ""};
    a2amm_launch_options lo = {.size = sizeof lo, .heap_bytes = 64u << 20};
    CHECK(a2amm_launch(2, rank_shared, rep, &lo, &err) == 0, "shared weights: the launch: %s", err.msg);
    for (int r = 0; r < 2; r++)
        CHECK(rep[r].ok, "shared weights, rank %d: two ops on one preparation, their bits and refusals: %d %s", r,
              rep[r].rc, rep[r].msg);
    munmap(rep, 2 * sizeof *rep);
}

/* The observer: a chunked call's events, in time order, one call's worth each: CALL around it; per chunk a
 * dispatch and a combine (EXCHANGE, slot 0 and 1), the experts (MATMUL) whose WORK events' rows add up to
 * theirs. Per rank: what was wrong, or "" */
typedef struct seen_events {
    a2amm_event ev[512];
    int n;
} seen_events;

static int collect(void *arg, const a2amm_event *ev)
{
    seen_events *s = arg;
    if (s->n < 512) s->ev[s->n] = *ev;
    s->n++;
    return -1; /* answers are ignored */
}

static const char *check_events(const seen_events *s, int64_t T, int chunks, int me)
{
    if (s->n < 2 || s->n > 512) return "too few or too many events";
    if (s->ev[0].kind != A2AMM_EVENT_CALL_BEGIN || s->ev[s->n - 1].kind != A2AMM_EVENT_CALL_END) return "CALL not around";
    if (s->ev[0].rows != T) return "CALL's rows are not the rank's tokens";
    int dispatch[4] = {0}, combine[4] = {0}, matmul[4] = {0};
    int64_t matmul_rows[4] = {0}, work_rows[4] = {0};
    for (int i = 0; i < s->n; i++) {
        const a2amm_event *e = &s->ev[i];
        if (e->rank != me || e->call != 1) return "an event of another rank or call";
        if (i && e->time_ns < s->ev[i - 1].time_ns) return "not in time order";
        if (e->tile >= chunks) return "a chunk past the call's";
        int c = e->tile < 0 ? 0 : (int)e->tile;
        if (e->kind == A2AMM_EVENT_EXCHANGE_END) (e->slot == 0 ? dispatch : combine)[c]++;
        if (e->kind == A2AMM_EVENT_MATMUL_END) matmul[c]++, matmul_rows[c] = e->rows;
        if (e->kind == A2AMM_EVENT_WORK) work_rows[c] += e->rows;
    }
    for (int c = 0; c < chunks; c++) {
        if (dispatch[c] != 1 || combine[c] != 1 || matmul[c] != 1) return "a chunk without its dispatch, experts, combine";
        if (work_rows[c] != matmul_rows[c]) return "the experts' WORK rows do not add up to the chunk's";
    }
    return "";
}

/* The schedules the observer test runs: overlap (two chunks), unfused, and fused by size on either side of
 * its rule (R * max_tokens * k / E / 2 rows an expert a chunk: 75, then 262 with max_tokens 700). */
enum { OBSERVE_RUNS = 4 };
static const char *const OBSERVE_NAMES[OBSERVE_RUNS] = {"overlap", "unfused", "fused, 75 rows an expert a chunk",
                                                        "fused, 262 rows an expert a chunk"};

typedef struct observe_report {
    char what[OBSERVE_RUNS][120];
} observe_report;

static int rank_observe(a2amm_comm *comm, void *arg)
{
    observe_report *rep = (observe_report *)arg + a2amm_comm_rank(comm);
    const moe_case *c = &MC_CASES[MC_FIRST_CHUNKED]; /* R 2, E 8, k 3, max_tokens 200, the overlap schedule */
    const int r = a2amm_comm_rank(comm);
    const int64_t H = c->H, T = 150 - 40 * r;
    uint8_t *x = malloc((size_t)(T * H)), *sx = malloc((size_t)(T * H / 32));
    int32_t *idx = malloc(sizeof *idx * (size_t)(T * c->k));
    float *w = malloc(sizeof *w * (size_t)(T * c->k));
    uint16_t *out = malloc(sizeof *out * (size_t)(T * H));
    seen_events *seen = calloc(1, sizeof *seen);
    mc_inputs(c, r, 0, T, x, sx, idx, w);
    a2amm_error err = {0, ""};
    for (int sched = 0; sched < OBSERVE_RUNS; sched++) {
        static const int chunks[OBSERVE_RUNS] = {2, 1, 1, 2};
        moe_case one = *c;
        one.schedule = sched == 0 ? A2AMM_SCHEDULE_OVERLAP : sched == 1 ? A2AMM_SCHEDULE_UNFUSED : A2AMM_SCHEDULE_FUSED;
        if (sched == 3) one.max_tokens = 700;
        a2amm_moe *m = NULL;
        seen->n = 0;
        int rc = mc_make(comm, &one, 0, 30, &m, &err);
        if (!rc) rc = a2amm_moe_set_observer(m, collect, seen, &err);
        if (!rc) rc = a2amm_moe_run(m, T, x, sx, H / 32, idx, w, out, &err);
        snprintf(rep->what[sched], sizeof rep->what[sched], "%.100s", rc ? err.msg : check_events(seen, T, chunks[sched], r));
        a2amm_moe_destroy(m);
    }
    free(x), free(sx), free(idx), free(w), free(out), free(seen);
    return 0;
}

static void test_observer(void)
{
    observe_report *rep = mmap(NULL, 2 * sizeof *rep, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(rep, 0xFF, 2 * sizeof *rep);
    CHECK(MC_CASES[MC_FIRST_CHUNKED].R == 2 && MC_CASES[MC_FIRST_CHUNKED].E == 8 && MC_CASES[MC_FIRST_CHUNKED].k == 3 &&
          MC_CASES[MC_FIRST_CHUNKED].max_tokens == 200, "observer: the case the schedules' rows are worked out for");
    a2amm_error err = {0, ""};
    a2amm_launch_options lo = {.size = sizeof lo, .heap_bytes = 64u << 20};
    CHECK(a2amm_launch(2, rank_observe, rep, &lo, &err) == 0, "observer: the launch: %s", err.msg);
    for (int r = 0; r < 2; r++)
        for (int sched = 0; sched < OBSERVE_RUNS; sched++)
            CHECK(rep[r].what[sched][0] == '\0', "observer, rank %d, %s schedule: %.100s", r, OBSERVE_NAMES[sched],
                  rep[r].what[sched]);
    munmap(rep, 2 * sizeof *rep);
}

/* `test_moe digests`: the digest of every rank's outputs of every case, as mpi_moe prints them over MPI
 * (tests/test_mpi.sh compares: the same bits on both transports). */
static int print_digests(void)
{
    for (size_t i = 0; i < MC_NCASES; i++) {
        const moe_case *c = &MC_CASES[i];
        case_run *run = launch_case(c, 0, 0, 0);
        for (int r = 0; r < c->R; r++)
            printf("case %zu rank %d: %s %016llx\n", i, r, run->rc[r] ? "failed" : "digest",
                   (unsigned long long)mc_digest(c, r, run->outs + (size_t)r * (size_t)c->calls *
                                                                (size_t)(c->max_tokens * c->H)));
        free_run(run);
    }
    return check_failed != 0;
}

/* A rank that dies before its call, or stalls past the timeout: the others' calls end, naming it. */
static void test_faults(void)
{
    const moe_case *c = &MC_CASES[1]; /* R=2 */
    case_run *run = launch_case(c, 0, 0, FAULT_EXIT);
    printf("rank 1 died: rank 0: %s\n", run->msg[0]);
    CHECK(run->rc[0] == A2AMM_E_PEER && strstr(run->msg[0], "rank 1") && run->seconds[0] < 10, "rank 1 died: rank "
          "0's call gave %d after %.1f s: %s", run->rc[0], run->seconds[0], run->msg[0]);
    free_run(run);
    /* a fused call (chunks on the exchanges' thread) whose peer dies: it ends too, naming it */
    run = launch_case(&MC_CASES[MC_FIRST_CHUNKED], 0, 0, FAULT_EXIT);
    CHECK(run->rc[0] == A2AMM_E_PEER && strstr(run->msg[0], "rank 1") && run->seconds[0] < 10, "rank 1 died before "
          "a fused call: rank 0's call gave %d after %.1f s: %s", run->rc[0], run->seconds[0], run->msg[0]);
    free_run(run);
    run = launch_case(c, 0, 0, FAULT_STALL);
    printf("rank 1 stalled: rank 0: %s\n", run->msg[0]);
    CHECK(run->rc[0] == A2AMM_E_TIMEOUT && run->seconds[0] < STALL_SLEEP_S, "rank 1 stalled: rank 0's call gave %d "
          "after %.1f s (timeout %d s): %s", run->rc[0], run->seconds[0], STALL_TIMEOUT_S, run->msg[0]);
    free_run(run);
}

/* ---- dispatch, the caller's experts, combine: the op's bits when the experts compute as the op does ---- */

/* Expert e's y for n rows (codes [n, H], scales [n, H/32]): g and u by the kernel level's matmul, a =
 * bf16(silu(g) u), the kernel level's down projection: what the op computes, from the caller's side. */
static void caller_expert(const moe_case *c, int e, int64_t n, const uint8_t *codes, const uint8_t *scales, float *y)
{
    const int64_t H = c->H, I = c->I;
    uint8_t *w13 = malloc((size_t)(2 * I * H)), *s13 = malloc((size_t)(2 * I * H / 32));
    uint8_t *w2 = malloc((size_t)(H * I)), *s2 = malloc((size_t)(H * I / 32));
    mc_expert(c, e, w13, s13, w2, s2);
    gemm_isa isa;
    gemm_b *b = NULL;
    a2amm_error err;
    float *gu = malloc(sizeof *gu * (size_t)(n * 2 * I)), *a = malloc(sizeof *a * (size_t)(n * I));
    float **ys = malloc(sizeof *ys * (size_t)n);
    if (gemm_isa_select(&isa, &err) == 0 && gemm_b_prepare(isa, w13, s13, 2 * I, H, H / 32, c->b_type, &b, &err) == 0) {
        gemm_a_slab slab = {codes, scales, H, H / 32, c->a_type};
        gemm_multiply(b, &slab, n, 0, H, 0, 2 * I, gu, 2 * I);
        for (int64_t i = 0; i < n; i++) {
            for (int64_t k = 0; k < I; k++)
                a[i * I + k] = mx_bf16_to_f32(mx_f32_to_bf16(mx_silu(gu[i * 2 * I + k]) * gu[i * 2 * I + I + k]));
            ys[i] = y + i * H;
        }
        uint8_t *packed = malloc(moe_down_bytes(H, I));
        moe_down_pack(H, I, c->b_type, w2, I, s2, I / 32, packed);
        CHECK(moe_down_for(isa)(H, I, c->b_type, a, n, packed, ys) == 0, "the down projection: out of memory");
        free(packed);
    }
    gemm_b_free(b);
    free(w13), free(s13), free(w2), free(s2), free(gu), free(a), free(ys);
}

/* Expert e's y as a caller builds it from the public calls alone: a2amm_matmul_f32 (g and u), a2amm_swiglu,
 * a2amm_matmul_bf16a (the down projection). 0, or the first call's error. */
static int public_expert(const moe_case *c, int e, int64_t n, const uint8_t *codes, const uint8_t *scales, float *y,
                         a2amm_error *err)
{
    const int64_t H = c->H, I = c->I;
    uint8_t *w13 = malloc((size_t)(2 * I * H)), *s13 = malloc((size_t)(2 * I * H / 32));
    uint8_t *w2 = malloc((size_t)(H * I)), *s2 = malloc((size_t)(H * I / 32));
    float *gu = malloc(sizeof *gu * (size_t)(n * 2 * I));
    uint16_t *a = malloc(sizeof *a * (size_t)(n * I));
    mc_expert(c, e, w13, s13, w2, s2);
    a2amm_weights *wu = NULL;
    a2amm_bf16a_weights *wd = NULL;
    int rc = a2amm_weights_create(w13, s13, 2 * I, H, H / 32, c->b_type, 1, &wu, err);
    if (!rc) rc = a2amm_matmul_f32(wu, codes, H, scales, H / 32, n, c->a_type, gu, 2 * I, 2, err);
    for (int64_t i = 0; !rc && i < n; i++) a2amm_swiglu(gu + i * 2 * I, gu + i * 2 * I + I, I, a + i * I);
    if (!rc) rc = a2amm_bf16a_weights_create(w2, s2, H, I, I / 32, c->b_type, &wd, err);
    if (!rc) rc = a2amm_matmul_bf16a(wd, a, I, n, y, H, 2, err);
    a2amm_weights_destroy(wu);
    a2amm_bf16a_weights_destroy(wd);
    free(w13), free(s13), free(w2), free(s2), free(gu), free(a);
    return rc;
}

typedef struct pair_report {
    int rc, same, rows_ok, expert_same, public_same;
    char msg[1100];
} pair_report;

static int rank_pair(a2amm_comm *comm, void *arg)
{
    pair_report *rep = (pair_report *)arg + a2amm_comm_rank(comm);
    const moe_case *c = &MC_CASES[7]; /* R = 2, E = 32, k = 6 */
    const int r = a2amm_comm_rank(comm), local = c->E / c->R;
    const int64_t H = c->H, MT = c->max_tokens, T = mc_tokens(c, r, 0);
    uint8_t *x = malloc((size_t)(MT * H)), *sx = malloc((size_t)(MT * H / 32));
    int32_t *idx = malloc(sizeof *idx * (size_t)(MT * c->k));
    float *w = malloc(sizeof *w * (size_t)(MT * c->k)), *y[64] = {0};
    uint16_t *by_run = calloc((size_t)(MT * H), 2), *by_pair = calloc((size_t)(MT * H), 2);
    mc_inputs(c, r, 0, T, x, sx, idx, w);
    a2amm_error err = {0, ""};
    a2amm_moe *m = NULL;
    a2amm_moe_batch *batch = NULL;
    int rc = mc_make(comm, c, 0, 30, &m, &err);
    if (!rc) rc = a2amm_moe_run(m, T, x, sx, H / 32, idx, w, by_run, &err);
    if (!rc) rc = a2amm_moe_dispatch(m, T, x, sx, H / 32, idx, w, &batch, &err);
    int64_t total = 0;
    rep->rows_ok = 1, rep->expert_same = 1, rep->public_same = 1;
    for (int le = 0; !rc && le < local; le++) {
        int64_t n = 0;
        const uint8_t *codes = NULL, *scales = NULL;
        rc = a2amm_moe_batch_rows(batch, le, &n, &codes, &scales, &err);
        total += n;
        if (!rc && n) {
            y[le] = malloc(sizeof *y[le] * (size_t)(n * H));
            caller_expert(c, r * local + le, n, codes, scales, y[le]);
            /* the public a2amm_moe_expert: the same bits (the op's level against the portable down projection) */
            float *y2 = malloc(sizeof *y2 * (size_t)(n * H));
            a2amm_error e2 = {0, ""};
            rep->expert_same &= y2 && a2amm_moe_expert(m, le, n, codes, scales, H / 32, y2, H, &e2) == 0 &&
                                !memcmp(y2, y[le], sizeof *y2 * (size_t)(n * H));
            /* and from the public matmuls: the same bits */
            rep->public_same &= y2 && public_expert(c, r * local + le, n, codes, scales, y2, &e2) == 0 &&
                                !memcmp(y2, y[le], sizeof *y2 * (size_t)(n * H));
            free(y2);
        }
    }
    a2amm_error bad = {0, ""};
    rep->rows_ok &= a2amm_moe_batch_rows(batch, local, &total, NULL, NULL, &bad) == A2AMM_E_INVAL &&
                    strstr(bad.msg, "local experts 0 .. 15") != NULL;
    if (!rc) rc = a2amm_moe_combine(m, batch, (const float *const *)y, by_pair, &err);
    rep->same = !rc && !memcmp(by_run, by_pair, sizeof *by_run * (size_t)(T * H));
    a2amm_moe_batch_destroy(batch);
    a2amm_moe_destroy(m);
    for (int le = 0; le < local; le++) free(y[le]);
    free(x), free(sx), free(idx), free(w), free(by_run), free(by_pair);
    rep->rc = rc;
    snprintf(rep->msg, sizeof rep->msg, "%s", rc ? err.msg : "");
    return rc;
}

static void test_dispatch_combine(void)
{
    pair_report *rep = mmap(NULL, 2 * sizeof *rep, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(rep, 0, 2 * sizeof *rep);
    a2amm_error err = {0, ""};
    a2amm_launch_options lo = {.size = sizeof lo, .heap_bytes = 64u << 20};
    CHECK(a2amm_launch(2, rank_pair, rep, &lo, &err) == 0, "dispatch + combine: the launch: %s", err.msg);
    for (int r = 0; r < 2; r++) {
        CHECK(rep[r].rc == 0, "dispatch + combine, rank %d: %s", r, rep[r].msg);
        CHECK(rep[r].same, "rank %d: dispatch, the caller's experts and combine gave other bits than a2amm_moe_run", r);
        CHECK(rep[r].rows_ok, "rank %d: a batch's rows of an expert the rank does not hold were not refused", r);
        CHECK(rep[r].expert_same, "rank %d: a2amm_moe_expert gave other bits than the op's expert computation", r);
        CHECK(rep[r].public_same, "rank %d: experts from a2amm_matmul_f32, a2amm_swiglu and a2amm_matmul_bf16a gave "
              "other bits than the op's", r);
    }
    munmap(rep, 2 * sizeof *rep);
}

/* NULLs and out-of-range values of one rank's local calls and of a call refused before it is collective. */
static int rank_nulls(a2amm_comm *comm, void *arg)
{
    int *failed = arg;
    a2amm_error err = {0, ""};
    a2amm_moe *m = NULL;
    a2amm_moe_config bad = A2AMM_MOE_CONFIG_INIT;
    struct {
        int rc;
        const char *text;
    } cases[8];
    int n = 0;
    cases[n].rc = a2amm_moe_create(comm, NULL, &m, &err), cases[n++].text = "must not be NULL";
    bad.experts = 2, bad.topk = 33, bad.hidden = 64, bad.inter = 32, bad.max_tokens = 4;
    cases[n].rc = a2amm_moe_create(comm, &bad, &m, &err), cases[n++].text = "topk must be 1 to 32";
    bad.topk = 1, bad.schedule = (a2amm_schedule)7;
    cases[n].rc = a2amm_moe_create(comm, &bad, &m, &err), cases[n++].text = "schedule must be";
    /* the message shows max_recv as passed (0), not the R * max_tokens it stands for */
    bad.schedule = A2AMM_SCHEDULE_FUSED, bad.max_tokens = -1;
    cases[n].rc = a2amm_moe_create(comm, &bad, &m, &err), cases[n++].text = "max_tokens -1, max_recv 0,";
    for (int i = 0; i < n; i++)
        if (cases[i].rc != A2AMM_E_INVAL || !strstr(i + 1 == n ? err.msg : cases[i].text, cases[i].text))
            failed[0]++, fprintf(stderr, "create case %d: status %d: %s\n", i, cases[i].rc, err.msg);
    return 0;
}

static int rank_null_calls(a2amm_comm *comm, void *arg)
{
    int *failed = arg;
    const moe_case *c = &MC_CASES[0];
    a2amm_error err = {0, ""};
    a2amm_moe *m = NULL;
    int rc = mc_make(comm, c, 0, 30, &m, &err);
    uint8_t w[64] = {0};
    if (rc) failed[0]++, fprintf(stderr, "make: %s\n", err.msg);
    if (!rc && (a2amm_moe_set_weights(m, NULL, w, 2, w, w, 1, &err) != A2AMM_E_INVAL ||
                !strstr(err.msg, "must not be NULL")))
        failed[0]++, fprintf(stderr, "set_weights NULL: %s\n", err.msg);
    if (!rc && (a2amm_moe_set_weights(m, w, w, 1, w, w, 1, &err) != A2AMM_E_INVAL || !strstr(err.msg, "ld13")))
        failed[0]++, fprintf(stderr, "set_weights ld13: %s\n", err.msg);
    int64_t rows;
    if (a2amm_moe_batch_rows(NULL, 0, &rows, NULL, NULL, &err) != A2AMM_E_INVAL)
        failed[0]++, fprintf(stderr, "batch_rows NULL accepted\n");
    if (a2amm_moe_run(NULL, 0, NULL, NULL, 0, NULL, NULL, NULL, &err) != A2AMM_E_INVAL)
        failed[0]++, fprintf(stderr, "run on NULL accepted\n");
    a2amm_moe_batch_destroy(NULL);
    float y[64];
    if (a2amm_moe_expert(NULL, 0, 0, NULL, NULL, 0, NULL, 0, &err) != A2AMM_E_INVAL)
        failed[0]++, fprintf(stderr, "expert on NULL accepted\n");
    if (!rc && (a2amm_moe_expert(m, 0, 1, w, w, 1, y, 64, &err) != A2AMM_E_INVAL || !strstr(err.msg, "ldsx must")))
        failed[0]++, fprintf(stderr, "expert with a short ldsx: %s\n", err.msg);
    if (!rc && (a2amm_moe_expert(m, -1, 1, w, w, 2, y, 64, &err) != A2AMM_E_INVAL ||
                !strstr(err.msg, "local_expert must be one of the local experts")))
        failed[0]++, fprintf(stderr, "expert -1: %s\n", err.msg);
    if (!rc && (a2amm_moe_expert(m, 0, 1, NULL, w, 2, y, 64, &err) != A2AMM_E_INVAL || !strstr(err.msg, "NULL")))
        failed[0]++, fprintf(stderr, "expert with NULL codes: %s\n", err.msg);
    /* the calls of this session: observer, shared weights */
    if (a2amm_moe_set_observer(NULL, NULL, NULL, &err) != A2AMM_E_INVAL || !strstr(err.msg, "moe is NULL"))
        failed[0]++, fprintf(stderr, "set_observer on NULL: %s\n", err.msg);
    if (!rc && a2amm_moe_set_observer(m, NULL, NULL, &err) != A2AMM_OK) /* NULL removes it */
        failed[0]++, fprintf(stderr, "set_observer NULL fn: %s\n", err.msg);
    a2amm_moe_weights *mw = (a2amm_moe_weights *)1;
    if (a2amm_moe_weights_create(1, 64, 32, A2AMM_E4M3, 4, NULL, w, 2, w, w, 1, &mw, &err) != A2AMM_E_INVAL ||
        mw != NULL || !strstr(err.msg, "must not be NULL"))
        failed[0]++, fprintf(stderr, "weights_create with NULL w13: %s\n", err.msg);
    if (a2amm_moe_weights_create(1, 48, 32, A2AMM_E4M3, 4, w, w, 2, w, w, 1, &mw, &err) != A2AMM_E_INVAL ||
        !strstr(err.msg, "multiples of 32"))
        failed[0]++, fprintf(stderr, "weights_create with hidden 48: %s\n", err.msg);
    if (a2amm_moe_weights_create(1, 64, 32, A2AMM_E4M3, 0, w, w, 2, w, w, 1, &mw, &err) != A2AMM_E_INVAL ||
        !strstr(err.msg, "max_rows must be positive"))
        failed[0]++, fprintf(stderr, "weights_create with max_rows 0: %s\n", err.msg);
    if (!rc && (a2amm_moe_use_weights(m, NULL, &err) != A2AMM_E_INVAL || !strstr(err.msg, "must not be NULL")))
        failed[0]++, fprintf(stderr, "use_weights NULL: %s\n", err.msg);
    a2amm_moe_weights_destroy(NULL);
    /* a call with tokens and NULL arrays: refused on this rank, naming them (and failing the communicator) */
    if (!rc && (a2amm_moe_run(m, 2, NULL, NULL, 2, NULL, NULL, NULL, &err) != A2AMM_E_INVAL ||
                !strstr(err.msg, "must not be NULL with 2 tokens")))
        failed[0]++, fprintf(stderr, "run with NULL arrays: %s\n", err.msg);
    a2amm_moe_destroy(m);
    return 0;
}

/* Ranks that disagree on the schedule (a shared field): create fails on both, naming the difference. */
static int rank_disagree(a2amm_comm *comm, void *arg)
{
    int *refused = arg;
    moe_case c = MC_CASES[1];
    c.schedule = a2amm_comm_rank(comm) ? A2AMM_SCHEDULE_UNFUSED : A2AMM_SCHEDULE_FUSED;
    a2amm_error err = {0, ""};
    a2amm_moe *m = NULL;
    int rc = mc_make(comm, &c, 0, 10, &m, &err);
    if (rc == A2AMM_E_INVAL || rc == A2AMM_E_MISMATCH || rc == A2AMM_E_PEER) refused[a2amm_comm_rank(comm)] = 1;
    else fprintf(stderr, "rank %d: create with another schedule: status %d %s\n", a2amm_comm_rank(comm), rc, err.msg);
    a2amm_moe_destroy(m);
    return 0;
}

/* max_recv 0 on rank 0 and the R * max_tokens it stands for on rank 1: the same room, so create agrees */
static int rank_room_spelled_two_ways(a2amm_comm *comm, void *arg)
{
    int *made = arg;
    a2amm_error err = {0, ""};
    a2amm_moe *m = NULL;
    a2amm_moe_config cfg = A2AMM_MOE_CONFIG_INIT;
    cfg.experts = 2, cfg.topk = 1, cfg.hidden = 64, cfg.inter = 32, cfg.max_tokens = 4;
    cfg.max_recv = a2amm_comm_rank(comm) == 0 ? 0 : 2 * cfg.max_tokens;
    int rc = a2amm_moe_create(comm, &cfg, &m, &err);
    made[a2amm_comm_rank(comm)] = rc == 0;
    if (rc) fprintf(stderr, "max_recv 0 beside R * max_tokens: rank %d: %s\n", a2amm_comm_rank(comm), err.msg);
    a2amm_moe_destroy(m);
    return 0;
}

static void test_nulls(void)
{
    int *failed = mmap(NULL, sizeof *failed, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    *failed = 0;
    a2amm_error err = {0, ""};
    a2amm_launch(1, rank_nulls, failed, NULL, &err);
    a2amm_launch(1, rank_null_calls, failed, NULL, &err);
    CHECK(*failed == 0, "%d NULL or out-of-range arguments were not refused as expected (above)", *failed);
    munmap(failed, sizeof *failed);
    int *refused = mmap(NULL, 2 * sizeof *refused, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    refused[0] = refused[1] = 0;
    a2amm_launch_options lo = {.size = sizeof lo, .heap_bytes = 64u << 20};
    a2amm_launch(2, rank_room_spelled_two_ways, refused, &lo, &err);
    CHECK(refused[0] && refused[1], "max_recv 0 on one rank, R * max_tokens on the other: created on rank 0 %d, "
          "rank 1 %d", refused[0], refused[1]);
    refused[0] = refused[1] = 0;
    a2amm_launch(2, rank_disagree, refused, &lo, &err);
    CHECK(refused[0] && refused[1], "ranks that disagree on the schedule: create accepted (rank 0 %d, rank 1 %d)",
          refused[0], refused[1]);
    munmap(refused, 2 * sizeof *refused);
}

/* a2amm_moe_heap_bytes: in a heap of that size the op is made and its calls run (within the bound); in one
 * a page smaller a2amm_moe_create refuses on every rank with A2AMM_E_NOMEM, naming the bytes needed and
 * the query, and the communicator stays usable (the launch succeeds). */
static void test_heap_bytes(void)
{
    const moe_case *c = &MC_CASES[MC_FIRST_CHUNKED]; /* two chunks: the stage serves both exchanges */
    a2amm_moe_config cfg = A2AMM_MOE_CONFIG_INIT;
    cfg.experts = c->E, cfg.topk = c->k, cfg.hidden = c->H, cfg.inter = c->I, cfg.max_tokens = c->max_tokens;
    cfg.a_type = c->a_type, cfg.b_type = c->b_type, cfg.schedule = c->schedule;
    size_t need = 0;
    a2amm_error err = {0, ""};
    CHECK(a2amm_moe_heap_bytes(&cfg, c->R, &need, &err) == 0, "a2amm_moe_heap_bytes: %s", err.msg);
    const size_t partials = (size_t)c->R * (size_t)c->max_tokens * (size_t)c->H * 2;
    const size_t records = (size_t)c->R * (size_t)c->max_tokens * (size_t)(c->H + c->H / 32 + 8 * c->k + 8);
    CHECK(need >= partials && need >= records && need > 4096, "a2amm_moe_heap_bytes: %zu, under the partials (%zu) or "
          "the records (%zu), or within a page", need, partials, records);
    int rc = 0;
    case_run *run = launch_case_in(c, 0, 0, 0, need, &rc);
    CHECK(rc == 0, "a heap of a2amm_moe_heap_bytes = %zu: the launch: %s", need, run->launch_msg);
    for (int r = 0; r < c->R; r++)
        CHECK(run->rc[r] == 0, "a heap of a2amm_moe_heap_bytes = %zu, rank %d: %s", need, r, run->msg[r]);
    double worst = 0;
    CHECK(rc == 0 && mc_check_all(c, run->outs, &worst) == 0, "a heap of a2amm_moe_heap_bytes: outputs outside the "
          "bound");
    free_run(run);
    size_t smaller = (need - 1) & ~(size_t)4095; /* heaps are whole pages */
    run = launch_case_in(c, 0, 0, 0, smaller, &rc);
    CHECK(rc == 0, "a heap of %zu: the refusal at create leaves the communicator usable (the launch succeeds): %s",
          smaller, run->launch_msg);
    char want[80];
    snprintf(want, sizeof want, "stage needs %zu bytes", need);
    for (int r = 0; r < c->R; r++)
        CHECK(run->rc[r] == A2AMM_E_NOMEM && strstr(run->msg[r], "a2amm_moe_create: ") && strstr(run->msg[r], want) &&
                  strstr(run->msg[r], "a2amm_moe_heap_bytes") && !strstr(run->msg[r], "a2amm_op_heap_bytes"),
              "a heap of %zu, rank %d: a2amm_moe_create refuses, naming %s and a2amm_moe_heap_bytes (got %d: %s)",
              smaller, r, want, run->rc[r], run->msg[r]);
    free_run(run);
    cfg.topk = 33;
    CHECK(a2amm_moe_heap_bytes(&cfg, c->R, &need, &err) == A2AMM_E_INVAL && need == 0 &&
              strstr(err.msg, "a2amm_moe_heap_bytes: topk must be 1 to 32"),
          "a2amm_moe_heap_bytes of topk 33: %s", err.msg);
    CHECK(a2amm_moe_heap_bytes(NULL, 2, &need, &err) == A2AMM_E_INVAL, "a2amm_moe_heap_bytes of a NULL config");
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "digests")) return print_digests();
    test_cases();
    test_tiny_outputs();
    test_schedules();
    test_bad_arguments();
    test_room();
    test_faults();
    test_dispatch_combine();
    test_shared_weights();
    test_observer();
    test_nulls();
    test_heap_bytes();
    return check_summary("test_moe");
}
