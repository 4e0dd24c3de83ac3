/* Deterministic input generation for every distribution gen offers. */
#include "gen/gen.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "gen/rng.h"

static float rng_value(rng *g, gen_dist d)
{
    return d == GEN_DIST_UNIFORM ? (float)(2.0 * rng_unit(g) - 1.0) : rng_normal(g);
}

/*
 * Fills `rows` rows of `len` codes and their scale rows (stride bytes each,
 * pad bytes 0). `is_a` picks the A-side extreme scales.
 */
static int fill_matrix(const gen_options *o, rng *g, a2amm_fp8_type type, int64_t rows,
                       int64_t len, int64_t stride, int is_a, uint8_t *codes, uint8_t *scales,
                       a2amm_error *err)
{
    float *row = NULL;
    if (o->dist != GEN_DIST_SEED && !(row = malloc((size_t)len * sizeof *row)))
        return a2amm_fail(err, A2AMM_E_NOMEM, "gen: cannot allocate a row of %lld values", (long long)len);
    int64_t blocks = len / MX_BLOCK;
    for (int64_t i = 0; i < rows; i++) {
        uint8_t *c = codes + i * len, *s = scales + i * stride;
        memset(s, 0, (size_t)stride);
        if (o->dist == GEN_DIST_SEED) {
            /* codes of the values 1..8: E4M3 0x38..0x50, E5M2 0x3C..0x48 */
            uint8_t lo = type == A2AMM_E4M3 ? 0x38 : 0x3C, hi = type == A2AMM_E4M3 ? 0x50 : 0x48;
            for (int64_t k = 0; k < len; k++) c[k] = (uint8_t)(lo + rng_next(g) % (uint64_t)(hi - lo + 1));
            for (int64_t b = 0; b < blocks; b++) s[b] = (uint8_t)(127 + rng_next(g) % 4);
            continue;
        }
        for (int64_t k = 0; k < len; k++) row[k] = rng_value(g, o->dist);
        mx_quantize_row(row, (size_t)len, type, o->scale_mode, c, s);
        if (o->dist == GEN_DIST_EXTREME)
            for (int64_t b = 0; b < blocks; b++)
                s[b] = (uint8_t)((is_a ? 7 : 242) + rng_next(g) % 3);
        if (o->dist == GEN_DIST_SPECIAL) {
            /* about one row in 16 gets a NaN scale, one in 16 a NaN code */
            uint64_t pick = rng_next(g);
            if (pick % 16 == 0) s[(pick >> 8) % (uint64_t)blocks] = MX_E8M0_NAN;
            if (pick % 16 == 1) c[(pick >> 8) % (uint64_t)len] = MX_FP8_NAN;
        }
    }
    free(row);
    return A2AMM_OK;
}

int gen_rank_inputs(const op_shape *s, const op_sizes *z, const gen_options *o, int rank,
                    io_rank_inputs *in, a2amm_error *err)
{
    rng ga = rng_stream(o->seed, rank, 0), gb = rng_stream(o->seed, rank, 1);
    int rc = fill_matrix(o, &ga, s->a_type, z->a_rows, z->ka, z->ska, 1, in->a, in->sa, err);
    if (!rc) rc = fill_matrix(o, &gb, s->b_type, s->N, s->K, z->sk, 0, in->b, in->sb, err);
    return rc;
}

int gen_write_inputs(const char *dir, const op_shape *s, const op_sizes *z, const gen_options *opt,
                     io_rank_inputs *in, a2amm_error *err)
{
    for (int r = 0; r < s->R; r++) {
        int rc = io_rank_inputs_alloc(z, &in[r], err);
        if (!rc) rc = gen_rank_inputs(s, z, opt, r, &in[r], err);
        if (!rc) rc = io_save_rank_inputs(dir, r, z, &in[r], err);
        if (rc) return rc;
    }
    return A2AMM_OK;
}

int gen_remove_goldens(const char *dir, int *removed, a2amm_error *err)
{
    char out[IO_PATH_MAX], path[IO_PATH_MAX];
    *removed = 0;
    int n = snprintf(out, sizeof out, "%s/output", dir);
    if (n < 0 || (size_t)n >= sizeof out)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s/output: the path is too long", dir);
    DIR *d = opendir(out);
    if (!d) {
        if (errno == ENOENT) return A2AMM_OK; /* no outputs yet: no golden */
        return a2amm_fail(err, A2AMM_E_IO, "cannot read %s to remove an earlier golden: %s", out, strerror(errno));
    }
    int rc = A2AMM_OK;
    for (struct dirent *e; !rc && (e = readdir(d)) != NULL;) {
        if (!e->d_name[0] || strspn(e->d_name, "0123456789") != strlen(e->d_name)) continue; /* rank folders only */
        n = snprintf(path, sizeof path, "%s/%s/cpu_output.bin", out, e->d_name);
        if (n < 0 || (size_t)n >= sizeof path)
            rc = a2amm_fail(err, A2AMM_E_INVAL, "%s/%s: the path is too long", out, e->d_name);
        else if (unlink(path) == 0)
            (*removed)++;
        else if (errno != ENOENT)
            rc = a2amm_fail(err, A2AMM_E_IO, "cannot remove %s, an earlier gen's golden (gen --no-golden removes it "
                            "so that verify does not compare against it): %s", path, strerror(errno));
    }
    closedir(d);
    return rc;
}
