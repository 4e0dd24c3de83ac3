/*
 * Input generation: deterministic MXFP8 inputs for every rank. The same
 * options give the same bytes on every machine (integer RNG, no libm
 * transcendental functions on the path).
 */
#ifndef A2AMM_GEN_H
#define A2AMM_GEN_H

#include <stdint.h>

#include "a2amm.h"
#include "io/io.h"
#include "mx/mx.h"

typedef enum gen_dist {
    GEN_DIST_NORMAL = 0, /* signed Gaussian values, quantized (the default) */
    GEN_DIST_SEED,       /* like the seed: fp8 values in [1, 8], scales 2^0..2^3 */
    GEN_DIST_UNIFORM,    /* signed uniform values in [-1, 1], quantized */
    GEN_DIST_EXTREME,    /* normal codes, A scales near 2^-120, B scales near 2^+115 */
    GEN_DIST_SPECIAL     /* normal, plus NaN scales (0xFF) and NaN codes here and there */
} gen_dist;

#define GEN_DIST_COUNT 5

const char *gen_dist_name(gen_dist d);
int gen_dist_parse(const char *s, gen_dist *out);
/* One line describing each distribution, for --help. */
const char *gen_dist_help(gen_dist d);

typedef struct gen_options {
    gen_dist dist;
    uint64_t seed;
    mx_scale_mode scale_mode;
} gen_options;

/* Fills rank r's four arrays (allocated for this shape). Scale pad bytes
 * are 0. Returns A2AMM_E_NOMEM when a row buffer cannot be allocated. */
int gen_rank_inputs(const a2amm_shape *shape, const a2amm_sizes *sizes, const gen_options *opt,
                    int rank, io_rank_inputs *in, a2amm_error *err);

/*
 * Generates every rank's inputs into in[0..R-1] (allocated here; the caller
 * frees them with io_rank_inputs_free, also after a failure) and writes them
 * in the seed's layout under dir.
 */
int gen_write_inputs(const char *dir, const a2amm_shape *shape, const a2amm_sizes *sizes,
                     const gen_options *opt, io_rank_inputs *in, a2amm_error *err);

#endif
