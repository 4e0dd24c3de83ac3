/* The MoE op's exp and SiLU (see expf.h): Cody-Waite reduction by ln 2, a degree-7 polynomial, 2^n. */
#include "mx/expf.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* 2^n for a normal exponent, -126 <= n <= 127. */
static float pow2(int n)
{
    uint32_t bits = (uint32_t)(n + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

float mx_expf(float x)
{
    if (x != x) return x + x;
    if (x > 88.72283935546875f) return INFINITY; /* e^x over FLT_MAX: ln(FLT_MAX) is 88.7228391... */
    if (x < -103.97208404541015625f) return 0.0f; /* under half the smallest subnormal, 2^-150 */
    /* x = n ln2 + r, |r| <= ln2 / 2; ln2 in two parts: n * LN2_HI is exact (|n| <= 150, LN2_HI has 16 bits) */
    const float LOG2E = 1.44269504088896341f, LN2_HI = 0.693145751953125f, LN2_LO = 1.42860682030941723212e-6f;
    int n = (int)(x * LOG2E + (x >= 0 ? 0.5f : -0.5f));
    float r = (x - (float)n * LN2_HI) - (float)n * LN2_LO;
    /* e^r by its Taylor polynomial to r^7 (the next term is under 2^-28 of it on |r| <= 0.347) */
    float p = 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    /* times 2^n in two exact steps where 2^n is not a normal float: the last one rounds (subnormal) once */
    if (n > 127) return p * pow2(n - 1) * 2.0f;
    if (n < -126) return p * pow2(n + 64) * pow2(-64);
    return p * pow2(n);
}

float mx_silu(float g) { return g / (1.0f + mx_expf(-g)); }
