/* Data the benchmarks draw (bench_data.h). */
#include "bench/bench_data.h"

#include <stdlib.h>

#include "common/error.h"

int bench_uniform_mx(uint64_t *s, int64_t rows, int64_t cols, uint8_t *codes, uint8_t *scales, a2amm_error *err)
{
    enum { CHUNK_ROWS = 256 };
    float *tmp = malloc(sizeof *tmp * (size_t)(CHUNK_ROWS * cols));
    if (!tmp) return a2amm_fail(err, A2AMM_E_NOMEM, "out of memory");
    int rc = A2AMM_OK;
    for (int64_t r0 = 0; !rc && r0 < rows; r0 += CHUNK_ROWS) {
        const int64_t n = rows - r0 < CHUNK_ROWS ? rows - r0 : CHUNK_ROWS;
        for (int64_t i = 0; i < n * cols; i++) {
            *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
            tmp[i] = (float)((double)(*s * 0x2545F4914F6CDD1Dull >> 11) / 4503599627370496.0 - 1.0);
        }
        rc = a2amm_mx_quantize_f32(tmp, n, cols, cols, A2AMM_E4M3, A2AMM_SCALE_FLOOR, codes + r0 * cols, cols,
                                   scales + r0 * (cols / 32), cols / 32, err);
    }
    free(tmp);
    return rc;
}
