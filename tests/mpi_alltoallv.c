/*
 * a2amm_comm_alltoallv over MPI messages (liba2amm_mpi), for tests/test_mpi.sh:
 * one rank of an MPI job (mpirun -np 2 or more) that runs the cases of
 * alltoallv_cases.h (as tests/test_alltoallv.c does over shared memory) and
 * prints "rank R: alltoallv: N checks, F failed" and the first failure.
 * Exit 0 when none failed.
 */
#include <mpi.h>

#include "a2amm_mpi.h"
#include "alltoallv_cases.h"

int main(int argc, char **argv)
{
    int provided = 0, me = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    a2amm_comm *comm = NULL;
    a2amm_error err = {0, ""};
    v_outcome o = {0, 0, ""};
    int rc = a2amm_mpi_comm_create(MPI_COMM_WORLD, 16u << 20, &comm, &err);
    if (rc) {
        printf("rank %d: a2amm_mpi_comm_create: %s\n", me, err.msg);
    } else {
        v_all_cases(comm, &o);
        a2amm_comm_destroy(comm);
    }
    printf("rank %d: alltoallv: %d checks, %d failed%s%s\n", me, o.checks, o.failed, o.failed ? ": " : "", o.first);
    fflush(stdout);
    MPI_Finalize();
    return rc || o.failed || o.checks == 0;
}
