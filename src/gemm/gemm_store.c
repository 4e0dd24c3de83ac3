/*
 * gemm_store_bf16: fp32 accumulators to bf16, round to nearest even in
 * integer arithmetic (subnormals kept, NaN stays a quiet NaN), exactly as
 * mx_f32_to_bf16 does for one value. An AVX-512 loop where the CPU has it
 * (same bits: pure integer operations), else the scalar loop.
 */
#include <immintrin.h>

#include "common/cpu.h"
#include "gemm/gemm.h"
#include "gemm/gemm_bf16_round.h"
#include "mx/mx.h"

static void store_scalar(const float *c, int64_t n0, int64_t n1, uint16_t *out)
{
    for (int64_t n = n0; n < n1; n++) out[n] = mx_f32_to_bf16(c[n]);
}

__attribute__((target("avx512f,avx512bw"))) static void store_avx512(const float *c, int64_t n0, int64_t n1,
                                                                    uint16_t *out)
{
    int64_t n = n0;
    for (; n + 16 <= n1; n += 16) _mm256_storeu_si256((__m256i *)(out + n), gemm_bf16_round16(_mm512_loadu_ps(c + n)));
    store_scalar(c, n, n1, out);
}

void gemm_store_bf16(const float *c, int64_t ldc, int64_t rows, int64_t n0, int64_t n1, uint16_t *out,
                     int64_t ldo)
{
    int wide = cpu_has(CPU_AVX512F) && cpu_has(CPU_AVX512BW);
    for (int64_t i = 0; i < rows; i++) {
        if (wide) store_avx512(c + i * ldc, n0, n1, out + i * ldo);
        else store_scalar(c + i * ldc, n0, n1, out + i * ldo);
    }
}
