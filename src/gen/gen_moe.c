/* The MoE op's inputs: tokens, routing by route, experts' weights. */
#include "gen/gen_moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "gen/rng.h"
#include "mx/mx.h"

/* Streams: per rank for tokens and routing, per global expert for weights (matrix numbers apart from
 * gen.c's 0 and 1). */
enum { STREAM_X = 20, STREAM_ROUTE = 21, STREAM_W13 = 22, STREAM_W2 = 23 };

double gen_exp_neg(double x)
{
    if (!(x > -700.0)) return 0.0;
    double y = x / 64.0, term = 1.0, sum = 1.0;
    for (int n = 1; n <= 10; n++) term *= y / n, sum += term;
    for (int i = 0; i < 6; i++) sum *= sum;
    return sum;
}

/* rows x len values of the distribution times gain, quantized into codes and scale rows of stride bytes. */
static void fill_rows(rng *g, const gen_options *o, double gain, a2amm_fp8_type type, int64_t rows, int64_t len,
                      int64_t stride, uint8_t *codes, uint8_t *scales, float *row)
{
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t k = 0; k < len; k++)
            row[k] = (float)(gain * (o->dist == GEN_DIST_UNIFORM ? 2.0 * rng_unit(g) - 1.0 : (double)rng_normal(g)));
        memset(scales + i * stride, 0, (size_t)stride);
        mx_quantize_row(row, (size_t)len, type, o->scale_mode, codes + i * len, scales + i * stride);
    }
}

/* The best not yet taken expert by logit (ties to the lower id), or -1. */
static int best_left(const double *logit, const unsigned char *taken, int E)
{
    int best = -1;
    for (int e = 0; e < E; e++)
        if (!taken[e] && (best < 0 || logit[e] > logit[best])) best = e;
    return best;
}

/* An expert not yet taken, drawn with probability proportional to 1/(e+1) among those left. */
static int zipf_left(rng *g, const unsigned char *taken, int E)
{
    double total = 0;
    for (int e = 0; e < E; e++) total += taken[e] ? 0.0 : 1.0 / (e + 1);
    double u = rng_unit(g) * total;
    int last = -1;
    for (int e = 0; e < E; e++) {
        if (taken[e]) continue;
        last = e;
        if ((u -= 1.0 / (e + 1)) < 0) return e;
    }
    return last;
}

/* One token's slots: ids[K] and w[K]. */
static void route_token(rng *g, const moe_io_shape *s, moe_io_route route, double *logit, unsigned char *taken,
                        int32_t *ids, float *w)
{
    const int E = s->E, K = s->K;
    for (int e = 0; e < E; e++) logit[e] = rng_normal(g), taken[e] = 0;
    for (int j = 0; j < K; j++) {
        int e = route == MOE_ROUTE_HOT && j == 0 ? 0
                : route == MOE_ROUTE_SKEWED    ? zipf_left(g, taken, E)
                                               : best_left(logit, taken, E);
        taken[e] = 1, ids[j] = e;
    }
    if (route == MOE_ROUTE_EMPTY) { /* a token in 8 with no expert, a slot in 4 unused */
        int none = rng_next(g) % 8 == 0;
        for (int j = 0; j < K; j++)
            if (none || rng_next(g) % 4 == 0) ids[j] = -1;
    }
    double top = -1e300, sum = 0;
    for (int j = 0; j < K; j++)
        if (ids[j] >= 0 && logit[ids[j]] > top) top = logit[ids[j]];
    for (int j = 0; j < K; j++) sum += ids[j] >= 0 ? gen_exp_neg(logit[ids[j]] - top) : 0.0;
    for (int j = 0; j < K; j++) w[j] = ids[j] >= 0 ? (float)(gen_exp_neg(logit[ids[j]] - top) / sum) : 0.0f;
}

int gen_moe_rank(const moe_io_shape *s, moe_io_route route, const gen_options *opt, int r, moe_io_rank *d,
                 a2amm_error *err)
{
    const int64_t H = s->H, I = s->I, T = s->tokens[r], sh = moe_io_scale_row(H), si = moe_io_scale_row(I);
    const int L = s->E / s->R;
    float *row = malloc(sizeof *row * (size_t)(H > 2 * I ? H : 2 * I));
    double *logit = malloc(sizeof *logit * (size_t)s->E);
    unsigned char *taken = malloc((size_t)s->E);
    if (!row || !logit || !taken) {
        free(row), free(logit), free(taken);
        return a2amm_fail(err, A2AMM_E_NOMEM, "gen: out of memory");
    }
    rng gx = rng_stream(opt->seed, r, STREAM_X), gr = rng_stream(opt->seed, r, STREAM_ROUTE);
    fill_rows(&gx, opt, 1.0, s->a_type, T, H, sh, d->x, d->sx, row);
    for (int64_t t = 0; t < T; t++) route_token(&gr, s, route, logit, taken, d->idx + t * s->K, d->w + t * s->K);
    for (int le = 0; le < L; le++) {
        const int e = r * L + le;
        rng g13 = rng_stream(opt->seed, e, STREAM_W13), g2 = rng_stream(opt->seed, e, STREAM_W2);
        fill_rows(&g13, opt, 1.0 / sqrt((double)H), s->b_type, 2 * I, H, sh, d->w13 + (size_t)le * (size_t)(2 * I * H),
                  d->s13 + (size_t)le * (size_t)(2 * I * sh), row);
        fill_rows(&g2, opt, 1.0 / sqrt((double)I), s->b_type, H, I, si, d->w2 + (size_t)le * (size_t)(H * I),
                  d->s2 + (size_t)le * (size_t)(H * si), row);
    }
    free(row), free(logit), free(taken);
    return A2AMM_OK;
}
