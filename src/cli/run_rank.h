/*
 * Inside the runner (runner.c the launcher, run_rank.c a rank, run_perf.c,
 * run_mpi.c, run_sgemm.c): what the launcher hands every rank, one rank's
 * state, and the calls between them (downward only: the launcher calls the
 * rank side, never the other way).
 * Not for other users: they have runner.h.
 */
#ifndef A2AMM_CLI_RUN_RANK_H
#define A2AMM_CLI_RUN_RANK_H

#include <stddef.h>
#include <stdint.h>

#include "a2amm.h"
#include "common/shape.h"
#include "op/op_kind.h"
#include "cli/fault.h"
#include "cli/runner.h"
#include "cli/time_map.h"
#include "cli/trace.h"

typedef struct runner {
    const char *dir;
    op_shape s;
    op_sizes z;
    run_options o;
    int threads;   /* per rank, resolved */
    char tag[32];  /* outputs are staged as npu_out.bin.tmp.<tag>, committed as a set */
    time_map tm;   /* shared with the ranks: the variants' times, then the rows prepare (RUN_ROW_PREPARE)
                      and the breakdown (RUN_ROW_BREAKDOWN + field: RUN_BD_FIELDS + R rows); its text: how
                      rank 0 ran the baseline */
    trace_rank *trace;   /* this process's rank's spans and sums (each rank its own copy) */
} runner;

/* perf mode's per-rank breakdown of a fused call, in the shared times after
 * the preparations: call, matmul, waits, sends, barriers, then waits by source */
enum { RUN_BD_CALL, RUN_BD_MATMUL, RUN_BD_WAIT, RUN_BD_SEND, RUN_BD_BARRIER, RUN_BD_FIELDS };

#define BASELINE_WHAT_CHARS sizeof(((run_perf *)0)->baseline_what)

/* The runner's rows of its time map: rank r's B preparation time, then the breakdown's fields. */
enum { RUN_ROW_PREPARE, RUN_ROW_BREAKDOWN };
#define RUN_ROWS(R) (RUN_ROW_BREAKDOWN + RUN_BD_FIELDS + (R))

static inline double *time_slot(const runner *rn, int v, int it, int r) { return time_map_at(&rn->tm, v, it, r); }

static inline double *prepare_slot(const runner *rn, int r) { return time_map_row(&rn->tm, RUN_ROW_PREPARE, r); }

static inline double *breakdown_slot(const runner *rn, int field, int r)
{
    return time_map_row(&rn->tm, RUN_ROW_BREAKDOWN + field, r);
}

static inline a2amm_op_config config_of(const runner *rn, int unfused)
{
    return (a2amm_op_config){.size = sizeof(a2amm_op_config), .max_m = rn->s.M, .k = rn->s.K, .n = rn->s.N, .a_type = rn->s.a_type,
                             .b_type = rn->s.b_type, .tile_m = rn->o.tile_m, .depth = rn->o.depth,
                             .threads = rn->threads, .path = rn->o.path, .timeout_s = rn->o.timeout_s,
                             .schedule = unfused ? A2AMM_SCHEDULE_UNFUSED : A2AMM_SCHEDULE_FUSED,
                             .kind = op_kind_row_of(rn->s.kind)->api_kind};
}

/* One rank's state, in its process. */
typedef struct rank_state {
    a2amm_comm *comm;
    const runner *rn;
    int me, R;
    a2amm_op *op;      /* the configured op */
    a2amm_op *op_u;    /* perf: the unfused op (op itself when that is what was asked) */
    a2amm_weights *w;  /* prepared once, used by every op and the matmul alone */
    uint16_t *out;     /* [M, N] (matmul-alltoall: [R*M, N/R]) */
    uint8_t *b, *sb;   /* the weights as read, until prepared */
    /* perf: the matmul alone, on the rows the AllToAll brings: [M, K] and [M, K/32]
       (matmul-alltoall: X_r and its scales as read) */
    uint8_t *xa, *xsa;
    /* perf: received blocks [R][M*ka], [R][M*ska] (the AllToAll alone, the baseline) */
    uint8_t *ra, *rsa;
    /* perf, matmul-alltoall: the result [M, N] of the matmul alone and of the baseline's matmul, and its
       column blocks [R][M][N/R] as the AllToAll alone and the baseline send them */
    uint16_t *y, *blocks;
    /* perf baseline: its matmul, and where A [M, K] goes dequantized */
    const run_baseline_gemm *gemm;
    void *gemm_ctx;
    float *bl_x;
    fault_plan fault;
} rank_state;

/* run_rank.c: a rank's whole run (a2amm_launch's function, or an MPI rank's),
 * the symmetric heap it needs, and a barrier of the command's own (a trace span). */
int run_rank_main(a2amm_comm *comm, void *arg);
size_t run_heap_bytes(const runner *rn);
int run_traced_barrier(rank_state *st, a2amm_error *err);

/* perf mode's variants that differ by op (run_perf.c holds alltoall-matmul's,
 * run_perf_reverse.c matmul-alltoall's): each a timed call on a rank; the
 * harness's row of the op-kind table (op/op_kind.h has the library's). */
typedef int (*run_variant_fn)(rank_state *st, a2amm_error *err);
typedef struct run_perf_op {
    op_kind kind;
    /* the buffers of the variants below, once the op (and the unfused op) are made and
       loaded; B and its scales as read are still in st->b, st->sb */
    int (*setup)(rank_state *st, a2amm_error *err);
    run_variant_fn matmul, alltoall, baseline;
    /* what perf's report says "matmul alone" and "alltoall alone" time (two lines), and the baseline's steps */
    void (*print_alone)(const op_shape *s);
    const char *baseline_steps;
} run_perf_op;
/* The perf variants of a kind; NULL for none. */
const run_perf_op *run_perf_op_of(op_kind kind);

/* run_perf.c: the variants' setup on a rank, their timed repetitions, and
 * the launcher's figures from every rank's times; the baseline's matmul
 * made on the weights as read (both ops' baselines use it). */
int run_perf_setup(rank_state *st, a2amm_error *err);
int run_baseline_setup(rank_state *st, a2amm_error *err);
int run_rank_perf(rank_state *st, a2amm_error *err);
int run_collect_perf(const runner *rn, run_perf *p, a2amm_error *err);

/* run_mpi.c: this process as one rank of an MPI job; offsets[R] gets the
 * clock offsets when tracing. */
int run_files_mpi(runner *rn, run_result *res, int64_t *offsets, a2amm_error *err);

/* run_sgemm.c: the command's baseline matmul, OpenBLAS sgemm. */
extern const run_baseline_gemm run_sgemm_baseline;

#endif
