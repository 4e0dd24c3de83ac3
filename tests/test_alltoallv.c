/*
 * a2amm_comm_alltoallv over shared memory: the cases of alltoallv_cases.h on
 * 1 to 4 ranks of a2amm_launch (tests/mpi_alltoallv.c runs them over MPI),
 * the refusals of one rank's bad arguments (each fails the communicator:
 * the other ranks hear why at once, in alltoallv, alltoall and barrier),
 * and a NULL recv where nothing arrives.
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

/* One rank, bad arguments: each refused at once, naming what is wrong, and failing the communicator (any
 * error of a collective call does): the good call after it returns A2AMM_E_PEER with the refusal's reason. */
enum { BAD_CASES = 5 };
typedef struct bad_case_out {
    int rc, after_rc;
    char msg[1024], after_msg[1024];
} bad_case_out;

static int rank_bad_argument(a2amm_comm *comm, void *arg)
{
    bad_case_out *o = arg;
    int which = o->rc; /* the case, on the way in */
    size_t sb[1] = {8}, so[1] = {0}, room[1] = {8}, ro[1] = {0}, got[1] = {0}, huge[1] = {SIZE_MAX - 3};
    uint8_t buf[8] = {0}, out[8];
    a2amm_error err = {0, ""};
    switch (which) {
    case 0: o->rc = a2amm_comm_alltoallv(comm, buf, NULL, so, out, room, ro, got, 5, &err); break;
    case 1: o->rc = a2amm_comm_alltoallv(comm, NULL, sb, so, out, room, ro, got, 5, &err); break;
    case 2: o->rc = a2amm_comm_alltoallv(comm, buf, sb, huge, out, room, ro, got, 5, &err); break;
    case 3: o->rc = a2amm_comm_alltoallv(comm, buf, sb, so, out, room, ro, got, 0, &err); break;
    default: o->rc = a2amm_comm_alltoallv(NULL, buf, sb, so, out, room, ro, got, 5, &err); break;
    }
    snprintf(o->msg, sizeof o->msg, "%s", err.msg);
    o->after_rc = a2amm_comm_alltoallv(comm, buf, sb, so, out, room, ro, got, 5, &err);
    snprintf(o->after_msg, sizeof o->after_msg, "%s", o->after_rc ? err.msg : "");
    return 0;
}

static void test_bad_arguments(void)
{
    static const struct {
        int want;
        const char *text;
    } cases[BAD_CASES] = {
        {A2AMM_E_INVAL, "a2amm_comm_alltoallv: comm and the six size arrays must not be NULL (send_bytes is)"},
        {A2AMM_E_INVAL, "a2amm_comm_alltoallv: send is NULL with bytes for rank 0"},
        {A2AMM_E_OVERFLOW, "a2amm_comm_alltoallv: the block of rank 0 overflows"},
        {A2AMM_E_INVAL, "a2amm_comm_alltoallv: timeout_s must be positive"},
        {A2AMM_E_INVAL, "must not be NULL"},
    };
    bad_case_out *o = mmap(NULL, sizeof *o, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    for (int i = 0; i < BAD_CASES; i++) {
        memset(o, 0, sizeof *o);
        o->rc = i;
        a2amm_error err = {0, ""};
        int rc = a2amm_launch(1, rank_bad_argument, o, NULL, &err);
        int failed = i < BAD_CASES - 1; /* the refusal failed the communicator, so the launch too, with its reason */
        CHECK(failed ? rc == cases[i].want && strstr(err.msg, cases[i].text) : rc == 0,
              "bad argument %d: the launch: %d %s", i, rc, err.msg);
        CHECK(o->rc == cases[i].want && strstr(o->msg, cases[i].text), "bad argument %d: status %d, expected %d: %s "
              "(expected: %s)", i, o->rc, cases[i].want, o->msg, cases[i].text);
        if (i == BAD_CASES - 1) { /* a NULL communicator: nothing to fail, the good call works */
            CHECK(o->after_rc == 0, "after a refusal of comm NULL, a good call: %d %s", o->after_rc, o->after_msg);
            continue;
        }
        CHECK(o->after_rc == A2AMM_E_PEER && strstr(o->after_msg, "rank 0: ") && strstr(o->after_msg, cases[i].text),
              "bad argument %d failed the communicator: the call after it returns A2AMM_E_PEER with its reason "
              "(got %d: %s)", i, o->after_rc, o->after_msg);
    }
    munmap(o, sizeof *o);
}

/* Two ranks: rank 0's own arguments refused in a collective call while rank 1 makes the same call with good
 * ones. Rank 1's call returns A2AMM_E_PEER naming rank 0 and its reason (not its deadline's timeout, nor a
 * mismatch with rank 0's next call); rank 0 goes on to a barrier, which returns A2AMM_E_PEER too. */
enum refused_call { REFUSE_ALLTOALLV, REFUSE_ALLTOALLV_NO_ERR, REFUSE_ALLTOALL, REFUSE_BARRIER, REFUSED_CALLS };
typedef struct refusal_out {
    enum refused_call call;
    int rc[2], next_rc[2], status_rc[2];
    char msg[2][1024], status_msg[2][1024];
} refusal_out;

static int rank_refusal(a2amm_comm *comm, void *arg)
{
    refusal_out *o = arg;
    int me = a2amm_comm_rank(comm);
    size_t sb[2] = {4, 4}, so[2] = {0, 4}, room[2] = {4, 4}, ro[2] = {0, 4}, got[2];
    uint8_t send[8] = {1, 2, 3, 4, 5, 6, 7, 8}, recv[8];
    if (me == 0) sb[1] = SIZE_MAX;
    a2amm_error err = {0, ""};
    const double timeout_s = 30;
    switch (o->call) {
    case REFUSE_ALLTOALLV:
        o->rc[me] = a2amm_comm_alltoallv(comm, send, sb, so, recv, room, ro, got, timeout_s, &err);
        break;
    case REFUSE_ALLTOALLV_NO_ERR: /* rank 0 takes no message: rank 1 still hears why */
        o->rc[me] = a2amm_comm_alltoallv(comm, send, sb, so, recv, room, ro, got, timeout_s, me == 0 ? NULL : &err);
        break;
    case REFUSE_ALLTOALL:
        o->rc[me] = a2amm_comm_alltoall(comm, me == 0 ? NULL : send, recv, 4, timeout_s, &err);
        break;
    default: o->rc[me] = a2amm_comm_barrier(comm, me == 0 ? 0 : timeout_s, &err); break;
    }
    snprintf(o->msg[me], sizeof o->msg[me], "%s", o->rc[me] ? err.msg : "");
    if (me == 0) o->next_rc[me] = a2amm_comm_barrier(comm, timeout_s, &err); /* its next collective call */
    o->status_rc[me] = a2amm_comm_status(comm, &err);
    snprintf(o->status_msg[me], sizeof o->status_msg[me], "%s", o->status_rc[me] ? err.msg : "");
    return 0;
}

static void test_refusal_fails_the_others(void)
{
    static const struct {
        int want;
        const char *reason;
    } cases[REFUSED_CALLS] = {
        {A2AMM_E_OVERFLOW, "rank 0: a2amm_comm_alltoallv: the block of rank 1 overflows"},
        {A2AMM_E_OVERFLOW, "rank 0: a2amm_comm_alltoallv: the block of rank 1 overflows"},
        {A2AMM_E_INVAL, "rank 0: a2amm_comm_alltoall: send must not be NULL with block_bytes 4"},
        {A2AMM_E_INVAL, "rank 0: a2amm_comm_barrier: timeout_s must be positive (got 0)"},
    };
    refusal_out *o = mmap(NULL, sizeof *o, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    for (int c = 0; c < REFUSED_CALLS; c++) {
        memset(o, 0, sizeof *o);
        o->call = (enum refused_call)c;
        a2amm_error err = {0, ""};
        a2amm_launch_options lo = {.size = sizeof lo, .heap_bytes = 16u << 20};
        int rc = a2amm_launch(2, rank_refusal, o, &lo, &err);
        CHECK(rc == cases[c].want && strstr(err.msg, cases[c].reason),
              "refusal %d: the launch fails with rank 0's refusal (every rank returned 0): %d %s", c, rc, err.msg);
        CHECK(o->rc[0] == cases[c].want, "refusal %d: rank 0's own error: %d %s", c, o->rc[0], o->msg[0]);
        CHECK(o->rc[1] == A2AMM_E_PEER && strstr(o->msg[1], cases[c].reason),
              "refusal %d: rank 1 gets A2AMM_E_PEER naming rank 0 and why (got %d: %s; expected: %s)", c, o->rc[1],
              o->msg[1], cases[c].reason);
        CHECK(o->next_rc[0] == A2AMM_E_PEER, "refusal %d: rank 0's next collective call: %d", c, o->next_rc[0]);
        for (int r = 0; r < 2; r++)
            CHECK(o->status_rc[r] == cases[c].want && strstr(o->status_msg[r], cases[c].reason),
                  "refusal %d: rank %d: a2amm_comm_status gives rank 0's refusal (got %d: %s)", c, r, o->status_rc[r],
                  o->status_msg[r]);
    }
    munmap(o, sizeof *o);
}

/* recv NULL has room for nothing: a call that sends it no byte works (whatever recv_room says), one that
 * sends it a block fails on every rank as a block over its room does, and the communicator goes on. */
typedef struct null_recv_out {
    int rc[3][2];
    char msg[3][2][1024];
    size_t got[2][2];
} null_recv_out;

static int rank_null_recv(a2amm_comm *comm, void *arg)
{
    null_recv_out *o = arg;
    int me = a2amm_comm_rank(comm);
    size_t room[2] = {8, 8}, ro[2] = {0, 8}, so[2] = {0, 8}, got[2] = {99, 99};
    uint8_t send[16], recv[16];
    memset(send, 0x30 + me, sizeof send);
    a2amm_error err = {0, ""};
    for (int round = 0; round < 3; round++) {
        size_t sb[2] = {0, 0}; /* round 0: nothing to rank 0; round 1: rank 1 sends it 4 bytes; round 2: again 0 */
        if (me == 1) sb[1] = 8;
        if (round == 1 && me == 1) sb[0] = 4;
        int null_here = me == 0; /* rank 0 has no recv, and sends nothing: send NULL too */
        /* a NULL recv's room is not looked at: one that would overflow is no error there */
        size_t huge[2] = {SIZE_MAX, SIZE_MAX}, at1[2] = {1, 1};
        o->rc[round][me] = a2amm_comm_alltoallv(comm, null_here ? NULL : send, sb, so, null_here ? NULL : recv,
                                                null_here ? huge : room, null_here ? at1 : ro, got, 30, &err);
        snprintf(o->msg[round][me], sizeof o->msg[round][me], "%s", o->rc[round][me] ? err.msg : "");
        if (round == 0) o->got[me][0] = got[0], o->got[me][1] = got[1];
    }
    return 0;
}

static void test_null_recv(void)
{
    null_recv_out *o = mmap(NULL, sizeof *o, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(o, 0, sizeof *o);
    a2amm_error err = {0, ""};
    a2amm_launch_options lo = {.size = sizeof lo, .heap_bytes = 16u << 20};
    CHECK(a2amm_launch(2, rank_null_recv, o, &lo, &err) == 0, "recv NULL: the launch: %s", err.msg);
    for (int r = 0; r < 2; r++) {
        CHECK(o->rc[0][r] == 0, "recv NULL on rank 0, nothing sent to it: rank %d: %d %s", r, o->rc[0][r], o->msg[0][r]);
        CHECK(o->rc[1][r] == A2AMM_E_SIZE && strstr(o->msg[1][r], "rank 1 sends 4 bytes to rank 0, whose recv is NULL"),
              "4 bytes to rank 0's NULL recv: rank %d: refused, named (got %d: %s)", r, o->rc[1][r], o->msg[1][r]);
        CHECK(o->rc[2][r] == 0, "the call after: the communicator goes on: rank %d: %d %s", r, o->rc[2][r],
              o->msg[2][r]);
    }
    CHECK(o->got[0][0] == 0 && o->got[0][1] == 0 && o->got[1][0] == 0 && o->got[1][1] == 8,
          "recv_bytes: rank 0 %zu %zu, rank 1 %zu %zu (expected 0 0, 0 8)", o->got[0][0], o->got[0][1], o->got[1][0],
          o->got[1][1]);
    munmap(o, sizeof *o);
}

int main(void)
{
    for (int R = 1; R <= MAX_R; R++) test_cases(R);
    test_bad_arguments();
    test_refusal_fails_the_others();
    test_null_recv();
    return check_summary("test_alltoallv");
}
