/*
 * What this CPU runs, as the library sees it: the features it detects at run
 * time, less those the environment variable A2AMM_CPU_HIDE hides.
 *
 * A2AMM_CPU_HIDE is a comma-separated list of amx, avx512bf16, avx512, avx2
 * (or empty / "none"). Each name hides that feature and every one above it,
 * as on a CPU that lacks it:
 *   amx         AMX-TILE and AMX-BF16                    -> the avx512 level
 *   avx512bf16  AVX512_BF16 (and AMX)                    -> the avx2 level
 *   avx512      every AVX-512 extension (and AMX)        -> the avx2 level
 *   avx2        AVX2 and FMA (and everything above them) -> the ref level
 * so that the fallbacks a user on another CPU gets run on whatever CPU the
 * tests have. Everything in a2amm that asks about a feature asks here.
 */
#ifndef A2AMM_COMMON_CPU_H
#define A2AMM_COMMON_CPU_H

#include "a2amm.h"

typedef enum cpu_feature {
    CPU_AVX2,
    CPU_FMA,
    CPU_AVX512F,
    CPU_AVX512BW,
    CPU_AVX512VBMI,
    CPU_AVX512BF16,
    CPU_AMX_TILE,
    CPU_AMX_BF16,
    CPU_F16C, /* fp16 <-> fp32 (vcvtph2ps): every AVX2 CPU has it; the avx2 level widens fp8 through it */
    CPU_FEATURE_COUNT
} cpu_feature;

/* The feature's name as /proc/cpuinfo spells it ("avx512_bf16"). */
const char *cpu_feature_name(cpu_feature f);
/* Whether the CPU reports the feature (hidden or not). */
int cpu_detected(cpu_feature f);
/* Whether A2AMM_CPU_HIDE hides it. */
int cpu_hidden(cpu_feature f);
/* Detected and not hidden: what the library may use. */
int cpu_has(cpu_feature f);

/*
 * Checks A2AMM_CPU_HIDE: A2AMM_OK when it is unset, empty, "none" or a list
 * of known names; A2AMM_E_INVAL naming the bad entry otherwise (and then
 * nothing is hidden).
 */
int cpu_hide_check(a2amm_error *err);
/* The names A2AMM_CPU_HIDE accepts, for messages and --help. */
#define CPU_HIDE_NAMES "amx, avx512bf16, avx512, avx2"

/*
 * The vector levels of the kernels that need plain integer and float
 * vectors only (the MX quantizer, the MoE activation): portable, avx2 (8
 * lanes; AVX2) and avx512 (16 lanes; AVX-512 F and BW). Whether this CPU
 * runs one (cpu_has: A2AMM_CPU_HIDE counts), the best it runs, a name.
 */
typedef enum cpu_vector_level { CPU_VECTOR_PORTABLE, CPU_VECTOR_AVX2, CPU_VECTOR_AVX512 } cpu_vector_level;
int cpu_vector_usable(cpu_vector_level level);
cpu_vector_level cpu_vector_best(void);
const char *cpu_vector_name(cpu_vector_level level);

/* The CPU's model name ("AMD EPYC 9B14"), or "unknown". */
const char *cpu_model_name(void);

#endif
