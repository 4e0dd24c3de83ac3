/*
 * The uneven AllToAll's cases on a communicator of any transport (run by
 * tests/test_alltoallv.c over shared memory and tests/mpi_alltoallv.c over
 * MPI): every rank runs them in the same order and counts what went wrong.
 * Sizes differ by pair and by round (zeros among them, the stage growing
 * and shrinking), blocks lie scattered in send and recv with gaps, rooms are
 * exact or larger, and an even AllToAll runs between them on the same
 * communicator. One block over its room: every rank gets A2AMM_E_SIZE
 * naming both ranks and sizes, no byte of any recv was written, and the
 * calls after it work.
 */
#ifndef A2AMM_TESTS_ALLTOALLV_CASES_H
#define A2AMM_TESTS_ALLTOALLV_CASES_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "a2amm.h"

typedef struct v_outcome {
    int checks, failed;
    char first[400]; /* the first failure */
} v_outcome;

static void v_check(v_outcome *o, int ok, const char *fmt, ...)
{
    o->checks++;
    if (ok) return;
    if (!o->failed++) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(o->first, sizeof o->first, fmt, ap);
        va_end(ap);
    }
}

enum { V_ROUNDS = 5, V_GAP = 7, V_UNTOUCHED = 0xEE };

/* What rank `from` sends rank `to` in a round: every rank knows it, so that each checks what it gets. */
static size_t v_size(int from, int to, int round)
{
    uint64_t h = (uint64_t)(from * 131 + to * 71 + round * 977 + 12345) * 0x9E3779B97F4A7C15ull;
    if ((h >> 60) % 4 == 0) return 0;
    size_t cap = round == 2 ? 20000 : round == 4 ? 1 : 3000; /* the stage grows, then serves smaller calls */
    return (size_t)((h >> 20) % (cap + 1));
}

static uint8_t v_byte(int from, int to, int round, size_t k)
{
    return (uint8_t)(from * 37 + to * 11 + round * 5 + k * 3 + 1);
}

/* Blocks laid out in reverse rank order with a gap after each: offsets[p], and the whole length. */
static size_t v_layout(const size_t *bytes, size_t *offsets, int R)
{
    size_t at = 0;
    for (int p = R - 1; p >= 0; p--) offsets[p] = at, at += bytes[p] + V_GAP;
    return at;
}

/* One round: sends, checks recv_bytes, every byte received, and that nothing else of recv was written.
 * over_room: rank R-1's block for rank 0 is one byte over rank 0's room for it. */
static void v_round(a2amm_comm *comm, int round, int over_room, v_outcome *o)
{
    int me = a2amm_comm_rank(comm), R = a2amm_comm_size(comm);
    size_t *sb = calloc((size_t)R * 5, sizeof *sb), *so = sb + R, *room = sb + 2 * R, *ro = sb + 3 * R, *got = sb + 4 * R;
    for (int p = 0; p < R; p++) {
        sb[p] = v_size(me, p, round);
        room[p] = v_size(p, me, round) + (p % 2 ? 13 : 0);
    }
    if (over_room) {
        if (me == R - 1) sb[0] = 100;
        if (me == 0) room[R - 1] = 99;
    }
    size_t send_len = v_layout(sb, so, R), recv_len = v_layout(room, ro, R);
    uint8_t *send = malloc(send_len + 1), *recv = malloc(recv_len + 1);
    memset(send, 0, send_len + 1);
    memset(recv, V_UNTOUCHED, recv_len + 1);
    for (int p = 0; p < R; p++)
        for (size_t k = 0; k < sb[p]; k++) send[so[p] + k] = v_byte(me, p, round, k);
    a2amm_error err = {0, ""};
    int rc = a2amm_comm_alltoallv(comm, send, sb, so, recv, room, ro, got, 30, &err);
    if (over_room) {
        char want[160];
        snprintf(want, sizeof want, "rank %d sends 100 bytes to rank 0, which has room for 99", R - 1);
        v_check(o, rc == A2AMM_E_SIZE && strstr(err.msg, want), "round %d, rank %d: a block over its room gave status "
                "%d: %s (expected A2AMM_E_SIZE: %s)", round, me, rc, err.msg, want);
        size_t written = 0;
        for (size_t i = 0; i < recv_len; i++) written += recv[i] != V_UNTOUCHED;
        v_check(o, written == 0, "round %d, rank %d: a refused call wrote %zu bytes of recv", round, me, written);
    } else {
        v_check(o, rc == 0, "round %d, rank %d: status %d: %s", round, me, rc, err.msg);
        for (int p = 0; !rc && p < R; p++) {
            size_t want = v_size(p, me, round), bad = 0;
            v_check(o, got[p] == want, "round %d, rank %d: recv_bytes[%d] = %zu, expected %zu", round, me, p, got[p],
                    want);
            for (size_t k = 0; k < want; k++) bad += recv[ro[p] + k] != v_byte(p, me, round, k);
            for (size_t k = want; k < room[p] + V_GAP; k++) bad += recv[ro[p] + k] != V_UNTOUCHED;
            v_check(o, bad == 0, "round %d, rank %d: %zu bytes of rank %d's block (or past it) wrong", round, me,
                    bad, p);
        }
    }
    free(send), free(recv), free(sb);
}

/* The even AllToAll on the same communicator, between uneven ones (they share the stage on shm). */
static void v_even(a2amm_comm *comm, size_t block, v_outcome *o)
{
    int me = a2amm_comm_rank(comm), R = a2amm_comm_size(comm);
    uint8_t *send = malloc((size_t)R * block), *recv = malloc((size_t)R * block);
    for (int p = 0; p < R; p++) memset(send + (size_t)p * block, me * 16 + p + 1, block);
    a2amm_error err = {0, ""};
    int rc = a2amm_comm_alltoall(comm, send, recv, block, 30, &err);
    v_check(o, rc == 0, "rank %d: a2amm_comm_alltoall between uneven ones: %s", me, err.msg);
    size_t bad = 0;
    for (int p = 0; !rc && p < R; p++)
        for (size_t k = 0; k < block; k++) bad += recv[(size_t)p * block + k] != (uint8_t)(p * 16 + me + 1);
    v_check(o, bad == 0, "rank %d: a2amm_comm_alltoall between uneven ones: %zu bytes wrong", me, bad);
    free(send), free(recv);
}

static void v_all_cases(a2amm_comm *comm, v_outcome *o)
{
    for (int round = 0; round < V_ROUNDS; round++) {
        v_round(comm, round, 0, o);
        if (round == 1 || round == 3) v_even(comm, round == 1 ? 700 : 40000, o);
    }
    v_round(comm, V_ROUNDS, 1, o); /* refused on every rank, the communicator still good: */
    v_round(comm, V_ROUNDS + 1, 0, o);
    v_even(comm, 100, o);
}

#endif
