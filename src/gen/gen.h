/*
 * Input generation: deterministic MXFP8 inputs for every rank. The same
 * options give the same bytes on every machine (integer RNG, no libm
 * transcendental functions on the path).
 */
#ifndef A2AMM_GEN_H
#define A2AMM_GEN_H

#include <stdint.h>

#include "a2amm.h"
#include "common/shape.h"
#include "io/io.h"
#include "mx/mx.h"
#include "util/dist.h"

typedef struct gen_options {
    gen_dist dist;
    uint64_t seed;
    mx_scale_mode scale_mode;
} gen_options;

/* Fills rank r's four arrays (allocated for this shape). Scale pad bytes
 * are 0. Returns A2AMM_E_NOMEM when a row buffer cannot be allocated. */
int gen_rank_inputs(const op_shape *shape, const op_sizes *sizes, const gen_options *opt,
                    int rank, io_rank_inputs *in, a2amm_error *err);

/*
 * Generates every rank's inputs into in[0..R-1] (allocated here; the caller
 * frees them with io_rank_inputs_free, also after a failure) and writes them
 * in the seed's layout under dir.
 */
int gen_write_inputs(const char *dir, const op_shape *shape, const op_sizes *sizes,
                     const gen_options *opt, io_rank_inputs *in, a2amm_error *err);

/*
 * gen --no-golden: removes DIR/output/<r>/cpu_output.bin of every rank folder
 * there (an earlier gen's goldens, of any R), so that no later verify compares
 * against the golden of other inputs. *removed: how many there were. An error
 * names the file that could not be removed, or the folder that could not be read.
 */
int gen_remove_goldens(const char *dir, int *removed, a2amm_error *err);

#endif
