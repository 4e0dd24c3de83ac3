/*
 * The executions of one rank: the fused pipeline over tiles of M (rows read
 * directly from peers, or put into a ring of slots and signalled), the
 * unfused AllToAll-then-matmul, and the matmul alone on data in place.
 */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/hugemem.h"
#include "op/rank.h"

#define ALIGN 64
#define PROGRESS_ROWS 64 /* rows multiplied between two progress calls on a message transport */

size_t op_rank_heap_bytes(const a2amm_shape *s, const a2amm_sizes *z, const op_options *opt,
                          int need_ring, int need_xbuf)
{
    size_t tm = (size_t)(opt->tile_m < s->M ? opt->tile_m : s->M);
    size_t bytes = z->a_bytes + z->sa_bytes + 4 * ALIGN;
    if (need_ring)
        bytes += (size_t)opt->depth * (size_t)s->R * tm * (size_t)(z->ka + z->ska) +
                 ((size_t)opt->depth + 1) * (size_t)s->R * 8 + 4 * ALIGN;
    if (need_xbuf) bytes += z->a_bytes + z->sa_bytes + 2 * ALIGN;
    return bytes + 4096;
}

int op_rank_alloc(op_rank *rk, int need_ring, int need_xbuf, a2amm_error *err)
{
    const a2amm_shape *s = rk->s;
    const a2amm_sizes *z = rk->z;
    size_t R = (size_t)s->R, tm = (size_t)rk->tm, depth = (size_t)rk->opt->depth;
    int rc = comm_alloc(rk->ctx, z->a_bytes, ALIGN, (void **)&rk->a, err);
    if (!rc) rc = comm_alloc(rk->ctx, z->sa_bytes, ALIGN, (void **)&rk->sa, err);
    if (!rc && need_ring) {
        rc = comm_alloc(rk->ctx, depth * R * tm * (size_t)z->ka, ALIGN, (void **)&rk->ring, err);
        if (!rc) rc = comm_alloc(rk->ctx, depth * R * tm * (size_t)z->ska, ALIGN, (void **)&rk->ring_s, err);
        if (!rc) rc = comm_alloc(rk->ctx, depth * R * 8, ALIGN, (void **)&rk->arrived, err);
        if (!rc) rc = comm_alloc(rk->ctx, R * 8, ALIGN, (void **)&rk->released, err);
    }
    if (!rc && need_xbuf) {
        rc = comm_alloc(rk->ctx, z->a_bytes, ALIGN, (void **)&rk->xbuf, err);
        if (!rc) rc = comm_alloc(rk->ctx, z->sa_bytes, ALIGN, (void **)&rk->xbuf_s, err);
    }
    if (rc) return rc;
    rk->c = hugemem_alloc(tm * (size_t)s->N * sizeof *rk->c);
    rk->out = malloc(z->out_bytes);
    if (!rk->c || !rk->out)
        return a2amm_fail(err, A2AMM_E_NOMEM, "rank %d: cannot allocate %.1f MB of result buffers", rk->me,
                          (double)(tm * (size_t)s->N * 4 + z->out_bytes) / 1e6);
    return A2AMM_OK;
}

void op_rank_free(op_rank *rk)
{
    gemm_b_free(rk->owned_b);
    pool_destroy(rk->pool);
    free(rk->c);
    free(rk->out);
    free(rk->work);
    rk->work = NULL;
    rk->b = NULL, rk->owned_b = NULL, rk->pool = NULL, rk->c = NULL, rk->out = NULL;
}

/* ---- The matmul of one tile from one source, split over threads by N ---- */

typedef struct tile_job {
    const op_rank *rk;
    gemm_a_slab slab;
    int64_t rows, k0;
    float *c;      /* the accumulators of these rows */
    int threads;
    int first;     /* the tile's first source: C = product (gemm_multiply), not C += */
    uint16_t *out; /* the tile's last source: its bf16 rows of the output (C is then left unspecified) */
    int64_t *work; /* observed: per task, the thread that ran it, its start and end (ns); else NULL */
} tile_job;

static void tile_task(void *arg, int task)
{
    const tile_job *j = arg;
    int64_t t0 = j->work ? comm_now_ns() : 0;
    const gemm_b *b = j->rk->b;
    int64_t N = j->rk->s->N, ka = j->rk->z->ka;
    gemm_split p = gemm_split_task(j->rows, N, ka, j->threads, task);
    gemm_a_slab slab = j->slab;
    slab.a += p.r0 * slab.lda;
    slab.sa += p.r0 * slab.ldsa;
    int64_t rows = p.r1 - p.r0;
    float *c = j->c + p.r0 * N;
    uint16_t *out = j->out ? j->out + p.r0 * N : NULL;
    if (out && j->first) gemm_multiply_store(b, &slab, rows, j->k0, ka, p.n0, p.n1, c, N, out, N);
    else if (out) gemm_accumulate_store(b, &slab, rows, j->k0, ka, p.n0, p.n1, c, N, out, N);
    else if (j->first) gemm_multiply(b, &slab, rows, j->k0, ka, p.n0, p.n1, c, N);
    else gemm_accumulate(b, &slab, rows, j->k0, ka, p.n0, p.n1, c, N);
    if (j->work) {
        int64_t *w = j->work + 3 * task;
        w[0] = pool_thread_index(), w[1] = t0, w[2] = comm_now_ns();
    }
}

/* An event of this rank's current call, stamped now (the matmul's carry its columns). */
static a2amm_event event_of(const op_rank *rk, a2amm_event_kind kind, int64_t tile, int64_t rows, int peer, int slot)
{
    int matmul = kind == A2AMM_EVENT_MATMUL_BEGIN || kind == A2AMM_EVENT_MATMUL_END || kind == A2AMM_EVENT_WORK;
    return (a2amm_event){.kind = kind, .rank = rk->me, .call = rk->call, .tile = tile, .tiles = rk->ntiles,
                         .rows = rows, .peer = peer, .slot = slot, .k = matmul ? rk->z->ka : 0,
                         .time_ns = comm_now_ns()};
}

/* Tells the observer which thread ran each of the `tasks` pieces of a matmul. */
static void observe_work(const op_rank *rk, const tile_job *job, int tasks, int64_t t, int src)
{
    for (int i = 0; i < tasks; i++) {
        const int64_t *w = job->work + 3 * i;
        a2amm_event ev = event_of(rk, A2AMM_EVENT_WORK, t, job->rows, src, -1);
        ev.time_ns = w[1], ev.thread = (int)w[0], ev.duration_ns = w[2] - w[1];
        (void)rk->observer(rk->observer_arg, &ev);
    }
}

/*
 * C[rows, :] += rows of source `src` (a, sa with row strides ka / ska);
 * C[rows, :] = them for the tile's first source (k == 0). After the last
 * (k == R - 1) the tile's rows of the output, from row i0, hold bf16(C).
 */
static void multiply_source(op_rank *rk, int k, int src, const uint8_t *a, const uint8_t *sa, int64_t i0,
                            int64_t t, int64_t rows)
{
    int64_t N = rk->s->N, ka = rk->z->ka, ska = rk->z->ska;
    int T = pool_threads(rk->pool);
    if (rk->observer && !rk->work) rk->work = malloc((size_t)T * 3 * sizeof *rk->work); /* no trace of it if NULL */
    const comm_msg_ops *msg = comm_msg(rk->ctx);
    /* over a message transport the engine moves data only while called: the
     * rows go in slices with a progress call between (rows are independent,
     * so the bits are the same) */
    int64_t slice = msg ? PROGRESS_ROWS : rows;
    for (int64_t r0 = 0; r0 < rows; r0 += slice) {
        int64_t n = rows - r0 < slice ? rows - r0 : slice;
        tile_job job = {rk,     {a + r0 * ka, sa + r0 * ska, ka, ska, rk->s->a_type}, n, src * ka, rk->c + r0 * N, T,
                        k == 0, k == rk->R - 1 ? rk->out + (i0 + r0) * N : NULL, rk->observer ? rk->work : NULL};
        int tasks = gemm_split_count(n, N, ka, T);
        pool_run(rk->pool, tile_task, &job, tasks);
        if (job.work) observe_work(rk, &job, tasks, t, src);
        if (msg) msg->progress(comm_msg_state(rk->ctx));
    }
}

/* The rows of rank `src`'s A that go to `dst`, starting at tile row i0. */
static const uint8_t *rows_of(const op_rank *rk, const uint8_t *a_base, int dst, int64_t i0, int64_t width)
{
    return a_base + ((int64_t)dst * rk->m_max + i0) * width;
}

void op_observe(const op_rank *rk, a2amm_event_kind kind, int64_t tile, int64_t rows, int peer, int slot,
                int64_t bytes, uint64_t signal)
{
    if (!rk->observer) return;
    a2amm_event ev = event_of(rk, kind, tile, rows, peer, slot);
    ev.bytes = bytes, ev.signal = signal;
    (void)rk->observer(rk->observer_arg, &ev);
}

/* Tells the caller's observer that tile t begins; its non-zero answer stops the call. */
static int observe_tile(op_rank *rk, int64_t t, int64_t rows, a2amm_error *err)
{
    if (!rk->observer) return A2AMM_OK;
    a2amm_event ev = event_of(rk, A2AMM_EVENT_TILE, t, rows, -1, -1);
    int rc = rk->observer(rk->observer_arg, &ev);
    if (!rc) return A2AMM_OK;
    char why[COMM_FAIL_CHARS] = ""; /* the observer may have failed the communicator itself, saying why */
    comm_failure(rk->ctx, NULL, why, sizeof why);
    a2amm_fail(err, rc < 0 ? rc : A2AMM_E_INVAL, "rank %d: the observer stopped the call at tile %lld%s%s", rk->me,
               (long long)t, why[0] ? ": " : "", why);
    return comm_fail(rk->ctx, err ? err->code : A2AMM_E_INVAL, "%s", err ? err->msg : "the observer stopped the call");
}

/* The bytes of `rows` rows of codes and scales. */
static int64_t row_bytes(const op_rank *rk, int64_t rows) { return rows * (rk->z->ka + rk->z->ska); }

/* ---- The put path: sending tile t to every other rank ------------------- */

static int send_tile(op_rank *rk, uint64_t g, int64_t t, a2amm_error *err)
{
    const a2amm_sizes *z = rk->z;
    int64_t i0 = t * rk->tm, rows = rk->m - i0 < rk->tm ? rk->m - i0 : rk->tm;
    int depth = rk->opt->depth, slot = (int)(g % (uint64_t)depth);
    for (int k = 1; k < rk->R; k++) {
        int d = (rk->me + k) % rk->R;
        op_observe(rk, A2AMM_EVENT_SEND_BEGIN, t, rows, d, slot, row_bytes(rk, rows), 0);
        if (g >= (uint64_t)depth) {
            /* slot reuse: d must have consumed tile g - depth from me */
            uint64_t need = g - (uint64_t)depth + 1, seen = 0;
            comm_set_doing(rk->ctx, "sending tile %lld to rank %d: waiting for slot %d to be released (signal >= %llu)",
                           (long long)t, d, slot, (unsigned long long)need);
            int rc = comm_signal_wait_until(rk->ctx, &rk->released[d], COMM_CMP_GE, need,
                                            comm_deadline_after(rk->opt->timeout_s), &seen, err);
            if (rc == A2AMM_E_TIMEOUT)
                return comm_fail(rk->ctx, rc,
                                 "rank %d: timed out after %g s waiting for rank %d to release slot %d "
                                 "(tile %lld): released signal >= %llu, last seen %llu",
                                 rk->me, rk->opt->timeout_s, d, slot, (long long)t - depth,
                                 (unsigned long long)need, (unsigned long long)seen);
            if (rc) return rc;
        }
        size_t off = ((size_t)slot * (size_t)rk->R + (size_t)rk->me) * (size_t)rk->tm;
        int rc = comm_put(rk->ctx, rk->ring + off * (size_t)z->ka, rows_of(rk, rk->a, d, i0, z->ka),
                          (size_t)(rows * z->ka), d, err);
        if (!rc)
            rc = comm_put_signal(rk->ctx, rk->ring_s + off * (size_t)z->ska, rows_of(rk, rk->sa, d, i0, z->ska),
                                 (size_t)(rows * z->ska), &rk->arrived[slot * rk->R + rk->me], g + 1,
                                 COMM_SIGNAL_SET, d, err);
        if (rc) return comm_fail(rk->ctx, rc, "rank %d: put of tile %lld to rank %d failed: %s", rk->me,
                                 (long long)t, d, err ? err->msg : "");
        op_observe(rk, A2AMM_EVENT_SIGNAL, t, rows, d, slot, 0, g + 1);
        op_observe(rk, A2AMM_EVENT_SEND_END, t, rows, d, slot, row_bytes(rk, rows), 0);
    }
    return A2AMM_OK;
}

/* ---- The put path over a message transport -------------------------------- */

/* Posts the receives of tile t (global number g) from every other rank into its slot. */
static int post_tile_msg(op_rank *rk, uint64_t g, int64_t t, a2amm_error *err)
{
    const comm_msg_ops *msg = comm_msg(rk->ctx);
    const a2amm_sizes *z = rk->z;
    int64_t i0 = t * rk->tm, rows = rk->m - i0 < rk->tm ? rk->m - i0 : rk->tm;
    int slot = (int)(g % (uint64_t)rk->opt->depth);
    for (int k = 1; k < rk->R; k++) {
        int src = (rk->me + rk->R - k) % rk->R;
        size_t off = ((size_t)slot * (size_t)rk->R + (size_t)src) * (size_t)rk->tm;
        int rc = msg->post(comm_msg_state(rk->ctx), slot, src, rk->ring + off * (size_t)z->ka, (size_t)(rows * z->ka),
                           rk->ring_s + off * (size_t)z->ska, (size_t)(rows * z->ska), err);
        if (rc) return comm_fail(rk->ctx, rc, "rank %d: posting the receive of tile %lld from rank %d failed: %s",
                                 rk->me, (long long)t, src, err ? err->msg : "");
    }
    return A2AMM_OK;
}

/* Sends tile t (global number g) to every other rank, straight from A. */
static int send_tile_msg(op_rank *rk, uint64_t g, int64_t t, a2amm_error *err)
{
    const comm_msg_ops *msg = comm_msg(rk->ctx);
    const a2amm_sizes *z = rk->z;
    int64_t i0 = t * rk->tm, rows = rk->m - i0 < rk->tm ? rk->m - i0 : rk->tm;
    int slot = (int)(g % (uint64_t)rk->opt->depth);
    for (int k = 1; k < rk->R; k++) {
        int d = (rk->me + k) % rk->R;
        comm_set_doing(rk->ctx, "sending tile %lld to rank %d (slot %d)", (long long)t, d, slot);
        op_observe(rk, A2AMM_EVENT_SEND_BEGIN, t, rows, d, slot, row_bytes(rk, rows), 0);
        int rc = msg->send(comm_msg_state(rk->ctx), slot, d, rows_of(rk, rk->a, d, i0, z->ka), (size_t)(rows * z->ka),
                           rows_of(rk, rk->sa, d, i0, z->ska), (size_t)(rows * z->ska),
                           comm_deadline_after(rk->opt->timeout_s), err);
        if (rc) return comm_fail(rk->ctx, rc, "rank %d: sending tile %lld to rank %d (slot %d) failed: %s", rk->me,
                                 (long long)t, d, slot, err ? err->msg : "");
        op_observe(rk, A2AMM_EVENT_SEND_END, t, rows, d, slot, row_bytes(rk, rows), 0);
    }
    return A2AMM_OK;
}

/* Waits until tile t from `src` sits in its slot (a message transport). */
static int wait_tile_msg(op_rank *rk, uint64_t g, int64_t t, int src, a2amm_error *err)
{
    int slot = (int)(g % (uint64_t)rk->opt->depth);
    comm_set_doing(rk->ctx, "tile %lld/%lld: waiting for rows from rank %d (slot %d)", (long long)t,
                   (long long)rk->ntiles, src, slot);
    int rc = comm_msg(rk->ctx)->wait(comm_msg_state(rk->ctx), slot, src, comm_deadline_after(rk->opt->timeout_s), err);
    if (rc == A2AMM_E_TIMEOUT)
        return comm_fail(rk->ctx, rc, "rank %d: timed out after %g s waiting for tile %lld from rank %d (slot %d)",
                         rk->me, rk->opt->timeout_s, (long long)t, src, slot);
    if (rc) return comm_fail(rk->ctx, rc, "rank %d: receiving tile %lld from rank %d failed: %s", rk->me, (long long)t,
                             src, err ? err->msg : "");
    return A2AMM_OK;
}

/* Waits until tile t from `src` sits in its slot. */
static int wait_tile(op_rank *rk, uint64_t g, int64_t t, int src, a2amm_error *err)
{
    int slot = (int)(g % (uint64_t)rk->opt->depth);
    uint64_t seen = 0;
    comm_set_doing(rk->ctx, "tile %lld/%lld: waiting for rows from rank %d (slot %d, signal >= %llu)",
                   (long long)t, (long long)rk->ntiles, src, slot, (unsigned long long)(g + 1));
    int rc = comm_signal_wait_until(rk->ctx, &rk->arrived[slot * rk->R + src], COMM_CMP_GE, g + 1,
                                    comm_deadline_after(rk->opt->timeout_s), &seen, err);
    if (rc == A2AMM_E_TIMEOUT)
        return comm_fail(rk->ctx, rc,
                         "rank %d: timed out after %g s waiting for tile %lld from rank %d: slot %d signal "
                         ">= %llu, last seen %llu",
                         rk->me, rk->opt->timeout_s, (long long)t, src, slot, (unsigned long long)(g + 1),
                         (unsigned long long)seen);
    return rc;
}

int op_exec_fused(op_rank *rk, uint64_t base, a2amm_error *err)
{
    const a2amm_sizes *z = rk->z;
    const comm_msg_ops *msg = comm_msg(rk->ctx);
    int put = rk->opt->path == OP_PATH_PUT && rk->R > 1;
    int64_t prefill = rk->ntiles < rk->opt->depth ? rk->ntiles : rk->opt->depth;
    for (int64_t t = 0; put && msg && t < prefill; t++) { /* every receive posted before any send */
        int rc = post_tile_msg(rk, base + (uint64_t)t, t, err);
        if (rc) return rc;
    }
    for (int64_t t = 0; put && t < prefill; t++) {
        int rc = msg ? send_tile_msg(rk, base + (uint64_t)t, t, err) : send_tile(rk, base + (uint64_t)t, t, err);
        if (rc) return rc;
    }
    for (int64_t t = 0; t < rk->ntiles; t++) {
        int64_t i0 = t * rk->tm, rows = rk->m - i0 < rk->tm ? rk->m - i0 : rk->tm;
        int slot = (int)((base + (uint64_t)t) % (uint64_t)rk->opt->depth);
        int frc = observe_tile(rk, t, rows, err);
        if (!frc) frc = comm_check_peers(rk->ctx, err); /* stop between tiles once any rank failed */
        if (frc) return frc;
        for (int k = 0; k < rk->R; k++) {
            int src = (rk->me + k) % rk->R;
            const uint8_t *a, *sa;
            if (src == rk->me) {
                a = rows_of(rk, rk->a, rk->me, i0, z->ka);
                sa = rows_of(rk, rk->sa, rk->me, i0, z->ska);
            } else if (put) {
                op_observe(rk, A2AMM_EVENT_WAIT_BEGIN, t, rows, src, slot, 0, base + (uint64_t)t + 1);
                int rc = msg ? wait_tile_msg(rk, base + (uint64_t)t, t, src, err)
                             : wait_tile(rk, base + (uint64_t)t, t, src, err);
                if (rc) return rc;
                op_observe(rk, A2AMM_EVENT_WAIT_END, t, rows, src, slot, row_bytes(rk, rows), base + (uint64_t)t + 1);
                size_t off = ((size_t)slot * (size_t)rk->R + (size_t)src) * (size_t)rk->tm;
                a = rk->ring + off * (size_t)z->ka;
                sa = rk->ring_s + off * (size_t)z->ska;
            } else {
                const uint8_t *pa = comm_ptr(rk->ctx, rk->a, src), *psa = comm_ptr(rk->ctx, rk->sa, src);
                if (!pa || !psa)
                    return comm_fail(rk->ctx, A2AMM_E_INVAL,
                                     "rank %d: this transport cannot read rank %d's memory directly; use the put path",
                                     rk->me, src);
                a = rows_of(rk, pa, rk->me, i0, z->ka);
                sa = rows_of(rk, psa, rk->me, i0, z->ska);
            }
            comm_set_doing(rk->ctx, "tile %lld/%lld: multiplying the rows of rank %d", (long long)t,
                           (long long)rk->ntiles, src);
            op_observe(rk, A2AMM_EVENT_MATMUL_BEGIN, t, rows, src, put && src != rk->me ? slot : -1, 0, 0);
            multiply_source(rk, k, src, a, sa, i0, t, rows);
            op_observe(rk, A2AMM_EVENT_MATMUL_END, t, rows, src, put && src != rk->me ? slot : -1, 0, 0);
        }
        op_observe(rk, A2AMM_EVENT_TILE_END, t, rows, -1, -1, 0, 0);
        if (put && msg && t + rk->opt->depth < rk->ntiles) { /* the slot is free again: its next tile's receives */
            int rc = post_tile_msg(rk, base + (uint64_t)(t + rk->opt->depth), t + rk->opt->depth, err);
            if (rc) return rc;
        }
        if (put && !msg) {
            for (int k = 1; k < rk->R; k++) {
                int src = (rk->me + k) % rk->R;
                int rc = comm_signal_set(rk->ctx, &rk->released[rk->me], base + (uint64_t)t + 1, src, err);
                if (rc) return rc;
                op_observe(rk, A2AMM_EVENT_SIGNAL, t, rows, src, -1, 0, base + (uint64_t)t + 1);
            }
        }
        if (put && t + rk->opt->depth < rk->ntiles) {
            uint64_t g = base + (uint64_t)(t + rk->opt->depth);
            int rc = msg ? send_tile_msg(rk, g, t + rk->opt->depth, err) : send_tile(rk, g, t + rk->opt->depth, err);
            if (rc) return rc;
        }
    }
    if (put && msg) { /* every send complete: the caller may overwrite A once the call returns */
        comm_set_doing(rk->ctx, "fused run: completing the sends");
        int rc = msg->flush(comm_msg_state(rk->ctx), comm_deadline_after(rk->opt->timeout_s), err);
        if (rc) return comm_fail(rk->ctx, rc, "rank %d: completing the sends failed: %s", rk->me, err ? err->msg : "");
    }
    comm_set_doing(rk->ctx, "fused run done");
    return A2AMM_OK;
}

/* The matmul of the unfused execution, on every source's rows in place. */
static int exec_local(op_rank *rk, a2amm_error *err)
{
    const a2amm_sizes *z = rk->z;
    for (int64_t t = 0; t < rk->ntiles; t++) {
        int64_t i0 = t * rk->tm, rows = rk->m - i0 < rk->tm ? rk->m - i0 : rk->tm;
        int rc = observe_tile(rk, t, rows, err);
        if (!rc) rc = comm_check_peers(rk->ctx, err);
        if (rc) return rc;
        for (int k = 0; k < rk->R; k++) {
            int src = (rk->me + k) % rk->R;
            /* my own rows are block `me` of my A; the others' are block `src` of xbuf */
            const uint8_t *abase = src == rk->me ? rk->a : rk->xbuf;
            const uint8_t *sbase = src == rk->me ? rk->sa : rk->xbuf_s;
            op_observe(rk, A2AMM_EVENT_MATMUL_BEGIN, t, rows, src, -1, 0, 0);
            multiply_source(rk, k, src, rows_of(rk, abase, src, i0, z->ka), rows_of(rk, sbase, src, i0, z->ska), i0,
                            t, rows);
            op_observe(rk, A2AMM_EVENT_MATMUL_END, t, rows, src, -1, 0, 0);
        }
        op_observe(rk, A2AMM_EVENT_TILE_END, t, rows, -1, -1, 0, 0);
    }
    return A2AMM_OK;
}

/* The unfused exchange: every peer's rows for me into xbuf, then a barrier. */
static int exchange_all(op_rank *rk, a2amm_error *err)
{
    const a2amm_sizes *z = rk->z;
    /* blocks are m_max rows apart; this execution moves the first m rows of each */
    size_t blk = (size_t)(rk->m_max * z->ka), blk_s = (size_t)(rk->m_max * z->ska);
    size_t len = (size_t)(rk->m * z->ka), len_s = (size_t)(rk->m * z->ska);
    comm_set_doing(rk->ctx, "unfused: all-to-all exchange");
    const comm_msg_ops *msg = comm_msg(rk->ctx);
    if (msg) { /* my block for p becomes p's xbuf block `me` */
        int64_t deadline = comm_deadline_after(rk->opt->timeout_s);
        int rc = msg->exchange(comm_msg_state(rk->ctx), rk->a, rk->xbuf, blk, len, deadline, err);
        if (!rc) rc = msg->exchange(comm_msg_state(rk->ctx), rk->sa, rk->xbuf_s, blk_s, len_s, deadline, err);
        if (rc) return comm_fail(rk->ctx, rc, "rank %d: unfused exchange failed: %s", rk->me, err ? err->msg : "");
    }
    for (int k = 1; !msg && k < rk->R; k++) {
        int peer = (rk->me + k) % rk->R;
        int rc;
        if (rk->opt->path == OP_PATH_PUT) {
            /* my rows for `peer` into its xbuf block `me` */
            rc = comm_put(rk->ctx, rk->xbuf + (size_t)rk->me * blk, rows_of(rk, rk->a, peer, 0, z->ka), len, peer, err);
            if (!rc)
                rc = comm_put(rk->ctx, rk->xbuf_s + (size_t)rk->me * blk_s, rows_of(rk, rk->sa, peer, 0, z->ska),
                              len_s, peer, err);
        } else {
            /* peer's rows for me into my xbuf block `peer` */
            rc = comm_get(rk->ctx, rk->xbuf + (size_t)peer * blk, rows_of(rk, rk->a, rk->me, 0, z->ka), len, peer, err);
            if (!rc)
                rc = comm_get(rk->ctx, rk->xbuf_s + (size_t)peer * blk_s, rows_of(rk, rk->sa, rk->me, 0, z->ska),
                              len_s, peer, err);
        }
        if (rc) return comm_fail(rk->ctx, rc, "rank %d: unfused exchange with rank %d failed", rk->me, peer);
    }
    comm_set_doing(rk->ctx, "unfused: barrier after the exchange");
    return comm_barrier(rk->ctx, comm_deadline_after(rk->opt->timeout_s), err);
}

int op_exec_unfused(op_rank *rk, a2amm_error *err)
{
    int64_t received = (int64_t)(rk->R - 1) * row_bytes(rk, rk->m);
    op_observe(rk, A2AMM_EVENT_EXCHANGE_BEGIN, -1, rk->m, -1, -1, received, 0);
    int rc = exchange_all(rk, err);
    if (rc) return rc;
    op_observe(rk, A2AMM_EVENT_EXCHANGE_END, -1, rk->m, -1, -1, received, 0);
    comm_set_doing(rk->ctx, "unfused: matmul");
    rc = exec_local(rk, err);
    comm_set_doing(rk->ctx, "unfused run done");
    return rc;
}
