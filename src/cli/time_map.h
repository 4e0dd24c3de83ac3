/*
 * What a run's ranks hand their launcher (and, over MPI, one another): one
 * shared mapping, laid out once here for every runner. Doubles [variant]
 * [iteration][rank] (each timed repetition of each perf variant), then
 * `rows` rows of R doubles that are the runner's own (a preparation time, a
 * breakdown, the most rows a rank received), then `chars` bytes of text.
 * Anonymous and shared, so forked ranks write into the launcher's copy;
 * over MPI each rank has its own and time_map_doubles says how much to share.
 */
#ifndef A2AMM_CLI_TIME_MAP_H
#define A2AMM_CLI_TIME_MAP_H

#include <stddef.h>

#include "a2amm.h"

typedef struct time_map {
    double *d;
    int variants, iters, R, rows;
    char *text;   /* chars bytes after the doubles, or NULL */
    size_t chars; /* of text */
    size_t bytes; /* of the whole mapping */
} time_map;

/* Zeroed; A2AMM_E_NOMEM with a message when the mapping cannot be made. */
int time_map_create(time_map *m, int variants, int iters, int R, int rows, size_t chars, a2amm_error *err);
void time_map_free(time_map *m);

/* Variant v's repetition it on rank r. */
static inline double *time_map_at(const time_map *m, int v, int it, int r)
{
    return &m->d[((size_t)v * (size_t)m->iters + (size_t)it) * (size_t)m->R + (size_t)r];
}

/* The runner's own row `row` (0 .. rows - 1), rank r's entry. */
static inline double *time_map_row(const time_map *m, int row, int r) { return time_map_at(m, m->variants, 0, 0) + (size_t)row * (size_t)m->R + (size_t)r; }

/* The doubles of the map (timings and rows): what ranks share over MPI (entry i is rank i mod R's). */
static inline size_t time_map_doubles(const time_map *m)
{
    return ((size_t)m->variants * (size_t)m->iters + (size_t)m->rows) * (size_t)m->R;
}

#endif
