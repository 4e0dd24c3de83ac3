/*
 * Getting every rank's spans to the one file `--trace FILE` names. Ranks
 * forked here save theirs beside FILE (FILE.rank<r>.<tag>), and the launcher
 * merges them; over MPI, rank 0 measures each rank's clock offset at start
 * (a ping exchange) and gathers the spans at the end.
 */
#ifndef A2AMM_CLI_RUN_TRACE_H
#define A2AMM_CLI_RUN_TRACE_H

#include "cli/trace.h"

/* A forked rank: its spans into FILE.rank<r>.<tag>. */
int run_trace_save_part(const trace_rank *t, const char *trace_path, const char *tag, a2amm_error *err);
/* The launcher: the R parts into one JSON at trace_path (write = 0: only
 * removes them, as after a failed run). The parts are removed either way. */
int run_trace_merge_parts(const char *trace_path, const char *tag, int R, int write, trace_meta *meta,
                          a2amm_error *err);

/* Over MPI (every rank calls these): each rank's clock minus rank 0's, in
 * offset_ns[R] on rank 0 (zeros elsewhere); then the spans gathered to rank
 * 0, which writes the JSON. Every rank gets rank 0's status. */
void run_trace_mpi_offsets(int R, int rank, int64_t *offset_ns);
int run_trace_mpi_write(const trace_rank *t, const char *trace_path, int R, int rank, trace_meta *meta,
                        a2amm_error *err);

#endif
