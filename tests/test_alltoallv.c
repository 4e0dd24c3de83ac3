/*
 * a2amm_comm_alltoallv over shared memory: the cases of alltoallv_cases.h on
 * 1 to 4 ranks of a2amm_launch (tests/mpi_alltoallv.c runs them over MPI),
 * and the refusals of one rank's bad arguments.
 */
#include <sys/mman.h>

#include "alltoallv_cases.h"
#include "check.h"

enum { MAX_R = 4 };

static int rank_cases(a2amm_comm *comm, void *arg)
{
    v_outcome *o = (v_outcome *)arg + a2amm_comm_rank(comm);
    v_all_cases(comm, o);
    return 0;
}

static void test_cases(int R)
{
    v_outcome *o = mmap(NULL, MAX_R * sizeof *o, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(o, 0, MAX_R * sizeof *o);
    a2amm_error err = {0, ""};
    a2amm_launch_options lo = {.size = sizeof lo, .heap_bytes = 16u << 20};
    int rc = a2amm_launch(R, rank_cases, o, &lo, &err);
    CHECK(rc == 0, "R=%d: the launch: %s", R, err.msg);
    for (int r = 0; r < R; r++) {
        CHECK(o[r].checks > 0, "R=%d, rank %d ran no case", R, r);
        CHECK(o[r].failed == 0, "R=%d, rank %d: %d of %d cases failed; the first: %s", R, r, o[r].failed, o[r].checks,
              o[r].first);
    }
    munmap(o, MAX_R * sizeof *o);
}

/* One rank, bad arguments: each refused at once, naming what is wrong. */
static int rank_bad_arguments(a2amm_comm *comm, void *arg)
{
    int *failed = arg;
    size_t sb[1] = {8}, so[1] = {0}, room[1] = {8}, ro[1] = {0}, got[1] = {0}, huge[1] = {SIZE_MAX - 3};
    uint8_t buf[8] = {0}, out[8];
    a2amm_error err = {0, ""};
    struct {
        int rc, want;
        const char *text;
    } cases[] = {
        {a2amm_comm_alltoallv(comm, buf, NULL, so, out, room, ro, got, 5, &err), A2AMM_E_INVAL, "must not be NULL"},
        {a2amm_comm_alltoallv(comm, NULL, sb, so, out, room, ro, got, 5, &err), A2AMM_E_INVAL, "send is NULL with bytes for rank 0"},
        {a2amm_comm_alltoallv(comm, buf, sb, so, NULL, room, ro, got, 5, &err), A2AMM_E_INVAL, "recv is NULL with bytes for rank 0"},
        {a2amm_comm_alltoallv(comm, buf, sb, huge, out, room, ro, got, 5, &err), A2AMM_E_OVERFLOW, "overflows"},
        {a2amm_comm_alltoallv(comm, buf, sb, so, out, room, ro, got, 0, &err), A2AMM_E_INVAL, "timeout_s must be positive"},
        {a2amm_comm_alltoallv(NULL, buf, sb, so, out, room, ro, got, 5, &err), A2AMM_E_INVAL, "must not be NULL"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        if (cases[i].rc != cases[i].want)
            failed[0]++, fprintf(stderr, "bad argument (%s): status %d, expected %d\n", cases[i].text, cases[i].rc,
                                 cases[i].want);
    /* a message says what is wrong */
    if (a2amm_comm_alltoallv(comm, NULL, sb, so, out, room, ro, got, 5, &err) != A2AMM_E_INVAL ||
        !strstr(err.msg, "a2amm_comm_alltoallv: send is NULL with bytes for rank 0"))
        failed[0]++, fprintf(stderr, "send NULL: %s\n", err.msg);
    /* the communicator still works after local refusals: a good call */
    memset(buf, 5, sizeof buf);
    if (a2amm_comm_alltoallv(comm, buf, sb, so, out, room, ro, got, 5, &err) || got[0] != 8 || memcmp(buf, out, 8))
        failed[0]++, fprintf(stderr, "a good call after the refusals: %s\n", err.msg);
    return 0;
}

static void test_bad_arguments(void)
{
    int *failed = mmap(NULL, sizeof *failed, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    *failed = 0;
    a2amm_error err = {0, ""};
    CHECK(a2amm_launch(1, rank_bad_arguments, failed, NULL, &err) == 0, "bad arguments: the launch: %s", err.msg);
    CHECK(*failed == 0, "%d bad arguments were not refused as expected (above)", *failed);
    munmap(failed, sizeof *failed);
}

int main(void)
{
    for (int R = 1; R <= MAX_R; R++) test_cases(R);
    test_bad_arguments();
    return check_summary("test_alltoallv");
}
