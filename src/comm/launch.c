/*
 * The shm launcher: forks one process per rank over a world and supervises
 * them. A rank that fails, by returning an error or by dying, fails the
 * world; the others get a grace period to leave, then are killed. Every
 * child is reaped before comm_launch returns; none outlives its parent.
 */
#include "comm/comm_shm.h"
#include "common/error.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXIT_ORPHANED 125   /* the launcher was gone before the rank started */
#define EXIT_ODD_STATUS 124 /* a status outside the A2AMM_E_* range */
#define POLL_NS 2000000     /* how often the launcher looks at its children */

struct rank_watch {
    comm_rank_outcome outcome;
    int running;
};

static int exit_code_of(int status)
{
    if (status == A2AMM_OK)
        return 0;
    return status < 0 && status > -EXIT_ODD_STATUS ? -status : EXIT_ODD_STATUS;
}

static int status_of_exit_code(int code)
{
    if (code == 0)
        return A2AMM_OK;
    return code < EXIT_ODD_STATUS ? -code : A2AMM_E_SYS;
}

/* The child's side: run the rank and leave without returning to main. */
static _Noreturn void run_rank(comm_world *world, int rank, comm_rank_fn rank_fn, void *arg,
                               pid_t launcher)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != launcher)
        _exit(EXIT_ORPHANED);
    /* the launcher's handlers are its own: a rank dies of SIGINT/SIGTERM, which the launcher reports */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    struct comm_rank_slot *slot = &world->hdr->rank[rank];
    atomic_store(&slot->pid, (int32_t)getpid());
    atomic_store(&slot->phase, COMM_PHASE_RUNNING);
    comm_ctx ctx;
    comm_ctx_init(&ctx, world, rank);
    comm_progress(&ctx);
    error_forget_here(); /* the launcher's thread's, copied by the fork: not this rank's */
    int status = rank_fn(&ctx, arg);
    if (status != A2AMM_OK && !comm_world_failed(world->hdr, NULL, NULL, NULL, 0)) {
        /* what the library last refused on this thread (comm's own failures among them), newer than
         * the comm's last failure where they differ */
        const a2amm_error *here = error_last_here();
        if (here->code == status && strcmp(here->msg, ctx.last_error.msg) != 0) {
            comm_fail(&ctx, status, "returned %d (%s); its last error: %s", status, a2amm_strerror(status),
                      here->msg);
        } else if (ctx.last_error.code == status) {
            comm_fail(&ctx, status, "%s", ctx.last_error.msg);
        } else {
            char doing[2 * COMM_DOING_CHARS + 32];
            comm_describe_rank(world->hdr, rank, doing, sizeof doing);
            comm_fail(&ctx, status, "returned %d (%s) while %s", status, a2amm_strerror(status),
                      doing);
        }
    }
    comm_progress(&ctx);
    comm_rank_ended(world->hdr, rank, COMM_PHASE_RETURNED, status); /* a peer still waiting for it hears now */
    fflush(NULL);
    _exit(exit_code_of(status));
}

/* Records how rank r ended (wait_status from waitpid, or -1 if it could not
 * be waited for) and fails the world if it ended badly. */
static void record_end(struct comm_world_header *hdr, struct rank_watch *w, int r,
                       int wait_status, int wait_errno)
{
    comm_rank_outcome *o = &w->outcome;
    char doing[2 * COMM_DOING_CHARS + 32], reason[COMM_FAIL_CHARS];
    comm_describe_rank(hdr, r, doing, sizeof doing);
    comm_copy_shared_text(o->doing, sizeof o->doing, doing, sizeof doing);
    int returned = atomic_load(&hdr->rank[r].phase) == COMM_PHASE_RETURNED;
    w->running = 0;
    reason[0] = '\0';
    if (wait_status == -1) {
        o->exit_code = -1;
        o->status = A2AMM_E_SYS;
        snprintf(reason, sizeof reason, "rank %d (pid %d) could not be waited for (%s) while %s",
                 r, (int)o->pid, strerror(wait_errno), doing);
    } else if (WIFSIGNALED(wait_status)) {
        o->exit_code = -1;
        o->term_signal = WTERMSIG(wait_status);
        o->status = A2AMM_E_PEER;
        if (!o->killed_by_launcher)
            snprintf(reason, sizeof reason, "rank %d (pid %d) was killed by signal %d (%s) while %s",
                     r, (int)o->pid, o->term_signal, strsignal(o->term_signal), doing);
    } else {
        o->exit_code = WEXITSTATUS(wait_status);
        o->status = status_of_exit_code(o->exit_code);
        if (o->exit_code == EXIT_ORPHANED)
            snprintf(reason, sizeof reason, "rank %d could not start: its launcher was gone", r);
        else if (!returned)
            snprintf(reason, sizeof reason,
                     "rank %d (pid %d) exited with code %d before its rank function returned, "
                     "while %s", r, (int)o->pid, o->exit_code, doing);
        if (!returned)
            o->status = A2AMM_E_PEER;
    }
    if (reason[0])
        comm_mark_failed(hdr, r, A2AMM_E_PEER, reason);
}

/* The safety limit passed: fail the world, naming what every rank does. */
static void fail_for_timeout(struct comm_world_header *hdr, const struct rank_watch *w,
                             int nranks, double timeout_s)
{
    char reason[COMM_FAIL_CHARS], doing[2 * COMM_DOING_CHARS + 32];
    size_t used = 0;
    reason[0] = '\0';
    comm_append(reason, sizeof reason, &used, "the run outlived its %.1f s limit", timeout_s);
    for (int r = 0; r < nranks; r++) {
        if (!w[r].running)
            continue;
        comm_describe_rank(hdr, r, doing, sizeof doing);
        comm_append(reason, sizeof reason, &used, "; rank %d: %s", r, doing);
    }
    comm_mark_failed(hdr, -1, A2AMM_E_TIMEOUT, reason);
}

/* A running rank silent for longer than stall_s: fail the world naming it. */
static void watch_stalls(struct comm_world_header *hdr, const struct rank_watch *w, int nranks, double stall_s,
                         int64_t now)
{
    for (int r = 0; r < nranks; r++) {
        if (!w[r].running)
            continue;
        int64_t last = atomic_load_explicit(&hdr->rank[r].progress_ns, memory_order_relaxed);
        if (last == 0 || (double)(now - last) * 1e-9 <= stall_s)
            continue; /* 0: not started yet; the safety limit covers that */
        char doing[2 * COMM_DOING_CHARS + 32], reason[COMM_FAIL_CHARS];
        comm_describe_rank(hdr, r, doing, sizeof doing);
        snprintf(reason, sizeof reason, "rank %d (pid %d) showed no sign of life for %.1f s (stopped or stuck) "
                 "while %s", r, (int)w[r].outcome.pid, (double)(now - last) * 1e-9, doing);
        comm_mark_failed(hdr, r, A2AMM_E_TIMEOUT, reason);
        return;
    }
}

/* Polls the children until all have ended, killing them once a failure's
 * grace period (or the safety limit's) has passed. */
static void supervise(struct comm_world_header *hdr, struct rank_watch *w, int nranks,
                      double timeout_s, double grace_s, double stall_s, const volatile sig_atomic_t *stop)
{
    int64_t safety_end = comm_deadline_after(timeout_s), grace_end = INT64_MAX;
    int running = 0;
    for (int r = 0; r < nranks; r++)
        running += w[r].running;
    while (running > 0) {
        /* Before reaping: a Ctrl-C reaches the ranks too (one process group), and a rank it ended
         * must not be reported as the failure the user's interrupt was. */
        if (grace_end == INT64_MAX && stop && *stop) {
            char reason[64];
            snprintf(reason, sizeof reason, "interrupted by signal %d (%s)", (int)*stop, strsignal((int)*stop));
            comm_mark_failed(hdr, -1, A2AMM_E_INTERRUPTED, reason);
            grace_s = grace_s < 0.2 ? grace_s : 0.2; /* the user is waiting: stop the ranks now */
        }
        for (int r = 0; r < nranks; r++) {
            if (!w[r].running)
                continue;
            int wait_status;
            pid_t got = waitpid(w[r].outcome.pid, &wait_status, WNOHANG);
            if (got == 0 || (got < 0 && errno == EINTR))
                continue;
            record_end(hdr, &w[r], r, got < 0 ? -1 : wait_status, errno);
            running--;
        }
        int64_t now = comm_now_ns();
        if (grace_end == INT64_MAX && now >= safety_end)
            fail_for_timeout(hdr, w, nranks, timeout_s);
        if (grace_end == INT64_MAX && stall_s > 0)
            watch_stalls(hdr, w, nranks, stall_s, now);
        if (grace_end == INT64_MAX && comm_world_failed(hdr, NULL, NULL, NULL, 0))
            grace_end = comm_deadline_after(grace_s);
        if (running > 0 && now >= grace_end) {
            for (int r = 0; r < nranks; r++) {
                if (w[r].running) {
                    w[r].outcome.killed_by_launcher = 1;
                    kill(w[r].outcome.pid, SIGKILL);
                }
            }
            grace_end = INT64_MAX - 1; /* killed once; the loop reaps them */
        }
        struct timespec pause = {0, POLL_NS};
        nanosleep(&pause, NULL);
    }
}

int comm_launch(comm_world *world, comm_rank_fn rank_fn, void *arg,
                const comm_launch_options *options, comm_rank_outcome *outcomes,
                a2amm_error *err)
{
    struct comm_world_header *hdr = world->hdr;
    int nranks = hdr->nranks;
    if (world->launched)
        return a2amm_fail(err, A2AMM_E_INVAL, "comm: this world has already run; make a new one");
    world->launched = 1;
    double timeout_s = options && options->timeout_s > 0 ? options->timeout_s : 600.0;
    double grace_s = options && options->grace_s > 0 ? options->grace_s : 1.5;
    double stall_s = options && options->stall_s > 0 ? options->stall_s : 0;
    struct rank_watch *w = calloc((size_t)nranks, sizeof *w);
    if (!w)
        return a2amm_fail(err, A2AMM_E_NOMEM, "comm: out of memory for %d rank records", nranks);

    fflush(NULL); /* or buffered output would be written by every child too */
    pid_t launcher = getpid();
    for (int r = 0; r < nranks; r++) {
        pid_t pid = fork();
        if (pid == 0)
            run_rank(world, r, rank_fn, arg, launcher);
        if (pid < 0 || (options && options->stop && *options->stop)) {
            if (pid == 0)
                break; /* not reached: the child runs its rank */
            if (pid > 0) {
                w[r].outcome.pid = pid;
                w[r].running = 1;
                break; /* a stop request: the supervisor marks the world and stops them */
            }
            char reason[128];
            snprintf(reason, sizeof reason, "the launcher could not fork rank %d: %s", r,
                     strerror(errno));
            comm_mark_failed(hdr, -1, A2AMM_E_SYS, reason);
            break;
        }
        w[r].outcome.pid = pid;
        w[r].running = 1;
    }
    supervise(hdr, w, nranks, timeout_s, grace_s, stall_s, options ? options->stop : NULL);

    int status = A2AMM_OK, fail_rank, fail_code;
    char reason[COMM_FAIL_CHARS];
    if (comm_world_failed(hdr, &fail_rank, &fail_code, reason, sizeof reason)) {
        char msg[sizeof err->msg];
        size_t used = 0;
        msg[0] = '\0';
        comm_append(msg, sizeof msg, &used, "%s", reason);
        for (int r = 0; r < nranks; r++)
            if (w[r].outcome.killed_by_launcher)
                comm_append(msg, sizeof msg, &used, "; rank %d did not stop in time and was "
                            "killed while %s", r, w[r].outcome.doing);
        status = a2amm_fail(err, fail_code, "%s", msg);
        if (fail_rank >= 0)
            w[fail_rank].outcome.failed_first = 1;
    }
    if (outcomes)
        for (int r = 0; r < nranks; r++)
            outcomes[r] = w[r].outcome;
    free(w);
    return status;
}
