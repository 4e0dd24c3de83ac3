/*
 * The machine's compute ceiling, measured by `a2amm bench`: T threads at
 * once, each in its own loop of 24 independent accumulators (so latency
 * never limits), once with vdpbf16ps (bf16 dot products, 64 FLOP per zmm
 * instruction) and once with vfmadd231ps (fp32 FMA, 32 FLOP per zmm).
 * Only the instructions this CPU has are run: without AVX512_BF16 the bf16
 * ceiling is absent; without AVX-512 the FMA ceiling is measured on ymm.
 */
#ifndef A2AMM_CLI_BENCH_CEILING_H
#define A2AMM_CLI_BENCH_CEILING_H

#include "a2amm.h"

typedef struct bench_ceiling {
    int threads;
    double bf16_gflops; /* NAN when this CPU has no AVX512_BF16 */
    double fma_gflops;  /* NAN when it has no FMA */
    const char *bf16_what; /* "vdpbf16ps zmm", or why it is absent */
    const char *fma_what;  /* "vfmadd231ps zmm" / "vfmadd231ps ymm", or why absent */
    double seconds;        /* the probe's whole time */
} bench_ceiling;

/*
 * Measures both ceilings on `threads` threads, each probe taking about
 * `seconds` (calibrated on this machine; the best of three runs counts).
 * Fails only when threads cannot be started.
 */
int bench_ceiling_measure(int threads, double seconds, bench_ceiling *out, a2amm_error *err);

/* The peak of two measurements (on a shared machine, the less disturbed
 * one): each ceiling's maximum, the probe times added. */
bench_ceiling bench_ceiling_peak(const bench_ceiling *a, const bench_ceiling *b);

#endif
