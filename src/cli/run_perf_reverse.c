/*
 * perf mode's variants of matmul-alltoall (run_perf.c times them beside the
 * op, fused and unfused): the matmul alone (a2amm_matmul of X_r by B_r, all
 * N columns), the AllToAll alone (a2amm_comm_alltoall of the result's
 * column blocks, M*N/R bf16 values per pair) and the baseline a user writes
 * today: dequantize X_r to fp32, the baseline's matmul to bf16 [M, N], its
 * column blocks packed one after another, then MPI_Alltoall of them (over
 * MPI) or a2amm_comm_alltoall, straight into the output [R*M, N/R].
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/run_rank.h"
#include "common/error.h"

/* The matmul alone: X_r [M, K] by B_r, every one of the N columns, to st->y [M, N]. */
static int v_matmul(rank_state *st, a2amm_error *err)
{
    const op_shape *s = &st->rn->s;
    return a2amm_matmul(st->w, st->xa, s->K, st->xsa, st->rn->z.ska, s->M, s->a_type, st->y, s->N, st->rn->threads,
                        err);
}

/* Bytes of one column block: what each pair of ranks exchanges. */
static size_t block_bytes(const runner *rn) { return (size_t)(rn->s.M * (rn->s.N / rn->s.R)) * sizeof(uint16_t); }

/* The AllToAll alone: every column block of the result to its rank, no matmul. */
static int v_alltoall(rank_state *st, a2amm_error *err)
{
    return a2amm_comm_alltoall(st->comm, st->blocks, st->out, block_bytes(st->rn), st->rn->o.timeout_s, err);
}

/* y [M, N]'s column block j (N/R columns) to blocks[j] [M, N/R], for every j: what an AllToAll sends. */
static void pack_blocks(const runner *rn, const uint16_t *y, uint16_t *blocks)
{
    int64_t M = rn->s.M, N = rn->s.N, nb = N / rn->s.R;
    for (int64_t j = 0; j < rn->s.R; j++)
        for (int64_t i = 0; i < M; i++)
            memcpy(blocks + (j * M + i) * nb, y + i * N + j * nb, (size_t)nb * sizeof(uint16_t));
}

/* The baseline's exchange: over MPI what users write, MPI_Alltoall; else a2amm_comm_alltoall. */
static int baseline_exchange(rank_state *st, a2amm_error *err)
{
    if (st->rn->o.transport != RUN_MPI) return v_alltoall(st, err);
    size_t bytes = block_bytes(st->rn);
    if (bytes > INT32_MAX)
        return a2amm_fail(err, A2AMM_E_INVAL, "baseline: MPI_Alltoall takes at most %d bytes per rank, this shape "
                          "sends %zu", INT32_MAX, bytes);
    if (MPI_Alltoall(st->blocks, (int)bytes, MPI_BYTE, st->out, (int)bytes, MPI_BYTE, MPI_COMM_WORLD))
        return a2amm_fail(err, A2AMM_E_SYS, "baseline: MPI_Alltoall failed");
    return A2AMM_OK;
}

/* What a user writes today: dequantize to fp32, the baseline's matmul to bf16, pack the blocks, the AllToAll. */
static int v_baseline(rank_state *st, a2amm_error *err)
{
    const op_shape *s = &st->rn->s;
    int rc = a2amm_mx_dequantize_f32(st->xa, s->K, st->xsa, st->rn->z.ska, s->M, s->K, s->a_type, st->bl_x, s->K,
                                     err);
    if (!rc) rc = st->gemm->run(st->gemm_ctx, st->y, err);
    if (rc) return rc;
    pack_blocks(st->rn, st->y, st->blocks);
    return baseline_exchange(st, err);
}

/* X_r as read, the result and its blocks (the real ones: the matmul's), the baseline's matmul. */
static int reverse_setup(rank_state *st, a2amm_error *err)
{
    const runner *rn = st->rn;
    const op_sizes *z = &rn->z;
    uint8_t *x = NULL, *sx = NULL;
    a2amm_op_input(st->op, &x, &sx, NULL, NULL, NULL, NULL);
    st->xa = malloc(z->a_bytes);
    st->xsa = malloc(z->sa_bytes);
    st->y = malloc(z->out_bytes); /* M*N bf16, as many as the output's R*M*N/R */
    st->blocks = malloc(z->out_bytes);
    if (!st->xa || !st->xsa || !st->y || !st->blocks)
        return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the perf variants' buffers");
    memcpy(st->xa, x, z->a_bytes);
    memcpy(st->xsa, sx, z->sa_bytes);
    int rc = v_matmul(st, err);
    if (rc) return rc;
    pack_blocks(rn, st->y, st->blocks);
    return rn->o.baseline ? run_baseline_setup(st, err) : A2AMM_OK;
}

static void print_alone(const op_shape *s)
{
    printf("  matmul alone: a2amm_matmul of X_r [M, K] by B_r, all N columns, same weights and threads;\n"
           "  alltoall alone: a2amm_comm_alltoall of the result's column blocks (%.3f MB per pair), no matmul\n",
           (double)s->M * (double)(s->N / s->R) * 2 / 1e6);
}

const run_perf_op run_perf_reverse = {OP_MATMUL_ALLTOALL, reverse_setup, v_matmul, v_alltoall, v_baseline,
                                      print_alone,
                                      "dequantize to fp32, the matmul to bf16, the whole AllToAll of its blocks"};
