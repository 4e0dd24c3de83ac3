/*
 * a2amm: the fused AllToAll + MXFP8 quantized matmul across R ranks.
 *
 * This header is the library's manual. Every call returns an int status:
 * 0 (A2AMM_OK) on success, a negative A2AMM_E_* code on failure. Calls that
 * can fail in ways a user must understand (a file of the wrong size, a shape
 * that breaks a rule) also take an `a2amm_error *` that, when not NULL, is
 * filled with a message naming the file, rank or argument, what was expected
 * and what was found. The library never prints; the CLI does.
 *
 * The contract the operator implements is docs/op-contract.md.
 */
#ifndef A2AMM_H
#define A2AMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status codes ------------------------------------------------------ */
enum {
    A2AMM_OK = 0,
    A2AMM_E_INVAL = -1,    /* a bad argument or a shape that breaks a rule */
    A2AMM_E_IO = -2,       /* a file could not be opened, read or written */
    A2AMM_E_SIZE = -3,     /* a file is shorter or longer than the shape says */
    A2AMM_E_NOMEM = -4,    /* an allocation failed */
    A2AMM_E_OVERFLOW = -5, /* a size does not fit in the address space */
    A2AMM_E_FORMAT = -6,   /* a file's content is not what it should be */
    A2AMM_E_TIMEOUT = -7,  /* a wait outlived its deadline */
    A2AMM_E_PEER = -8,     /* another rank failed */
    A2AMM_E_SYS = -9,      /* an operating-system call failed */
    A2AMM_E_MISMATCH = -10, /* verification found results outside tolerance */
    A2AMM_E_INTERRUPTED = -11 /* stopped on request (a signal) */
};

/* A short, static description of a status code ("file size mismatch"). */
const char *a2amm_strerror(int status);

/* The detail of a failure: the status and a message for a person. */
typedef struct a2amm_error {
    int code;
    char msg[1024];
} a2amm_error;

/* ---- Element types ------------------------------------------------------ */
typedef enum a2amm_fp8_type {
    A2AMM_E4M3 = 0, /* OFP8 E4M3FN: bias 7, max 448, no Inf, S.1111.111 NaN */
    A2AMM_E5M2 = 1  /* OFP8 E5M2: bias 15, max 57344, IEEE-like Inf/NaN */
} a2amm_fp8_type;

/* "e4m3" / "e5m2". */
const char *a2amm_fp8_type_name(a2amm_fp8_type t);
/* Parses "e4m3" or "e5m2" (case-insensitive); returns A2AMM_E_INVAL otherwise. */
int a2amm_fp8_type_parse(const char *s, a2amm_fp8_type *out);

/* ---- Shapes ------------------------------------------------------------- */
/*
 * The operator's shape in the seed's command-line order M K N R.
 * Rank r holds A_r [R*M, ka] fp8 with scales [R*M, ska], and B_r stored
 * transposed [N, K] fp8 with scales [N, sk]; ka = K/R; ska = 2*ceil(ka/64);
 * sk = 2*ceil(K/64). Every rank writes out_r [M, N] bf16.
 */
typedef struct a2amm_shape {
    int64_t M, K, N, R;
    a2amm_fp8_type a_type, b_type;
} a2amm_shape;

/* Sizes derived from a checked shape, in elements (= bytes for fp8/E8M0). */
typedef struct a2amm_sizes {
    int64_t ka;        /* K / R */
    int64_t ska;       /* scale bytes per A row: 2*ceil(ka/64) */
    int64_t sk;        /* scale bytes per B row: 2*ceil(K/64) */
    size_t a_bytes;    /* input_a.bin: R*M*ka */
    size_t sa_bytes;   /* input_scaleA.bin: R*M*ska */
    size_t b_bytes;    /* input_b.bin: N*K */
    size_t sb_bytes;   /* input_scaleB.bin: N*sk */
    size_t out_bytes;  /* npu_out.bin / cpu_output.bin: M*N*2 */
} a2amm_sizes;

/*
 * Checks the contract's rules (M, K, N, R >= 1; K divisible by R; K/R a
 * multiple of 32; no size overflows) and fills *sizes (may be NULL).
 */
int a2amm_shape_check(const a2amm_shape *shape, a2amm_sizes *sizes, a2amm_error *err);

#ifdef __cplusplus
}
#endif
#endif
