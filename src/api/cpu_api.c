/* The public query of this CPU as the library sees it: its features (less
 * what A2AMM_CPU_HIDE hides) and the kernel levels they allow. */
#include "a2amm.h"
#include "common/cpu.h"
#include "common/error.h"
#include "common/pool.h"
#include "gemm/gemm.h"

const char *a2amm_cpu_model(void) { return cpu_model_name(); }

int a2amm_cpu_cores(void) { return pool_cpu_count(); }

int a2amm_cpu_env_check(a2amm_error *err) { return cpu_hide_check(err); }

int a2amm_cpu_feature_count(void) { return CPU_FEATURE_COUNT; }

int a2amm_cpu_feature(int index, const char **name, int *detected, int *hidden, int *used, a2amm_error *err)
{
    if (index < 0 || index >= CPU_FEATURE_COUNT)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_cpu_feature: index must be 0 to %d (got %d)",
                          CPU_FEATURE_COUNT - 1, index);
    cpu_feature f = (cpu_feature)index;
    if (name) *name = cpu_feature_name(f);
    if (detected) *detected = cpu_detected(f);
    if (hidden) *hidden = cpu_hidden(f);
    if (used) *used = cpu_has(f);
    return A2AMM_OK;
}

int a2amm_kernel_level_count(void) { return GEMM_ISA_COUNT; }

int a2amm_kernel_level(int index, const char **name, const char **why_not, a2amm_error *err)
{
    if (index < 0 || index >= GEMM_ISA_COUNT)
        return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_kernel_level: index must be 0 to %d (got %d)", GEMM_ISA_COUNT - 1,
                          index);
    if (name) *name = gemm_isa_name((gemm_isa)index);
    if (why_not) *why_not = gemm_isa_why_not((gemm_isa)index);
    return A2AMM_OK;
}

int a2amm_kernel(const char **name, a2amm_error *err)
{
    gemm_isa isa;
    int rc = gemm_isa_select(&isa, err);
    if (name) *name = rc ? NULL : gemm_isa_name(isa);
    return rc;
}
