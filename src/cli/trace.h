/*
 * The pipeline seen from inside each rank, for `--trace FILE` and perf
 * mode's per-rank breakdown. One observer per rank (trace_observe, on the
 * op through a2amm_op_set_observer) turns the op's events into spans; it
 * sums their time by kind while counting is on and, when recording, keeps
 * every span. The spans of all ranks become one Chrome trace-event JSON
 * file (trace_write_json: Perfetto, chrome://tracing, `a2amm timeline`).
 */
#ifndef A2AMM_CLI_TRACE_H
#define A2AMM_CLI_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "a2amm.h"
#include "common/shape.h"

typedef enum trace_kind {
    TRACE_CALL, TRACE_BARRIER, TRACE_TILE, TRACE_WAIT, TRACE_MATMUL, TRACE_SEND, TRACE_SIGNAL, TRACE_EXCHANGE,
    TRACE_PREPARE, TRACE_WRITE, TRACE_VARIANT, TRACE_WORK, TRACE_KINDS
} trace_kind;

/* "call", "barrier", "tile", "wait", "matmul", "send", "signal", "exchange",
 * "prepare", "write", "variant", "work": the spans' category in the JSON. */
const char *trace_kind_name(trace_kind k);

/* One span (t1 == t0 for an instant), in CLOCK_MONOTONIC ns of its rank. */
typedef struct trace_rec {
    int64_t t0_ns, t1_ns;
    int32_t kind, peer, slot, variant; /* peer, slot: -1 when none; variant: TRACE_VARIANT's index;
                                          TRACE_WORK: the compute thread (0: the rank's own) */
    int64_t call, tile, rows, k, bytes;
    uint64_t signal;
} trace_rec;

/* At most this many spans are kept per rank (about 80 MB); the rest are counted. */
#define TRACE_MAX_RECS ((size_t)1 << 20)

typedef struct trace_rank {
    int rank, R;
    int recording;               /* keep the spans (--trace) */
    int counting;                /* sum the spans' time (perf mode's timed repetitions) */
    trace_rec *recs;
    size_t n, cap, dropped;
    a2amm_event open[A2AMM_EVENT_KINDS]; /* each open span's begin */
    double sum_s[TRACE_KINDS];   /* time per kind while counting */
    double *wait_from_s;         /* [R]: time waiting for each source while counting */
    int64_t calls;               /* calls ended while counting */
    a2amm_observer_fn next;      /* another observer called after (fault injection), or NULL */
    void *next_arg;
} trace_rank;

int trace_rank_init(trace_rank *t, int rank, int R, int recording, a2amm_error *err);
void trace_rank_free(trace_rank *t);
/* The observer (arg: a trace_rank); passes every event on to t->next. */
int trace_observe(void *arg, const a2amm_event *ev);
/* A span of the command's own (B preparation, an output write, a perf variant). */
void trace_span(trace_rank *t, trace_kind kind, int64_t t0_ns, int64_t t1_ns, int variant);
int64_t trace_now_ns(void);

/* A rank's spans to and from a file (the ranks of one machine hand them to
 * the launcher that way); the reader checks the file's size and magic. */
int trace_save(const trace_rank *t, const char *path, a2amm_error *err);
int trace_load(const char *path, trace_rec **recs, size_t *n, size_t *dropped, a2amm_error *err);

struct moe_io_shape;
typedef struct trace_meta {
    const op_shape *s;           /* the op's shape, or NULL for the MoE op (moe) */
    const struct moe_io_shape *moe; /* the MoE op's shape (a2amm run --op moe), or NULL */
    const char *mode;            /* "precision" or "perf" */
    const char *transport;       /* "shm" or "mpi" */
    const char *path;            /* "direct" or "put" */
    int64_t tile_m;
    int depth, threads, unfused;
    const char *schedule;        /* the schedule's name where set (the MoE op's), else from unfused */
    const char *const *variant_names; /* TRACE_VARIANT's names by index */
    const int64_t *offset_ns;    /* [R]: each rank's clock minus rank 0's (ping exchange), or NULL (one clock) */
    const size_t *dropped;       /* [R]: spans not kept, or NULL */
    const char *summary;         /* perf: one line for a title, or NULL */
    double fused_s, matmul_s, alltoall_s; /* perf medians, 0 when none */
} trace_meta;

/*
 * Writes the spans of R ranks (recs[r][0..n[r]-1]) as Chrome trace-event
 * JSON at `path` (through a temporary name, renamed when complete): one
 * process per rank, a track for its thread (the pipeline and its own share
 * of each matmul) and one for each of its compute threads, "X" spans with their details in
 * args, "i" instants for signals, a "bytes received" counter; times in us
 * from the earliest span, each rank's corrected by its offset; what was run
 * in "otherData".
 */
int trace_write_json(const char *path, int R, trace_rec *const *recs, const size_t *n, const trace_meta *meta,
                     a2amm_error *err);

#endif
