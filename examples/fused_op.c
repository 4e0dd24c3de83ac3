/*
 * a2amm from a program of its own: R ranks made by the embedded launcher,
 * each quantizing its own data to MXFP8, then one fused AllToAll + matmul
 * per step, checked against the single-rank matmul on the rows it received.
 *
 *   cc fused_op.c $(pkg-config --cflags --libs a2amm) -o fused_op && ./fused_op
 *
 * The same ranks as an MPI job (liba2amm_mpi; on one machine or several):
 *
 *   mpicc -DWITH_MPI fused_op.c $(pkg-config --cflags --libs a2amm-mpi) -o fused_op_mpi
 *   mpirun --allow-run-as-root --oversubscribe -np 2 ./fused_op_mpi
 *
 * (statically: mpicc -DWITH_MPI fused_op.c -I$PREFIX/include $PREFIX/lib/liba2amm_mpi.a -lm -o fused_op_mpi;
 * liba2amm_mpi.a holds the whole library, so it is linked alone)
 *
 * Exit 0 and "fused_op: OK" when every rank's result is within a bf16
 * rounding of the check.
 */
#include <a2amm.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { R = 2, M = 96, K = 256, N = 64 }; /* K/R = 128 values of K per rank */

/* Rank r's activations: R blocks of M rows, block j for rank j; deterministic. */
static float value(int r, int64_t row, int64_t col) { return (float)sin(0.1 * (double)(r * 7919 + row * 131 + col)); }

static int rank_main(a2amm_comm *comm, void *arg)
{
    (void)arg;
    int me = a2amm_comm_rank(comm), ka = K / R;
    a2amm_error err;
    /* my A_r [R*M, K/R] and my weights B_r^T [N, K], quantized to MXFP8 */
    float *x = malloc(sizeof(float) * R * M * ka), *w = malloc(sizeof(float) * N * K);
    uint8_t *a = malloc(R * M * ka), *sa = malloc(R * M * ka / 32), *b = malloc(N * K), *sb = malloc(N * K / 32);
    uint16_t *out = malloc(sizeof(uint16_t) * M * N);
    for (int64_t i = 0; i < R * M * ka; i++) x[i] = value(me, i / ka, i % ka);
    for (int64_t i = 0; i < N * K; i++) w[i] = value(100 + me, i / K, i % K) / 16;
    a2amm_mx_quantize_f32(x, R * M, ka, ka, A2AMM_E4M3, A2AMM_SCALE_RCEIL, a, ka, sa, ka / 32, &err);
    a2amm_mx_quantize_f32(w, N, K, K, A2AMM_E4M3, A2AMM_SCALE_RCEIL, b, K, sb, K / 32, &err);

    /* the op, made once; weights set once; one collective call per step */
    a2amm_op_config cfg;
    a2amm_op_config_init(&cfg); /* the defaults, and the layout this header knows: later libraries read it as such */
    cfg.max_m = M, cfg.k = K, cfg.n = N, cfg.a_type = A2AMM_E4M3, cfg.b_type = A2AMM_E4M3;
    cfg.path = A2AMM_PATH_PUT, cfg.tile_m = 32;
    a2amm_op *op = NULL;
    int rc = a2amm_op_create(comm, &cfg, &op, &err);
    if (!rc) rc = a2amm_op_set_weights(op, b, sb, K / 32, &err);
    if (!rc) rc = a2amm_op_run(op, M, a, sa, out, &err);
    a2amm_op_destroy(op);
    if (rc) {
        fprintf(stderr, "rank %d: %s\n", me, err.msg);
        return rc;
    }

    /* the check: the rows I received (block `me` of every rank's A, side by side along K) times my B */
    float *got = malloc(sizeof(float) * M * K);
    uint8_t *ga = malloc(M * K), *gsa = malloc(M * K / 32);
    for (int64_t i = 0; i < M; i++)
        for (int j = 0; j < R; j++)
            for (int t = 0; t < ka; t++) got[i * K + j * ka + t] = value(j, me * M + i, t);
    a2amm_mx_quantize_f32(got, M, K, K, A2AMM_E4M3, A2AMM_SCALE_RCEIL, ga, K, gsa, K / 32, &err);
    a2amm_weights *wb = NULL;
    uint16_t *want = malloc(sizeof(uint16_t) * M * N);
    rc = a2amm_weights_create(b, sb, N, K, K / 32, A2AMM_E4M3, 0, &wb, &err);
    if (!rc) rc = a2amm_matmul(wb, ga, K, gsa, K / 32, M, A2AMM_E4M3, want, N, 1, &err);
    a2amm_weights_destroy(wb);
    int far = 0;
    for (int64_t i = 0; !rc && i < M * N; i++) {
        uint32_t gu = (uint32_t)out[i] << 16, wu = (uint32_t)want[i] << 16;
        float g, v;
        memcpy(&g, &gu, 4), memcpy(&v, &wu, 4);
        far += fabsf(g - v) > fabsf(v) / 64 + 1e-3f; /* the sums differ only in their order */
    }
    printf("rank %d: %d x %d result, %d values off the check\n", me, M, N, far);
    free(x), free(w), free(a), free(sa), free(b), free(sb), free(out), free(got), free(ga), free(gsa), free(want);
    return rc ? rc : far ? A2AMM_E_MISMATCH : A2AMM_OK;
}

#ifdef WITH_MPI
#include <a2amm_mpi.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    a2amm_comm *comm = NULL;
    a2amm_error err;
    int rc = size == R ? a2amm_mpi_comm_create(MPI_COMM_WORLD, 0, &comm, &err) : A2AMM_E_INVAL;
    if (size != R) snprintf(err.msg, sizeof err.msg, "run it with mpirun -np %d (got %d ranks)", R, size);
    if (!rc) rc = rank_main(comm, NULL);
    int all = 0;
    if (comm) MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    a2amm_comm_destroy(comm);
    int me = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Finalize();
    if (rc || all) {
        if (rc == A2AMM_E_INVAL) fprintf(stderr, "fused_op: %s\n", err.msg);
        return 1;
    }
    if (me == 0) printf("fused_op: OK (a2amm %s, built with the header of %s)\n", a2amm_version(), A2AMM_VERSION_STRING);
    return 0;
}
#else
int main(void)
{
    a2amm_error err;
    int rc = a2amm_launch(R, rank_main, NULL, NULL, &err);
    if (rc) {
        fprintf(stderr, "fused_op: %s\n", err.msg);
        return 1;
    }
    printf("fused_op: OK (a2amm %s, built with the header of %s)\n", a2amm_version(), A2AMM_VERSION_STRING);
    return 0;
}
#endif
