/* The VDPBF16PS order probe (gemm_bf16_order.h). */
#include "gemm/gemm_bf16_order.h"

#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "common/cpu.h"
#include "mx/mx.h"

#define ORDER_TARGET __attribute__((target("avx512f,avx512bf16")))

/* A bf16 with a random sign, exponent in [100, 149] and mantissa (products and sums stay normal). */
static uint16_t probe_bf16(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t r = *state >> 33;
    return (uint16_t)((r & 1) << 15 | (100 + (r >> 1) % 50) << 7 | (r >> 8 & 0x7F));
}

/* acc plus the products odd and even (each exact in fp32: 8-bit mantissas) in `order`. */
static float sum_as(gemm_dot_order order, float acc, float odd, float even)
{
    switch (order) {
    case GEMM_DOT_EVEN_FIRST: return (acc + even) + odd;
    case GEMM_DOT_PAIR_FIRST: return acc + (odd + even);
    case GEMM_DOT_ONE_ROUNDING: return (float)((double)acc + (double)odd + (double)even);
    default: return (acc + odd) + even;
    }
}

static ORDER_TARGET int probe(gemm_dot_order order)
{
    uint64_t state = 0x2545F4914F6CDD1Dull;
    for (int it = 0; it < 64; it++) {
        uint16_t x[32], y[32];
        float acc[16], got[16];
        for (int i = 0; i < 32; i++) x[i] = probe_bf16(&state), y[i] = probe_bf16(&state);
        for (int j = 0; j < 16; j++) acc[j] = mx_bf16_to_f32(probe_bf16(&state)) * mx_bf16_to_f32(probe_bf16(&state));
        _mm512_storeu_ps(got, _mm512_dpbf16_ps(_mm512_loadu_ps(acc), (__m512bh)_mm512_loadu_si512(x),
                                               (__m512bh)_mm512_loadu_si512(y)));
        for (int j = 0; j < 16; j++) {
            const float odd = mx_bf16_to_f32(x[2 * j + 1]) * mx_bf16_to_f32(y[2 * j + 1]);
            const float even = mx_bf16_to_f32(x[2 * j]) * mx_bf16_to_f32(y[2 * j]);
            const float want = sum_as(order, acc[j], odd, even);
            if (memcmp(&want, &got[j], sizeof want)) return 0;
        }
    }
    return 1;
}

int gemm_bf16_dot_sums_as(gemm_dot_order order)
{
    if (!cpu_detected(CPU_AVX512F) || !cpu_detected(CPU_AVX512BF16)) return 0;
    return probe(order);
}

static pthread_once_t order_once = PTHREAD_ONCE_INIT;
static int order_holds;

static void order_check(void) { order_holds = gemm_bf16_dot_sums_as(GEMM_DOT_ODD_FIRST); }

int gemm_bf16_dot_order_holds(void)
{
    pthread_once(&order_once, order_check);
    return order_holds;
}
