/*
 * The op-kind table: what differs between the even ops (the seed's AllToAll
 * then matmul, and the reverse), said once. Its rows give each kind's name,
 * its shape rules, the geometry of its input and output, its fused and
 * unfused execution and its words in traces; the library (op_api.c, the
 * public a2amm_op_geometry), the harness (gen, run, verify, trace) and the
 * Python extension (through the public queries) read them instead of
 * branching on the kind. A new even kind is one row and its execution.
 * (The MoE op is an object of its own: its per-rank token counts, top-k
 * routes and per-expert weights are not this geometry; docs/op-contract.md.)
 */
#ifndef A2AMM_OP_KIND_H
#define A2AMM_OP_KIND_H

#include <stdint.h>

#include "a2amm.h"
#include "common/error.h"
#include "common/shape.h"

typedef struct op_rank op_rank;

typedef struct op_kind_row {
    op_kind kind;
    a2amm_op_kind api_kind;
    const char *name;        /* as the command, the meta file and Python spell it */
    /* The kind's own shape rules (the common ones, M, K, N, R >= 1, are checked first): A2AMM_E_INVAL
     * naming the rule; *ka = the columns of a row of A_r. */
    int (*rules)(const op_shape *s, int64_t *ka, a2amm_error *err);
    int a_blocks_per_rank;   /* A_r: R blocks of m rows, one per destination (1), or one block of m (0) */
    int out_blocks_per_rank; /* out_r: R blocks of m rows, one per source (1), or m rows (0) */
    int out_cols_split;      /* out_r's columns: N / R (1), or N (0) */
    int matmul_first;        /* the matmul makes what travels (1), or multiplies what came (0) */
    /* A tile's matmul with `peer`, in traces: the block made "to" it, or the rows from it ("source") */
    const char *matmul_peer_key, *matmul_arrow;
    int (*exec_fused)(op_rank *rk, uint64_t tiles_before, a2amm_error *err);
    int (*exec_unfused)(op_rank *rk, a2amm_error *err);
} op_kind_row;

/* The row of a kind; NULL for none. */
const op_kind_row *op_kind_row_of(op_kind kind);
/* The row of a public kind; NULL for none. */
const op_kind_row *op_kind_row_of_api(a2amm_op_kind kind);
/* The kinds in order: row i (i = 0, 1, ...), NULL past the last. */
const op_kind_row *op_kind_row_at(int i);

#endif
