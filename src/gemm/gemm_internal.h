/* What the gemm dispatcher, the driver and the levels share: the prepared-B handle. */
#ifndef A2AMM_GEMM_INTERNAL_H
#define A2AMM_GEMM_INTERNAL_H

#include "gemm/gemm.h"
#include "gemm/gemm_exact.h"

struct gemm_level;

/*
 * Prepared B, the same for every level: B's codes and scales (the exact
 * path reads them; the ref level reads nothing else), and, for a level with
 * a microkernel, the level's packed panels and the fold rule's summary of
 * each (K-block, panel).
 */
struct gemm_b {
    gemm_isa isa;
    const struct gemm_level *level; /* its context, blocking set for this CPU */
    int64_t N, K;
    a2amm_fp8_type type;
    gemm_exact_b exact;
    void *packed;          /* npanels panels of K/32 blocks of level->b_block bytes, 64-byte aligned; or NULL */
    size_t packed_bytes, codes_bytes;
    gemm_panel_info *info; /* [K/32][npanels], or NULL */
    gemm_panel_group *groups; /* [npanels][ngroups]: info 32 K-blocks at a time, or NULL */
    int64_t npanels, ngroups;
    int fp8_only;          /* packed is NULL: every call reads B in fp8 (the level's small-M path) */
    float values[2][256];  /* each code's value by a2amm_fp8_type: A's, for the exact path */
};

#endif
