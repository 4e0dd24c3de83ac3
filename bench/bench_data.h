/* Data the benchmarks draw: weights and activations as real ones look. */
#ifndef A2AMM_BENCH_DATA_H
#define A2AMM_BENCH_DATA_H

#include <stdint.h>

#include "a2amm.h"

/*
 * rows x cols values as ggml's tests draw them (floats uniform in [-1, 1],
 * from the xorshift state *s), MX-quantized to E4M3 codes and scales (row
 * strides cols and cols / 32; cols a multiple of 32), a chunk of rows at a
 * time: nearly no code is zero or subnormal, as in real weights, where
 * codes drawn uniformly put one in nearly every block (the widening's
 * exact path, which the tests cover and `bench moe --uniform-codes` times).
 */
int bench_uniform_mx(uint64_t *s, int64_t rows, int64_t cols, uint8_t *codes, uint8_t *scales, a2amm_error *err);

#endif
