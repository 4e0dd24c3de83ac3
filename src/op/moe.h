/*
 * The MoE op's rank-local steps (docs/op-contract.md, "The MoE op"): the
 * routing's checks, the dispatch records a rank sends, the experts on the
 * records that arrived (their partials), and the combine's sum. The API
 * (api/moe_api.c) moves records and partials between ranks.
 *
 * A dispatch record is one token for one owner rank: its slots that the
 * owner holds (local expert and weight, in slot order), then the token's
 * x codes and scales; records to an owner go in token order, and the
 * owner's partials come back in the order of its records.
 */
#ifndef A2AMM_OP_MOE_H
#define A2AMM_OP_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "a2amm.h"
#include "common/pool.h"
#include "gemm/gemm.h"
#include "op/moe_down.h"

typedef struct moe_shape {
    int R, me;       /* ranks, this rank */
    int E, local, k; /* experts, experts a rank (E/R), slots a token */
    int64_t H, I;    /* hidden, inner: multiples of 32 */
    a2amm_fp8_type a_type, b_type;
} moe_shape;

/* Bytes of a dispatch record (8-aligned). */
size_t moe_record_bytes(const moe_shape *s);
/* The token (its index on the sending rank) of record r of the records at recs. */
int32_t moe_record_token(const moe_shape *s, const uint8_t *recs, int64_t r);

/* The routing of a call of T tokens: every id in [-1, E), none twice in a token, every weight of a
 * used slot finite. 0, or A2AMM_E_INVAL naming the token and the slot. */
int moe_check_routing(const moe_shape *s, int64_t T, const int32_t *idx, const float *w, a2amm_error *err);

/* counts[o]: this rank's records for owner o (its tokens with a slot there). */
void moe_count(const moe_shape *s, int64_t T, const int32_t *idx, int64_t *counts);

/* The records of T tokens into send: owner o's at byte offset first[o] (moe_record_bytes apart). */
void moe_pack(const moe_shape *s, int64_t T, const uint8_t *x, const uint8_t *sx, int64_t ldsx, const int32_t *idx,
              const float *w, uint8_t *send, const size_t *first);

/* This rank's experts, prepared: the gate and up rows (W1, W3) for the kernel level's matmul, the down
 * projection (W2) packed for the down projection's level that goes with it (moe_down.h). */
typedef struct moe_weights {
    gemm_b **w13;      /* [local]: [2I, H] each */
    uint8_t *w2;       /* [local]: moe_down_bytes(H, I) each */
    moe_down_fn *down; /* the down projection's level */
} moe_weights;

/* max_rows: the most rows an expert can get in a call (R * max_tokens: a token reaches an owner once):
 * where the kernel level reads B in fp8 for so few, W1/W3 are kept in fp8 only (half the bytes a decode
 * call reads, the same bits). */
int moe_weights_prepare(const moe_shape *s, gemm_isa isa, int64_t max_rows, const uint8_t *w13, const uint8_t *s13,
                        int64_t ld13, const uint8_t *w2, const uint8_t *s2, int64_t ld2, moe_weights *out,
                        a2amm_error *err);
void moe_weights_free(const moe_shape *s, moe_weights *w);

/* What arrived, grouped: the (record, slot) pairs numbered in record order, then slot order (pair p's y
 * is row p of a [pairs, H] array); each expert's entries (its pairs in record order) listed. */
typedef struct moe_groups {
    int64_t nrec, pairs;
    int64_t *first; /* [nrec + 1]: record r's pairs are first[r] .. first[r + 1] - 1 */
    int64_t *start; /* [local + 1]: expert le's entries are start[le] .. start[le + 1] - 1 */
    int64_t *rec;   /* [pairs]: each entry's record */
    int64_t *pair;  /* [pairs]: each entry's pair */
} moe_groups;

int moe_group(const moe_shape *s, const uint8_t *recv, int64_t nrec, moe_groups *g, a2amm_error *err);
void moe_groups_free(moe_groups *g);
/* Expert le's rows (its entries' x) into codes [n, H] and scales [n, H/32]. */
void moe_gather_rows(const moe_shape *s, const uint8_t *recv, const moe_groups *g, int le, uint8_t *codes,
                     uint8_t *scales);
/* Local expert le on n rows of x (codes [n, H], scales [n, H/32]): g and u by the kernel level's matmul, a =
 * bf16(silu(g) u), y by the down projection's level, into ys[i] (H floats each). 0, or -1 out of memory. */
int moe_expert_rows(const moe_shape *s, const moe_weights *w, int le, const uint8_t *codes, const uint8_t *scales,
                    int64_t n, float *const *ys);
/* When and where an expert ran (for the op's observer): CLOCK_MONOTONIC ns, the pool's thread, its rows. */
typedef struct moe_expert_span {
    int64_t t0_ns, t1_ns;
    int thread;
    int64_t rows;
} moe_expert_span;

/* Every expert on its rows, shared out over the pool's threads (the same bits on any number): y [pairs, H];
 * spans[local] (or NULL) gets each expert's (rows 0 where it had none). */
int moe_experts(const moe_shape *s, const moe_weights *w, pool *workers, const uint8_t *recv, const moe_groups *g,
                float *y, moe_expert_span *spans, a2amm_error *err);
/* The partials, one a record in record order: its slots' w * y[pair] (y: a row per pair) in slot order in
 * fp32, rounded to bf16 once; rows shared out over the pool's threads (NULL: this thread), each row's bits its
 * own. */
void moe_partials(const moe_shape *s, const uint8_t *recv, const moe_groups *g, const float *const *y,
                  uint16_t *partials, pool *workers);

/* (tokens shared out over the pool's threads as the partials' rows are) out[t] = bf16 of the fp32 sum, owners in rank order, of token t's partials (owner o's rows start at
 * partials + first[o] elements, in the order of the records sent there); zeros for a token with none. */
int moe_combine(const moe_shape *s, int64_t T, const int32_t *idx, const uint16_t *partials, const size_t *first,
                uint16_t *out, pool *workers, a2amm_error *err);

#endif
