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
        {"stall-end", FAULT_STALL_END}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcmp(f, kinds[i].name)) return kinds[i].kind;
    return FAULT_NONE;
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

void fault_at_end(const fault_plan *plan)
{
    if (plan->kind != FAULT_STALL_END) return;
    a2amm_comm_say(plan->comm, "stalling after the last barrier (injected)");
    for (;;) pause();
}
