/*
 * The amx level (gemm_amx.c): its context is gemm_amx_level (gemm_level.h);
 * these are what else it shares (bench/tools/bench_amx_feed uses the tile
 * set-up too).
 */
#ifndef A2AMM_GEMM_AMX_H
#define A2AMM_GEMM_AMX_H

#include <stdint.h>

/* Rows of A a microkernel call multiplies: two tiles of 16. */
enum { GEMM_AMX_ROWS = 32 };

/*
 * Whether this CPU has AMX-BF16 and the kernel lets this process use its
 * tile registers (Linux asks for them once, arch_prctl ARCH_REQ_XCOMP_PERM;
 * forked children inherit the grant).
 */
int gemm_amx_usable(void);

/* Palette 1's tile configuration, as _tile_loadconfig reads it (tiles 0-7 used). Keep one in a global:
 * GCC 12 sees only the first 16 bytes of a local read by _tile_loadconfig and drops the stores to the rest. */
typedef struct gemm_amx_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} gemm_amx_config;

/* Loads the tile configuration on the calling thread; gemm_amx_end releases the tiles. */
void gemm_amx_begin(void);
void gemm_amx_end(void);

#endif
