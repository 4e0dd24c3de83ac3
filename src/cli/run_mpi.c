/* The runner as one rank of an MPI job (mpirun -np R ... --transport mpi). */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "a2amm_mpi.h"
#include "cli/run_rank.h"
#include "cli/run_trace.h"
#include "common/error.h"
#include "io/io.h"

int run_under_mpirun(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

int run_mpi_rank(void)
{
    static const char *const names[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (getenv(names[i])) return atoi(getenv(names[i]));
    return -1;
}

void run_mpi_finalize(void)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized) MPI_Finalize();
}

/* mpirun stops the other ranks with SIGTERM when one fails or dies: each
 * says what it was doing (write(2) only: this runs in a signal handler). */
static a2amm_comm *stopped_comm;
static int stopped_rank;

static void say_stopped(int sig)
{
    (void)sig;
    char head[96];
    int n = snprintf(head, sizeof head, "a2amm: rank %d stopped by mpirun (another rank failed) while: ", stopped_rank);
    const char *doing = stopped_comm ? a2amm_comm_doing(stopped_comm) : "";
    ssize_t w = write(2, head, (size_t)n);
    w += write(2, doing, strnlen(doing, 160));
    w += write(2, "\n", 1);
    (void)w;
    _exit(143);
}

/* This rank failed, or stopped for another's failure: the library returned
 * (it never aborts on its own), so the command says why and ends the whole
 * job, as mpirun expects of a failed rank. */
static _Noreturn void abort_job(a2amm_comm *comm, int rank, int rc)
{
    a2amm_error why = {0, ""};
    if (a2amm_comm_status(comm, &why) == A2AMM_OK) snprintf(why.msg, sizeof why.msg, "%s", a2amm_strerror(rc));
    char host[MPI_MAX_PROCESSOR_NAME] = "";
    int len = 0;
    MPI_Get_processor_name(host, &len);
    fprintf(stderr, "a2amm: rank %d on %s failed (%s): %s\n", rank, host, a2amm_strerror(rc), why.msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

int run_mpi_share(a2amm_comm *comm, double *times, size_t n, double timeout_s, a2amm_error *err)
{
    int R = a2amm_comm_size(comm), me = a2amm_comm_rank(comm);
    size_t tbytes = n * sizeof(double);
    double *send = malloc(tbytes * (size_t)R), *recv = malloc(tbytes * (size_t)R);
    int rc = send && recv ? A2AMM_OK : a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the perf figures");
    for (int r = 0; !rc && r < R; r++) memcpy(send + (size_t)r * n, times, tbytes);
    if (!rc) rc = a2amm_comm_alltoall(comm, send, recv, tbytes, timeout_s, err);
    for (size_t i = 0; !rc && i < n; i++) /* entry i belongs to rank i mod R */
        if ((int)(i % (size_t)R) != me) times[i] = recv[(i % (size_t)R) * n + i];
    free(send), free(recv);
    return rc;
}

int run_mpi_start(int R, int *rank, a2amm_error *err)
{
    int inited = 0, provided = 0, size = 0;
    MPI_Initialized(&inited);
    if (!inited) MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != R)
        return a2amm_fail(err, A2AMM_E_INVAL, "mpirun started %d ranks, the shape's R is %d: run mpirun -np %d", size,
                          R, R);
    return A2AMM_OK;
}

int run_mpi_call(int R, size_t heap_bytes, int (*fn)(a2amm_comm *, void *), void *arg, int *rank, a2amm_comm **comm,
                 a2amm_error *err)
{
    *comm = NULL;
    int rc = run_mpi_start(R, rank, err);
    if (!rc) rc = a2amm_mpi_comm_create(MPI_COMM_WORLD, heap_bytes, comm, err);
    if (rc) return rc;
    stopped_comm = *comm, stopped_rank = *rank;
    signal(SIGTERM, say_stopped);
    rc = fn(*comm, arg);
    signal(SIGTERM, SIG_DFL);
    stopped_comm = NULL;
    if (rc) abort_job(*comm, *rank, rc); /* naming the rank that failed first */
    return A2AMM_OK;
}

int run_files_mpi(runner *rn, run_result *res, int64_t *offsets, a2amm_error *err)
{
    int rank = 0, rc = run_mpi_start((int)rn->s.R, &rank, err);
    res->rank = rank;
    if (rc) return rc;
    if (rn->o.trace_path) run_trace_mpi_offsets((int)rn->s.R, rank, offsets); /* before anything is timed */
    a2amm_comm *comm = NULL;
    rc = run_mpi_call((int)rn->s.R, run_heap_bytes(rn), run_rank_main, rn, &rank, &comm, err);
    if (!rc && rn->o.mode == RUN_PRECISION) {
        /* every rank wrote (the end barrier): each commits its own */
        char path[IO_PATH_MAX];
        rc = io_rank_path(path, sizeof path, rn->dir, "output", rank, "npu_out.bin", err);
        if (!rc) rc = io_commit_staged(path, rn->tag, err);
    }
    if (!rc && rn->o.mode == RUN_PERF) rc = run_mpi_share(comm, rn->tm.d, time_map_doubles(&rn->tm), rn->o.timeout_s, err);
    if (comm) a2amm_comm_barrier(comm, rn->o.timeout_s, NULL);
    a2amm_comm_destroy(comm);
    for (int r = 0; !rc && r < rn->s.R; r++) res->ranks[r] = (a2amm_rank_report){.started = 1, .status = A2AMM_OK};
    return rc;
}
