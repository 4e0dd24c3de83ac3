/* The names of the input distributions (util/dist.h). */
#include "util/dist.h"

#include <strings.h>

#include "a2amm.h"

static const struct {
    const char *name, *help;
} DISTS[GEN_DIST_COUNT] = {
    [GEN_DIST_NORMAL] = {"normal", "signed Gaussian values quantized with the chosen scale mode (default)"},
    [GEN_DIST_SEED] = {"seed", "like the seed's generator: fp8 values in [1, 8], scales 2^0..2^3, all positive"},
    [GEN_DIST_UNIFORM] = {"uniform", "signed uniform values in [-1, 1] quantized"},
    [GEN_DIST_EXTREME] = {"extreme", "normal codes with A scales near 2^-120 and B scales near 2^+115"},
    [GEN_DIST_SPECIAL] = {"special", "normal, plus NaN scales (0xFF) and NaN codes in a few blocks"},
};

const char *gen_dist_name(gen_dist d) { return DISTS[d].name; }
const char *gen_dist_help(gen_dist d) { return DISTS[d].help; }

int gen_dist_parse(const char *s, gen_dist *out)
{
    for (int d = 0; s && d < GEN_DIST_COUNT; d++)
        if (strcasecmp(s, DISTS[d].name) == 0) {
            *out = (gen_dist)d;
            return A2AMM_OK;
        }
    return A2AMM_E_INVAL;
}
