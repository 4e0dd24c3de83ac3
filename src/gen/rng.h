/*
 * The generator's random numbers: splitmix64, one stream per (seed, rank or
 * expert, matrix) so that ranks can be generated in any order, and plain
 * arithmetic on top (no libm), so the same bits on every machine.
 */
#ifndef A2AMM_GEN_RNG_H
#define A2AMM_GEN_RNG_H

#include <stdint.h>

typedef struct rng { uint64_t s; } rng;

static inline uint64_t rng_next(rng *g)
{
    uint64_t z = (g->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline rng rng_stream(uint64_t seed, int rank, int matrix)
{
    rng g = {seed ^ (0xA2A33A2Aull * (uint64_t)(rank + 1)) ^ ((uint64_t)matrix << 56)};
    for (int i = 0; i < 4; i++) (void)rng_next(&g);
    return g;
}

/* Uniform in [0, 1) with 53 random bits: exact in double. */
static inline double rng_unit(rng *g) { return (double)(rng_next(g) >> 11) * 0x1p-53; }

/* Approximately standard normal: the Irwin-Hall sum of 12 uniforms minus 6. */
static inline float rng_normal(rng *g)
{
    double s = 0.0;
    for (int i = 0; i < 12; i++) s += rng_unit(g);
    return (float)(s - 6.0);
}

#endif
