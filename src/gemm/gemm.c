/*
 * The gemm dispatcher: the levels' table, which level runs here, and the
 * public calls, which the one driver (gemm_driver.c) runs on the level's
 * context.
 */
#include "gemm/gemm_level.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/cpu.h"
#include "common/error.h"
#include "mx/mx.h"

/* By gemm_isa. */
static const gemm_level *const LEVELS[GEMM_ISA_COUNT] = {&gemm_ref_level, &gemm_avx2_level, &gemm_avx512_level,
                                                         &gemm_amx_level};
static const char *const ISA_NAMES[GEMM_ISA_COUNT] = {"ref", "avx2", "avx512", "amx"};

const char *gemm_isa_name(gemm_isa isa)
{
    return (unsigned)isa < GEMM_ISA_COUNT ? ISA_NAMES[isa] : "?";
}

/* ---- Block sizes from the caches --------------------------------------------- */

static gemm_level blocked[GEMM_ISA_COUNT];
static pthread_once_t blocked_once = PTHREAD_ONCE_INIT;

/*
 * At most the rows of packed A whose block (`packs` chunks deep) fits in
 * an L2 of l2 bytes beside the panel's chunks of B it multiplies and the
 * next panel's, brought in meanwhile; the level's own figure where that is
 * more (it was measured), and at least one tile. The levels' figures fit
 * every L2 of 1 MB and more with room to spare, so this changes nothing
 * there; on a smaller L2 (256-512 KB) it keeps the design's premise that a
 * block of A stays in L2 while B's panels stream past.
 */
static int fit_rows(const gemm_level *L, int rows, int packs, long l2)
{
    if (l2 <= 0 || !L->kernel) return rows;
    int64_t b_bytes = 2 * (int64_t)packs * (L->kc / 32) * L->b_block;
    int64_t fit = (l2 - b_bytes) / ((int64_t)packs * L->a_ld) / L->mr * L->mr;
    if (fit < L->mr) fit = L->mr;
    return fit < rows ? (int)fit : rows;
}

static void block_levels(void)
{
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    for (int i = 0; i < GEMM_ISA_COUNT; i++) {
        blocked[i] = *LEVELS[i];
        int packs = blocked[i].all_k_chunks > 1 ? blocked[i].all_k_chunks : 1;
        blocked[i].mc = fit_rows(LEVELS[i], LEVELS[i]->mc, packs, l2);
        blocked[i].mc_deep = fit_rows(LEVELS[i], LEVELS[i]->mc_deep, 1, l2);
    }
}

const gemm_level *gemm_level_blocking(gemm_isa isa)
{
    pthread_once(&blocked_once, block_levels);
    return (unsigned)isa < GEMM_ISA_COUNT ? &blocked[isa] : NULL;
}

/* ---- Which level runs here ---------------------------------------------------- */

const char *gemm_isa_why_not(gemm_isa isa)
{
    static __thread char why[160];
    if ((unsigned)isa >= GEMM_ISA_COUNT) return "no such level";
    const gemm_level *L = LEVELS[isa];
    /* what the CPU lacks first (hiding it too changes nothing), then what A2AMM_CPU_HIDE hides */
    for (int lacking = 1; lacking >= 0; lacking--)
        for (int i = 0; i < L->nneeds; i++) {
            cpu_feature f = L->needs[i];
            if (cpu_has(f) || (cpu_detected(f) ? 0 : 1) != lacking) continue;
            snprintf(why, sizeof why, "%s %s", lacking ? "this CPU lacks" : "A2AMM_CPU_HIDE hides",
                     cpu_feature_name(f));
            return why;
        }
    if (L->why_not) return L->why_not();
    return NULL;
}

int gemm_isa_supported(gemm_isa isa)
{
    return gemm_isa_why_not(isa) == NULL;
}

int gemm_isa_select(gemm_isa *out, a2amm_error *err)
{
    int rc = cpu_hide_check(err);
    if (rc) return rc;
    const char *forced = getenv("A2AMM_ISA");
    if (forced && *forced) {
        for (int i = 0; i < GEMM_ISA_COUNT; i++)
            if (strcasecmp(forced, ISA_NAMES[i]) == 0) {
                if (!gemm_isa_supported((gemm_isa)i))
                    return a2amm_fail(err, A2AMM_E_INVAL,
                                      "A2AMM_ISA=%s: this CPU or build cannot run the %s kernels (%s)",
                                      forced, ISA_NAMES[i], gemm_isa_why_not((gemm_isa)i));
                *out = (gemm_isa)i;
                return A2AMM_OK;
            }
        return a2amm_fail(err, A2AMM_E_INVAL, "A2AMM_ISA=%s: expected ref, avx2, avx512 or amx", forced);
    }
    for (int i = GEMM_ISA_COUNT - 1; i >= 0; i--)
        if (gemm_isa_supported((gemm_isa)i)) {
            *out = (gemm_isa)i;
            return A2AMM_OK;
        }
    *out = GEMM_ISA_REF;
    return A2AMM_OK;
}

/* ---- Prepared B ------------------------------------------------------------------ */

int gemm_b_prepare(gemm_isa isa, const uint8_t *bq, const uint8_t *sb, int64_t N, int64_t K,
                   int64_t ldsb, a2amm_fp8_type type, gemm_b **out, a2amm_error *err)
{
    return gemm_b_prepare_on(NULL, isa, bq, sb, N, K, ldsb, type, out, err);
}

int gemm_b_prepare_on(pool *workers, gemm_isa isa, const uint8_t *bq, const uint8_t *sb, int64_t N, int64_t K,
                      int64_t ldsb, a2amm_fp8_type type, gemm_b **out, a2amm_error *err)
{
    return gemm_b_prepare_for(workers, isa, bq, sb, N, K, ldsb, type, 0, out, err);
}

int64_t gemm_b_small_rows(gemm_isa isa)
{
    if ((unsigned)isa >= GEMM_ISA_COUNT) return 0;
    const gemm_level *L = gemm_level_blocking(isa);
    return L->widen_b8 && L->widen_m > L->small_m ? L->widen_m : L->small_m; /* the small-M or widening path */
}

int64_t gemm_b_bytes(const gemm_b *b)
{
    return gemm_driver_bytes(b);
}

int gemm_b_prepare_for(pool *workers, gemm_isa isa, const uint8_t *bq, const uint8_t *sb, int64_t N, int64_t K,
                       int64_t ldsb, a2amm_fp8_type type, int64_t max_rows, gemm_b **out, a2amm_error *err)
{
    *out = NULL;
    if (N < 1 || K < 32 || K % 32 != 0 || ldsb < K / 32)
        return a2amm_fail(err, A2AMM_E_INVAL,
                          "gemm: B must be [N >= 1, K] with K a positive multiple of 32 and scale "
                          "stride >= K/32 (got N=%lld K=%lld stride=%lld)",
                          (long long)N, (long long)K, (long long)ldsb);
    if (!gemm_isa_supported(isa))
        return a2amm_fail(err, A2AMM_E_INVAL, "gemm: this CPU or build cannot run the %s kernels (%s)",
                          gemm_isa_name(isa), gemm_isa_why_not(isa));
    gemm_b *b = calloc(1, sizeof *b);
    if (!b) return a2amm_fail(err, A2AMM_E_NOMEM, "gemm: out of memory");
    b->isa = isa;
    b->level = gemm_level_blocking(isa);
    b->N = N;
    b->K = K;
    b->type = type;
    b->fp8_only = max_rows > 0 && max_rows <= gemm_b_small_rows(isa);
    int rc = gemm_driver_prepare(b, bq, sb, ldsb, workers, err);
    if (rc) {
        free(b);
        return rc;
    }
    *out = b;
    return A2AMM_OK;
}

void gemm_b_free(gemm_b *b)
{
    if (!b) return;
    gemm_driver_release(b);
    free(b);
}

gemm_isa gemm_b_isa(const gemm_b *b) { return b->isa; }

/* ---- The multiply ------------------------------------------------------------------ */

static void zero_c(int64_t rows, int64_t n0, int64_t n1, float *c, int64_t ldc)
{
    for (int64_t i = 0; i < rows; i++) memset(c + i * ldc + n0, 0, (size_t)(n1 - n0) * sizeof *c);
}

void gemm_accumulate(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen,
                     int64_t n0, int64_t n1, float *c, int64_t ldc)
{
    if (rows <= 0 || klen <= 0 || n1 <= n0) return;
    gemm_driver_run(b, a, rows, k0, klen, n0, n1, c, ldc, 0, NULL, 0);
}

void gemm_multiply(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen, int64_t n0,
                   int64_t n1, float *c, int64_t ldc)
{
    if (rows <= 0 || n1 <= n0) return;
    if (klen > 0) gemm_driver_run(b, a, rows, k0, klen, n0, n1, c, ldc, 1, NULL, 0);
    else zero_c(rows, n0, n1, c, ldc);
}

static void run_store(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen, int64_t n0,
                      int64_t n1, float *c, int64_t ldc, int overwrite, uint16_t *out, int64_t ldo)
{
    if (rows <= 0 || n1 <= n0) return;
    if (klen > 0) {
        gemm_driver_run(b, a, rows, k0, klen, n0, n1, c, ldc, overwrite, out, ldo);
        return;
    }
    if (overwrite) zero_c(rows, n0, n1, c, ldc);
    gemm_store_bf16(c, ldc, rows, n0, n1, out, ldo);
}

void gemm_accumulate_store(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen,
                           int64_t n0, int64_t n1, float *c, int64_t ldc, uint16_t *out, int64_t ldo)
{
    run_store(b, a, rows, k0, klen, n0, n1, c, ldc, 0, out, ldo);
}

void gemm_multiply_store(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen,
                         int64_t n0, int64_t n1, float *c, int64_t ldc, uint16_t *out, int64_t ldo)
{
    run_store(b, a, rows, k0, klen, n0, n1, c, ldc, 1, out, ldo);
}

/* ---- The split over threads -------------------------------------------------------- */

/* Rows per thread from which splitting by rows pays: one full block of packed A rows. */
enum { SPLIT_ROWS_MIN = 192, SPLIT_ROW_UNIT = 6, SPLIT_COL_UNIT = 64 };
/* Below this many multiply-adds one thread does it all: about 10 us of a core, the cost of a wake-up. */
#define SPLIT_WORK_MIN 2e6

/* How a split goes: along rows or columns, in `units` pieces of `unit`, over `tasks` tasks. */
typedef struct split_plan {
    int by_rows, tasks;
    int64_t total, unit, units;
} split_plan;

static split_plan split_plan_of(int64_t rows, int64_t N, int64_t klen, int threads)
{
    if (threads < 1 || rows < 1 || N < 1 || (double)rows * (double)N * (double)klen < SPLIT_WORK_MIN) threads = 1;
    split_plan s = {rows >= (int64_t)threads * SPLIT_ROWS_MIN, 1, 0, 0, 0};
    s.total = s.by_rows ? rows : N;
    s.unit = s.by_rows ? SPLIT_ROW_UNIT : SPLIT_COL_UNIT;
    s.units = (s.total + s.unit - 1) / s.unit;
    s.tasks = (int)(s.units < threads ? s.units : threads);
    return s;
}

int gemm_split_count(int64_t rows, int64_t N, int64_t klen, int threads)
{
    return split_plan_of(rows, N, klen, threads).tasks;
}

gemm_split gemm_split_task(int64_t rows, int64_t N, int64_t klen, int threads, int task)
{
    split_plan s = split_plan_of(rows, N, klen, threads);
    /* units spread evenly: task t takes [t * units / tasks, (t + 1) * units / tasks) */
    int64_t u0 = task * s.units / s.tasks, u1 = (task + 1) * s.units / s.tasks;
    int64_t b = u0 * s.unit, e = u1 * s.unit < s.total ? u1 * s.unit : s.total;
    return s.by_rows ? (gemm_split){b, e, 0, N} : (gemm_split){0, rows, b, e};
}
