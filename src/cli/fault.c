/* The failure tests' injected faults (see fault.h). */
#include "cli/fault.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

fault_kind fault_from_env(int rank)
{
    const char *r = getenv("A2AMM_FAULT_RANK"), *f = getenv("A2AMM_FAULT");
    if (!r || !f || atoi(r) != rank) return FAULT_NONE;
    static const struct { const char *name; fault_kind kind; } kinds[] = {
        {"kill", FAULT_KILL}, {"exit", FAULT_EXIT}, {"stall", FAULT_STALL}, {"error", FAULT_ERROR},
        {"stall-end", FAULT_STALL_END}, {"pause-compute", FAULT_PAUSE_COMPUTE}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcmp(f, kinds[i].name)) return kinds[i].kind;
    return FAULT_NONE;
}

int fault_slow_here(const char *name, int rank)
{
    const char *r = getenv("A2AMM_FAULT_RANK"), *f = getenv("A2AMM_FAULT");
    return r && f && !strcmp(f, name) && atoi(r) == rank;
}

int fault_observe(void *arg, const a2amm_event *ev)
{
    fault_plan *p = arg;
    if (p->done || ev->kind != A2AMM_EVENT_TILE || ev->tile != (ev->tiles > 1 ? 1 : 0)) return A2AMM_OK;
    p->done = 1;
    switch (p->kind) {
    case FAULT_KILL: raise(SIGKILL); break;
    case FAULT_EXIT: _exit(3);
    case FAULT_STALL:
        for (;;) pause();
    case FAULT_PAUSE_COMPUTE: fault_pause("compute", -1); break;
    case FAULT_ERROR: {
        char msg[64];
        snprintf(msg, sizeof msg, "injected error at tile %lld", (long long)ev->tile);
        return a2amm_comm_fail(p->comm, A2AMM_E_INVAL, msg);
    }
    default: break;
    }
    return A2AMM_OK;
}

int fault_in_pipeline(const fault_plan *plan) { return plan->kind != FAULT_NONE && plan->kind != FAULT_STALL_END; }

static volatile sig_atomic_t resumed;
static void on_resume(int sig) { (void)sig; resumed = 1; }

void fault_pause(const char *phase, int rank)
{
    const char *f = getenv("A2AMM_FAULT"), *r = getenv("A2AMM_FAULT_RANK");
    if (!f || strncmp(f, "pause-", 6) || strcmp(f + 6, phase)) return;
    if (rank >= 0 && (!r || atoi(r) != rank)) return;
    sigset_t usr1, before;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, &before); /* no SIGUSR1 lost between the test and the wait */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_resume;
    sigaction(SIGUSR1, &sa, NULL);
    char line[128];
    int n = snprintf(line, sizeof line, "a2amm: paused at %s (pid %ld)\n", phase, (long)getpid());
    if (n > 0 && write(STDERR_FILENO, line, (size_t)n) < 0) _exit(3);
    sigdelset(&before, SIGUSR1);
    while (!resumed) sigsuspend(&before);
    resumed = 0;
    sigprocmask(SIG_UNBLOCK, &usr1, NULL);
}

void fault_at_end(const fault_plan *plan)
{
    if (plan->kind != FAULT_STALL_END) return;
    a2amm_comm_say(plan->comm, "stalling after the last barrier (injected)");
    for (;;) pause();
}
