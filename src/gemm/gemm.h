/*
 * The MXFP8 x MXFP8 -> fp32 matmul the operator is made of.
 *
 * B (a rank's weights, stored transposed [N, K] fp8 with E8M0 scales) is
 * prepared once into a gemm_b handle and reused across calls. A arrives in
 * slabs: `rows` rows of fp8 covering one range [k0, k0 + klen) of B's K,
 * with their scales, straight from wherever the rows live (a peer's memory,
 * a slot, a local buffer). gemm_accumulate adds A_slab * B[k0:k0+klen, n0:n1]
 * into an fp32 C; gemm_store_bf16 rounds C to bf16 once, to nearest even,
 * in integer arithmetic (subnormals kept).
 *
 * Determinism: for a given ISA level, the value of C[i][n] depends only on
 * the inputs and on the sequence of k ranges accumulated into it; never on
 * `rows`, on how [n0, n1) is split between threads, or on anything else.
 * Different ISA levels agree within the contract's tolerance.
 */
#ifndef A2AMM_GEMM_H
#define A2AMM_GEMM_H

#include <stdint.h>

#include "a2amm.h"
#include "common/pool.h"

typedef enum gemm_isa {
    GEMM_ISA_REF = 0,   /* portable C: the reference twin of every kernel */
    GEMM_ISA_AVX2 = 1,  /* AVX2 + FMA */
    GEMM_ISA_AVX512 = 2, /* AVX-512 BF16 (vdpbf16ps) + VBMI */
    GEMM_ISA_AMX = 3     /* the AVX-512 level's packing, multiplied by AMX-BF16 tiles (TDPBF16PS) */
} gemm_isa;

#define GEMM_ISA_COUNT 4

/* "ref", "avx2", "avx512", "amx". */
const char *gemm_isa_name(gemm_isa isa);
/* Whether this CPU (and OS) can run the level, with the features that
 * A2AMM_CPU_HIDE hides taken as absent (common/cpu.h). */
int gemm_isa_supported(gemm_isa isa);
/* Why the level cannot run here ("this CPU lacks avx512_bf16", "A2AMM_CPU_HIDE
 * hides amx_tile"), or NULL when it can. The string is the calling thread's
 * until its next call. */
const char *gemm_isa_why_not(gemm_isa isa);
/*
 * The level to use: the best this CPU supports, or the one the environment
 * variable A2AMM_ISA (ref|avx2|avx512|amx) forces. A forced level this CPU
 * cannot run is an error naming it and why, and so is an A2AMM_CPU_HIDE
 * that names no known feature.
 */
int gemm_isa_select(gemm_isa *out, a2amm_error *err);

/* Prepared weights: one rank's B, packed for one ISA level. */
typedef struct gemm_b gemm_b;

/*
 * Prepares B: b is [N, K] fp8 (B transposed, row c holds column c of B),
 * sb its scales [N, ldsb] (one E8M0 byte per 32 K values; ldsb >= K/32).
 * K must be a multiple of 32.
 */
int gemm_b_prepare(gemm_isa isa, const uint8_t *b, const uint8_t *sb, int64_t N, int64_t K,
                   int64_t ldsb, a2amm_fp8_type type, gemm_b **out, a2amm_error *err);
/* gemm_b_prepare with the work spread over a pool's threads (NULL: the caller's only): the same handle. */
int gemm_b_prepare_on(pool *workers, gemm_isa isa, const uint8_t *b, const uint8_t *sb, int64_t N, int64_t K,
                      int64_t ldsb, a2amm_fp8_type type, gemm_b **out, a2amm_error *err);
/*
 * gemm_b_prepare_on for calls of at most max_rows rows of A (0: any). Where
 * the level reads B in fp8 for so few rows (gemm_b_small_rows), B is kept
 * in fp8 only, no wider packed copy: no more memory than B's own codes and
 * scales. Such a handle still serves calls of more rows, with the same bits,
 * more slowly.
 */
int gemm_b_prepare_for(pool *workers, gemm_isa isa, const uint8_t *b, const uint8_t *sb, int64_t N, int64_t K,
                       int64_t ldsb, a2amm_fp8_type type, int64_t max_rows, gemm_b **out, a2amm_error *err);
/* The most rows of a call the level multiplies reading B in fp8 (0: it never does). */
int64_t gemm_b_small_rows(gemm_isa isa);
/* The bytes a prepared B holds (its packed forms, B's own codes and scales, the fold rule's summary). */
int64_t gemm_b_bytes(const gemm_b *b);
void gemm_b_free(gemm_b *b);
gemm_isa gemm_b_isa(const gemm_b *b);

/* Rows of A: fp8 values a[i*lda + t] with scale sa[i*ldsa + t/32]. */
typedef struct gemm_a_slab {
    const uint8_t *a;
    const uint8_t *sa;
    int64_t lda, ldsa;
    a2amm_fp8_type type;
} gemm_a_slab;

/*
 * C[i][n] += sum_{t < klen} A[i][t] * B[k0 + t][n] for i < rows, n0 <= n < n1,
 * accumulating in fp32 in a fixed order (by 32-blocks of K, ascending). k0
 * and klen are multiples of 32. NaN scales and NaN/Inf values propagate as
 * IEEE arithmetic says. Thread-safe for disjoint C regions.
 */
void gemm_accumulate(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen,
                     int64_t n0, int64_t n1, float *c, int64_t ldc);

/*
 * C[i][n] = 0, then gemm_accumulate over the same arguments, for i < rows,
 * n0 <= n < n1: the same bits, without reading C's old contents (which may
 * be anything). klen may be 0 (C is zeroed).
 */
void gemm_multiply(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen,
                   int64_t n0, int64_t n1, float *c, int64_t ldc);

/*
 * gemm_accumulate / gemm_multiply over the same arguments, then
 * gemm_store_bf16 of the same rows and columns into out: the same bits.
 * Afterwards C's contents in the region are unspecified (a fast level may
 * round its last sums straight to bf16 and never write them to C), so use
 * these for a region's last k range. klen may be 0.
 */
void gemm_accumulate_store(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen,
                           int64_t n0, int64_t n1, float *c, int64_t ldc, uint16_t *out, int64_t ldo);
void gemm_multiply_store(const gemm_b *b, const gemm_a_slab *a, int64_t rows, int64_t k0, int64_t klen,
                         int64_t n0, int64_t n1, float *c, int64_t ldc, uint16_t *out, int64_t ldo);

/*
 * How `threads` threads share a matmul of rows x [0, N) over klen of K: task
 * t of gemm_split_count(...) takes rows [r0, r1) x columns [n0, n1). Tall
 * problems split by rows (each thread packs only its own rows of A), short
 * ones by whole 64-column panels (each thread reads only its part of B),
 * tiny ones not at all (waking a thread costs more than they do). The
 * results do not depend on the split.
 */
typedef struct gemm_split {
    int64_t r0, r1, n0, n1;
} gemm_split;

int gemm_split_count(int64_t rows, int64_t N, int64_t klen, int threads);
gemm_split gemm_split_task(int64_t rows, int64_t N, int64_t klen, int threads, int task);

/* out[i][n] = bf16_rne(C[i][n]) for i < rows, n0 <= n < n1. */
void gemm_store_bf16(const float *c, int64_t ldc, int64_t rows, int64_t n0, int64_t n1,
                     uint16_t *out, int64_t ldo);

#endif
