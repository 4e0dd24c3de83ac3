/*
 * The MoE op over MPI messages (liba2amm_mpi), for tests/test_mpi.sh: one
 * rank of an MPI job that runs every case of moe_cases.h made for as many
 * ranks as the job has, checks its own outputs against the fp64 bound, and
 * prints "case I rank R: digest D" (as `test_moe digests` does over shared
 * memory: the same bits on both transports) and "rank R: moe: N cases, F
 * off the bound". Exit 0 when none is off.
 */
#include <mpi.h>

#include "a2amm_mpi.h"
#include "moe_cases.h"

int main(int argc, char **argv)
{
    int provided = 0, me = 0, R = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &R);
    a2amm_comm *comm = NULL;
    a2amm_error err = {0, ""};
    int rc = a2amm_mpi_comm_create(MPI_COMM_WORLD, 64u << 20, &comm, &err);
    int cases = 0, failed = rc != 0;
    for (size_t i = 0; !rc && i < MC_NCASES; i++) {
        const moe_case *c = &MC_CASES[i];
        if (c->R != R) continue;
        uint16_t *out = malloc(sizeof *out * (size_t)c->calls * (size_t)(c->max_tokens * c->H));
        a2amm_moe *m = NULL;
        rc = mc_make(comm, c, 0, 30, &m, &err);
        if (!rc) rc = mc_run_calls(comm, m, c, out, &err);
        a2amm_moe_destroy(m);
        mc_experts ex;
        double worst = 0;
        int64_t off = rc ? -1 : mc_experts_make(c, &ex) ? mc_check_rank(c, &ex, me, out, &worst) : -1;
        if (!rc) mc_experts_free(&ex);
        printf("case %zu rank %d: %s %016llx\n", i, me, rc ? "failed" : "digest",
               (unsigned long long)(rc ? 0 : mc_digest(c, me, out)));
        if (rc) printf("rank %d: case %zu: %s\n", me, i, err.msg);
        else if (off) printf("rank %d: case %zu: %lld values off the fp64 bound (worst %.2f of it)\n", me, i,
                             (long long)off, worst);
        failed += rc || off;
        cases++;
        free(out);
    }
    if (comm) a2amm_comm_destroy(comm);
    printf("rank %d: moe: %d cases, %d off the bound or failed\n", me, cases, failed);
    fflush(stdout);
    MPI_Finalize();
    return failed || cases == 0;
}
