/*
 * `a2amm timeline`: a trace (Chrome trace JSON as --trace writes it) drawn
 * as one SVG picture: ranks as rows, time across, a colour per kind of
 * span, tile numbers where they fit, waits that stalled a rank in red with a
 * mark above, the MoE op's experts each a bar of its own (its number among
 * all E where it fits, always in its title) in a lane per compute thread, a
 * legend of the kinds drawn, a time axis, and the perf summary in the title.
 * Spans narrower than a pixel merge with their neighbours of the same kind,
 * so the picture stays small at thousands of tiles.
 */
#ifndef A2AMM_CLI_TIMELINE_H
#define A2AMM_CLI_TIMELINE_H

#include <stddef.h>
#include <stdint.h>

#include "a2amm.h"

typedef struct timeline_options {
    int width;          /* the picture's width in pixels (default 1400) */
    int64_t call;       /* only this call's time (its CALL spans on every rank), or 0 for all */
    double stall_us;    /* a wait at least this long is a stall (0: a quarter of the median tile, at least 20 us) */
} timeline_options;

typedef struct timeline_stats {
    int ranks;
    size_t spans;       /* spans read */
    size_t shapes;      /* rectangles drawn (after merging) */
    size_t stalls;      /* waits drawn as stalls */
    double from_us, to_us;
    double stall_us;    /* the threshold used */
} timeline_stats;

/* Reads json_path, writes svg_path (through a temporary name). Errors name
 * the file and what was wrong in it. */
int timeline_render(const char *json_path, const char *svg_path, const timeline_options *o, timeline_stats *stats,
                    a2amm_error *err);

#endif
