/*
 * The step of the L2-fed AMX probe (bench_ceiling.c), shared with
 * bench/tools/amx_parts so that its first line is exactly the probe's loop
 * on a real call's operands: per step two A tiles (16 rows a_ld bytes
 * apart, 64 bytes along them; the next 32-row group once a row's
 * a_ld - 64 bytes are walked; back to the first at a_bytes) and two B tiles
 * (16 K-pair rows b_ld bytes apart, on to the next 16 rows; back at
 * b_bytes), four TDPBF16PS into tmm0-3, in the kernel's tile configuration
 * (gemm_amx_begin).
 */
#ifndef A2AMM_BENCH_AMX_STEP_H
#define A2AMM_BENCH_AMX_STEP_H

#include <immintrin.h>
#include <stdint.h>

static inline __attribute__((always_inline, target("amx-tile,amx-bf16"))) void
bench_amx_l2_steps(const char *a_base, int64_t a_ld, int64_t a_bytes, const char *b_base, int64_t b_ld,
                   int64_t b_bytes, int64_t steps)
{
    const int64_t a_group = 32 * a_ld, b_step = 16 * b_ld;
    int64_t ka = 0, ga = 0, kb = 0;
    for (int64_t n = 0; n < steps; n++) {
        const char *a = a_base + ga + ka, *b = b_base + kb;
        _tile_loadd(4, a, a_ld);
        _tile_loadd(6, b, b_ld);
        _tile_loadd(7, b + 64, b_ld);
        _tile_loadd(5, a + 16 * a_ld, a_ld);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
        ka += 64;
        if (ka == a_ld - 64) {
            ka = 0;
            ga = ga + a_group < a_bytes ? ga + a_group : 0;
        }
        kb = kb + b_step < b_bytes ? kb + b_step : 0;
    }
}

#endif
