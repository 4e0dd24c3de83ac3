/* The oneDNN expert-parallel baseline of `a2amm bench moe` (see moe_dnn.h). */
#include "bench/moe_dnn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_peers.h"
#include "common/error.h"
#include "mx/mx.h"

struct moe_dnn {
    a2amm_comm *comm;
    moe_dnn_shape s;
    int L;
    uint16_t *xb;              /* [T, H]: x in bf16 (the activations a user has) */
    const int32_t *idx;
    const float *w;
    int64_t npairs;            /* this rank's (token, slot) pairs with an expert */
    int64_t *pair_t, *pair_j;  /* [npairs]: by owner, local expert, token, slot */
    int64_t *to_owner;         /* [R]: pairs to each owner */
    int64_t *from;             /* [R][L]: rows each source sends each local expert */
    int64_t *n;                /* [L]: rows of each local expert */
    size_t *sb, *so, *room, *ro, *got, *back_room, *back_off; /* [R] each */
    size_t per_source;         /* bytes of rows a source can send a rank at most */
    uint16_t *send, *recv, *yback, *yrecv;
    float *acc;                /* [T, H] */
    bench_onednn **up, **down; /* [L]: gate and up [n, H] x [H, 2I]; down [n, I] x [I, H] */
    char what[200];
};

static float bf16_value(uint16_t h) { return mx_bf16_to_f32(h); }

/* Codes [rows, cols] with scales (cols/32 a row) into bf16 (exact: an fp8 value times a power of two) and fp32. */
static int dequantize(const uint8_t *codes, const uint8_t *scales, int64_t rows, int64_t cols, a2amm_fp8_type type,
                      uint16_t *bf, float *f, a2amm_error *err)
{
    int rc = a2amm_mx_dequantize_f32(codes, cols, scales, cols / 32, rows, cols, type, f, cols, err);
    for (int64_t i = 0; !rc && i < rows * cols; i++) bf[i] = mx_f32_to_bf16(f[i]);
    return rc;
}

/* Row r of a matmul's A from bf16 values (A is bf16, or fp32 where oneDNN has no bf16 matmul). */
static void put_row(bench_onednn *o, int64_t r, int64_t K, const uint16_t *row)
{
    if (bench_onednn_is_f32(o)) {
        float *a = (float *)bench_onednn_input(o) + r * K;
        for (int64_t k = 0; k < K; k++) a[k] = bf16_value(row[k]);
    } else {
        memcpy((uint16_t *)bench_onednn_input(o) + r * K, row, (size_t)K * 2);
    }
}

/* Row r of a matmul's result [.., N] as floats. */
static void result_row(const bench_onednn *o, int64_t r, int64_t N, float *out)
{
    if (bench_onednn_is_f32(o)) {
        memcpy(out, (const float *)bench_onednn_result(o) + r * N, sizeof *out * (size_t)N);
    } else {
        const uint16_t *c = (const uint16_t *)bench_onednn_result(o) + r * N;
        for (int64_t k = 0; k < N; k++) out[k] = bf16_value(c[k]);
    }
}

/* The pairs by (owner, local expert, token, slot); to_owner and the per-(owner, expert) counts. */
static int sort_pairs(moe_dnn *b, int64_t *count, a2amm_error *err)
{
    const int R = b->s.R, L = b->L, K = b->s.K;
    int64_t *first = calloc((size_t)(R * L + 1), sizeof *first);
    if (!first) return a2amm_fail(err, A2AMM_E_NOMEM, "out of memory");
    memset(count, 0, sizeof *count * (size_t)(R * L));
    for (int64_t t = 0; t < b->s.T; t++)
        for (int j = 0; j < K; j++)
            if (b->idx[t * K + j] >= 0) count[b->idx[t * K + j]]++; /* expert e is owner e / L, local e % L */
    for (int g = 0; g < R * L; g++) first[g + 1] = first[g] + count[g];
    b->npairs = first[R * L];
    for (int o = 0; o < R; o++) b->to_owner[o] = first[(o + 1) * L] - first[o * L];
    b->pair_t = malloc(sizeof *b->pair_t * (size_t)(b->npairs + 1));
    b->pair_j = malloc(sizeof *b->pair_j * (size_t)(b->npairs + 1));
    if (!b->pair_t || !b->pair_j) {
        free(first);
        return a2amm_fail(err, A2AMM_E_NOMEM, "out of memory");
    }
    for (int64_t t = 0; t < b->s.T; t++)
        for (int j = 0; j < K; j++) {
            int e = b->idx[t * K + j];
            if (e < 0) continue;
            b->pair_t[first[e]] = t, b->pair_j[first[e]] = j, first[e]++;
        }
    free(first);
    return A2AMM_OK;
}

/* oneDNN's two matmuls of local expert le (n rows), its weights dequantized on the way. */
static int make_expert(moe_dnn *b, const moe_dnn_inputs *in, int le, a2amm_error *err)
{
    const int64_t H = b->s.H, I = b->s.I, n = b->n[le];
    const size_t n13 = (size_t)(2 * I * H), n2 = (size_t)(H * I), big = n13 > n2 ? n13 : n2;
    uint16_t *wb = malloc(big * 2), *ab = calloc((size_t)(n * (H > I ? H : I)), 2);
    float *wf = malloc(big * 4), *af = calloc((size_t)(n * (H > I ? H : I)), 4);
    int rc = wb && ab && wf && af ? A2AMM_OK : a2amm_fail(err, A2AMM_E_NOMEM, "out of memory for expert %d", le);
    if (!rc) rc = dequantize(in->w13 + (size_t)le * n13, in->s13 + (size_t)le * n13 / 32, 2 * I, H, b->s.b_type, wb, wf, err);
    if (!rc) rc = bench_onednn_create(ab, wb, af, wf, n, 2 * I, H, b->s.threads, &b->up[le], err);
    if (!rc) rc = dequantize(in->w2 + (size_t)le * n2, in->s2 + (size_t)le * n2 / 32, H, I, b->s.b_type, wb, wf, err);
    if (!rc) rc = bench_onednn_create(ab, wb, af, wf, n, H, I, b->s.threads, &b->down[le], err);
    free(wb), free(ab), free(wf), free(af);
    return rc;
}

int moe_dnn_create(a2amm_comm *comm, const moe_dnn_shape *s, const moe_dnn_inputs *in, moe_dnn **out,
                   a2amm_error *err)
{
    *out = NULL;
    moe_dnn *b = calloc(1, sizeof *b);
    if (!b) return a2amm_fail(err, A2AMM_E_NOMEM, "out of memory");
    const int R = s->R, L = s->E / s->R;
    const int64_t H = s->H, T = s->T;
    b->comm = comm, b->s = *s, b->L = L, b->idx = in->idx, b->w = in->w;
    b->per_source = (size_t)s->max_tokens * (size_t)(s->K < L ? s->K : L) * (size_t)H * 2;
    b->xb = malloc((size_t)(T * H) * 2 + 2);
    float *xf = malloc((size_t)(T * H) * 4 + 4);
    int64_t *count = malloc(sizeof *count * (size_t)(R * L)), *recv_counts = malloc(sizeof *count * (size_t)(R * L));
    b->to_owner = calloc((size_t)R, sizeof *b->to_owner), b->from = recv_counts;
    b->n = calloc((size_t)L, sizeof *b->n);
    size_t **z[] = {&b->sb, &b->so, &b->room, &b->ro, &b->got, &b->back_room, &b->back_off};
    int ok = b->xb && xf && count && recv_counts && b->to_owner && b->n;
    for (size_t i = 0; i < sizeof z / sizeof *z; i++) ok &= (*z[i] = calloc((size_t)R, sizeof(size_t))) != NULL;
    b->up = calloc((size_t)L, sizeof *b->up), b->down = calloc((size_t)L, sizeof *b->down);
    int rc = ok && b->up && b->down ? A2AMM_OK : a2amm_fail(err, A2AMM_E_NOMEM, "out of memory");
    if (!rc && T) rc = dequantize(in->x, in->sx, T, H, s->a_type, b->xb, xf, err);
    if (!rc) rc = sort_pairs(b, count, err);
    /* how many rows each source will send each local expert (the routing is the same every call) */
    if (!rc) rc = a2amm_comm_alltoall(comm, count, recv_counts, sizeof *count * (size_t)L, s->timeout_s, err);
    for (int q = 0; !rc && q < R; q++)
        for (int le = 0; le < L; le++) b->n[le] += recv_counts[q * L + le];
    b->send = malloc((size_t)b->npairs * (size_t)H * 2 + 2), b->yrecv = malloc((size_t)b->npairs * (size_t)H * 2 + 2);
    b->recv = malloc(b->per_source * (size_t)R + 2), b->yback = malloc(b->per_source * (size_t)R + 2);
    b->acc = malloc(sizeof *b->acc * (size_t)(T * H) + 4);
    if (!rc && (!b->send || !b->yrecv || !b->recv || !b->yback || !b->acc))
        rc = a2amm_fail(err, A2AMM_E_NOMEM, "out of memory for the exchanges");
    for (int le = 0; !rc && le < L; le++)
        if (b->n[le]) rc = make_expert(b, in, le, err);
    for (int le = 0; !rc && le < L; le++)
        if (b->up[le]) {
            snprintf(b->what, sizeof b->what, "oneDNN %s %s matmuls (%s)", bench_onednn_version(),
                     bench_onednn_is_f32(b->up[le]) ? "fp32" : "bf16", bench_onednn_impl(b->up[le]));
            break;
        }
    free(xf), free(count);
    if (rc) {
        moe_dnn_free(b);
        return rc;
    }
    *out = b;
    return A2AMM_OK;
}

int moe_dnn_run(moe_dnn *b, uint16_t *out, a2amm_error *err)
{
    const int R = b->s.R, L = b->L, K = b->s.K;
    const int64_t H = b->s.H, I = b->s.I, T = b->s.T;
    const size_t row = (size_t)H * 2;
    int64_t *count = malloc(sizeof *count * (size_t)(R * L));
    if (!count) return a2amm_fail(err, A2AMM_E_NOMEM, "out of memory");
    /* 1. the counts to every rank (what each will receive), as a user's code does every call */
    memset(count, 0, sizeof *count * (size_t)(R * L));
    for (int64_t p = 0; p < b->npairs; p++) count[b->idx[b->pair_t[p] * K + b->pair_j[p]]]++;
    int rc = a2amm_comm_alltoall(b->comm, count, b->from, sizeof *count * (size_t)L, b->s.timeout_s, err);
    /* 2. each pair's row to its expert's rank */
    size_t at = 0;
    for (int o = 0; o < R; o++) b->so[o] = at, b->sb[o] = (size_t)b->to_owner[o] * row, at += b->sb[o];
    for (int64_t p = 0; p < b->npairs; p++) memcpy(b->send + p * H, b->xb + b->pair_t[p] * H, row);
    for (int q = 0; q < R; q++) b->room[q] = b->per_source, b->ro[q] = (size_t)q * b->per_source;
    if (!rc)
        rc = a2amm_comm_alltoallv(b->comm, b->send, b->sb, b->so, b->recv, b->room, b->ro, b->got, b->s.timeout_s, err);
    /* 3. the experts: rows of expert le come from each source in turn (each source's rows by expert) */
    for (int le = 0; !rc && le < L; le++) {
        if (!b->n[le]) continue;
        int64_t r = 0;
        for (int q = 0; q < R; q++) {
            int64_t skip = 0;
            for (int x = 0; x < le; x++) skip += b->from[q * L + x];
            for (int64_t i = 0; i < b->from[q * L + le]; i++)
                put_row(b->up[le], r++, H, b->recv + b->ro[q] / 2 + (size_t)(skip + i) * (size_t)H);
        }
        rc = bench_onednn_run(b->up[le], err);
        float *gu = malloc(sizeof *gu * (size_t)(2 * I));
        uint16_t *a = malloc((size_t)I * 2);
        for (int64_t i = 0; !rc && a && gu && i < b->n[le]; i++) {
            result_row(b->up[le], i, 2 * I, gu);
            for (int64_t c = 0; c < I; c++) a[c] = mx_f32_to_bf16(gu[c] / (1.0f + expf(-gu[c])) * gu[I + c]);
            put_row(b->down[le], i, I, a);
        }
        if (!a || !gu) rc = a2amm_fail(err, A2AMM_E_NOMEM, "out of memory");
        free(a), free(gu);
        if (!rc) rc = bench_onednn_run(b->down[le], err);
        /* the results back where the rows came from */
        r = 0;
        for (int q = 0; !rc && q < R; q++) {
            int64_t skip = 0;
            for (int x = 0; x < le; x++) skip += b->from[q * L + x];
            for (int64_t i = 0; i < b->from[q * L + le]; i++, r++) {
                uint16_t *dst = b->yback + b->ro[q] / 2 + (size_t)(skip + i) * (size_t)H;
                if (bench_onednn_is_f32(b->down[le]))
                    for (int64_t c = 0; c < H; c++) dst[c] = mx_f32_to_bf16(((const float *)bench_onednn_result(b->down[le]))[r * H + c]);
                else
                    memcpy(dst, (const uint16_t *)bench_onednn_result(b->down[le]) + r * H, (size_t)H * 2);
            }
        }
    }
    /* 4. back to the tokens' ranks, in the order they came */
    for (int q = 0; q < R; q++) b->back_room[q] = b->sb[q], b->back_off[q] = b->so[q];
    if (!rc)
        rc = a2amm_comm_alltoallv(b->comm, b->yback, b->got, b->ro, b->yrecv, b->back_room, b->back_off, b->room,
                                  b->s.timeout_s, err);
    /* 5. each token's weighted sum */
    if (!rc) {
        memset(b->acc, 0, sizeof *b->acc * (size_t)(T * H));
        for (int64_t p = 0; p < b->npairs; p++) {
            const float wt = b->w[b->pair_t[p] * K + b->pair_j[p]];
            float *acc = b->acc + b->pair_t[p] * H;
            const uint16_t *y = b->yrecv + p * H;
            for (int64_t c = 0; c < H; c++) acc[c] += wt * bf16_value(y[c]);
        }
        for (int64_t i = 0; i < T * H; i++) out[i] = mx_f32_to_bf16(b->acc[i]);
    }
    free(count);
    return rc;
}

void moe_dnn_idle(moe_dnn *b)
{
    for (int le = 0; le < b->L; le++)
        if (b->up[le]) {
            bench_onednn_idle(b->up[le]);
            return;
        }
}

const char *moe_dnn_what(const moe_dnn *b) { return b->what[0] ? b->what : "oneDNN (no expert had rows)"; }

void moe_dnn_free(moe_dnn *b)
{
    if (!b) return;
    for (int le = 0; le < b->L && b->up; le++) bench_onednn_free(b->up[le]), bench_onednn_free(b->down[le]);
    free(b->up), free(b->down), free(b->xb), free(b->pair_t), free(b->pair_j), free(b->to_owner), free(b->from);
    free(b->n), free(b->sb), free(b->so), free(b->room), free(b->ro), free(b->got), free(b->back_room);
    free(b->back_off), free(b->send), free(b->recv), free(b->yback), free(b->yrecv), free(b->acc);
    free(b);
}
