/*
 * The machine's compute ceiling, measured by `a2amm bench`: T threads at
 * once, each in its own loop of independent accumulators (so latency never
 * limits): with AMX's TDPBF16PS (4 tiles, 32768 FLOP per instruction), with
 * vdpbf16ps (bf16 dot products, 24 zmm, 64 FLOP per instruction) and with
 * vfmadd231ps (fp32 FMA, 24 zmm, 32 FLOP per instruction). Only the
 * instructions this CPU has are run: without AMX-BF16 or AVX512_BF16 that
 * ceiling is absent; without AVX-512 the FMA ceiling is measured on ymm.
 * With AMX, a second figure: the same four TDPBF16PS with their two A and
 * two B tiles loaded every time from operands too large for L1 and held in
 * L2 (a2amm's packed layouts), the most a kernel fed from L2 can reach.
 * And the streaming read bandwidth: T threads each reading its part of a
 * buffer twice the last-level cache (at least 512 MiB) with plain 512-bit
 * (or 256-bit) loads, the most a matmul that is a read of B can reach.
 */
#ifndef A2AMM_CLI_BENCH_CEILING_H
#define A2AMM_CLI_BENCH_CEILING_H

#include "a2amm.h"

typedef struct bench_ceiling {
    int threads;
    double amx_gflops;  /* NAN when this CPU (or OS) has no AMX-BF16 */
    double amx_l2_gflops; /* the same, tiles loaded from L2 every step; NAN with amx_gflops */
    double bf16_gflops; /* NAN when this CPU has no AVX512_BF16 */
    double fma_gflops;  /* NAN when it has no FMA */
    const char *amx_what;  /* "tdpbf16ps tiles", or why it is absent */
    const char *amx_l2_what; /* "4 tile loads a step", or why it is absent */
    const char *bf16_what; /* "vdpbf16ps zmm", or why it is absent */
    const char *fma_what;  /* "vfmadd231ps zmm" / "vfmadd231ps ymm", or why absent */
    double read_gbs;       /* the streaming read, GB/s; NAN when not measured */
    double read_bytes;     /* the size of the buffer it reads */
    const char *read_what; /* "512-bit loads over 960 MiB", or why absent */
    double seconds;        /* the probe's whole time */
} bench_ceiling;

/*
 * Measures the ceilings on `threads` threads, each probe taking about
 * `seconds` (calibrated on this machine; the best of three runs counts).
 * fma_on_ymm: the FMA ceiling on ymm even where the CPU has AVX-512 (the
 * ceiling of a kernel that uses only AVX2). Fails only when threads cannot
 * be started.
 */
int bench_ceiling_measure(int threads, double seconds, int fma_on_ymm, bench_ceiling *out, a2amm_error *err);

/* The peak of two measurements (on a shared machine, the less disturbed
 * one): each ceiling's (and the read's) maximum, the probe times added. */
bench_ceiling bench_ceiling_peak(const bench_ceiling *a, const bench_ceiling *b);

#endif
