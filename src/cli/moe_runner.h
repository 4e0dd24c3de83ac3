/*
 * The MoE op over its files (a2amm run --op moe): a user of the public API
 * (a2amm_moe_*) like any other. It checks every rank's input files, runs R
 * ranks (a2amm_launch here, or this process as one rank of an MPI job), and
 * in each loads DIR/input/<r>/, makes the op, sets the rank's experts, and
 * either calls it once and writes DIR/output/<r>/npu_out.bin (every rank's
 * committed as a set) or times repetitions (perf mode).
 */
#ifndef A2AMM_CLI_MOE_RUNNER_H
#define A2AMM_CLI_MOE_RUNNER_H

#include <signal.h>

#include "a2amm.h"
#include "cli/runner.h"
#include "io/moe_io.h"

/* What perf mode times, each repetition after a barrier, as the slowest rank's time:
 * the op's call (the schedule asked for); the call on the other schedule (unfused, or fused with
 * --unfused); its experts alone (every local expert on the rows a dispatch gave it, on the op's thread
 * count, by a2amm_moe_expert); the exchange alone (dispatch and combine, the experts' outputs zeros). */
enum { MOE_V_CALL, MOE_V_OTHER, MOE_V_EXPERTS, MOE_V_EXCHANGE, MOE_VARIANTS };
extern const char *const moe_variant_names[MOE_VARIANTS];

/* "fused", "unfused" or "overlap". */
const char *moe_schedule_name(a2amm_schedule schedule);

/* What perf mode times beside the schedule asked for: unfused, or fused where unfused was asked. */
static inline a2amm_schedule moe_other_schedule(a2amm_schedule schedule)
{
    return schedule == A2AMM_SCHEDULE_UNFUSED ? A2AMM_SCHEDULE_FUSED : A2AMM_SCHEDULE_UNFUSED;
}

typedef struct moe_run_options {
    run_mode mode;
    int iters, warmup; /* perf: timed repetitions (default 10), untimed ones first (default 1) */
    int threads;       /* compute threads a rank (0: cores / ranks sharing this machine) */
    a2amm_schedule schedule; /* fused (the default: by size), unfused or overlap (a2amm_moe_config) */
    double timeout_s;  /* every wait between ranks (default 60) */
    run_transport transport;
    const volatile sig_atomic_t *stop; /* non-zero stops the run (A2AMM_E_INTERRUPTED, nothing written) */
    int progress;      /* perf over shm: the repetitions done on stderr, a terminal's line or plain lines
                          (progress.h; the caller decides: not --quiet, not --json) */
    const char *trace_path; /* --trace FILE: every rank's events of the op's calls as Chrome trace JSON, or NULL
                               (shm only; held to cli_check_output by the caller) */
} moe_run_options;

typedef struct moe_run_result {
    int rank;                 /* over MPI: this process's rank (only rank 0 reports) */
    int threads;              /* compute threads a rank */
    const char *kernel;       /* the kernel level */
    a2amm_rank_report *ranks; /* [R] */
    int iters;
    double *t[MOE_VARIANTS];  /* perf: [iters] each, the slowest rank's seconds */
    int64_t rows_max;         /* perf: the most expert rows (token, local expert) a rank computed in a call */
} moe_run_result;

/* Symmetric memory a rank's MoE op needs (heap_bytes of its communicator): the stages of the dispatch and
 * the combine at the worst case (R * max_tokens rows each way), twice over, and room for the communicator's
 * own. */
size_t moe_run_heap_bytes(int R, int64_t max_tokens, int64_t H, int K);

int moe_run_files(const char *dir, const moe_io_shape *s, const moe_run_options *o, moe_run_result *res,
                  a2amm_error *err);
void moe_run_result_free(moe_run_result *res);

#endif
