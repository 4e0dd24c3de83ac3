/* Perf-mode figures as people and programs read them. */
#ifndef A2AMM_CLI_PERF_REPORT_H
#define A2AMM_CLI_PERF_REPORT_H

#include "common/shape.h"
#include "cli/runner.h"

typedef struct cli_summary { double min, median, max; } cli_summary;

/* min, median and max of n > 0 values. */
cli_summary cli_summarize(const double *v, int n);

/* The perf table of an op run (or one JSON object with --json). */
void cli_print_op_perf(const op_shape *s, const run_options *o, const run_result *res, int json);

#endif
