/*
 * The public API (include/a2amm.h) in memory, from inside ranks made by the
 * embedded launcher: every path, tile size and depth; m changing from call
 * to call up to max_m; weights replaced between calls; input copied in or
 * written in place; fused and unfused; weights set on the op or prepared
 * once and shared. Each result is compared bit for bit with the command's
 * (`a2amm run` over files in the seed layout, the binary beside this test's
 * folder) on the same data and within tolerance with the fp64 reference. Then wrong use: NULL arguments,
 * sizes that do not match between ranks, m above max_m, a call before the
 * weights, a call on a destroyed op, and a rank that dies while the others
 * are inside a collective call (they get A2AMM_E_PEER within seconds).
 *
 * Ranks are processes: what they see comes back through a MAP_SHARED area,
 * and the checks are made here, in the test's own process.
 */
#include <math.h>
#include <signal.h>
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
#include "ref/ref_op.h"

enum { MAX_R = 3, MAX_M = 70, K_PER_RANK = 64, N = 40, CALLS = 5, CONFIGS = 6 };

/* The calls every config makes: m, and which weights (0 or 1). */
static const int64_t CALL_M[CALLS] = {MAX_M, 1, 37, MAX_M, 37};
static const int CALL_W[CALLS] = {0, 0, 1, 1, 0};

static const a2amm_op_config CONFIG_OF[CONFIGS] = {
    {.size = sizeof(a2amm_op_config), .path = A2AMM_PATH_DIRECT},                          /* defaults: tile 512, depth 4 */
    {.size = sizeof(a2amm_op_config), .path = A2AMM_PATH_PUT, .tile_m = 7, .depth = 1},
    {.size = sizeof(a2amm_op_config), .path = A2AMM_PATH_PUT, .tile_m = 16, .depth = 3, .threads = 2},
    {.size = sizeof(a2amm_op_config), .path = A2AMM_PATH_DIRECT, .tile_m = 1, .threads = 3},
    {.size = sizeof(a2amm_op_config), .path = A2AMM_PATH_PUT, .tile_m = 16, .depth = 2, .schedule = A2AMM_SCHEDULE_UNFUSED},
    {.size = sizeof(a2amm_op_config), .path = A2AMM_PATH_DIRECT, .tile_m = 7, .threads = 2, .schedule = A2AMM_SCHEDULE_UNFUSED},
};
/* Configs that borrow weights prepared once (a2amm_weights_create + a2amm_op_use_weights). */
static int borrows_weights(int c) { return c % 2 == 1; }

/* The a2amm command, beside this test's folder (build/tests/ -> build/a2amm). */
static char a2amm_bin[600];

/* Everything the ranks read (inherited through fork) and write (shared). */
typedef struct world_data {
    int R;
    op_shape s;
    op_sizes z;
    io_rank_inputs in[2][MAX_R]; /* [weights set][rank]: set 1 differs in B only */
    uint16_t *got;               /* shared: [CONFIGS][CALLS][R][MAX_M * N] */
    int *status;                 /* shared: [R] */
} world_data;

static size_t got_index(int cfg, int call, int r) { return (((size_t)cfg * CALLS + (size_t)call) * MAX_R + (size_t)r) * MAX_M * N; }

/* Rank r's A_r for a call with m rows per destination: [R*m, ka], block j = first m rows of block j. */
static void sub_a(const world_data *w, int r, int64_t m, uint8_t *a, uint8_t *sa)
{
    for (int j = 0; j < w->R; j++) {
        memcpy(a + (size_t)(j * m * w->z.ka), w->in[0][r].a + (size_t)(j * MAX_M * w->z.ka), (size_t)(m * w->z.ka));
        memcpy(sa + (size_t)(j * m * w->z.ska), w->in[0][r].sa + (size_t)(j * MAX_M * w->z.ska), (size_t)(m * w->z.ska));
    }
}

static int rank_calls(a2amm_comm *comm, void *arg)
{
    world_data *w = arg;
    int me = a2amm_comm_rank(comm);
    a2amm_error err = {0, ""};
    uint8_t *a = malloc(w->z.a_bytes), *sa = malloc(w->z.sa_bytes);
    int rc = a && sa ? A2AMM_OK : A2AMM_E_NOMEM;
    for (int c = 0; !rc && c < CONFIGS; c++) {
        a2amm_op_config cfg = CONFIG_OF[c];
        cfg.max_m = MAX_M, cfg.k = w->s.K, cfg.n = N, cfg.a_type = w->s.a_type, cfg.b_type = w->s.b_type;
        a2amm_op *op = NULL;
        a2amm_weights *shared[2] = {NULL, NULL};
        rc = a2amm_op_create(comm, &cfg, &op, &err);
        for (int s = 0; !rc && borrows_weights(c) && s < 2; s++)
            rc = a2amm_weights_create(w->in[s][me].b, w->in[s][me].sb, N, w->s.K, w->z.sk, w->s.b_type, s + 1,
                                      &shared[s], &err);
        int weights = -1;
        for (int k = 0; !rc && k < CALLS; k++) {
            if (CALL_W[k] != weights) {
                weights = CALL_W[k];
                if (borrows_weights(c)) rc = a2amm_op_use_weights(op, shared[weights], &err);
                else rc = a2amm_op_set_weights(op, w->in[weights][me].b, w->in[weights][me].sb, w->z.sk, &err);
                if (rc) break;
            }
            int64_t m = CALL_M[k];
            uint16_t *out = w->got + got_index(c, k, me);
            if ((c + k) % 2) { /* in place: written where the op says */
                uint8_t *ia, *isa;
                int64_t lda, ldsa, block;
                rc = a2amm_op_input(op, &ia, &isa, &lda, &ldsa, &block, &err);
                for (int j = 0; !rc && j < w->R; j++) {
                    memcpy(ia + j * block * lda, w->in[0][me].a + (size_t)(j * MAX_M * w->z.ka), (size_t)(m * lda));
                    memcpy(isa + j * block * ldsa, w->in[0][me].sa + (size_t)(j * MAX_M * w->z.ska), (size_t)(m * ldsa));
                }
                if (!rc) rc = a2amm_op_run(op, m, NULL, NULL, out, &err);
            } else { /* copied in from the caller's own arrays */
                sub_a(w, me, m, a, sa);
                rc = a2amm_op_run(op, m, a, sa, out, &err);
            }
        }
        a2amm_op_destroy(op);
        a2amm_weights_destroy(shared[0]);
        a2amm_weights_destroy(shared[1]);
    }
    if (rc) fprintf(stderr, "rank %d: %s\n", me, err.msg);
    w->status[me] = rc;
    free(a);
    free(sa);
    return rc;
}

/* Runs the a2amm command with these arguments, its output to /dev/null; its exit status. */
static int run_command(char *const args[])
{
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout)) _exit(127);
        execv(a2amm_bin, args);
        _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The command (`a2amm run` over files) on the data of one call: rank j's bf16 [m, N] into want[j]. */
static int pipeline_outputs(const world_data *w, int64_t m, int weights, const char *dir, uint16_t **want)
{
    op_shape s = w->s;
    s.M = m;
    op_sizes z;
    a2amm_error err;
    if (op_shape_check(&s, &z, &err)) return -1;
    uint8_t *a = malloc(z.a_bytes), *sa = malloc(z.sa_bytes);
    int rc = 0;
    for (int r = 0; r < w->R && !rc; r++) {
        sub_a(w, r, m, a, sa);
        io_rank_inputs in = {a, sa, w->in[weights][r].b, w->in[weights][r].sb};
        rc = io_save_rank_inputs(dir, r, &z, &in, &err);
    }
    char M[32], Kx[32], Nx[32], Rx[32];
    snprintf(M, sizeof M, "%lld", (long long)m), snprintf(Kx, sizeof Kx, "%lld", (long long)s.K);
    snprintf(Nx, sizeof Nx, "%lld", (long long)s.N), snprintf(Rx, sizeof Rx, "%lld", (long long)s.R);
    char *args[] = {a2amm_bin, "run", M, Kx, Nx, Rx, "--dir", (char *)dir, "--a-type",
                    (char *)a2amm_fp8_type_name(s.a_type), "--b-type", (char *)a2amm_fp8_type_name(s.b_type), NULL};
    if (!rc && run_command(args) != 0) {
        snprintf(err.msg, sizeof err.msg, "%s run failed", a2amm_bin);
        rc = -1;
    }
    for (int r = 0; r < w->R && !rc; r++) {
        char path[IO_PATH_MAX];
        rc = io_rank_path(path, sizeof path, dir, "output", r, "npu_out.bin", &err);
        if (!rc) rc = io_read_exact(path, want[r], z.out_bytes, &err);
    }
    if (rc) fprintf(stderr, "pipeline for m=%lld: %s\n", (long long)m, err.msg);
    free(a);
    free(sa);
    return rc;
}

/* |got - fp64 reference| within the contract: checked through ref_op_rank's own bf16 output, 2 ulps. */
static int close_to_reference(const world_data *w, int64_t m, int weights, int r, const uint16_t *got)
{
    op_shape s = w->s;
    s.M = m;
    op_sizes z;
    a2amm_error err;
    op_shape_check(&s, &z, &err);
    uint8_t *as[MAX_R], *sas[MAX_R];
    for (int j = 0; j < w->R; j++) {
        as[j] = malloc(z.a_bytes), sas[j] = malloc(z.sa_bytes);
        sub_a(w, j, m, as[j], sas[j]);
    }
    uint16_t *ref = malloc(z.out_bytes);
    int rc = ref_op_rank(&s, r, (const uint8_t *const *)as, (const uint8_t *const *)sas, w->in[weights][r].b,
                         w->in[weights][r].sb, ref, &err);
    int64_t far = 0;
    for (int64_t i = 0; !rc && i < m * N; i++) {
        int d = (int)got[i] - (int)ref[i];
        far += (d > 2 || d < -2) && !(isnan(mx_bf16_to_f32(got[i])) && isnan(mx_bf16_to_f32(ref[i])));
    }
    for (int j = 0; j < w->R; j++) free(as[j]), free(sas[j]);
    free(ref);
    return rc == 0 && far == 0;
}

static void test_calls(int R)
{
    world_data w = {.R = R};
    w.s = (op_shape){MAX_M, K_PER_RANK * R, N, R, R == 2 ? A2AMM_E5M2 : A2AMM_E4M3, A2AMM_E4M3, OP_ALLTOALL_MATMUL};
    a2amm_error err;
    CHECK(op_shape_check(&w.s, &w.z, &err) == 0, "shape: %s", err.msg);
    gen_options g0 = {GEN_DIST_NORMAL, 100 + (uint64_t)R, MX_SCALE_FLOOR}, g1 = {GEN_DIST_NORMAL, 200 + (uint64_t)R, MX_SCALE_FLOOR};
    for (int r = 0; r < R; r++) {
        io_rank_inputs_alloc(&w.z, &w.in[0][r], &err);
        io_rank_inputs_alloc(&w.z, &w.in[1][r], &err);
        gen_rank_inputs(&w.s, &w.z, &g0, r, &w.in[0][r], &err);
        gen_rank_inputs(&w.s, &w.z, &g1, r, &w.in[1][r], &err);
    }
    size_t got_bytes = got_index(CONFIGS, 0, 0) * sizeof(uint16_t);
    w.got = mmap(NULL, got_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    w.status = mmap(NULL, MAX_R * sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(w.got, 0xEE, got_bytes);
    int rc = a2amm_launch(R, rank_calls, &w, NULL, &err);
    CHECK(rc == 0, "R=%d: the launch failed: %s", R, err.msg);

    char dir[] = "/tmp/a2amm-test-op.XXXXXX";
    const char *tmp = getenv("TMPDIR");
    char dirbuf[512];
    snprintf(dirbuf, sizeof dirbuf, "%s/a2amm-test-op.XXXXXX", tmp && *tmp && strlen(tmp) < 400 ? tmp : "/tmp");
    char *d = mkdtemp(dirbuf);
    (void)dir;
    uint16_t *want[MAX_R];
    for (int r = 0; r < R; r++) want[r] = malloc((size_t)MAX_M * N * 2);
    for (int k = 0; d && k < CALLS; k++) {
        if (pipeline_outputs(&w, CALL_M[k], CALL_W[k], d, want)) {
            CHECK(0, "R=%d call %d: the pipeline over files failed", R, k);
            continue;
        }
        for (int r = 0; r < R; r++) {
            for (int c = 0; c < CONFIGS; c++) {
                const uint16_t *got = w.got + got_index(c, k, r);
                CHECK(!memcmp(got, want[r], (size_t)(CALL_M[k] * N * 2)),
                      "R=%d config %d (path %d, tile %lld, depth %d, schedule %d) call %d (m=%lld, weights %d) rank "
                      "%d: not the command's bits", R, c, CONFIG_OF[c].path, (long long)CONFIG_OF[c].tile_m,
                      CONFIG_OF[c].depth, CONFIG_OF[c].schedule, k,
                      (long long)CALL_M[k], CALL_W[k], r);
            }
            CHECK(close_to_reference(&w, CALL_M[k], CALL_W[k], r, want[r]),
                  "R=%d call %d rank %d: not within tolerance of the fp64 reference", R, k, r);
        }
    }
    if (d) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
        CHECK(system(cmd) == 0, "removing %s", d);
    }
    for (int r = 0; r < R; r++) {
        free(want[r]);
        io_rank_inputs_free(&w.in[0][r]);
        io_rank_inputs_free(&w.in[1][r]);
    }
    munmap(w.got, got_bytes);
    munmap(w.status, MAX_R * sizeof(int));
}

/* ---- wrong use ------------------------------------------------------------ */

enum misuse { NO_WEIGHTS, M_TOO_BIG, M_DIFFERS, CONFIG_DIFFERS, DESTROYED, RANK_DIES, PEER_GONE, MISUSES };

typedef struct misuse_report {
    int rc[2];
    char msg[2][300];
    double seconds[2];
} misuse_report;

typedef struct misuse_arg {
    enum misuse what;
    misuse_report *rep;
} misuse_arg;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* PEER_GONE's observers: rank 0 dawdles after the call's first barrier (its agreement), before it
 * goes on; rank 1 stops its call at the first tile and destroys its op, giving its memory back. */
static int dawdle_after_barrier(void *arg, const a2amm_event *ev)
{
    (void)arg;
    if (ev->kind == A2AMM_EVENT_BARRIER_END) usleep(300000);
    return 0;
}

static int stop_at_first_tile(void *arg, const a2amm_event *ev)
{
    (void)arg;
    return ev->kind == A2AMM_EVENT_TILE ? A2AMM_E_INVAL : 0;
}

static int rank_misuse(a2amm_comm *comm, void *arg)
{
    const misuse_arg *ma = arg;
    int me = a2amm_comm_rank(comm);
    a2amm_error err = {0, ""};
    a2amm_op_config cfg = {.size = sizeof(a2amm_op_config), .max_m = 8, .k = 64, .n = 16, .a_type = A2AMM_E4M3, .b_type = A2AMM_E4M3};
    if (ma->what == CONFIG_DIFFERS && me == 1) cfg.n = 24;
    uint8_t b[24 * 64], sb[24 * 2], a[2 * 8 * 32], sa[2 * 8 * 2];
    memset(b, 0x38, sizeof b), memset(sb, 127, sizeof sb), memset(a, 0x38, sizeof a), memset(sa, 127, sizeof sa);
    uint16_t out[8 * 24];
    a2amm_op *op = NULL;
    double t0 = now_s();
    int rc = a2amm_op_create(comm, &cfg, &op, &err);
    if (!rc && ma->what != NO_WEIGHTS) rc = a2amm_op_set_weights(op, b, sb, 2, &err);
    if (!rc) {
        switch (ma->what) {
        case NO_WEIGHTS: rc = a2amm_op_run(op, 8, a, sa, out, &err); break;
        case M_TOO_BIG: rc = a2amm_op_run(op, me == 0 ? 9 : 8, a, sa, out, &err); break;
        case M_DIFFERS: rc = a2amm_op_run(op, me == 0 ? 5 : 6, a, sa, out, &err); break;
        case DESTROYED:
            a2amm_op_destroy(op);
            rc = a2amm_op_run(op, 8, a, sa, out, &err); /* refused before any wait: both ranks do this */
            op = NULL;
            break;
        case RANK_DIES:
            if (me == 1) {
                usleep(200000);
                _exit(3); /* dies while rank 0 waits inside the call */
            }
            t0 = now_s();
            rc = a2amm_op_run(op, 8, a, sa, out, &err);
            break;
        case PEER_GONE: /* rank 1's op is gone (its heap zeroed) when rank 0 goes on with the call */
            rc = a2amm_op_set_observer(op, me == 0 ? dawdle_after_barrier : stop_at_first_tile, NULL, &err);
            if (!rc) rc = a2amm_op_run(op, 8, a, sa, out, &err);
            if (me == 1) a2amm_op_destroy(op), op = NULL;
            break;
        default: break;
        }
    }
    ma->rep->rc[me] = rc;
    ma->rep->seconds[me] = now_s() - t0;
    snprintf(ma->rep->msg[me], sizeof ma->rep->msg[me], "%.299s", err.msg);
    a2amm_op_destroy(op);
    return A2AMM_OK; /* what happened is in the report */
}

static void test_misuse(void)
{
    misuse_report *rep = mmap(NULL, sizeof *rep * MISUSES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(rep, 0, sizeof *rep * MISUSES);
    a2amm_error err;
    for (int w = 0; w < MISUSES; w++) {
        misuse_arg ma = {(enum misuse)w, &rep[w]};
        a2amm_launch(2, rank_misuse, &ma, NULL, &err);
    }
    const misuse_report *r = rep;
    CHECK(r[NO_WEIGHTS].rc[0] == A2AMM_E_INVAL && strstr(r[NO_WEIGHTS].msg[0], "no weights: call a2amm_op_set_weights"),
          "run before weights: %d %s", r[NO_WEIGHTS].rc[0], r[NO_WEIGHTS].msg[0]);
    CHECK(r[M_TOO_BIG].rc[0] == A2AMM_E_INVAL && strstr(r[M_TOO_BIG].msg[0], "m must be 1 to max_m = 8 (got 9)"),
          "m above max_m: %d %s", r[M_TOO_BIG].rc[0], r[M_TOO_BIG].msg[0]);
    CHECK(r[M_TOO_BIG].rc[1] == A2AMM_E_PEER, "m above max_m on rank 0: rank 1 gets A2AMM_E_PEER (%d)", r[M_TOO_BIG].rc[1]);
    CHECK((r[M_DIFFERS].rc[0] == A2AMM_E_INVAL || r[M_DIFFERS].rc[1] == A2AMM_E_INVAL) &&
              (strstr(r[M_DIFFERS].msg[0], "every rank must pass the same") ||
               strstr(r[M_DIFFERS].msg[1], "every rank must pass the same")),
          "different m: %d %s / %d %s", r[M_DIFFERS].rc[0], r[M_DIFFERS].msg[0], r[M_DIFFERS].rc[1], r[M_DIFFERS].msg[1]);
    CHECK(r[M_DIFFERS].rc[0] != 0 && r[M_DIFFERS].rc[1] != 0, "different m: both ranks fail");
    CHECK(r[CONFIG_DIFFERS].rc[0] != 0 && r[CONFIG_DIFFERS].rc[1] != 0 &&
              (strstr(r[CONFIG_DIFFERS].msg[0], "has n = ") || strstr(r[CONFIG_DIFFERS].msg[1], "has n = ")),
          "different configs: %s / %s", r[CONFIG_DIFFERS].msg[0], r[CONFIG_DIFFERS].msg[1]);
    for (int k = 0; k < 2; k++)
        CHECK(r[DESTROYED].rc[k] == A2AMM_E_INVAL && strstr(r[DESTROYED].msg[k], "not a live op"),
              "a destroyed op, rank %d: %d %s", k, r[DESTROYED].rc[k], r[DESTROYED].msg[k]);
    CHECK(r[RANK_DIES].rc[0] == A2AMM_E_PEER, "a rank dies: the other's call returns A2AMM_E_PEER (got %d: %s)",
          r[RANK_DIES].rc[0], r[RANK_DIES].msg[0]);
    CHECK(r[RANK_DIES].seconds[0] < 10.0, "a rank dies: the other's call returned after %.2f s", r[RANK_DIES].seconds[0]);
    CHECK(strstr(r[RANK_DIES].msg[0], "rank 1") != NULL, "a rank dies: the message names it: %s", r[RANK_DIES].msg[0]);
    CHECK(r[PEER_GONE].rc[1] == A2AMM_E_INVAL && strstr(r[PEER_GONE].msg[1], "observer stopped the call"),
          "a peer stops its call: %d %s", r[PEER_GONE].rc[1], r[PEER_GONE].msg[1]);
    CHECK(r[PEER_GONE].rc[0] == A2AMM_E_PEER && strstr(r[PEER_GONE].msg[0], "rank 1"),
          "a peer's op destroyed while this rank is in the call: its failure, not a mismatch "
          "(got %d: %s)", r[PEER_GONE].rc[0], r[PEER_GONE].msg[0]);
    munmap(rep, sizeof *rep * MISUSES);

    /* local misuse: refused at once, nothing collective involved */
    a2amm_op_config cfg = {.size = sizeof(a2amm_op_config), .max_m = 8, .k = 64, .n = 16};
    a2amm_op *op = (a2amm_op *)&cfg;
    CHECK(a2amm_op_create(NULL, &cfg, &op, &err) == A2AMM_E_INVAL && strstr(err.msg, "must not be NULL") && op == NULL,
          "create with a NULL comm: %s", err.msg);
    uint16_t out[4];
    CHECK(a2amm_op_run(NULL, 1, NULL, NULL, out, &err) == A2AMM_E_INVAL && strstr(err.msg, "not a live op"),
          "run on NULL: %s", err.msg);
    CHECK(a2amm_op_run((a2amm_op *)&cfg, 1, NULL, NULL, out, &err) == A2AMM_E_INVAL && strstr(err.msg, "not a live op"),
          "run on a made-up handle: %s", err.msg);
    CHECK(a2amm_op_set_weights(NULL, NULL, NULL, 0, &err) == A2AMM_E_INVAL, "set_weights on NULL");
    CHECK(a2amm_launch(0, rank_misuse, NULL, NULL, &err) == A2AMM_E_INVAL && strstr(err.msg, "nranks must be 1 to 1024"),
          "launch of 0 ranks: %s", err.msg);
    CHECK(a2amm_launch(2, NULL, NULL, NULL, &err) == A2AMM_E_INVAL, "launch of a NULL function");
    size_t bytes = 0;
    CHECK(a2amm_op_heap_bytes(&cfg, 2, &bytes, &err) == A2AMM_OK && bytes > 0, "heap bytes: K=64 fits R=2: %s", err.msg);
    CHECK(a2amm_op_heap_bytes(&cfg, 3, &bytes, &err) == A2AMM_E_INVAL && bytes == 0 && strstr(err.msg, "divisible by R") &&
              strstr(err.msg, "a2amm_op_heap_bytes: "),
          "heap bytes: K=64 does not fit R=3, and says why: %s", err.msg);
    CHECK(a2amm_op_heap_bytes(NULL, 2, &bytes, &err) == A2AMM_E_INVAL, "heap bytes of a NULL config");
    a2amm_op_config overlap = cfg;
    overlap.schedule = A2AMM_SCHEDULE_OVERLAP;
    CHECK(a2amm_op_heap_bytes(&overlap, 2, &bytes, &err) == A2AMM_E_INVAL && strstr(err.msg, "the MoE op's"),
          "the MoE op's overlap schedule is refused for an a2amm_op, saying so: %s", err.msg);
    CHECK(a2amm_op_input(NULL, NULL, NULL, NULL, NULL, NULL, &err) == A2AMM_E_INVAL && strstr(err.msg, "not a live op"),
          "input of a NULL op, said: %s", err.msg);
    CHECK(a2amm_op_set_observer(NULL, NULL, NULL, &err) == A2AMM_E_INVAL && strstr(err.msg, "not a live op"),
          "set_observer on a NULL op, said: %s", err.msg);

    /* the config and the launch options read as the program's header laid them out */
    a2amm_op_config zero = cfg;
    zero.size = 0;
    CHECK(a2amm_op_heap_bytes(&zero, 2, &bytes, &err) == A2AMM_E_INVAL && strstr(err.msg, "size is 0") &&
              strstr(err.msg, "initializer"), "a config without its size is refused, naming the initializer: %s", err.msg);
    a2amm_op_config made;
    a2amm_op_config_init(&made);
    CHECK(made.size == sizeof made && made.max_m == 0 && made.tile_m == 0 && made.timeout_s == 0 && made.path == 0,
          "a2amm_op_config_init: the size, every field 0");
    a2amm_op_config from_macro = A2AMM_OP_CONFIG_INIT;
    CHECK(!memcmp(&made, &from_macro, sizeof made), "the macro and the function agree");
    struct { a2amm_op_config c; unsigned char later[24]; } newer; /* a program built with a later header */
    memset(&newer, 0, sizeof newer);
    newer.c = cfg;
    newer.c.size = sizeof newer;
    size_t same = 0;
    a2amm_op_heap_bytes(&cfg, 2, &same, NULL);
    CHECK(a2amm_op_heap_bytes(&newer.c, 2, &bytes, &err) == A2AMM_OK && bytes == same,
          "a larger config whose later fields are 0 (their defaults) is read: %s", err.msg);
    newer.later[5] = 1;
    CHECK(a2amm_op_heap_bytes(&newer.c, 2, &bytes, &err) == A2AMM_E_INVAL && strstr(err.msg, "does not know"),
          "a later field set is refused, saying this library does not know it: %s", err.msg);
    a2amm_op_config older = cfg;
    older.size = sizeof older - 8;
    CHECK(a2amm_op_heap_bytes(&older, 2, &bytes, &err) == A2AMM_E_INVAL && strstr(err.msg, "smaller than any layout"),
          "a size below the first layout is refused: %s", err.msg);
    a2amm_launch_options lo_zero = {0};
    CHECK(a2amm_launch(2, rank_misuse, NULL, &lo_zero, &err) == A2AMM_E_INVAL && strstr(err.msg, "options") &&
              strstr(err.msg, "size is 0"), "launch options without their size are refused: %s", err.msg);
    a2amm_launch_options lo_made;
    a2amm_launch_options_init(&lo_made);
    CHECK(lo_made.size == sizeof lo_made && lo_made.heap_bytes == 0 && lo_made.reports == NULL,
          "a2amm_launch_options_init: the size, every field 0");
}

/* ---- the launch's reports, stall watch and stop flag ----------------------- */

enum launch_case { EXITS, STALLS, STOPPED };

/* ---- several ops on one communicator, destroyed in any order; the AllToAll; borrowed weights checked ---- */

typedef struct several_report {
    int rc, alltoall_ok, same_after_destroy, wrong_weights_refused;
    char msg[1100];
} several_report;

static int rank_several(a2amm_comm *comm, void *arg)
{
    several_report *rep = (several_report *)arg + a2amm_comm_rank(comm);
    int me = a2amm_comm_rank(comm), R = a2amm_comm_size(comm);
    a2amm_error err = {0, ""};
    enum { BLOCK = 1000 };
    uint8_t send[3 * BLOCK], recv[3 * BLOCK];
    for (int j = 0; j < R; j++) memset(send + j * BLOCK, me * 16 + j, BLOCK);
    int rc = a2amm_comm_alltoall(comm, send, recv, BLOCK, 10, &err);
    rep->alltoall_ok = !rc;
    for (int j = 0; !rc && j < R; j++)
        for (int i = 0; i < BLOCK; i++) rep->alltoall_ok &= recv[j * BLOCK + i] == (uint8_t)(j * 16 + me);
    enum { M = 9, KR = 64, NN = 16 };
    int64_t K = (int64_t)KR * R;
    a2amm_op_config cfg = {.size = sizeof(a2amm_op_config), .max_m = M, .k = K, .n = NN, .path = A2AMM_PATH_PUT, .tile_m = 4, .depth = 2};
    uint8_t *b = calloc((size_t)(NN * K), 1), *sb = malloc((size_t)(NN * K / 32));
    uint8_t *a = malloc((size_t)(R * M * KR)), *sa = malloc((size_t)(R * M * 2));
    uint16_t out1[M * NN], out2[M * NN];
    for (int64_t i = 0; i < NN * K; i++) b[i] = (uint8_t)((i * 7 + me) % 120);
    memset(sb, 127, (size_t)(NN * K / 32));
    for (int i = 0; i < R * M * KR; i++) a[i] = (uint8_t)((i * 13) % 110);
    memset(sa, 126, (size_t)(R * M * 2));
    a2amm_op *op1 = NULL, *op2 = NULL, *op3 = NULL;
    a2amm_weights *w = NULL, *wrong = NULL;
    if (!rc) rc = a2amm_op_create(comm, &cfg, &op1, &err);
    if (!rc) rc = a2amm_op_create(comm, &cfg, &op2, &err);
    if (!rc) rc = a2amm_weights_create(b, sb, NN, K, K / 32, A2AMM_E4M3, 1, &w, &err);
    if (!rc) rc = a2amm_weights_create(b, sb, NN - 1, K, K / 32, A2AMM_E4M3, 1, &wrong, &err);
    if (!rc) {
        a2amm_error werr = {0, ""};
        rep->wrong_weights_refused = a2amm_op_use_weights(op2, wrong, &werr) == A2AMM_E_INVAL &&
                                     strstr(werr.msg, "n 15") != NULL;
        rc = a2amm_op_use_weights(op2, w, &err);
    }
    if (!rc) rc = a2amm_op_run(op2, M, a, sa, out1, &err);
    a2amm_op_destroy(op1); /* below op2: its memory comes back only with op2's */
    if (!rc) rc = a2amm_op_create(comm, &cfg, &op3, &err);
    if (!rc) rc = a2amm_op_set_weights(op3, b, sb, K / 32, &err);
    if (!rc) rc = a2amm_op_run(op2, M, a, sa, out2, &err);
    rep->same_after_destroy = !rc && !memcmp(out1, out2, sizeof out1);
    if (!rc) rc = a2amm_op_run(op3, M, a, sa, out2, &err);
    rep->same_after_destroy &= !rc && !memcmp(out1, out2, sizeof out1);
    a2amm_op_destroy(op2);
    a2amm_op_destroy(op3);
    a2amm_weights_destroy(w);
    a2amm_weights_destroy(wrong);
    free(a), free(sa), free(b), free(sb);
    rep->rc = rc;
    snprintf(rep->msg, sizeof rep->msg, "%s", err.msg);
    return rc;
}

static void test_several_ops(void)
{
    several_report *rep = mmap(NULL, 3 * sizeof *rep, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    a2amm_error err = {0, ""};
    int rc = a2amm_launch(3, rank_several, rep, &(a2amm_launch_options){.size = sizeof(a2amm_launch_options), .heap_bytes = 16u << 20}, &err);
    CHECK(rc == 0, "several ops: %s", err.msg);
    for (int r = 0; r < 3; r++) {
        CHECK(rep[r].rc == 0, "several ops, rank %d: %s", r, rep[r].msg);
        CHECK(rep[r].alltoall_ok, "rank %d: a2amm_comm_alltoall delivered other blocks", r);
        CHECK(rep[r].same_after_destroy, "rank %d: ops made and destroyed around an op changed its results", r);
        CHECK(rep[r].wrong_weights_refused, "rank %d: weights of another n were not refused", r);
    }
    munmap(rep, 3 * sizeof *rep);
}

static int rank_reported(a2amm_comm *comm, void *arg)
{
    enum launch_case c = *(const enum launch_case *)arg;
    a2amm_error err;
    if (a2amm_comm_rank(comm) == 1) {
        a2amm_comm_say(comm, "misbehaving on purpose, case %d", (int)c);
        if (c == EXITS) _exit(3);
        for (;;) pause(); /* STALLS, STOPPED: silent until killed */
    }
    a2amm_comm_say(comm, "waiting for rank 1");
    return a2amm_comm_barrier(comm, 60, &err);
}

static volatile sig_atomic_t stop_flag;
static void on_alarm(int sig) { stop_flag = sig; }

static void test_launch_reports(void)
{
    a2amm_rank_report rep[2];
    a2amm_error err;
    enum launch_case c = EXITS;
    a2amm_launch_options lo = {.size = sizeof(a2amm_launch_options), .reports = rep};
    int rc = a2amm_launch(2, rank_reported, &c, &lo, &err);
    CHECK(rc == A2AMM_E_PEER && strstr(err.msg, "rank 1"), "a rank exits: %d %s", rc, err.msg);
    CHECK(rep[1].started && rep[1].failed_first && rep[1].exit_code == 3 && rep[1].status == A2AMM_E_PEER,
          "report of the rank that exited: started %d first %d exit %d", rep[1].started, rep[1].failed_first,
          rep[1].exit_code);
    CHECK(strstr(rep[1].doing, "misbehaving on purpose") != NULL, "its last words: %s", rep[1].doing);
    CHECK(rep[0].started && !rep[0].failed_first && rep[0].status == A2AMM_E_PEER && strstr(rep[0].doing, "waiting for rank 1"),
          "the other: status %d, doing %s", rep[0].status, rep[0].doing);

    c = STALLS;
    lo.stall_s = 1.0;
    double t0 = now_s();
    rc = a2amm_launch(2, rank_reported, &c, &lo, &err);
    CHECK(rc == A2AMM_E_TIMEOUT && strstr(err.msg, "rank 1") && strstr(err.msg, "no sign of life"),
          "a silent rank fails the launch: %d %s", rc, err.msg);
    CHECK(now_s() - t0 < 20, "the stall watch took %.1f s", now_s() - t0);
    CHECK(rep[1].killed_by_launcher && rep[1].signal == SIGKILL, "the silent rank was killed");

    c = STOPPED;
    lo.stall_s = 0;
    lo.stop = &stop_flag;
    signal(SIGALRM, on_alarm);
    alarm(1);
    rc = a2amm_launch(2, rank_reported, &c, &lo, &err);
    alarm(0);
    CHECK(rc == A2AMM_E_INTERRUPTED && strstr(err.msg, "interrupted by signal"), "the stop flag: %d %s", rc, err.msg);
    CHECK(a2amm_launch(2, rank_reported, &c, &(a2amm_launch_options){.size = sizeof(a2amm_launch_options), .stall_s = -1}, &err) == A2AMM_E_INVAL,
          "a negative stall_s is refused");
}

int main(int argc, char **argv)
{
    (void)argc;
    const char *slash = strrchr(argv[0], '/');
    snprintf(a2amm_bin, sizeof a2amm_bin, "%.*s/../a2amm", slash ? (int)(slash - argv[0]) : 1, slash ? argv[0] : ".");
    if (access(a2amm_bin, X_OK) != 0) {
        fprintf(stderr, "test_op: the a2amm command is not at %s (build it first)\n", a2amm_bin);
        return 1;
    }
    for (int R = 1; R <= MAX_R; R++) test_calls(R);
    test_misuse();
    test_several_ops();
    test_launch_reports();
    return check_summary("test_op");
}
