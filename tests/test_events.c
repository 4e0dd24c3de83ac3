/*
 * The op's observer events (a2amm_op_set_observer): every rank's stream of
 * events over fused calls (direct and put paths) and unfused calls, checked
 * for what a trace is built from: spans properly nested and in time order,
 * a MATMUL span for every (tile, source), a WAIT before it for every other
 * source on the put path, a SEND for every (tile, destination), WORK
 * events of the compute threads inside every MATMUL, the right
 * rows, columns and bytes, and the same output bits with an observer as
 * without one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "a2amm.h"
#include "check.h"

enum { R = 3, K = 3 * 64, N = 24, MAX_M = 40, MAX_EVENTS = 8192, CALLS = 2, THREADS = 2 };
static const int64_t CALL_M[CALLS] = {MAX_M, 9};

typedef struct config_case {
    const char *name;
    a2amm_op_config cfg;
} config_case;

static const config_case CASES[] = {
    {"put, tile 7, depth 2", {.size = sizeof(a2amm_op_config), .path = A2AMM_PATH_PUT, .tile_m = 7, .depth = 2}},
    {"direct, tile 16", {.size = sizeof(a2amm_op_config), .path = A2AMM_PATH_DIRECT, .tile_m = 16}},
    {"unfused, tile 16", {.size = sizeof(a2amm_op_config), .path = A2AMM_PATH_PUT, .tile_m = 16, .schedule = A2AMM_SCHEDULE_UNFUSED}},
};
enum { NCASES = sizeof CASES / sizeof CASES[0] };

/* Shared with the ranks: each one's events and outputs. */
typedef struct shared {
    int config;
    int status[R];
    int nevents[R];
    int overflow[R];
    a2amm_event events[R][MAX_EVENTS];
    int same_bits[R]; /* the output with an observer equals the output without */
} shared;

static int record(void *arg, const a2amm_event *ev)
{
    shared *sh = arg;
    int r = ev->rank;
    if (sh->nevents[r] < MAX_EVENTS) sh->events[r][sh->nevents[r]++] = *ev;
    else sh->overflow[r] = 1;
    return 0;
}

/* Deterministic fp8 codes and scales near 1 (exponent 127 +- 2). */
static void fill(uint8_t *p, size_t n, unsigned seed, int scales)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = scales ? (uint8_t)(125 + (seed >> 16) % 5) : (uint8_t)((seed >> 16) & 0x77);
    }
}

static int rank_main(a2amm_comm *comm, void *arg)
{
    shared *sh = arg;
    int me = a2amm_comm_rank(comm);
    a2amm_error err = {0, ""};
    a2amm_op_config cfg = CASES[sh->config].cfg;
    cfg.max_m = MAX_M, cfg.k = K, cfg.n = N, cfg.a_type = A2AMM_E4M3, cfg.b_type = A2AMM_E4M3, cfg.threads = THREADS;
    a2amm_op *op = NULL;
    size_t a_bytes = (size_t)R * MAX_M * (K / R), sa_bytes = (size_t)R * MAX_M * 2;
    uint8_t *a = malloc(a_bytes), *sa = malloc(sa_bytes), *b = malloc((size_t)N * K), *sb = malloc((size_t)N * K / 32);
    uint16_t *out = malloc((size_t)MAX_M * N * 2), *plain = malloc((size_t)MAX_M * N * 2);
    int rc = a && sa && b && sb && out && plain ? A2AMM_OK : A2AMM_E_NOMEM;
    if (!rc) {
        fill(b, (size_t)N * K, 7u + (unsigned)me, 0);
        fill(sb, (size_t)N * K / 32, 11u + (unsigned)me, 1);
        rc = a2amm_op_create(comm, &cfg, &op, &err);
    }
    if (!rc) rc = a2amm_op_set_weights(op, b, sb, K / 32, &err);
    sh->same_bits[me] = 1;
    for (int c = 0; !rc && c < CALLS; c++) {
        int64_t m = CALL_M[c];
        fill(a, a_bytes, 3u + (unsigned)(me * 10 + c), 0);
        fill(sa, sa_bytes, 5u + (unsigned)(me * 10 + c), 1);
        rc = a2amm_op_set_observer(op, NULL, NULL, &err);
        if (!rc) rc = a2amm_op_run(op, m, a, sa, plain, &err); /* unobserved */
        if (!rc) rc = a2amm_op_set_observer(op, record, sh, &err);
        if (!rc) rc = a2amm_op_run(op, m, a, sa, out, &err); /* observed */
        if (!rc && memcmp(out, plain, (size_t)(m * N) * 2) != 0) sh->same_bits[me] = 0;
    }
    a2amm_op_destroy(op);
    if (rc) fprintf(stderr, "rank %d: %s\n", me, err.msg);
    sh->status[me] = rc;
    free(a), free(sa), free(b), free(sb), free(out), free(plain);
    return rc;
}

static int is_begin(a2amm_event_kind k)
{
    return k == A2AMM_EVENT_TILE || k == A2AMM_EVENT_WAIT_BEGIN || k == A2AMM_EVENT_MATMUL_BEGIN ||
           k == A2AMM_EVENT_SEND_BEGIN || k == A2AMM_EVENT_EXCHANGE_BEGIN || k == A2AMM_EVENT_BARRIER_BEGIN ||
           k == A2AMM_EVENT_CALL_BEGIN;
}

/* The begin that an end closes, or -1 when k is not an end. */
static int begin_of(a2amm_event_kind k)
{
    switch (k) {
    case A2AMM_EVENT_TILE_END: return A2AMM_EVENT_TILE;
    case A2AMM_EVENT_WAIT_END: return A2AMM_EVENT_WAIT_BEGIN;
    case A2AMM_EVENT_MATMUL_END: return A2AMM_EVENT_MATMUL_BEGIN;
    case A2AMM_EVENT_SEND_END: return A2AMM_EVENT_SEND_BEGIN;
    case A2AMM_EVENT_EXCHANGE_END: return A2AMM_EVENT_EXCHANGE_BEGIN;
    case A2AMM_EVENT_BARRIER_END: return A2AMM_EVENT_BARRIER_BEGIN;
    case A2AMM_EVENT_CALL_END: return A2AMM_EVENT_CALL_BEGIN;
    default: return -1;
    }
}

/* One rank's events of one call: [first, last]. */
static void check_call(const config_case *cc, int me, const a2amm_event *ev, int n, int64_t m)
{
    const int put = cc->cfg.path == A2AMM_PATH_PUT, unfused = cc->cfg.schedule == A2AMM_SCHEDULE_UNFUSED;
    const int64_t tm = cc->cfg.tile_m, tiles = (m + tm - 1) / tm, ka = K / R, ska = 2;
    CHECK(n >= 2 && ev[0].kind == A2AMM_EVENT_CALL_BEGIN && ev[n - 1].kind == A2AMM_EVENT_CALL_END,
          "%s, rank %d, m %lld: the call's events open and close with CALL", cc->name, me, (long long)m);
    int stack[16], depth = 0, nested = 1, ordered = 1, tile_begins = 0, exchanges = 0, stack_peer = -1;
    int matmuls[8][R], waits[8][R], sends[8][R], wait_before_matmul = 1, right_sizes = 1;
    memset(matmuls, 0, sizeof matmuls), memset(waits, 0, sizeof waits), memset(sends, 0, sizeof sends);
    int64_t cur_tile = -1, last_ns = 0, matmul_t0 = 0;
    int works_in_matmul = 0, works_inside = 1, work_threads_ok = 1, every_matmul_worked = 1;
    for (int i = 0; i < n; i++) {
        const a2amm_event *e = &ev[i];
        if (e->kind == A2AMM_EVENT_WORK) { /* reported after its work, stamped with its start */
            works_in_matmul++;
            if (depth == 0 || stack[depth - 1] != A2AMM_EVENT_MATMUL_BEGIN || e->time_ns < matmul_t0 ||
                e->duration_ns < 0)
                works_inside = 0;
            if (e->thread < 0 || e->thread >= THREADS || e->peer != stack_peer) work_threads_ok = 0;
            continue;
        }
        if (i && e->time_ns < last_ns) ordered = 0;
        last_ns = e->time_ns;
        if (e->kind == A2AMM_EVENT_MATMUL_BEGIN) matmul_t0 = e->time_ns, works_in_matmul = 0, stack_peer = e->peer;
        if (e->kind == A2AMM_EVENT_MATMUL_END) {
            if (works_in_matmul < 1 || works_in_matmul > THREADS) every_matmul_worked = 0;
            for (int j = i - works_in_matmul; j < i; j++) /* each piece ended before the span did */
                if (ev[j].time_ns + ev[j].duration_ns > e->time_ns) works_inside = 0;
        }
        if (e->rank != me || e->call != ev[0].call) nested = 0;
        if (is_begin(e->kind)) {
            if (depth == 16) { nested = 0; break; }
            stack[depth++] = e->kind;
        } else if (begin_of(e->kind) >= 0) {
            if (depth == 0 || stack[depth - 1] != begin_of(e->kind)) nested = 0;
            else depth--;
        }
        int64_t t = e->tile;
        int p = e->peer;
        int tile_ok = t >= 0 && t < tiles && t < 8, peer_ok = p >= 0 && p < R;
        int64_t rows = tile_ok ? (m - t * tm < tm ? m - t * tm : tm) : 0;
        switch (e->kind) {
        case A2AMM_EVENT_TILE:
            tile_begins++;
            cur_tile = t;
            if (!tile_ok || e->rows != rows || e->tiles != tiles) right_sizes = 0;
            break;
        case A2AMM_EVENT_WAIT_BEGIN:
            if (!tile_ok || !peer_ok || t != cur_tile || p == me) { right_sizes = 0; break; }
            waits[t][p]++;
            break;
        case A2AMM_EVENT_WAIT_END:
            if (!tile_ok || e->bytes != rows * (ka + ska)) right_sizes = 0;
            break;
        case A2AMM_EVENT_MATMUL_BEGIN:
            if (!tile_ok || !peer_ok || t != cur_tile || e->k != ka || e->rows != rows) { right_sizes = 0; break; }
            matmuls[t][p]++;
            if (put && !unfused && p != me && waits[t][p] != 1) wait_before_matmul = 0;
            break;
        case A2AMM_EVENT_SEND_BEGIN:
            if (!tile_ok || !peer_ok || p == me || e->bytes != rows * (ka + ska)) { right_sizes = 0; break; }
            sends[t][p]++;
            break;
        case A2AMM_EVENT_EXCHANGE_BEGIN:
            exchanges++;
            if (e->bytes != (R - 1) * m * (ka + ska)) right_sizes = 0;
            break;
        default: break;
        }
    }
    CHECK(nested && depth == 0, "%s, rank %d, m %lld: spans properly nested (depth left %d)", cc->name, me,
          (long long)m, depth);
    CHECK(ordered, "%s, rank %d, m %lld: event times never go back", cc->name, me, (long long)m);
    CHECK(every_matmul_worked, "%s, rank %d, m %lld: 1 to %d WORK events in every MATMUL span", cc->name, me,
          (long long)m, THREADS);
    CHECK(works_inside, "%s, rank %d, m %lld: each WORK lies inside its MATMUL span", cc->name, me, (long long)m);
    CHECK(work_threads_ok, "%s, rank %d, m %lld: WORK names a thread of the op and the MATMUL's source", cc->name,
          me, (long long)m);
    CHECK(right_sizes, "%s, rank %d, m %lld: tiles, rows, columns and bytes as the call has them", cc->name, me,
          (long long)m);
    CHECK(tile_begins == tiles, "%s, rank %d, m %lld: %d tiles seen, %lld expected", cc->name, me, (long long)m,
          tile_begins, (long long)tiles);
    CHECK(exchanges == unfused, "%s, rank %d: %d exchange spans", cc->name, me, exchanges);
    int every_matmul = 1, every_wait = 1, every_send = 1;
    for (int64_t t = 0; t < tiles && t < 8; t++)
        for (int p = 0; p < R; p++) {
            every_matmul &= matmuls[t][p] == 1;
            every_wait &= waits[t][p] == (put && !unfused && p != me);
            every_send &= sends[t][p] == (put && !unfused && p != me);
        }
    CHECK(every_matmul, "%s, rank %d, m %lld: one MATMUL span per (tile, source)", cc->name, me, (long long)m);
    CHECK(every_wait, "%s, rank %d, m %lld: one WAIT per (tile, other source) on the put path, none else",
          cc->name, me, (long long)m);
    CHECK(every_send, "%s, rank %d, m %lld: one SEND per (tile, other rank) on the put path, none else", cc->name,
          me, (long long)m);
    CHECK(wait_before_matmul, "%s, rank %d, m %lld: each source's rows awaited before they are multiplied", cc->name,
          me, (long long)m);
}

int main(void)
{
    shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) return 1;
    for (int c = 0; c < NCASES; c++) {
        memset(sh, 0, sizeof *sh);
        sh->config = c;
        a2amm_error err = {0, ""};
        int rc = a2amm_launch(R, rank_main, sh, &(a2amm_launch_options){.size = sizeof(a2amm_launch_options), .heap_bytes = 16u << 20, .timeout_s = 120},
                              &err);
        CHECK(rc == 0, "%s: launch: %s", CASES[c].name, err.msg);
        if (rc) continue;
        for (int r = 0; r < R; r++) {
            CHECK(!sh->overflow[r], "%s, rank %d: more than %d events", CASES[c].name, r, MAX_EVENTS);
            CHECK(sh->same_bits[r], "%s, rank %d: the observer changed the output", CASES[c].name, r);
            /* the events of each call, split at CALL_BEGIN */
            int start = 0, call = 0;
            for (int i = 1; i <= sh->nevents[r]; i++)
                if (i == sh->nevents[r] || sh->events[r][i].kind == A2AMM_EVENT_CALL_BEGIN) {
                    if (call < CALLS) check_call(&CASES[c], r, &sh->events[r][start], i - start, CALL_M[call]);
                    call++, start = i;
                }
            CHECK(call == CALLS, "%s, rank %d: %d calls observed, %d made", CASES[c].name, r, call, CALLS);
        }
    }
    munmap(sh, sizeof *sh);
    return check_summary("test_events");
}
