/* Perf-mode figures as people and programs read them. */
#ifndef A2AMM_CLI_PERF_REPORT_H
#define A2AMM_CLI_PERF_REPORT_H

#include <stddef.h>

#include "common/shape.h"
#include "cli/runner.h"

typedef struct cli_summary { double min, median, max; } cli_summary;

/* min, median and max of n > 0 values. */
cli_summary cli_summarize(const double *v, int n);

/*
 * Noise, by one rule for perf mode and every benchmark: a spread is wide where the fastest repetition
 * took under 0.9 of the slowest (bench gemm's test of its ceiling probes); a machine busy with other
 * work shows it. A difference of two medians is measurable where it exceeds the wider of the two
 * spreads (max - min): a smaller one could be the noise alone.
 */
int cli_spread_wide(double fastest, double slowest);
int cli_difference_measurable(const cli_summary *a, const cli_summary *b);
/* "12.345 ms (4.5% of the run)" for a measurable a.median - b.median > 0, else "none measurable (...)"
 * saying why: never a negative time. */
void cli_exposed_text(char *buf, size_t size, const cli_summary *run, const cli_summary *alone);
/* The same for any part timed alone, named by `alone_name` as the text's last words say it ("the experts
 * alone's"): "none measurable (the run's median is not above the experts alone's)". */
void cli_exposed_text_of(char *buf, size_t size, const cli_summary *run, const cli_summary *alone,
                         const char *alone_name);
/* One line "  spread, (max - min) / max: NAME 3%, NAME 15% (wide), ..." of n variants; returns whether
 * any spread is wide (then the caller says what a busy machine means). */
int cli_print_spreads(const char *const *names, const cli_summary *v, int n);

/* The perf table of an op run (or one JSON object with --json). */
void cli_print_op_perf(const op_shape *s, const run_options *o, const run_result *res, int json);

#endif
