/*
 * The fused AllToAll + MXFP8 matmul inside one rank: the pipeline the public
 * a2amm_op drives (src/api/op_api.c). For tile t the rows of every source
 * rank become visible (a direct read from the peer's memory, or a put into
 * slot t mod depth of a ring followed by a signal), and the rank multiplies
 * each source's rows as soon as they are visible, starting with its own
 * (read in place) and going round the ranks from there. The order of
 * accumulation is fixed (source j, j+1, ..., then K ascending), so results
 * are the same bits whatever the tile size, depth, threads or path, fused
 * or unfused.
 */
#ifndef A2AMM_OP_H
#define A2AMM_OP_H

#include <stdint.h>

#include "a2amm.h"

typedef enum op_path {
    OP_PATH_DIRECT = 0, /* load rows straight from the peer's memory */
    OP_PATH_PUT = 1     /* the owner puts rows into a ring of slots, then signals */
} op_path;

/* An op's pipeline settings, defaults filled in. */
typedef struct op_options {
    int64_t tile_m;   /* rows per tile */
    int depth;        /* ring slots per source */
    int threads;      /* compute threads of this rank */
    op_path path;
    int unfused;      /* whole AllToAll, barrier, then the matmul */
    double timeout_s; /* deadline of every wait */
} op_options;

#endif
