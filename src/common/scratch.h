/*
 * Per-thread scratch memory that outlives a call: the kernels pack A into
 * a few hundred KB on every call, and a fresh allocation of that size is a
 * fresh mmap whose page faults cost as much as a small matmul (measured:
 * 192 x 1024 x 1024 ran at 75% of the kernel's speed on 1024 rows). Freed
 * when the thread exits.
 */
#ifndef A2AMM_COMMON_SCRATCH_H
#define A2AMM_COMMON_SCRATCH_H

#include <stddef.h>

/* 0-3: the gemm driver's; then the MoE op's: its down projection's sequential rows times 256, an expert's
 * g, u and a, an expert's gathered rows, the amx down projection's buffers (each user's own slot: one may
 * call the next while holding its memory, as the amx level calls the sequential rule for some rows); the
 * gemm driver's widened chunk of B (the widening path) */
enum {
    SCRATCH_MOE_DOWN = 4,
    SCRATCH_MOE_EXPERT = 5,
    SCRATCH_MOE_ROWS = 6,
    SCRATCH_MOE_TILES = 7,
    SCRATCH_GEMM_WIDE = 8,
    SCRATCH_SLOTS = 9
};

/*
 * A 64-byte-aligned buffer of at least `bytes` owned by the calling thread,
 * one per slot (0 .. SCRATCH_SLOTS-1): the same memory on every call that
 * fits, its contents not kept when it grows. NULL when out of memory.
 */
void *scratch_get(int slot, size_t bytes);

#endif
