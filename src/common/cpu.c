/* CPU features detected at run time, less those A2AMM_CPU_HIDE hides. */
#include "common/cpu.h"

#include <cpuid.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

static const char *const FEATURE_NAMES[CPU_FEATURE_COUNT] = {
    "avx2", "fma", "avx512f", "avx512bw", "avx512_vbmi", "avx512_bf16", "amx_tile", "amx_bf16", "f16c"};

const char *cpu_feature_name(cpu_feature f)
{
    return (unsigned)f < CPU_FEATURE_COUNT ? FEATURE_NAMES[f] : "?";
}

/* A bit of CPUID leaf 7, subleaf 0, EDX (the OS's consent is asked apart, by arch_prctl). */
static int leaf7_edx_bit(int bit)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (d >> bit) & 1u;
}

int cpu_detected(cpu_feature f)
{
    __builtin_cpu_init();
    switch (f) {
    case CPU_AVX2: return __builtin_cpu_supports("avx2");
    case CPU_FMA: return __builtin_cpu_supports("fma");
    case CPU_AVX512F: return __builtin_cpu_supports("avx512f");
    case CPU_AVX512BW: return __builtin_cpu_supports("avx512bw");
    case CPU_AVX512VBMI: return __builtin_cpu_supports("avx512vbmi");
    case CPU_AVX512BF16: return __builtin_cpu_supports("avx512bf16");
    case CPU_AMX_TILE: return leaf7_edx_bit(24); /* CPUID.(7,0):EDX; not every compiler's builtin knows AMX */
    case CPU_AMX_BF16: return leaf7_edx_bit(22);
    case CPU_F16C: { /* CPUID.1:ECX bit 29 (clang's builtin does not know "f16c") */
        unsigned a, b, c, d;
        return __get_cpuid(1, &a, &b, &c, &d) && ((c >> 29) & 1u);
    }
    case CPU_FEATURE_COUNT: break;
    }
    return 0;
}

#define BIT(f) (1u << (f))
#define AMX_BITS (BIT(CPU_AMX_TILE) | BIT(CPU_AMX_BF16))
#define AVX512_BITS (BIT(CPU_AVX512F) | BIT(CPU_AVX512BW) | BIT(CPU_AVX512VBMI) | BIT(CPU_AVX512BF16))

/* Each name hides its feature and every feature above it. */
static const struct {
    const char *name;
    unsigned bits;
} HIDE_NAMES[] = {
    {"amx", AMX_BITS},
    {"avx512bf16", BIT(CPU_AVX512BF16) | AMX_BITS},
    {"avx512", AVX512_BITS | AMX_BITS},
    {"avx2", BIT(CPU_AVX2) | BIT(CPU_FMA) | BIT(CPU_F16C) | AVX512_BITS | AMX_BITS},
};

static pthread_once_t hide_once = PTHREAD_ONCE_INIT;
static unsigned hide_bits;
static char hide_bad[64]; /* the first entry that is no known name; "" when all are known */

static void hide_parse(void)
{
    const char *env = getenv("A2AMM_CPU_HIDE");
    if (!env) return;
    unsigned bits = 0;
    const char *p = env;
    while (*p) {
        size_t len = strcspn(p, ",");
        size_t k = 0, n = sizeof HIDE_NAMES / sizeof HIDE_NAMES[0];
        int empty = len == 0 || (len == 4 && !strncmp(p, "none", 4));
        for (; !empty && k < n; k++)
            if (strlen(HIDE_NAMES[k].name) == len && !strncmp(p, HIDE_NAMES[k].name, len)) break;
        if (!empty && k == n) {
            size_t shown = len < sizeof hide_bad - 4 ? len : sizeof hide_bad - 4;
            memcpy(hide_bad, p, shown);
            strcpy(hide_bad + shown, len > shown ? "..." : "");
            return; /* a bad list hides nothing; cpu_hide_check reports it */
        }
        if (!empty) bits |= HIDE_NAMES[k].bits;
        p += len;
        if (*p == ',') p++;
    }
    hide_bits = bits;
}

int cpu_hidden(cpu_feature f)
{
    pthread_once(&hide_once, hide_parse);
    return (unsigned)f < CPU_FEATURE_COUNT && (hide_bits & BIT(f)) != 0;
}

int cpu_has(cpu_feature f) { return cpu_detected(f) && !cpu_hidden(f); }

int cpu_hide_check(a2amm_error *err)
{
    pthread_once(&hide_once, hide_parse);
    if (hide_bad[0])
        return a2amm_fail(err, A2AMM_E_INVAL, "A2AMM_CPU_HIDE=%s: '%s' is not a feature a2amm can hide (expected a "
                          "comma-separated list of " CPU_HIDE_NAMES ", or none)", getenv("A2AMM_CPU_HIDE"), hide_bad);
    return A2AMM_OK;
}

static pthread_once_t model_once = PTHREAD_ONCE_INIT;
static char model[49];

/* The brand string of CPUID leaves 0x80000002-4, trimmed. */
static void model_read(void)
{
    unsigned regs[12] = {0};
    if ((unsigned)__get_cpuid_max(0x80000000u, NULL) < 0x80000004u) {
        strcpy(model, "unknown");
        return;
    }
    for (int i = 0; i < 3; i++)
        __get_cpuid(0x80000002u + (unsigned)i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2], &regs[4 * i + 3]);
    memcpy(model, regs, 48);
    model[48] = '\0';
    char *s = model;
    while (*s == ' ') s++;
    memmove(model, s, strlen(s) + 1);
    for (size_t n = strlen(model); n > 0 && model[n - 1] == ' '; n--) model[n - 1] = '\0';
    if (!model[0]) strcpy(model, "unknown");
}

const char *cpu_model_name(void)
{
    pthread_once(&model_once, model_read);
    return model;
}

int cpu_vector_usable(cpu_vector_level level)
{
    switch (level) {
    case CPU_VECTOR_PORTABLE: return 1;
    case CPU_VECTOR_AVX2: return cpu_has(CPU_AVX2);
    case CPU_VECTOR_AVX512: return cpu_has(CPU_AVX512F) && cpu_has(CPU_AVX512BW);
    }
    return 0;
}

cpu_vector_level cpu_vector_best(void)
{
    return cpu_vector_usable(CPU_VECTOR_AVX512) ? CPU_VECTOR_AVX512
           : cpu_vector_usable(CPU_VECTOR_AVX2) ? CPU_VECTOR_AVX2
                                                : CPU_VECTOR_PORTABLE;
}

const char *cpu_vector_name(cpu_vector_level level)
{
    return level == CPU_VECTOR_AVX512 ? "avx512" : level == CPU_VECTOR_AVX2 ? "avx2" : "portable";
}
