/*
 * Faults the failure tests inject into a run from outside the operator:
 * A2AMM_FAULT_RANK=r with A2AMM_FAULT=kill|exit|stall|error makes rank r
 * misbehave as its op call begins tile 1 (tile 0 when there is one tile),
 * through the op's observer; A2AMM_FAULT=stall-end stalls it after the run's
 * last barrier.
 *
 * A2AMM_FAULT=pause-<phase> makes the process that reaches the named phase
 * say "a2amm: paused at <phase> (pid N)" on stderr and wait, until killed
 * or resumed by SIGUSR1, so that a test can kill the launcher, a rank or
 * the guard at that moment:
 *   run's launcher: launch (before the ranks start), before-commit (every
 *     rank's output staged), commit-0 (the set's commit point passed, no
 *     file renamed), commit-1 (one renamed), after-commit (all in place,
 *     before the trace is merged);
 *   rank A2AMM_FAULT_RANK: load (before its inputs are read), compute (as
 *     its op call begins tile 1, like stall), staged (its output staged,
 *     before the end barrier);
 *   gen: gen-inputs (before the inputs), gen-golden (inputs written,
 *     before the goldens), gen-meta (before the meta file);
 *   bench moe's rank A2AMM_FAULT_RANK: bench-prepare (before its data).
 *
 * Faults of perf mode's timing, as a machine busy with other work may make
 * one variant slower than another that does more (the tests' way to a
 * difference of medians below zero, which the report must not print as a
 * time): with A2AMM_FAULT_RANK=r,
 *   A2AMM_FAULT=slow-matmul: rank r's timed matmul alone (the matmul ops'
 *     perf mode and bench op) takes 50 ms more;
 *   A2AMM_FAULT=slow-experts: rank r's timed experts alone (run --op moe
 *     perf) take 50 ms more.
 */
#ifndef A2AMM_CLI_FAULT_H
#define A2AMM_CLI_FAULT_H

#include "a2amm.h"

typedef enum fault_kind { FAULT_NONE, FAULT_KILL, FAULT_EXIT, FAULT_STALL, FAULT_ERROR, FAULT_STALL_END,
                           FAULT_PAUSE_COMPUTE } fault_kind;

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
/* A2AMM_FAULT=pause-<phase>: returns only on SIGUSR1 (rank >= 0: only in
 * rank A2AMM_FAULT_RANK; -1: the launcher or gen). Otherwise nothing. */
void fault_pause(const char *phase, int rank);
/* Whether A2AMM_FAULT is `name` (slow-matmul, slow-experts) and A2AMM_FAULT_RANK is `rank`. */
int fault_slow_here(const char *name, int rank);
/* A stall-end fault: never returns. Otherwise nothing. */
void fault_at_end(const fault_plan *plan);

#endif
