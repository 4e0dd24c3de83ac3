/*
 * The MoE activation's vector levels (src/op/swiglu.c) against the
 * portable one, bit for bit: every exponent of g with random mantissas and
 * both signs, the edges of exp's branches (e^-g's overflow, underflow and
 * subnormal range, the 2^n steps at n = 128 and n < -126), zeros, Inf and
 * NaN in g and u, and row lengths that leave a tail for the portable loop.
 *
 * test_swiglu [avx2|avx512]: one level (the suite runs each as a test of its
 * own); a level this CPU lacks is reported skipped (exit 77).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mx/expf.h"
#include "mx/mx.h"
#include "op/swiglu.h"

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* g values: each exponent (all 256 biased ones) with random mantissas and signs, then exp's edges. */
static int64_t make_g(float *g, int64_t cap)
{
    int64_t n = 0;
    for (uint32_t e = 0; e < 256; e++)
        for (int i = 0; i < 24 && n < cap; i++) g[n++] = from_bits((uint32_t)(rng() & 0x807FFFFFu) | e << 23);
    static const float edges[] = {0.0f, -0.0f, 88.72283935546875f, -88.72283935546875f, 88.7228f, -88.7229f,
                                  103.97208404541015625f, 103.972f, 103.9721f, -103.97208404541015625f,
                                  87.3365f, -87.3365f, 87.4f, 88.0f, 88.5f, 88.7f, 86.0f, 100.0f, -100.0f, 1e-40f,
                                  -1e-40f, 0.5f, -0.5f, 0.34657359f, -0.34657359f, 1.0f, -1.0f, 20.0f, -20.0f};
    for (size_t i = 0; i < sizeof edges / sizeof *edges && n < cap; i++) g[n++] = edges[i];
    /* -g where e^-g lands on the 2^n steps: n from -150 to 128, a value around each */
    for (int k = -150; k <= 128 && n + 3 <= cap; k++) {
        float x = (float)k * 0.69314718f;
        g[n++] = -x, g[n++] = -nextafterf(x, 1e9f), g[n++] = -nextafterf(x, -1e9f);
    }
    for (int i = 0; i < 8 && n < cap; i++) g[n++] = i % 2 ? INFINITY : -INFINITY;
    for (int i = 0; i < 8 && n < cap; i++) g[n++] = from_bits(0x7FC00000u | (uint32_t)i | (i % 2 ? 0x80000000u : 0));
    return n;
}

static void check_level(cpu_vector_level level)
{
    enum { CAP = 8192 };
    float *g = malloc(sizeof *g * CAP), *u = malloc(sizeof *u * CAP);
    uint16_t *want = malloc(sizeof *want * CAP), *got = malloc(sizeof *got * CAP);
    const int64_t n = make_g(g, CAP);
    for (int pass = 0; pass < 3; pass++) {
        for (int64_t i = 0; i < n; i++) /* u: ones, random values, and specials */
            u[i] = pass == 0 ? 1.0f
                   : pass == 1 ? from_bits((uint32_t)(rng() & 0x8FFFFFFFu) + (100u << 23))
                               : (i % 7 == 0 ? NAN : i % 7 == 1 ? INFINITY : i % 7 == 2 ? 0.0f : -3.5f);
        for (int64_t len = n; len >= n - 17; len -= 1 + len % 5) { /* tails of every length below a vector */
            memset(got, 0xA5, sizeof *got * CAP);
            swiglu_row_at(CPU_VECTOR_PORTABLE, g, u, len, want);
            swiglu_row_at(level, g, u, len, got);
            int64_t bad = -1;
            for (int64_t i = 0; bad < 0 && i < len; i++)
                if (want[i] != got[i]) bad = i;
            CHECK(bad < 0, "%s, u pass %d, %lld values: g %a (0x%08x), u %a: got 0x%04x, portable 0x%04x",
                  cpu_vector_name(level), pass, (long long)len, bad < 0 ? 0.0 : (double)g[bad],
                  bad < 0 ? 0u : f2u(g[bad]), bad < 0 ? 0.0 : (double)u[bad], bad < 0 ? 0 : got[bad],
                  bad < 0 ? 0 : want[bad]);
            CHECK(got[len] == 0xA5A5, "%s: wrote past the row's %lld values", cpu_vector_name(level), (long long)len);
        }
    }
    free(g), free(u), free(want), free(got);
}

/* The portable level is the activation as written: bf16(mx_silu(g) * u), NaN as 0x7FC0. */
static void check_portable(void)
{
    float g[64], u[64];
    uint16_t a[64];
    for (int i = 0; i < 64; i++) g[i] = (float)(i - 32) / 4.0f, u[i] = (float)(i % 5) - 2.0f;
    g[3] = NAN, u[5] = NAN, g[7] = -INFINITY;
    swiglu_row_at(CPU_VECTOR_PORTABLE, g, u, 64, a);
    int bad = 0;
    for (int i = 0; i < 64; i++) {
        float v = mx_silu(g[i]) * u[i];
        bad += a[i] != (isnan(v) ? 0x7FC0 : mx_f32_to_bf16(v));
    }
    CHECK(bad == 0, "portable swiglu: %d of 64 values differ from bf16(mx_silu(g) u)", bad);
    CHECK(a[3] == 0x7FC0 && a[5] == 0x7FC0 && a[7] == 0x7FC0, "NaN as 0x7FC0: 0x%04x 0x%04x 0x%04x", a[3], a[5], a[7]);
    float f[64];
    swiglu_row_f32(g, u, 64, f);
    for (int i = 0; i < 64; i++) bad += f2u(f[i]) != (uint32_t)a[i] << 16;
    CHECK(bad == 0, "swiglu_row_f32: %d of 64 values are not the bf16 bits as floats", bad);
}

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    if (argc > 2 || (only && strcmp(only, "avx2") && strcmp(only, "avx512"))) {
        fprintf(stderr, "usage: test_swiglu [avx2|avx512]\n");
        return 2;
    }
    rng_state = 0x2545F4914F6CDD1Dull;
    check_portable();
    int skipped = 0;
    static const cpu_vector_level levels[] = {CPU_VECTOR_AVX2, CPU_VECTOR_AVX512};
    for (int l = 0; l < 2; l++) {
        if (only && strcmp(only, cpu_vector_name(levels[l]))) continue;
        if (cpu_vector_usable(levels[l]))
            check_level(levels[l]);
        else
            printf("SKIP: the %s swiglu: this CPU lacks it (or A2AMM_CPU_HIDE hides it)\n", cpu_vector_name(levels[l])),
                skipped++;
    }
    int rc = check_summary("test_swiglu");
    return rc == 0 && skipped ? 77 : rc;
}
