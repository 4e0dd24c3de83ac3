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
/* Arms plan's fault (if one happens in the pipeline) on op. */
void fault_arm(fault_plan *plan, a2amm_op *op);
/* A stall-end fault: never returns. Otherwise nothing. */
void fault_at_end(const fault_plan *plan);

#endif
