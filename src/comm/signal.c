/*
 * Signals of the shm transport: 64-bit words in the symmetric heap, updated
 * with atomics, and waited on by sleeping on the waiter's 32-bit futex
 * doorbell, which every update of that rank's signals bumps. Waits sleep in
 * slices so that a failed world and the deadline are noticed promptly.
 */
#include "comm/comm_shm.h"

#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define WAIT_SPINS 200                  /* polls before going to sleep */
#define WAIT_SLICE_NS (100 * 1000000LL) /* longest sleep between checks */

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Shared (not FUTEX_PRIVATE) futexes: the word lives in a MAP_SHARED memfd. */
static void futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
    struct timespec ts = {(time_t)(timeout_ns / 1000000000), (long)(timeout_ns % 1000000000)};
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, &ts, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/*
 * Seq-cst throughout: either the waiter's read of the word (after it counts
 * itself a sleeper) sees the update, or the updater sees the sleeper and
 * wakes it; and the doorbell value the waiter sleeps on is then stale.
 */
void comm_ring_doorbell(struct comm_world_header *hdr, int pe)
{
    struct comm_rank_slot *slot = &hdr->rank[pe];
    atomic_fetch_add(&slot->doorbell, 1);
    if (atomic_load(&slot->sleepers) > 0)
        futex_wake_all(&slot->doorbell);
}

void comm_ring_all_doorbells(struct comm_world_header *hdr)
{
    for (int pe = 0; pe < hdr->nranks; pe++)
        comm_ring_doorbell(hdr, pe);
}

const char *comm_cmp_name(comm_cmp cmp)
{
    static const char *const names[] = {"==", "!=", ">", ">=", "<", "<="};
    return (unsigned)cmp < sizeof names / sizeof names[0] ? names[cmp] : "?";
}

static int cmp_holds(uint64_t seen, comm_cmp cmp, uint64_t value)
{
    switch (cmp) {
    case COMM_CMP_EQ: return seen == value;
    case COMM_CMP_NE: return seen != value;
    case COMM_CMP_GT: return seen > value;
    case COMM_CMP_GE: return seen >= value;
    case COMM_CMP_LT: return seen < value;
    case COMM_CMP_LE: return seen <= value;
    }
    return 0;
}

/* Fails the world naming a rank other than this one that has ended; 0 if none has. */
static int fail_for_ended_rank(comm_ctx *ctx)
{
    struct comm_world_header *hdr = ctx->hdr;
    for (int r = 0; r < ctx->nranks; r++) {
        int phase = atomic_load(&hdr->rank[r].phase);
        if (r == ctx->rank || (phase != COMM_PHASE_RETURNED && phase != COMM_PHASE_LEFT))
            continue;
        char how[64], said[COMM_DOING_CHARS], doing[COMM_DOING_CHARS], reason[COMM_FAIL_CHARS];
        if (phase == COMM_PHASE_RETURNED)
            snprintf(how, sizeof how, "its function returned %d", (int)atomic_load(&hdr->rank[r].end_status));
        else
            snprintf(how, sizeof how, "it left the communicator");
        comm_copy_shared_text(said, sizeof said, hdr->rank[r].doing, COMM_DOING_CHARS);
        comm_copy_shared_text(doing, sizeof doing, hdr->rank[ctx->rank].doing, COMM_DOING_CHARS);
        snprintf(reason, sizeof reason, "rank %d ended (%s) before making the collective call rank %d waits in "
                 "(%s); rank %d said last: %s", r, how, ctx->rank, doing[0] ? doing : "(no activity recorded)", r,
                 said[0] ? said : "(nothing)");
        comm_mark_failed(hdr, r, A2AMM_E_PEER, reason);
        return 1;
    }
    return 0;
}

int comm_wait_word(comm_ctx *ctx, _Atomic uint64_t *word, comm_cmp cmp, uint64_t value,
                   int64_t deadline_ns, uint64_t *seen, const char *what, a2amm_error *err)
{
    uint64_t v = atomic_load_explicit(word, memory_order_acquire);
    for (int i = 0; i < WAIT_SPINS && !cmp_holds(v, cmp, value); i++) {
        cpu_relax();
        v = atomic_load_explicit(word, memory_order_acquire);
    }
    if (seen)
        *seen = v;
    if (cmp_holds(v, cmp, value))
        return A2AMM_OK;
    if ((unsigned)cmp > COMM_CMP_LE)
        return comm_report(ctx, err, A2AMM_E_INVAL, "rank %d: unknown comparison %d waiting for %s",
                           ctx->rank, (int)cmp, what);

    struct comm_rank_slot *me = &ctx->hdr->rank[ctx->rank];
    char waiting[COMM_DOING_CHARS];
    snprintf(waiting, sizeof waiting, "%s %s %llu", what, comm_cmp_name(cmp),
             (unsigned long long)value);
    memcpy(me->waiting, waiting, strlen(waiting) + 1);
    int64_t start = comm_now_ns();
    int status;
    atomic_fetch_add(&me->sleepers, 1);
    for (;;) {
        uint32_t bell = atomic_load(&me->doorbell);
        v = atomic_load(word);
        if (cmp_holds(v, cmp, value)) {
            status = A2AMM_OK;
            break;
        }
        if (comm_world_failed(ctx->hdr, NULL, NULL, NULL, 0)) {
            status = A2AMM_E_PEER;
            break;
        }
        if (atomic_load(&ctx->hdr->ended) != 0) {
            /* a rank ended: what it did before is seen now, so a word still short will stay so */
            v = atomic_load(word);
            if (cmp_holds(v, cmp, value)) {
                status = A2AMM_OK;
                break;
            }
            if (fail_for_ended_rank(ctx)) {
                status = A2AMM_E_PEER;
                break;
            }
        }
        int64_t now = comm_now_ns();
        if (now >= deadline_ns) {
            status = A2AMM_E_TIMEOUT;
            break;
        }
        int64_t left = deadline_ns - now;
        futex_wait(&me->doorbell, bell, left < WAIT_SLICE_NS ? left : WAIT_SLICE_NS);
    }
    atomic_fetch_sub(&me->sleepers, 1);
    me->waiting[0] = '\0';
    if (seen)
        *seen = v;
    if (status == A2AMM_OK)
        return status;

    char doing[COMM_DOING_CHARS];
    comm_copy_shared_text(doing, sizeof doing, me->doing, COMM_DOING_CHARS);
    if (status == A2AMM_E_TIMEOUT)
        return comm_report(ctx, err, status,
                           "rank %d: timed out waiting until %s %s %llu (last seen %llu; "
                           "waited %.3f s) while %s", ctx->rank, what, comm_cmp_name(cmp),
                           (unsigned long long)value, (unsigned long long)v,
                           (double)(comm_now_ns() - start) / 1e9,
                           doing[0] ? doing : "(no activity recorded)");
    char reason[COMM_FAIL_CHARS];
    comm_world_failed(ctx->hdr, NULL, NULL, reason, sizeof reason);
    return comm_report(ctx, err, status,
                       "rank %d: stopped waiting until %s %s %llu (last seen %llu) because the "
                       "run failed: %s", ctx->rank, what, comm_cmp_name(cmp),
                       (unsigned long long)value, (unsigned long long)v, reason);
}

/* pe's copy of the signal at sig_sym, checked; NULL with err filled if bad. */
static _Atomic uint64_t *peer_signal(comm_ctx *ctx, const uint64_t *sig_sym, int pe,
                                     const char *op, a2amm_error *err)
{
    if ((uintptr_t)sig_sym % sizeof(uint64_t) != 0) {
        comm_report(ctx, err, A2AMM_E_INVAL, "rank %d: %s on pe %d: signal at %p is not "
                    "8-byte aligned", ctx->rank, op, pe, (const void *)sig_sym);
        return NULL;
    }
    return (_Atomic uint64_t *)comm_peer_range(ctx, sig_sym, sizeof *sig_sym, pe, op, err);
}

static int update_signal(comm_ctx *ctx, uint64_t *sig_sym, uint64_t value, comm_signal_op op,
                         int pe, a2amm_error *err)
{
    _Atomic uint64_t *sig = peer_signal(ctx, sig_sym, pe, "signal update", err);
    if (!sig)
        return ctx->last_error.code;
    if (op == COMM_SIGNAL_SET)
        atomic_store(sig, value);
    else if (op == COMM_SIGNAL_ADD)
        atomic_fetch_add(sig, value);
    else
        return comm_report(ctx, err, A2AMM_E_INVAL, "rank %d: unknown signal operation %d",
                           ctx->rank, (int)op);
    comm_ring_doorbell(ctx->hdr, pe);
    return A2AMM_OK;
}

int comm_signal_set(comm_ctx *ctx, uint64_t *sig_sym, uint64_t value, int pe, a2amm_error *err)
{
    return update_signal(ctx, sig_sym, value, COMM_SIGNAL_SET, pe, err);
}

int comm_signal_add(comm_ctx *ctx, uint64_t *sig_sym, uint64_t value, int pe, a2amm_error *err)
{
    return update_signal(ctx, sig_sym, value, COMM_SIGNAL_ADD, pe, err);
}

int comm_put_signal(comm_ctx *ctx, void *dest_sym, const void *src, size_t bytes,
                    uint64_t *sig_sym, uint64_t value, comm_signal_op op, int pe,
                    a2amm_error *err)
{
    if (!peer_signal(ctx, sig_sym, pe, "put_signal", err))
        return ctx->last_error.code;
    int status = comm_put(ctx, dest_sym, src, bytes, pe, err);
    if (status != A2AMM_OK)
        return status;
    return update_signal(ctx, sig_sym, value, op, pe, err); /* seq-cst: after the data */
}

uint64_t comm_signal_fetch(const comm_ctx *ctx, const uint64_t *sig_sym)
{
    (void)ctx;
    return atomic_load_explicit((_Atomic uint64_t *)sig_sym, memory_order_acquire);
}

int comm_signal_wait_until(comm_ctx *ctx, uint64_t *sig_sym, comm_cmp cmp, uint64_t value,
                           int64_t deadline_ns, uint64_t *seen, a2amm_error *err)
{
    _Atomic uint64_t *sig = peer_signal(ctx, sig_sym, ctx->rank, "signal wait", err);
    if (!sig)
        return ctx->last_error.code;
    comm_progress(ctx);
    uint64_t v = atomic_load_explicit(sig, memory_order_acquire);
    if (cmp_holds(v, cmp, value)) { /* the common case: no text to build */
        if (seen)
            *seen = v;
        return A2AMM_OK;
    }
    char what[64];
    snprintf(what, sizeof what, "signal at heap offset 0x%zx", comm_sym_offset(ctx, sig_sym));
    return comm_wait_word(ctx, sig, cmp, value, deadline_ns, seen, what, err);
}
