/*
 * The reverse op (matmul-alltoall) through the public API, R = 1 to 8 ranks
 * under a2amm_launch: rank r's output [R*m, N/R] holds, rows i*m.., column
 * block r of X_i x B_i for every rank i. Checked bit for bit against
 * a2amm_matmul of X_i by B_i, sliced (every rank makes every other's data:
 * it is a function of the rank), on every path, schedule, tile size,
 * thread count and at m from 1 to max_m, at every type pair; against an
 * fp64 dot product within a bf16 rounding; with N/R not a multiple of the
 * kernels' 16 or 64 columns; the input copied in or written in place; and
 * bad shapes refused naming the rule.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "a2amm.h"
#include "check.h"

enum { MAX_M = 23, K = 96, NB = 20, MAX_R = 8 }; /* N = R * NB: N/R = 20 columns per rank */

/* Every rank's data, a function of (rank, seed): X_r [MAX_M, K] and B_r [N, K], MX-quantized. */
typedef struct rank_data {
    uint8_t x[MAX_M * K], sx[MAX_M * K / 32], b[MAX_R * NB * K], sb[MAX_R * NB * K / 32];
} rank_data;

static float value(uint64_t seed, int r, int which, int64_t i)
{
    uint64_t h = seed * 0x9E3779B97F4A7C15ull ^ (uint64_t)(r * 7919 + which * 104729) ^ (uint64_t)i * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31, h *= 0x94D049BB133111EBull, h ^= h >> 29;
    double u = (double)(h >> 11) / 9007199254740992.0 - 0.5;
    return (float)(u * (1 + (int)(h % 5)) * ((h >> 8) % 7 == 0 ? 40.0 : 1.0)); /* some blocks with larger scales */
}

static int make_data(uint64_t seed, int r, int R, a2amm_fp8_type at, a2amm_fp8_type bt, rank_data *d)
{
    int64_t N = (int64_t)R * NB;
    float *f = malloc(sizeof(float) * (size_t)(N > MAX_M ? N : MAX_M) * K);
    if (!f) return A2AMM_E_NOMEM;
    for (int64_t i = 0; i < MAX_M * K; i++) f[i] = value(seed, r, 0, i);
    int rc = a2amm_mx_quantize_f32(f, MAX_M, K, K, at, A2AMM_SCALE_FLOOR, d->x, K, d->sx, K / 32, NULL);
    for (int64_t i = 0; !rc && i < N * K; i++) f[i] = value(seed, r, 1, i) / 8;
    if (!rc) rc = a2amm_mx_quantize_f32(f, N, K, K, bt, A2AMM_SCALE_RCEIL, d->b, K, d->sb, K / 32, NULL);
    free(f);
    return rc;
}

/* What a config and a run of calls check. */
typedef struct test_case {
    const char *name;
    int R;
    a2amm_fp8_type at, bt;
    a2amm_path path;
    a2amm_schedule schedule;
    int64_t tile_m;
    int threads;
    int in_place; /* the input written at a2amm_op_input */
} test_case;

typedef struct shared {
    test_case tc;
    int status[MAX_R];
    long mismatches[MAX_R], far[MAX_R], checked[MAX_R];
} shared;

static const int64_t CALL_M[] = {MAX_M, 1, 9, MAX_M};

/* fp64 value of X_i row r times B_i row n (dequantized exactly). */
static double dot64(const rank_data *d, a2amm_fp8_type at, a2amm_fp8_type bt, int64_t row, int64_t n)
{
    float x[K], b[K];
    a2amm_mx_dequantize_f32(d->x + row * K, K, d->sx + row * (K / 32), K / 32, 1, K, at, x, K, NULL);
    a2amm_mx_dequantize_f32(d->b + n * K, K, d->sb + n * (K / 32), K / 32, 1, K, bt, b, K, NULL);
    double s = 0;
    for (int k = 0; k < K; k++) s += (double)x[k] * (double)b[k];
    return s;
}

static float bf16_to_f32(uint16_t v)
{
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int rank_main(a2amm_comm *comm, void *arg)
{
    shared *sh = arg;
    const test_case *tc = &sh->tc;
    int me = a2amm_comm_rank(comm), R = tc->R;
    int64_t N = (int64_t)R * NB;
    a2amm_error err = {0, ""};
    rank_data *all = calloc((size_t)R, sizeof *all);
    uint16_t *out = malloc(sizeof(uint16_t) * (size_t)R * MAX_M * NB), *want = malloc(sizeof(uint16_t) * MAX_M * (size_t)N);
    int rc = all && out && want ? A2AMM_OK : A2AMM_E_NOMEM;
    for (int r = 0; !rc && r < R; r++) rc = make_data(77, r, R, tc->at, tc->bt, &all[r]);
    a2amm_op_config cfg = A2AMM_OP_CONFIG_INIT;
    cfg.kind = A2AMM_OP_MATMUL_ALLTOALL, cfg.max_m = MAX_M, cfg.k = K, cfg.n = N, cfg.a_type = tc->at;
    cfg.b_type = tc->bt, cfg.path = tc->path, cfg.schedule = tc->schedule, cfg.tile_m = tc->tile_m;
    cfg.threads = tc->threads, cfg.timeout_s = 30;
    a2amm_op *op = NULL;
    if (!rc) rc = a2amm_op_create(comm, &cfg, &op, &err);
    if (!rc) rc = a2amm_op_set_weights(op, all[me].b, all[me].sb, K / 32, &err);
    for (size_t c = 0; !rc && c < sizeof CALL_M / sizeof CALL_M[0]; c++) {
        int64_t m = CALL_M[c];
        memset(out, 0xEE, sizeof(uint16_t) * (size_t)R * MAX_M * NB);
        if (tc->in_place) {
            uint8_t *ia, *isa;
            int64_t lda, ldsa, block;
            rc = a2amm_op_input(op, &ia, &isa, &lda, &ldsa, &block, &err);
            if (!rc && (lda != K || ldsa != 2 * ((K + 63) / 64) || block != MAX_M)) {
                snprintf(err.msg, sizeof err.msg, "a2amm_op_input: lda %lld ldsa %lld block %lld", (long long)lda,
                         (long long)ldsa, (long long)block);
                rc = A2AMM_E_INVAL;
            }
            for (int64_t i = 0; !rc && i < m; i++) {
                memcpy(ia + i * lda, all[me].x + i * K, K);
                memset(isa + i * ldsa, 0, (size_t)ldsa);
                memcpy(isa + i * ldsa, all[me].sx + i * (K / 32), K / 32);
            }
            if (!rc) rc = a2amm_op_run(op, m, NULL, NULL, out, &err);
        } else {
            /* the caller's X [m, K] with scales [m, ldsa = 2*ceil(K/64) = 4]: the seed's padding */
            uint8_t sx[MAX_M * 4] = {0};
            for (int64_t i = 0; i < m; i++) memcpy(sx + i * 4, all[me].sx + i * (K / 32), K / 32);
            rc = a2amm_op_run(op, m, all[me].x, sx, out, &err);
        }
        /* block i of my output: column block `me` of X_i x B_i, rows 0..m */
        for (int i = 0; !rc && i < R; i++) {
            a2amm_weights *w = NULL;
            rc = a2amm_weights_create(all[i].b, all[i].sb, N, K, K / 32, tc->bt, 1, &w, &err);
            if (!rc) rc = a2amm_matmul(w, all[i].x, K, all[i].sx, K / 32, m, tc->at, want, N, 1, &err);
            a2amm_weights_destroy(w);
            for (int64_t r = 0; !rc && r < m; r++)
                for (int64_t n = 0; n < NB; n++) {
                    uint16_t got = out[(i * m + r) * NB + n], exp = want[r * N + me * NB + n];
                    sh->checked[me]++;
                    if (got != exp && !(isnan(bf16_to_f32(got)) && isnan(bf16_to_f32(exp)))) sh->mismatches[me]++;
                    if (c == 0 && (r + n) % 7 == 0) { /* and against fp64, within a bf16 rounding of a sum */
                        double ref = dot64(&all[i], tc->at, tc->bt, r, me * NB + n);
                        double g = bf16_to_f32(got);
                        if (isfinite(ref) && fabs(g - ref) > fabs(ref) / 128 + 1e-6) sh->far[me]++;
                    }
                }
        }
        /* the rows past R*m are not the op's to write */
        for (int64_t v = (int64_t)R * m * NB; !rc && v < (int64_t)R * MAX_M * NB; v++)
            if (out[v] != 0xEEEE) {
                sh->mismatches[me]++;
                break;
            }
    }
    a2amm_op_destroy(op);
    if (rc) fprintf(stderr, "%s: rank %d: %s\n", tc->name, me, err.msg);
    sh->status[me] = rc;
    free(all), free(out), free(want);
    return rc;
}

static void run_case(const test_case *tc)
{
    shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        CHECK(0, "mmap");
        return;
    }
    memset(sh, 0, sizeof *sh);
    sh->tc = *tc;
    a2amm_error err = {0, ""};
    a2amm_launch_options lo = A2AMM_LAUNCH_OPTIONS_INIT;
    lo.heap_bytes = 64u << 20, lo.timeout_s = 120;
    int rc = a2amm_launch(tc->R, rank_main, sh, &lo, &err);
    CHECK(rc == A2AMM_OK, "%s: launch: %s", tc->name, err.msg);
    for (int r = 0; r < tc->R; r++) {
        CHECK(sh->status[r] == A2AMM_OK, "%s: rank %d status %d", tc->name, r, sh->status[r]);
        CHECK(sh->checked[r] > 0 && sh->mismatches[r] == 0, "%s: rank %d: %ld of %ld values differ from a2amm_matmul's",
              tc->name, r, sh->mismatches[r], sh->checked[r]);
        CHECK(sh->far[r] == 0, "%s: rank %d: %ld values far from fp64", tc->name, r, sh->far[r]);
    }
    munmap(sh, sizeof *sh);
}

/* An op of a kind that is none: refused on every rank, naming the field. */
static int rank_bad_kind(a2amm_comm *comm, void *arg)
{
    (void)arg;
    a2amm_error err = {0, ""};
    a2amm_op_config cfg = A2AMM_OP_CONFIG_INIT;
    cfg.kind = (a2amm_op_kind)7, cfg.max_m = 4, cfg.k = 64, cfg.n = 32;
    a2amm_op *op = NULL;
    return a2amm_op_create(comm, &cfg, &op, &err);
}

/* Shapes the reverse op refuses, and why. */
static void check_bad_shapes(void)
{
    a2amm_error err = {0, ""};
    a2amm_op_config cfg = A2AMM_OP_CONFIG_INIT;
    cfg.kind = A2AMM_OP_MATMUL_ALLTOALL, cfg.max_m = 4, cfg.k = 64, cfg.n = 30; /* 30 % 4 != 0 */
    size_t bytes = 0;
    CHECK(a2amm_op_heap_bytes(&cfg, 4, &bytes, &err) == A2AMM_E_INVAL && strstr(err.msg, "N must be divisible by R"),
          "N not divisible by R refused naming the rule: %s", err.msg);
    cfg.n = 32, cfg.k = 48; /* not whole MX blocks */
    CHECK(a2amm_op_heap_bytes(&cfg, 4, &bytes, &err) == A2AMM_E_INVAL && strstr(err.msg, "multiple of 32"),
          "K = 48 refused naming the rule: %s", err.msg);
    cfg.k = 96; /* K/R need not be a multiple of 32 for the reverse op: 96 / 4 = 24 */
    CHECK(a2amm_op_heap_bytes(&cfg, 4, &bytes, &err) == A2AMM_OK && bytes > 0, "K = 96 on 4 ranks: %s", err.msg);
    cfg.kind = A2AMM_OP_ALLTOALL_MATMUL; /* which the seed's op refuses */
    CHECK(a2amm_op_heap_bytes(&cfg, 4, &bytes, &err) == A2AMM_E_INVAL && strstr(err.msg, "K / R must be a multiple"),
          "the same shape refused by alltoall-matmul: %s", err.msg);
    CHECK(a2amm_launch(2, rank_bad_kind, NULL, NULL, &err) == A2AMM_E_INVAL && strstr(err.msg, "kind must be"),
          "a kind that is none refused: %s", err.msg);
}

int main(void)
{
    static const a2amm_fp8_type T[2] = {A2AMM_E4M3, A2AMM_E5M2};
    char name[160];
    /* every R from 1 to 8, both paths and schedules, tiles that do and do not divide m */
    for (int R = 1; R <= MAX_R; R++)
        for (int v = 0; v < 4; v++) {
            test_case tc = {name, R, A2AMM_E4M3, A2AMM_E4M3, v % 2 ? A2AMM_PATH_PUT : A2AMM_PATH_DIRECT,
                            v / 2 ? A2AMM_SCHEDULE_UNFUSED : A2AMM_SCHEDULE_FUSED, R % 3 == 0 ? 4 : 7, 1 + R % 2, R % 2};
            snprintf(name, sizeof name, "R=%d %s %s tile %lld threads %d%s", R, v % 2 ? "put" : "direct",
                     v / 2 ? "unfused" : "fused", (long long)tc.tile_m, tc.threads, tc.in_place ? " in place" : "");
            run_case(&tc);
        }
    /* every type pair, one tile per call and one row per tile */
    for (int at = 0; at < 2; at++)
        for (int bt = 0; bt < 2; bt++)
            for (int64_t tile = 1; tile <= 64; tile *= 64) {
                test_case tc = {name, 3, T[at], T[bt], A2AMM_PATH_PUT, A2AMM_SCHEDULE_FUSED, tile, 2, 0};
                snprintf(name, sizeof name, "R=3 %s x %s, tile %lld", a2amm_fp8_type_name(T[at]),
                         a2amm_fp8_type_name(T[bt]), (long long)tile);
                run_case(&tc);
            }
    check_bad_shapes();
    return check_summary("test_reverse");
}
