/*
 * `a2amm bench moe`'s second baseline, what a user of expert parallelism
 * writes today without a2amm: the counts to every rank (an AllToAll), each
 * token's row in bf16 once per expert it uses to the expert's rank (an
 * uneven AllToAll), oneDNN's bf16 matmuls per expert (gate and up in one,
 * SwiGLU in fp32, down), the results back (an uneven AllToAll), and each
 * token's weighted sum in fp32, rounded to bf16. The exchanges are the
 * communicator's (a2amm_comm_alltoall / alltoallv: shared memory here, MPI
 * messages over MPI). oneDNN's matmuls are made once per expert for the
 * rows it gets (the routing is the same every repetition), their weights
 * packed then, untimed: its best case.
 */
#ifndef A2AMM_BENCH_MOE_DNN_H
#define A2AMM_BENCH_MOE_DNN_H

#include <stdint.h>

#include "a2amm.h"

typedef struct moe_dnn_shape {
    int R, E, K;
    int64_t T, H, I; /* T: this rank's tokens (every rank at most max_tokens) */
    int64_t max_tokens;
    a2amm_fp8_type a_type, b_type;
    int threads;
    double timeout_s;
} moe_dnn_shape;

/* This rank's inputs as the op takes them (x codes [T, H] with scales [T, H/32], the routing, its E/R
 * experts' codes and scales packed as in a2amm_moe_set_weights with ld13 = H/32, ld2 = I/32). */
typedef struct moe_dnn_inputs {
    const uint8_t *x, *sx, *w13, *s13, *w2, *s2;
    const int32_t *idx;
    const float *w;
} moe_dnn_inputs;

typedef struct moe_dnn moe_dnn;

/* Collective (one exchange of counts, to size oneDNN's matmuls). */
int moe_dnn_create(a2amm_comm *comm, const moe_dnn_shape *s, const moe_dnn_inputs *in, moe_dnn **out,
                   a2amm_error *err);
/* Collective: one call, out [T, H] bf16. */
int moe_dnn_run(moe_dnn *b, uint16_t *out, a2amm_error *err);
/* Untimed after a run: lets oneDNN's OpenMP workers stop spinning. */
void moe_dnn_idle(moe_dnn *b);
/* "oneDNN 2.6.3 bf16 matmul (brg:avx512_core_amx_bf16)" */
const char *moe_dnn_what(const moe_dnn *b);
void moe_dnn_free(moe_dnn *b);

#endif
