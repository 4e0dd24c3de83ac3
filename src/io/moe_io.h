/*
 * The MoE op's data on disk (docs/op-contract.md, "The MoE op"): the seed's
 * folder layout with the MoE op's files, each rank sized by its own tokens.
 *
 *   DIR/input/<r>/input_x.bin           x [T_r, H] fp8 (a_type)
 *   DIR/input/<r>/input_scaleX.bin      [T_r, 2*ceil(H/64)] E8M0
 *   DIR/input/<r>/input_topk_idx.bin    [T_r, K] int32 little-endian (-1: unused slot)
 *   DIR/input/<r>/input_topk_w.bin      [T_r, K] fp32 little-endian
 *   DIR/input/<r>/input_w13.bin         [E/R, 2I, H] fp8 (b_type): gate rows, then up rows
 *   DIR/input/<r>/input_scaleW13.bin    [E/R, 2I, 2*ceil(H/64)] E8M0
 *   DIR/input/<r>/input_w2.bin          [E/R, H, I] fp8 (b_type)
 *   DIR/input/<r>/input_scaleW2.bin     [E/R, H, 2*ceil(I/64)] E8M0
 *   DIR/output/<r>/cpu_output.bin       the golden, bf16 [T_r, H]
 *   DIR/output/<r>/npu_out.bin          the result, bf16 [T_r, H]
 *   DIR/input/a2amm-meta.txt            'op moe', the shape, every rank's tokens
 *
 * The same rules as io.h: exact-size reads, atomic writes.
 */
#ifndef A2AMM_IO_MOE_IO_H
#define A2AMM_IO_MOE_IO_H

#include <stddef.h>
#include <stdint.h>

#include "a2amm.h"
#include "io/io.h"

#define MOE_IO_MAX_R 256   /* ranks a MoE data set may have */
#define MOE_IO_MAX_TOPK 32 /* slots a token (the op's own limit) */
#define MOE_IO_MAX_LOCAL 1024 /* experts a rank */

/* How gen routes the tokens (--route). */
typedef enum moe_io_route {
    MOE_ROUTE_UNIFORM = 0, /* top-k of softmaxed random logits */
    MOE_ROUTE_SKEWED,      /* experts drawn with Zipf popularity (expert e about 1/(e+1)) */
    MOE_ROUTE_HOT,         /* every token's first slot on expert 0 */
    MOE_ROUTE_EMPTY        /* odd ranks without tokens (unless --tokens says), some unused slots */
} moe_io_route;
#define MOE_ROUTE_COUNT 4
const char *moe_io_route_name(moe_io_route r);
int moe_io_route_parse(const char *s, moe_io_route *out);

/* The data's shape: positional T H I R, --experts, --topk, every rank's tokens, the types. */
typedef struct moe_io_shape {
    int64_t T, H, I; /* T: the most tokens of a rank (max_tokens) */
    int R, E, K;
    int64_t tokens[MOE_IO_MAX_R]; /* [R]: rank r's T_r, 0..T */
    a2amm_fp8_type a_type, b_type;
} moe_io_shape;

/* The contract's rules: R from 1 to MOE_IO_MAX_R, E divisible by R (at most MOE_IO_MAX_LOCAL a rank), H and I multiples of 32, 1 <= K <=
 * min(E, 32), 0 <= T_r <= T, no size overflows; A2AMM_E_INVAL naming the rule. */
int moe_io_shape_check(const moe_io_shape *s, a2amm_error *err);

/* Scale bytes a row of n values in the seed's layout: 2*ceil(n/64). */
static inline int64_t moe_io_scale_row(int64_t n) { return 2 * ((n + 63) / 64); }

/* One rank's arrays, as the files hold them. */
typedef struct moe_io_rank {
    int64_t T;
    uint8_t *x, *sx;
    int32_t *idx;
    float *w;
    uint8_t *w13, *s13, *w2, *s2;
} moe_io_rank;

/* The input files, in a fixed order (each rank's sizes: moe_io_rank_bytes). */
#define MOE_IO_INPUTS 8
extern const io_rank_file moe_io_inputs[MOE_IO_INPUTS];
void moe_io_rank_bytes(const moe_io_shape *s, int r, size_t bytes[MOE_IO_INPUTS]);

int moe_io_rank_alloc(const moe_io_shape *s, int r, moe_io_rank *d, a2amm_error *err);
void moe_io_rank_free(moe_io_rank *d);
/* Rank r's eight input files, each checked for its size (the message names the rank and the file). */
int moe_io_rank_load(const char *dir, const moe_io_shape *s, int r, moe_io_rank *d, a2amm_error *err);
int moe_io_rank_save(const char *dir, const moe_io_shape *s, int r, const moe_io_rank *d, a2amm_error *err);

/* What gen records (DIR/input/a2amm-meta.txt, 'op moe'). */
typedef struct moe_io_meta {
    moe_io_shape shape;
    moe_io_route route;
    char scale_mode[24];
    uint64_t seed;
} moe_io_meta;

/*
 * The meta file of MoE data: 'a2amm-meta 1', 'op moe', then one 'key value'
 * line each of T, H, I, R, experts, topk, tokens (R numbers, comma
 * separated), a_type, b_type, route, scale_mode and seed; nothing else.
 * moe_io_meta_read parses it strictly (A2AMM_E_FORMAT naming the line and
 * the rule; A2AMM_E_IO when it cannot be opened).
 */
int moe_io_meta_write(const char *dir, const moe_io_meta *m, a2amm_error *err);
int moe_io_meta_read(const char *dir, moe_io_meta *m, a2amm_error *err);
int moe_io_meta_parse(const char *text, size_t len, const char *path, moe_io_meta *m, a2amm_error *err);

/* Whether DIR's meta file exists and says 'op moe' (no other check). */
int moe_io_dir_is_moe(const char *dir);

#endif
