/*
 * The input distributions by name: the vocabulary the meta file records
 * (io) and the generator implements (gen), kept below both so that neither
 * needs the other to name one.
 */
#ifndef A2AMM_UTIL_DIST_H
#define A2AMM_UTIL_DIST_H

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

#endif
