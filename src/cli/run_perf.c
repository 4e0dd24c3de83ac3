/*
 * perf mode inside a rank: the variants timed side by side (the configured
 * op, the unfused op, the matmul alone, the AllToAll alone, the baseline a
 * user writes today), their setup, the timed loop with its per-rank
 * breakdown, and the launcher's figures from every rank's times. The
 * variants of alltoall-matmul are here; matmul-alltoall's matmul alone,
 * AllToAll alone and baseline are in run_perf_reverse.c.
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/measure.h"
#include "cli/run_rank.h"
#include "common/error.h"

static int v_configured(rank_state *st, a2amm_error *err)
{
    return a2amm_op_run(st->op, st->rn->s.M, NULL, NULL, st->out, err);
}

static int v_unfused(rank_state *st, a2amm_error *err)
{
    return a2amm_op_run(st->op_u, st->rn->s.M, NULL, NULL, st->out, err);
}

static int v_matmul(rank_state *st, a2amm_error *err)
{
    const op_shape *s = &st->rn->s;
    return a2amm_matmul(st->w, st->xa, s->K, st->xsa, s->K / 32, s->M, s->a_type, st->out, s->N, st->rn->threads,
                        err);
}

/* The AllToAll alone: A and its scales, as the op moves them, with no matmul. */
static int v_alltoall(rank_state *st, a2amm_error *err)
{
    const op_shape *s = &st->rn->s;
    const op_sizes *z = &st->rn->z;
    uint8_t *a = NULL, *sa = NULL;
    a2amm_op_input(st->op, &a, &sa, NULL, NULL, NULL, NULL);
    int rc = a2amm_comm_alltoall(st->comm, a, st->ra, (size_t)(s->M * z->ka), st->rn->o.timeout_s, err);
    if (!rc) rc = a2amm_comm_alltoall(st->comm, sa, st->rsa, (size_t)(s->M * z->ska), st->rn->o.timeout_s, err);
    return rc;
}

/* The baseline's exchange: over MPI what users write, MPI_Alltoall of the
 * codes and of the scales; else the AllToAll alone. */
static int baseline_exchange(rank_state *st, a2amm_error *err)
{
    if (st->rn->o.transport != RUN_MPI) return v_alltoall(st, err);
    const op_shape *s = &st->rn->s;
    const op_sizes *z = &st->rn->z;
    uint8_t *a = NULL, *sa = NULL;
    a2amm_op_input(st->op, &a, &sa, NULL, NULL, NULL, NULL);
    int64_t counts[2] = {s->M * z->ka, s->M * z->ska};
    uint8_t *send[2] = {a, sa}, *recv[2] = {st->ra, st->rsa};
    for (int i = 0; i < 2; i++) {
        if (counts[i] > INT32_MAX)
            return a2amm_fail(err, A2AMM_E_INVAL, "baseline: MPI_Alltoall takes at most %d bytes per rank, "
                              "this shape sends %lld", INT32_MAX, (long long)counts[i]);
        if (MPI_Alltoall(send[i], (int)counts[i], MPI_BYTE, recv[i], (int)counts[i], MPI_BYTE, MPI_COMM_WORLD))
            return a2amm_fail(err, A2AMM_E_SYS, "baseline: MPI_Alltoall failed");
    }
    return A2AMM_OK;
}

/* What a user writes today: the whole AllToAll, dequantize to fp32, the baseline's matmul, bf16 out. */
static int v_baseline(rank_state *st, a2amm_error *err)
{
    const op_shape *s = &st->rn->s;
    const op_sizes *z = &st->rn->z;
    int rc = baseline_exchange(st, err);
    for (int j = 0; !rc && j < st->R; j++) /* block j is rank j's rows: columns j*ka.. of X */
        rc = a2amm_mx_dequantize_f32(st->ra + (size_t)j * (size_t)(s->M * z->ka), z->ka,
                                     st->rsa + (size_t)j * (size_t)(s->M * z->ska), z->ska, s->M, z->ka, s->a_type,
                                     st->bl_x + j * z->ka, s->K, err);
    return rc ? rc : st->gemm->run(st->gemm_ctx, st->out, err);
}

/* The baseline's matmul made on the weights dequantized as read; rank 0 says how it runs. */
int run_baseline_setup(rank_state *st, a2amm_error *err)
{
    const op_shape *s = &st->rn->s;
    st->gemm = st->rn->o.gemm ? st->rn->o.gemm : &run_sgemm_baseline;
    float *bt = malloc((size_t)(s->N * s->K) * sizeof(float));
    if (!bt) return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the baseline's fp32 weights");
    const char *what = "";
    a2amm_comm_say(st->comm, "perf: making the baseline's matmul");
    int rc = a2amm_mx_dequantize_f32(st->b, s->K, st->sb, st->rn->z.sk, s->N, s->K, s->b_type, bt, s->K, err);
    if (!rc) rc = st->gemm->create(bt, s->M, s->N, s->K, st->rn->threads, &st->gemm_ctx, &st->bl_x, &what, err);
    free(bt);
    const char *exchange = st->rn->o.transport == RUN_MPI ? "MPI_Alltoall" : "a2amm_comm_alltoall";
    if (!rc && st->me == 0 && op_kind_row_of(s->kind)->matmul_first)
        snprintf(st->rn->tm.text, st->rn->tm.chars, "%s, then %s of its column blocks", what, exchange);
    else if (!rc && st->me == 0)
        snprintf(st->rn->tm.text, st->rn->tm.chars, "%s, %s", exchange, what);
    return rc;
}

/* The gathered rows for the matmul alone, the baseline's operands. */
static int forward_setup(rank_state *st, a2amm_error *err)
{
    const runner *rn = st->rn;
    const op_shape *s = &rn->s;
    const op_sizes *z = &rn->z;
    st->ra = malloc(z->a_bytes);
    st->rsa = malloc(z->sa_bytes);
    st->xa = malloc((size_t)(s->M * s->K));
    st->xsa = malloc((size_t)(s->M * (s->K / 32)));
    if (!st->ra || !st->rsa || !st->xa || !st->xsa)
        return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the perf variants' buffers");
    /* the rows of A the AllToAll brings, side by side along K: what the matmul alone multiplies */
    a2amm_comm_say(st->comm, "perf: gathering the rows for the matmul alone");
    int rc = v_alltoall(st, err);
    if (rc) return rc;
    int64_t bpr = z->ka / 32; /* scale bytes a block of a row carries (ska may pad past them) */
    for (int j = 0; j < st->R; j++)
        for (int64_t i = 0; i < s->M; i++) {
            memcpy(st->xa + i * s->K + j * z->ka, st->ra + ((int64_t)j * s->M + i) * z->ka, (size_t)z->ka);
            memcpy(st->xsa + i * (s->K / 32) + j * bpr, st->rsa + ((int64_t)j * s->M + i) * z->ska, (size_t)bpr);
        }
    return rn->o.baseline ? run_baseline_setup(st, err) : A2AMM_OK;
}

static void print_alone(const op_shape *s)
{
    (void)s;
    printf("  matmul alone: a2amm_matmul on the rows the AllToAll brings ([M, K]), same weights and threads;\n"
           "  alltoall alone: a2amm_comm_alltoall of A and its scales, no matmul\n");
}

static const run_perf_op run_perf_forward = {OP_ALLTOALL_MATMUL, forward_setup, v_matmul, v_alltoall, v_baseline,
                                             print_alone,
                                             "the whole AllToAll, dequantize to fp32, the matmul to bf16"};

extern const run_perf_op run_perf_reverse;

const run_perf_op *run_perf_op_of(op_kind kind)
{
    static const run_perf_op *const OPS[] = {&run_perf_forward, &run_perf_reverse};
    for (size_t i = 0; i < sizeof OPS / sizeof *OPS; i++)
        if (OPS[i]->kind == kind) return OPS[i];
    return NULL;
}

static const run_perf_op *perf_op_of(const runner *rn) { return run_perf_op_of(rn->s.kind); }

/* The unfused op (its input copied from the op's), then the op's own variants' buffers. */
int run_perf_setup(rank_state *st, a2amm_error *err)
{
    const runner *rn = st->rn;
    const op_sizes *z = &rn->z;
    int rc = A2AMM_OK;
    if (rn->o.unfused) st->op_u = st->op;
    else {
        a2amm_op_config cu = config_of(rn, 1);
        rc = a2amm_op_create(st->comm, &cu, &st->op_u, err);
        if (!rc) rc = a2amm_op_use_weights(st->op_u, st->w, err);
        uint8_t *a = NULL, *sa = NULL, *ua = NULL, *usa = NULL;
        a2amm_op_input(st->op, &a, &sa, NULL, NULL, NULL, NULL);
        if (!rc) a2amm_op_input(st->op_u, &ua, &usa, NULL, NULL, NULL, NULL);
        if (!rc) memcpy(ua, a, z->a_bytes), memcpy(usa, sa, z->sa_bytes);
    }
    return rc ? rc : perf_op_of(rn)->setup(st, err);
}

/* A2AMM_FAULT=slow-matmul with A2AMM_FAULT_RANK=r: rank r's timed matmul alone takes 50 ms more, as a
 * busy machine may make one variant slower than another that does more: the tests' way to a matmul
 * alone slower than the fused run (exposed communication below zero, which the report must not print). */
static int slow_matmul_here(int rank)
{
    const char *r = getenv("A2AMM_FAULT_RANK"), *f = getenv("A2AMM_FAULT");
    return r && f && !strcmp(f, "slow-matmul") && atoi(r) == rank;
}

int run_rank_perf(rank_state *st, a2amm_error *err)
{
    const runner *rn = st->rn;
    const int slow_matmul = slow_matmul_here(st->me);
    const run_perf_op *po = perf_op_of(rn);
    run_variant_fn variants[RUN_VARIANTS] = {v_configured, v_unfused, po->matmul, po->alltoall, po->baseline};
    int nvariants = rn->o.baseline ? RUN_VARIANTS : RUN_V_BASELINE;
    measure_flusher fl;
    int rc = measure_flusher_init(&fl, NULL, measure_flush_bytes((int)rn->s.R), err);
    for (int w = 0; !rc && w < rn->o.warmup; w++)
        for (int v = 0; !rc && v < nvariants; v++) {
            a2amm_comm_say(st->comm, "perf warm-up %d, variant %d", w, v);
            rc = variants[v](st, err);
        }
    for (int it = 0; !rc && it < rn->o.iters; it++)
        for (int v = 0; !rc && v < nvariants; v++) {
            measure_flush(&fl);
            a2amm_comm_say(st->comm, "perf repetition %d, variant %d", it, v);
            rc = run_traced_barrier(st, err);
            rn->trace->counting = v == RUN_V_CONFIGURED;
            int64_t t0 = trace_now_ns();
            if (!rc) rc = variants[v](st, err);
            if (slow_matmul && v == RUN_V_MATMUL) nanosleep(&(struct timespec){0, 50000000}, NULL);
            int64_t t1 = trace_now_ns();
            rn->trace->counting = 0;
            *time_slot(rn, v, it, st->me) = (double)(t1 - t0) * 1e-9;
            trace_span(rn->trace, TRACE_VARIANT, t0, t1, v);
            if (v == RUN_V_BASELINE && st->gemm->idle) st->gemm->idle(st->gemm_ctx);
        }
    if (!rc) rc = run_traced_barrier(st, err);
    measure_flusher_free(&fl);
    const trace_rank *tr = rn->trace; /* the breakdown: per fused call, this rank */
    double calls = tr->calls > 0 ? (double)tr->calls : 1.0;
    int fields[RUN_BD_FIELDS] = {TRACE_CALL, TRACE_MATMUL, TRACE_WAIT, TRACE_SEND, TRACE_BARRIER};
    for (int f = 0; f < RUN_BD_FIELDS; f++) *breakdown_slot(rn, f, st->me) = tr->sum_s[fields[f]] / calls;
    for (int src = 0; src < st->R; src++) *breakdown_slot(rn, RUN_BD_FIELDS + src, st->me) = tr->wait_from_s[src] / calls;
    return rc;
}

/* Per repetition, the slowest rank's time of variant v. */
static void max_over_ranks(const runner *rn, int v, double *out)
{
    for (int it = 0; it < rn->o.iters; it++) {
        double m = 0;
        for (int r = 0; r < rn->s.R; r++) m = fmax(m, *time_slot(rn, v, it, r));
        out[it] = m;
    }
}

int run_collect_perf(const runner *rn, run_perf *p, a2amm_error *err)
{
    p->iters = rn->o.iters;
    int nv = rn->o.baseline ? RUN_VARIANTS : RUN_V_BASELINE;
    for (int v = 0; v < nv; v++) {
        if (!(p->t[v] = calloc((size_t)p->iters, sizeof(double))))
            return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the perf figures");
        max_over_ranks(rn, v, p->t[v]);
    }
    for (int r = 0; r < rn->s.R; r++)
        p->prepare_s = fmax(p->prepare_s, *prepare_slot(rn, r));
    p->flush_bytes = (double)measure_flush_bytes((int)rn->s.R);
    int R = (int)rn->s.R;
    if (!(p->ranks = calloc((size_t)R, sizeof *p->ranks)))
        return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the perf figures");
    for (int r = 0; r < R; r++) {
        struct run_rank_breakdown *b = &p->ranks[r];
        b->call_s = *breakdown_slot(rn, RUN_BD_CALL, r), b->matmul_s = *breakdown_slot(rn, RUN_BD_MATMUL, r);
        b->wait_s = *breakdown_slot(rn, RUN_BD_WAIT, r), b->send_s = *breakdown_slot(rn, RUN_BD_SEND, r);
        b->barrier_s = *breakdown_slot(rn, RUN_BD_BARRIER, r);
        if (!(b->wait_from_s = calloc((size_t)R, sizeof *b->wait_from_s)))
            return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the perf figures");
        for (int src = 0; src < R; src++) b->wait_from_s[src] = *breakdown_slot(rn, RUN_BD_FIELDS + src, r);
    }
    snprintf(p->baseline_what, sizeof p->baseline_what, "%s", rn->tm.text);
    return A2AMM_OK;
}

