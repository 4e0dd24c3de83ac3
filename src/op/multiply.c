/*
 * The matmul of one tile, split over the rank's threads (gemm_split: by
 * rows where each thread gets enough, else by whole panels of columns),
 * with the progress a channel needs between slices of rows and the pieces
 * each thread ran told to an observer. Both ops are made of it.
 */
#include <stdlib.h>

#include "op/rank.h"

#define PROGRESS_ROWS 64 /* rows multiplied between two progress calls on a channel that needs them */

typedef struct tile_job {
    const op_rank *rk;
    gemm_a_slab slab;
    int64_t rows, k0, klen, n0, n1;
    float *c;      /* the accumulators of these rows, row stride N */
    int threads;
    int first;     /* C = product (gemm_multiply), not C += */
    uint16_t *out; /* NULL, or the rows' bf16 values (C is then left unspecified) */
    int64_t ldo;
    int64_t *work; /* observed: per task, the thread that ran it, its start and end (ns); else NULL */
} tile_job;

static void tile_task(void *arg, int task)
{
    const tile_job *j = arg;
    int64_t t0 = j->work ? comm_now_ns() : 0;
    const gemm_b *b = j->rk->b;
    int64_t N = j->rk->s->N;
    gemm_split p = gemm_split_task(j->rows, j->n1 - j->n0, j->klen, j->threads, task);
    int64_t n0 = j->n0 + p.n0, n1 = j->n0 + p.n1;
    gemm_a_slab slab = j->slab;
    slab.a += p.r0 * slab.lda;
    slab.sa += p.r0 * slab.ldsa;
    int64_t rows = p.r1 - p.r0;
    float *c = j->c + p.r0 * N;
    uint16_t *out = j->out ? j->out + p.r0 * j->ldo : NULL;
    if (out && j->first) gemm_multiply_store(b, &slab, rows, j->k0, j->klen, n0, n1, c, N, out, j->ldo);
    else if (out) gemm_accumulate_store(b, &slab, rows, j->k0, j->klen, n0, n1, c, N, out, j->ldo);
    else if (j->first) gemm_multiply(b, &slab, rows, j->k0, j->klen, n0, n1, c, N);
    else gemm_accumulate(b, &slab, rows, j->k0, j->klen, n0, n1, c, N);
    if (j->work) {
        int64_t *w = j->work + 3 * task;
        w[0] = pool_thread_index(), w[1] = t0, w[2] = comm_now_ns();
    }
}

/* Tells the observer which thread ran each of the `tasks` pieces of a matmul. */
static void observe_work(const op_rank *rk, const tile_job *job, int tasks, int64_t t, int peer)
{
    for (int i = 0; i < tasks; i++) {
        const int64_t *w = job->work + 3 * i;
        a2amm_event ev = op_event(rk, A2AMM_EVENT_WORK, t, job->rows, peer, -1);
        ev.time_ns = w[1], ev.thread = (int)w[0], ev.duration_ns = w[2] - w[1];
        (void)rk->observer(rk->observer_arg, &ev);
    }
}

void op_multiply(op_rank *rk, const gemm_a_slab *slab, int64_t rows, int64_t k0, int64_t klen, int64_t n0,
                 int64_t n1, int first, uint16_t *out, int64_t ldo, int64_t t, int peer)
{
    int64_t N = rk->s->N;
    int T = pool_threads(rk->pool);
    if (rk->observer && !rk->work) rk->work = malloc((size_t)T * 3 * sizeof *rk->work); /* no trace of it if NULL */
    comm_channel *ch = &rk->chan;
    /* a channel that moves data only while called (a message engine's): the
     * rows go in slices with a progress call between (rows are independent,
     * so the bits are the same) */
    int64_t slice = ch->ops->progress ? PROGRESS_ROWS : rows;
    for (int64_t r0 = 0; r0 < rows; r0 += slice) {
        int64_t n = rows - r0 < slice ? rows - r0 : slice;
        gemm_a_slab part = *slab;
        part.a += r0 * slab->lda;
        part.sa += r0 * slab->ldsa;
        tile_job job = {rk, part, n, k0, klen, n0, n1, rk->c + r0 * N, T, first, out ? out + r0 * ldo : NULL, ldo,
                        rk->observer ? rk->work : NULL};
        int tasks = gemm_split_count(n, n1 - n0, klen, T);
        pool_run(rk->pool, tile_task, &job, tasks);
        if (job.work) observe_work(rk, &job, tasks, t, peer);
        if (ch->ops->progress) ch->ops->progress(ch);
    }
}
