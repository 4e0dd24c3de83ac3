/*
 * Faults the failure tests inject into a run from outside the operator:
 * A2AMM_FAULT_RANK=r with A2AMM_FAULT=kill|exit|stall|error makes rank r
 * misbehave as its op call begins tile 1 (tile 0 when there is one tile),
 * through the op's observer; A2AMM_FAULT=stall-end stalls it after the run's
 * last barrier.
 */
#ifndef A2AMM_CLI_FAULT_H
#define A2AMM_CLI_FAULT_H

#include "a2amm.h"

typedef enum fault_kind { FAULT_NONE, FAULT_KILL, FAULT_EXIT, FAULT_STALL, FAULT_ERROR, FAULT_STALL_END } fault_kind;

typedef struct fault_plan {
    fault_kind kind;
    a2amm_comm *comm;
    int done;
} fault_plan;

/* This rank's fault from the environment (FAULT_NONE for the other ranks). */
fault_kind fault_from_env(int rank);
/* Whether plan's fault happens in the pipeline: then fault_observe (arg:
 * the plan) must be the op's observer, or be called by it. */
int fault_in_pipeline(const fault_plan *plan);
/* The observer: the fault, once, as tile 1 (or the only tile) begins. */
int fault_observe(void *arg, const a2amm_event *ev);
/* A stall-end fault: never returns. Otherwise nothing. */
void fault_at_end(const fault_plan *plan);

#endif
