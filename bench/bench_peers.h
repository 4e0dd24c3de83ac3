/*
 * The peers `a2amm bench gemm` measures a2amm against, on the same
 * dequantized values: oneDNN's bf16 matmul with its weights reordered into
 * oneDNN's packed layout once (the strongest peer a user can install here),
 * and OpenBLAS sgemm on fp32. Each is set up once (untimed), then run as
 * often as the caller times it. Only the a2amm command links these
 * libraries; the a2amm library never does.
 */
#ifndef A2AMM_CLI_BENCH_PEERS_H
#define A2AMM_CLI_BENCH_PEERS_H

#include <stdint.h>

#include "a2amm.h"

/* ---- oneDNN: C[M,N] = A[M,K] x B (packed once), bf16, else fp32 -------- */
typedef struct bench_onednn bench_onednn;

/*
 * Caps the ISA oneDNN may use at what A2AMM_CPU_HIDE leaves a2amm (hidden
 * AMX: avx512_core_bf16; hidden AVX512_BF16: avx512_core_vnni; hidden
 * AVX-512: avx2; hidden AVX2: sse41), so that the peer runs as on a CPU
 * without them; not when the user set ONEDNN_MAX_CPU_ISA. Call before
 * anything else of oneDNN's. Returns the cap's name, or NULL for none.
 */
const char *bench_onednn_cap_isa(void);
/* The ISA oneDNN runs at ("avx2", "avx512_core_bf16", ...). */
const char *bench_onednn_isa(void);

/*
 * a is A [M, K] bf16 row-major, bt is B transposed [N, K] bf16 (row n holds
 * column n of B); af and btf are the same values in fp32. The matmul is
 * bf16 in and out where oneDNN has one for this CPU, else fp32 in and out
 * (bench_onednn_is_f32). Sets oneDNN's OpenMP thread count to `threads`
 * first. Copies what it needs: the inputs may be freed afterwards.
 */
int bench_onednn_create(const uint16_t *a, const uint16_t *bt, const float *af, const float *btf, int64_t M,
                        int64_t N, int64_t K, int threads, bench_onednn **out, a2amm_error *err);
/* One matmul, waited for. */
int bench_onednn_run(bench_onednn *o, a2amm_error *err);
/* A [M, K] as the next run reads it: bf16 (uint16_t), or float where
 * bench_onednn_is_f32; the caller may write new rows there between runs. */
void *bench_onednn_input(const bench_onednn *o);
/* The last run's C [M, N]: bf16 (uint16_t), or float where bench_onednn_is_f32. */
const void *bench_onednn_result(const bench_onednn *o);
int bench_onednn_is_f32(const bench_onednn *o);
/* Why the bf16 matmul does not run (the fp32 one does instead), or NULL. */
const char *bench_onednn_bf16_why_not(const bench_onednn *o);
/* oneDNN's name for the implementation it chose ("brg:avx512_core_bf16"). */
const char *bench_onednn_impl(const bench_onednn *o);
/* The OpenMP threads oneDNN runs on (as OpenMP reports them), and how that
 * count was set. */
int bench_onednn_threads(const bench_onednn *o);
const char *bench_onednn_threads_how(const bench_onednn *o);
void bench_onednn_free(bench_onednn *o);
/* "2.6.3" (the library that is loaded, not the header). */
const char *bench_onednn_version(void);

/* ---- OpenBLAS: C[M,N] = A[M,K] x B, sgemm on fp32 ------------------------ */
/*
 * Waits until oneDNN's OpenMP workers sleep: libgomp spins them (300,000
 * rounds by default) after each parallel region, taking a core from whatever
 * runs next; they cannot be told to stop from here.
 */
void bench_onednn_idle(void *ctx);

typedef struct bench_openblas bench_openblas;

/* a is A [M, K] fp32 row-major, bt is B transposed [N, K]; both are used in
 * place (they must outlive the handle). Sets OpenBLAS's thread count. */
int bench_openblas_create(const float *a, const float *bt, int64_t M, int64_t N, int64_t K, int threads,
                          bench_openblas **out, a2amm_error *err);
int bench_openblas_run(bench_openblas *o, a2amm_error *err);
const float *bench_openblas_result(const bench_openblas *o);
/*
 * Stops OpenBLAS's worker threads, which otherwise spin (sched_yield) for
 * about 2^28 cycles after each call and take half a core from whatever runs
 * next (measured: a2amm's next call 2x slower); the next call starts them
 * again.
 */
void bench_openblas_idle(void *ctx);
void bench_openblas_free(bench_openblas *o);
/* The kernel OpenBLAS chose ("Haswell"), the OPENBLAS_CORETYPE it was given
 * (NULL when unset), and its build configuration line. */
const char *bench_openblas_corename(void);
const char *bench_openblas_coretype_env(void);
const char *bench_openblas_config(void);
/* The threads OpenBLAS says it runs on. */
int bench_openblas_threads(void);

#endif
