/* The ranks' spans into one trace file (see run_trace.h). */
#include "cli/run_trace.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"

static int part_path(char *buf, size_t size, const char *trace_path, int rank, const char *tag, a2amm_error *err)
{
    int n = snprintf(buf, size, "%s.rank%d.%s", trace_path, rank, tag);
    if (n < 0 || (size_t)n >= size) return a2amm_fail(err, A2AMM_E_INVAL, "--trace: the path is too long");
    return A2AMM_OK;
}

int run_trace_save_part(const trace_rank *t, const char *trace_path, const char *tag, a2amm_error *err)
{
    char path[4200];
    int rc = part_path(path, sizeof path, trace_path, t->rank, tag, err);
    return rc ? rc : trace_save(t, path, err);
}

int run_trace_merge_parts(const char *trace_path, const char *tag, int R, int write, trace_meta *meta,
                          a2amm_error *err)
{
    trace_rec **recs = calloc((size_t)R, sizeof *recs);
    size_t *n = calloc((size_t)R, sizeof *n), *dropped = calloc((size_t)R, sizeof *dropped);
    int rc = recs && n && dropped ? A2AMM_OK : a2amm_fail(err, A2AMM_E_NOMEM, "--trace: out of memory");
    for (int r = 0; r < R; r++) {
        char path[4200];
        if (part_path(path, sizeof path, trace_path, r, tag, NULL)) continue;
        if (!rc && write) rc = trace_load(path, &recs[r], &n[r], &dropped[r], err);
        unlink(path);
    }
    if (!rc && write) {
        meta->dropped = dropped;
        rc = trace_write_json(trace_path, R, recs, n, meta, err);
        meta->dropped = NULL;
    }
    for (int r = 0; recs && r < R; r++) free(recs[r]);
    free(recs), free(n), free(dropped);
    return rc;
}

void run_trace_mpi_offsets(int R, int rank, int64_t *offset_ns)
{
    enum { PINGS = 8, TAG = 7001 };
    memset(offset_ns, 0, (size_t)R * sizeof *offset_ns);
    for (int r = 1; r < R; r++) {
        if (rank == 0) {
            int64_t best_rtt = INT64_MAX;
            for (int i = 0; i < PINGS; i++) {
                int64_t t0 = trace_now_ns(), theirs = 0;
                MPI_Send(&t0, 1, MPI_INT64_T, r, TAG, MPI_COMM_WORLD);
                MPI_Recv(&theirs, 1, MPI_INT64_T, r, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                int64_t t1 = trace_now_ns();
                if (t1 - t0 < best_rtt) best_rtt = t1 - t0, offset_ns[r] = theirs - (t0 + (t1 - t0) / 2);
            }
        } else if (rank == r) {
            for (int i = 0; i < PINGS; i++) {
                int64_t mine;
                MPI_Recv(&mine, 1, MPI_INT64_T, 0, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                mine = trace_now_ns();
                MPI_Send(&mine, 1, MPI_INT64_T, 0, TAG, MPI_COMM_WORLD);
            }
        }
    }
}

int run_trace_mpi_write(const trace_rank *t, const char *trace_path, int R, int rank, trace_meta *meta,
                        a2amm_error *err)
{
    /* the counts, then the spans as bytes (MPI counts are ints) */
    long long mine[2] = {(long long)t->n, (long long)t->dropped}, *all = rank == 0 ? calloc((size_t)R * 2, sizeof *all) : NULL;
    MPI_Gather(mine, 2, MPI_LONG_LONG, all, 2, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    int rc = A2AMM_OK, *counts = NULL, *displs = NULL;
    trace_rec *flat = NULL;
    long long total = 0;
    if (rank == 0) {
        counts = calloc((size_t)R, sizeof *counts), displs = calloc((size_t)R, sizeof *displs);
        for (int r = 0; all && r < R; r++) total += all[2 * r];
        if (!all || !counts || !displs) rc = a2amm_fail(err, A2AMM_E_NOMEM, "--trace: out of memory");
        else if (total * (long long)sizeof(trace_rec) > INT_MAX)
            rc = a2amm_fail(err, A2AMM_E_INVAL, "--trace: %lld spans are more than one MPI gather carries; trace "
                            "fewer repetitions", total);
        else if (!(flat = malloc((size_t)(total > 0 ? total : 1) * sizeof *flat)))
            rc = a2amm_fail(err, A2AMM_E_NOMEM, "--trace: out of memory for %lld spans", total);
        long long at = 0;
        for (int r = 0; !rc && r < R; r++) {
            counts[r] = (int)(all[2 * r] * (long long)sizeof(trace_rec));
            displs[r] = (int)(at * (long long)sizeof(trace_rec));
            at += all[2 * r];
        }
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rc) goto done;
    MPI_Gatherv(t->recs, (int)(t->n * sizeof(trace_rec)), MPI_BYTE, flat, counts, displs, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        trace_rec **recs = calloc((size_t)R, sizeof *recs);
        size_t *n = calloc((size_t)R, sizeof *n), *dropped = calloc((size_t)R, sizeof *dropped);
        if (!recs || !n || !dropped) rc = a2amm_fail(err, A2AMM_E_NOMEM, "--trace: out of memory");
        for (int r = 0; !rc && r < R; r++) {
            recs[r] = flat + displs[r] / (int)sizeof(trace_rec);
            n[r] = (size_t)all[2 * r], dropped[r] = (size_t)all[2 * r + 1];
        }
        if (!rc) {
            meta->dropped = dropped;
            rc = trace_write_json(trace_path, R, recs, n, meta, err);
            meta->dropped = NULL;
        }
        free(recs), free(n), free(dropped);
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rc && rank != 0) a2amm_fail(err, rc, "rank 0 could not write the trace %s", trace_path);
done:
    free(all), free(counts), free(displs), free(flat);
    return rc;
}
