/*
 * The API under misuse over MPI (liba2amm_mpi), for tests/test_mpi.sh: one
 * rank of an MPI job (mpirun -np 2 or more) that does what its mode says,
 * prints what each of its calls returned, and goes on to the end (the
 * library must return, never print or abort on its own):
 *
 *   mpi_misuse alltoall-sizes   a2amm_comm_alltoall with 64-byte blocks on
 *                               even ranks, 128 on odd ones
 *   mpi_misuse run-arg          a2amm_op_run with m above max_m on rank 0,
 *                               a good call on the others
 *   mpi_misuse alltoallv-arg    a2amm_comm_alltoallv with send_bytes[1] =
 *                               SIZE_MAX on rank 0 (refused there), then a
 *                               barrier; a good call on the others
 *   mpi_misuse swapped          two identical ops, called in swapped order
 *                               on odd ranks
 *   mpi_misuse leave            the last rank destroys its communicator at
 *                               once; the others call a2amm_comm_alltoall
 *
 * Each rank prints "rank R: CALL: status S after T s: MESSAGE" per call and
 * "rank R: finished" once it has destroyed what it made and finalized MPI.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "a2amm_mpi.h"

enum { M = 8, KR = 64, N = 16, TIMEOUT_S = 30 };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int me, differ;

static void say(const char *call, int rc, double t0, const a2amm_error *err)
{
    printf("rank %d: %s: status %d after %.2f s: %s\n", me, call, rc, now_s() - t0, rc ? err->msg : "ok");
    fflush(stdout);
}

/* An op of R ranks on the put path with this rank's weights (its own data). */
static int make_op(a2amm_comm *comm, int R, const uint8_t *b, const uint8_t *sb, a2amm_op **op, a2amm_error *err)
{
    a2amm_op_config cfg = {.size = sizeof(a2amm_op_config), .max_m = M, .k = (int64_t)KR * R, .n = N, .a_type = A2AMM_E4M3, .b_type = A2AMM_E4M3,
                           .tile_m = 4, .depth = 2, .threads = 1, .path = A2AMM_PATH_PUT, .timeout_s = TIMEOUT_S};
    if (differ && me == R - 1) cfg.depth = 3; /* config-differs: the last rank's ring is deeper */
    int rc = a2amm_op_create(comm, &cfg, op, err);
    if (!rc) rc = a2amm_op_set_weights(*op, b, sb, KR * R / 32, err);
    return rc;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    int provided = 0, R = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &R);
    a2amm_comm *comm = NULL;
    a2amm_error err = {0, ""};
    double t0 = now_s();
    int rc = a2amm_mpi_comm_create(MPI_COMM_WORLD, 16u << 20, &comm, &err);
    say("a2amm_mpi_comm_create", rc, t0, &err);
    size_t K = (size_t)KR * (size_t)R;
    uint8_t *a = malloc((size_t)R * M * KR), *sa = malloc((size_t)R * M * KR / 32);
    uint8_t *b = malloc(N * K), *sb = malloc(N * K / 32), *send = calloc((size_t)R, 128), *recv = calloc((size_t)R, 128);
    uint16_t *out = malloc(sizeof *out * M * N);
    for (size_t i = 0; i < (size_t)R * M * KR; i++) a[i] = (uint8_t)((i * 13 + (size_t)me) % 110);
    for (size_t i = 0; i < N * K; i++) b[i] = (uint8_t)((i * 7 + (size_t)me) % 120);
    memset(sa, 126, (size_t)R * M * KR / 32);
    memset(sb, 127, N * K / 32);
    a2amm_op *x = NULL, *y = NULL;
    if (!rc && !strcmp(mode, "alltoall-sizes")) {
        t0 = now_s();
        rc = a2amm_comm_alltoall(comm, send, recv, me % 2 ? 128 : 64, TIMEOUT_S, &err);
        say("a2amm_comm_alltoall", rc, t0, &err);
    } else if (!rc && !strcmp(mode, "run-arg")) {
        rc = make_op(comm, R, b, sb, &x, &err);
        say("a2amm_op_create", rc, t0, &err);
        t0 = now_s();
        if (!rc) say("a2amm_op_run", a2amm_op_run(x, me == 0 ? M + 1 : M, a, sa, out, &err), t0, &err);
    } else if (!rc && !strcmp(mode, "alltoallv-arg")) {
        size_t *sz = calloc((size_t)R * 5, sizeof *sz), *sb = sz, *so = sz + R, *room = sz + 2 * R, *ro = sz + 3 * R;
        for (int p = 0; p < R; p++) sb[p] = room[p] = 8, so[p] = ro[p] = (size_t)p * 8;
        if (me == 0) sb[1] = SIZE_MAX;
        t0 = now_s();
        rc = a2amm_comm_alltoallv(comm, send, sb, so, recv, room, ro, sz + 4 * R, TIMEOUT_S, &err);
        say("a2amm_comm_alltoallv", rc, t0, &err);
        if (me == 0) { /* its next collective call: the failure, at once */
            t0 = now_s();
            say("a2amm_comm_barrier", a2amm_comm_barrier(comm, TIMEOUT_S, &err), t0, &err);
        }
        free(sz);
    } else if (!rc && !strcmp(mode, "config-differs")) {
        differ = 1;
        rc = make_op(comm, R, b, sb, &x, &err);
        say("a2amm_op_create", rc, t0, &err);
    } else if (!rc && !strcmp(mode, "swapped")) {
        rc = make_op(comm, R, b, sb, &x, &err);
        if (!rc) rc = make_op(comm, R, b, sb, &y, &err);
        say("a2amm_op_create", rc, t0, &err);
        t0 = now_s();
        if (!rc) say("a2amm_op_run", a2amm_op_run(me % 2 ? y : x, M, a, sa, out, &err), t0, &err);
    } else if (!rc && !strcmp(mode, "leave")) {
        t0 = now_s();
        if (me == R - 1) {
            a2amm_comm_destroy(comm);
            comm = NULL;
            say("a2amm_comm_destroy", 0, t0, &err);
        } else {
            rc = a2amm_comm_alltoall(comm, send, recv, 64, TIMEOUT_S, &err);
            say("a2amm_comm_alltoall", rc, t0, &err);
        }
    } else if (!rc) {
        fprintf(stderr, "mpi_misuse: unknown mode '%s' (alltoall-sizes, run-arg, alltoallv-arg, config-differs, swapped "
                "or leave)\n", mode);
    }
    t0 = now_s();
    if (comm) {
        rc = a2amm_comm_status(comm, &err);
        say("a2amm_comm_status", rc, t0, &err);
    }
    a2amm_op_destroy(x);
    a2amm_op_destroy(y);
    a2amm_comm_destroy(comm);
    free(a), free(sa), free(b), free(sb), free(send), free(recv), free(out);
    MPI_Finalize();
    printf("rank %d: finished\n", me);
    return 0;
}
