/*
 * How a rank's end is told, the same for every op of `a2amm run`: a rank
 * that fails reports it to every rank (the launcher prints it once), and the
 * launcher prints a line a rank (ok, failed first and how, or stopped for
 * another's failure, with what it was doing).
 */
#ifndef A2AMM_CLI_RANK_REPORT_H
#define A2AMM_CLI_RANK_REPORT_H

#include "a2amm.h"

/* In a rank: reports its failure rc (err's message, without a leading "rank N: ") to every rank; the first
 * report wins. Returns rc. */
int rank_report_fail(a2amm_comm *comm, int me, int rc, const a2amm_error *err);

/* In the launcher: rank r's end in a line ("  [Rank r] ..."). */
void rank_report_print(int r, const a2amm_rank_report *k);

/* The same in a few words, for --json. */
const char *rank_report_word(const a2amm_rank_report *k);

/* run --json's end of the object: ,"ranks":[each rank's end] (ranks NULL: none),"outputs":[every rank's
 * DIR/output/<r>/npu_out.bin] (none where the run failed), then the closing brace and a newline. */
void rank_report_json_tail(const a2amm_rank_report *ranks, int R, const char *dir, int failed);

#endif
