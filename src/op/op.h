/*
 * The fused AllToAll + MXFP8 matmul, run by R rank processes on one machine.
 *
 * op_run is the launcher: it checks the shape and every rank's input files
 * (before any rank starts), forks one process per rank over a comm world,
 * and collects how each ended. Each rank loads its inputs into symmetric
 * memory, prepares its B once, and walks M in tiles: for tile t the rows of
 * every source rank become visible (a direct read from the peer's memory, or
 * a put into slot t mod depth of a ring followed by a signal), and the rank
 * multiplies each source's rows as soon as they are visible, starting with
 * its own (read in place) and going round the ranks from there. The order of
 * accumulation is fixed (source j, j+1, ..., then K ascending), so results
 * are the same bits whatever the tile size, depth, threads or path, fused
 * or unfused.
 */
#ifndef A2AMM_OP_H
#define A2AMM_OP_H

#include <signal.h>
#include <stdint.h>

#include "a2amm.h"
#include "gemm/gemm.h"

typedef enum op_path {
    OP_PATH_DIRECT = 0, /* load rows straight from the peer's memory */
    OP_PATH_PUT = 1     /* the owner puts rows into a ring of slots, then signals */
} op_path;

typedef enum op_mode { OP_MODE_PRECISION = 0, OP_MODE_PERF = 1 } op_mode;

typedef struct op_options {
    int64_t tile_m;   /* rows per tile (default 512) */
    int depth;        /* ring slots per source (default 4) */
    int threads;      /* compute threads per rank (0: cores / R, at least 1) */
    op_path path;
    int unfused;      /* whole AllToAll, barrier, then the matmul */
    double timeout_s; /* deadline of every wait (default 60) */
    op_mode mode;
    int iters;        /* perf repetitions (default 10) */
    int warmup;       /* perf warm-up runs (default 1) */
    int baseline;     /* perf: also time what a user writes today: the whole
                         exchange, dequantize to fp32, OpenBLAS sgemm */
    const volatile sig_atomic_t *stop; /* when set, non-zero stops the run (the
                         caller's SIGINT/SIGTERM handler): the ranks are stopped,
                         nothing is written, op_run returns A2AMM_E_INTERRUPTED */
} op_options;

/* The defaults above. */
void op_options_default(op_options *o);
const char *op_path_name(op_path p);

/* Perf figures: per repetition the slowest rank's time, in seconds. */
typedef struct op_perf {
    int iters;
    double *fused;     /* [iters]: the configured run (fused, or unfused if asked) */
    double *unfused;   /* [iters]: whole AllToAll, barrier, matmul */
    double *local;     /* [iters]: the same matmuls on data already in place */
    double *baseline;  /* [iters] when asked: exchange + dequantize + OpenBLAS sgemm */
    double prepare_s;  /* the slowest rank's B preparation (once) */
    double flush_bytes;/* bytes each rank passed over to flush caches */
} op_perf;

typedef struct op_rank_report {
    int status;        /* A2AMM_OK or the rank's error (A2AMM_E_PEER: it stopped for another's failure, or died) */
    int started;       /* 0: never forked (the launcher stopped first) */
    int exit_code;     /* its exit code, -1 when killed by a signal */
    int term_signal;   /* the signal that killed it, or 0 */
    int failed_first;  /* its failure is the one that ended the run */
    int killed_by_launcher; /* it outlived the others' failure and was killed */
    char doing[160];   /* what it was doing last */
} op_rank_report;

typedef struct op_result {
    int threads;       /* compute threads per rank used */
    gemm_isa isa;      /* kernel level used */
    int64_t ntiles;
    op_rank_report *ranks; /* [R] */
    op_perf perf;      /* filled in perf mode */
} op_result;

/*
 * Runs the operator over the seed layout in `dir`: reads DIR/input/<r>/...,
 * and in precision mode writes DIR/output/<r>/npu_out.bin for every rank, as
 * a set: all of them when the run succeeds (staged, then renamed), none
 * changed when it fails.
 * On failure the message names the rank and what it was doing. The result
 * (free it with op_result_free) is filled as far as the run got.
 */
int op_run(const char *dir, const a2amm_shape *shape, const op_options *opt, op_result *result,
           a2amm_error *err);
void op_result_free(op_result *r);

#endif
