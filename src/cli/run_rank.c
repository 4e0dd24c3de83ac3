/*
 * The rank side of run_files: what each rank does, under the embedded
 * launcher (runner.c) or as one rank of an MPI job (run_mpi.c): load its
 * inputs, prepare its weights, then run the op once and stage its output
 * (precision) or time the perf variants (run_perf.c). The launcher side,
 * which checks, launches and commits, is runner.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/fault.h"
#include "cli/measure.h"
#include "cli/rank_report.h"
#include "cli/run_rank.h"
#include "cli/run_trace.h"
#include "cli/trace.h"
#include "common/error.h"
#include "io/io.h"

static void rank_state_free(rank_state *st)
{
    if (st->op_u != st->op) a2amm_op_destroy(st->op_u);
    a2amm_op_destroy(st->op);
    a2amm_weights_destroy(st->w);
    free(st->out), free(st->b), free(st->sb), free(st->xa), free(st->xsa), free(st->ra), free(st->rsa);
    free(st->y), free(st->blocks);
    if (st->gemm_ctx) st->gemm->destroy(st->gemm_ctx);
}

/* Reads this rank's files: A and its scales straight into the op's input, B and its scales aside. */
static int load_inputs(rank_state *st, a2amm_error *err)
{
    const op_sizes *z = &st->rn->z;
    uint8_t *a = NULL, *sa = NULL;
    a2amm_op_input(st->op, &a, &sa, NULL, NULL, NULL, NULL);
    st->b = malloc(z->b_bytes);
    st->sb = malloc(z->sb_bytes);
    st->out = malloc(z->out_bytes);
    if (!st->b || !st->sb || !st->out)
        return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate %.1f MB for B and the output",
                          (double)(z->b_bytes + z->sb_bytes + z->out_bytes) / 1e6);
    fault_pause("load", st->me);
    uint8_t *dst[4] = {a, sa, st->b, st->sb};
    size_t bytes[4] = {z->a_bytes, z->sa_bytes, z->b_bytes, z->sb_bytes};
    for (int i = 0; i < 4; i++) {
        char path[IO_PATH_MAX];
        a2amm_comm_say(st->comm, "loading %s", io_rank_files[i].name);
        int rc = io_rank_path(path, sizeof path, st->rn->dir, "input", st->me, io_rank_files[i].name, err);
        if (!rc) rc = io_read_exact(path, dst[i], bytes[i], err);
        if (rc) return rc;
    }
    return A2AMM_OK;
}

/* The weights prepared once; the time it took into the shared times. */
static int prepare_weights(rank_state *st, a2amm_error *err)
{
    const runner *rn = st->rn;
    a2amm_comm_say(st->comm, "preparing B");
    int64_t t0 = trace_now_ns();
    int rc = a2amm_weights_create(st->b, st->sb, rn->s.N, rn->s.K, rn->z.sk, rn->s.b_type, rn->threads, &st->w, err);
    int64_t t1 = trace_now_ns();
    trace_span(rn->trace, TRACE_PREPARE, t0, t1, -1);
    *prepare_slot(rn, st->me) = (double)(t1 - t0) * 1e-9;
    if (!rc) rc = a2amm_op_use_weights(st->op, st->w, err);
    return rc;
}

/* A barrier of the command's own, as a span of the trace. */
int run_traced_barrier(rank_state *st, a2amm_error *err)
{
    int64_t t0 = trace_now_ns();
    int rc = a2amm_comm_barrier(st->comm, st->rn->o.timeout_s, err);
    trace_span(st->rn->trace, TRACE_BARRIER, t0, trace_now_ns(), -1);
    return rc;
}

/* ---- precision mode -------------------------------------------------------- */

static int rank_precision(rank_state *st, a2amm_error *err)
{
    const runner *rn = st->rn;
    int rc = a2amm_op_run(st->op, rn->s.M, NULL, NULL, st->out, err);
    if (!rc) {
        char path[IO_PATH_MAX];
        a2amm_comm_say(st->comm, "writing npu_out.bin (staged)");
        int64_t t0 = trace_now_ns();
        rc = io_rank_path(path, sizeof path, rn->dir, "output", st->me, "npu_out.bin", err);
        if (!rc) rc = io_write_staged(path, rn->tag, st->out, rn->z.out_bytes, err);
        trace_span(rn->trace, TRACE_WRITE, t0, trace_now_ns(), -1);
        if (!rc) fault_pause("staged", st->me);
    }
    if (!rc) { /* a rank that failed says what it was doing when it failed, not this */
        a2amm_comm_say(st->comm, "waiting at the end barrier");
        rc = run_traced_barrier(st, err);
    }
    return rc;
}

int run_rank_main(a2amm_comm *comm, void *arg)
{
    const runner *rn = arg;
    a2amm_error err = {0, ""};
    rank_state st = {.comm = comm, .rn = rn, .me = a2amm_comm_rank(comm), .R = a2amm_comm_size(comm)};
    st.fault = (fault_plan){fault_from_env(st.me), comm, 0};
    int rc = trace_rank_init(rn->trace, st.me, st.R, rn->o.trace_path != NULL, &err);
    a2amm_comm_say(comm, "making the op");
    a2amm_op_config c = config_of(rn, rn->o.unfused);
    if (!rc) rc = a2amm_op_create(comm, &c, &st.op, &err);
    if (!rc) rc = load_inputs(&st, &err);
    if (!rc) rc = prepare_weights(&st, &err);
    if (!rc && rn->o.mode == RUN_PERF) rc = run_perf_setup(&st, &err); /* the baseline dequantizes B as read */
    free(st.b), free(st.sb);
    st.b = st.sb = NULL;
    if (!rc && (rn->o.trace_path || rn->o.mode == RUN_PERF)) { /* the spans, or perf mode's breakdown */
        rn->trace->next = fault_in_pipeline(&st.fault) ? fault_observe : NULL;
        rn->trace->next_arg = &st.fault;
        rc = a2amm_op_set_observer(st.op, trace_observe, rn->trace, &err);
    } else if (!rc && fault_in_pipeline(&st.fault)) {
        rc = a2amm_op_set_observer(st.op, fault_observe, &st.fault, &err);
    }
    if (!rc && rn->o.mode == RUN_PERF) {
        rc = run_rank_perf(&st, &err);
    } else if (!rc) {
        rc = rank_precision(&st, &err);
    }
    if (!rc) fault_at_end(&st.fault);
    if (!rc && rn->o.trace_path && rn->o.transport != RUN_MPI) { /* the spans to the launcher */
        a2amm_comm_say(comm, "saving the trace's spans");
        rc = run_trace_save_part(rn->trace, rn->o.trace_path, rn->tag, &err);
    }
    if (rc) rank_report_fail(comm, st.me, rc, &err);
    else a2amm_comm_say(comm, "done");
    rank_state_free(&st);
    return rc;
}

/* ---- the launcher side ----------------------------------------------------- */

/* Symmetric memory per rank: the op(s), and in perf mode the AllToAll's staging (A and its scales, or
 * matmul-alltoall's result blocks: R blocks of M*N/R bf16). */
size_t run_heap_bytes(const runner *rn)
{
    /* the configs are the runner's, checked with the shape: a failure here shows again, saying why, at create */
    a2amm_op_config c = config_of(rn, rn->o.unfused), cu = config_of(rn, 1);
    size_t op = 0, op_u = 0;
    a2amm_op_heap_bytes(&c, (int)rn->s.R, &op, NULL);
    a2amm_op_heap_bytes(&cu, (int)rn->s.R, &op_u, NULL);
    size_t bytes = op + (64u << 10);
    size_t staging = op_kind_row_of(rn->s.kind)->matmul_first ? rn->z.out_bytes : rn->z.a_bytes + rn->z.sa_bytes;
    if (rn->o.mode == RUN_PERF) bytes += (rn->o.unfused ? 0 : op_u) + staging + (64u << 10);
    return bytes;
}
