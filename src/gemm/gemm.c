/* The gemm dispatcher: picks the ISA level once, routes calls to its kernel. */
#include "gemm/gemm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/cpu.h"
#include "common/error.h"
#include "gemm/gemm_amx.h"
#include "mx/mx.h"

static const char *const ISA_NAMES[GEMM_ISA_COUNT] = {"ref", "avx2", "avx512", "amx"};

const char *gemm_isa_name(gemm_isa isa)
{
    return (unsigned)isa < GEMM_ISA_COUNT ? ISA_NAMES[isa] : "?";
}

static const gemm_kernel_ops *kernel_ops(gemm_isa isa)
{
    switch (isa) {
    case GEMM_ISA_REF: return &gemm_ref_ops;
    case GEMM_ISA_AVX2: return gemm_avx2_ops_get();
    case GEMM_ISA_AVX512:
    case GEMM_ISA_AMX: return gemm_avx512_ops_get(); /* one packing; the kernel follows b->isa */
    }
    return NULL;
}

/* The features each level needs, as cpu.h names them. */
static const cpu_feature NEEDS_AVX2[] = {CPU_AVX2, CPU_FMA};
static const cpu_feature NEEDS_AVX512[] = {CPU_AVX512F, CPU_AVX512BW, CPU_AVX512BF16, CPU_AVX512VBMI};
static const cpu_feature NEEDS_AMX[] = {CPU_AMX_TILE, CPU_AMX_BF16};

/* The first feature of the list the library may not use, or -1. */
static int missing_of(const cpu_feature *needs, int n)
{
    for (int i = 0; i < n; i++)
        if (!cpu_has(needs[i])) return (int)needs[i];
    return -1;
}

#define MISSING(list) missing_of(list, (int)(sizeof list / sizeof list[0]))

const char *gemm_isa_why_not(gemm_isa isa)
{
    static __thread char why[160];
    int f = -1;
    switch (isa) {
    case GEMM_ISA_REF: return NULL;
    case GEMM_ISA_AVX2: f = MISSING(NEEDS_AVX2); break;
    case GEMM_ISA_AVX512: f = MISSING(NEEDS_AVX512); break;
    case GEMM_ISA_AMX:
        f = MISSING(NEEDS_AVX512);
        if (f < 0) f = MISSING(NEEDS_AMX);
        if (f < 0 && !gemm_amx_usable()) return "the OS does not grant the AMX tile state (arch_prctl refused)";
        break;
    default: return "no such level";
    }
    if (f < 0) return NULL;
    snprintf(why, sizeof why, "%s %s", cpu_detected((cpu_feature)f) ? "A2AMM_CPU_HIDE hides" : "this CPU lacks",
             cpu_feature_name((cpu_feature)f));
    return why;
}

int gemm_isa_supported(gemm_isa isa)
{
    return kernel_ops(isa) && gemm_isa_why_not(isa) == NULL;
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

int gemm_b_prepare(gemm_isa isa, const uint8_t *bq, const uint8_t *sb, int64_t N, int64_t K,
                   int64_t ldsb, a2amm_fp8_type type, gemm_b **out, a2amm_error *err)
{
    return gemm_b_prepare_on(NULL, isa, bq, sb, N, K, ldsb, type, out, err);
}

int gemm_b_prepare_on(pool *workers, gemm_isa isa, const uint8_t *bq, const uint8_t *sb, int64_t N, int64_t K,
                      int64_t ldsb, a2amm_fp8_type type, gemm_b **out, a2amm_error *err)
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
    *b = (gemm_b){isa, N, K, type, NULL};
    int rc = kernel_ops(isa)->prepare(b, bq, sb, ldsb, workers, err);
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
    kernel_ops(b->isa)->release(b);
    free(b);
}

gemm_isa gemm_b_isa(const gemm_b *b) { return b->isa; }

void gemm_accumulate(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen,
                     int64_t n0, int64_t n1, float *c, int64_t ldc)
{
    if (rows <= 0 || klen <= 0 || n1 <= n0) return;
    kernel_ops(b->isa)->accumulate(b, a, rows, k0, klen, n0, n1, c, ldc);
}

void gemm_multiply(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen, int64_t n0,
                   int64_t n1, float *c, int64_t ldc)
{
    if (rows <= 0 || n1 <= n0) return;
    const gemm_kernel_ops *ops = kernel_ops(b->isa);
    if (ops->multiply && klen > 0) {
        ops->multiply(b, a, rows, k0, klen, n0, n1, c, ldc);
        return;
    }
    for (int64_t i = 0; i < rows; i++) memset(c + i * ldc + n0, 0, (size_t)(n1 - n0) * sizeof *c);
    if (klen > 0) ops->accumulate(b, a, rows, k0, klen, n0, n1, c, ldc);
}

static void run_store(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen, int64_t n0,
                      int64_t n1, float *c, int64_t ldc, int overwrite, uint16_t *out, int64_t ldo)
{
    if (rows <= 0 || n1 <= n0) return;
    const gemm_kernel_ops *ops = kernel_ops(b->isa);
    if (ops->run_store && klen > 0) {
        ops->run_store(b, a, rows, k0, klen, n0, n1, c, ldc, overwrite, out, ldo);
        return;
    }
    if (overwrite) gemm_multiply(b, a, rows, k0, klen, n0, n1, c, ldc);
    else gemm_accumulate(b, a, rows, k0, klen, n0, n1, c, ldc);
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
