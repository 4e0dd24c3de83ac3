/*
 * Sequence-parallel (Ulysses) attention from a2amm's two ops: one attention
 * block over R ranks. The sequence has S = R*M tokens of hidden size
 * H = heads * d; rank r starts with tokens r*M .. r*M+M-1 and ends with the
 * same tokens after the block:
 *
 *   1. QKV projection + AllToAll (the matmul-alltoall op): my tokens [M, H]
 *      x W_qkv [H, 3H]; column block j of the result goes to rank j, so rank
 *      j gets Q, K and V of its heads (j*heads/R ..) for all S tokens.
 *   2. Attention on those heads, in fp32, CAUSAL (token i attends to tokens
 *      0..i of the whole sequence, as in a decoder).
 *   3. Its output quantized to MXFP8 (a2amm_mx_quantize_f32, blocks of 32
 *      along each row: H/R must be a multiple of 32).
 *   4. AllToAll + output projection (the alltoall-matmul op): every rank's
 *      rows for my tokens, side by side by heads, x W_o [H, H] -> my [M, H].
 *
 * Every rank then computes the same block in one process, with no op and
 * no AllToAll (a2amm_matmul for both projections, on the weights in their
 * plain order), from the same MX data, and compares its own M rows. Steps
 * 1-3 give the same bits there (the op's values are a2amm_matmul's bits;
 * the attention is the same code on the same numbers); step 4 does not
 * quite: the op sums K starting at the rank's own block of K, a2amm_matmul
 * from 0, so the fp32 sums differ in their last bits and a bf16 result may
 * round the other way. The check allows 2 bf16 ulps, or an absolute 2^-12
 * of the largest |value| of the rank's result (a sum that cancels to near
 * zero has tiny ulps but the fp32 error of its large terms), and prints the
 * worst difference. The shapes are any where heads is divisible by R and
 * H/R is a multiple of 32.
 *
 *   cc sequence_parallel.c $(pkg-config --cflags --libs a2amm) -lm -o sequence_parallel
 *   ./sequence_parallel [R [M [heads [d]]]]          (defaults: 4 64 8 64)
 *
 * The same ranks as an MPI job (R is the job's size: give the same or leave it out):
 *
 *   mpicc -DWITH_MPI sequence_parallel.c $(pkg-config --cflags --libs a2amm-mpi) -lm -o sequence_parallel_mpi
 *   mpirun --allow-run-as-root --oversubscribe -np 4 ./sequence_parallel_mpi [R [M [heads [d]]]]
 *
 * Rank 0 prints each step's time on every rank (an op's includes waiting
 * for the slowest rank to arrive), the max over ranks and each rank's
 * check, then "sequence_parallel: OK"; exit 0. A bad argument exits 2, a
 * failed run 1 (naming the rank).
 */
#define _POSIX_C_SOURCE 200809L
#include <a2amm.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FP8 A2AMM_E4M3 /* every MX array here: activations and weights */

typedef struct block_shape {
    int R;      /* ranks */
    int64_t M;  /* tokens per rank: rank r holds tokens r*M .. r*M+M-1 */
    int64_t heads, d;
    int64_t S;  /* the sequence: R*M tokens */
    int64_t H;  /* hidden size: heads * d */
    int64_t Hr; /* the hidden columns of one rank's heads: H / R */
} block_shape;

/* ---- Arguments ------------------------------------------------------------ */

/* text as a whole number from 1 to max into *value; else why not, -1. */
static int parse_count(const char *text, const char *name, long long max, int64_t *value, char *why, size_t why_size)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (!isdigit((unsigned char)text[0]) || *end || errno || v < 1 || v > max) {
        snprintf(why, why_size, "%s must be a whole number from 1 to %lld (got '%s')", name, max, text);
        return -1;
    }
    *value = v;
    return 0;
}

/* The shape from [R [M [heads [d]]]]; job_size > 0 under MPI (R is the job's
 * size). 0, or -1 with why an argument breaks a rule. */
static int shape_from_args(int argc, char **argv, int job_size, block_shape *s, char *why, size_t why_size)
{
    static const char *const names[4] = {"R", "M", "heads", "d"};
    static const long long max[4] = {64, 1 << 16, 1024, 1024};
    int64_t v[4] = {job_size > 0 ? job_size : 4, 64, 8, 64};
    if (argc > 5) {
        snprintf(why, why_size, "usage: sequence_parallel [R [M [heads [d]]]] (defaults: 4 64 8 64)");
        return -1;
    }
    for (int i = 1; i < argc; i++)
        if (parse_count(argv[i], names[i - 1], max[i - 1], &v[i - 1], why, why_size)) return -1;
    *s = (block_shape){(int)v[0], v[1], v[2], v[3], v[0] * v[1], v[2] * v[3], v[2] * v[3] / v[0]};
    if (job_size > 0 && s->R != job_size)
        snprintf(why, why_size, "R = %d, but the job has %d ranks: run it with mpirun -np %d, or leave R out", s->R,
                 job_size, s->R);
    else if (s->heads % s->R)
        snprintf(why, why_size, "heads (%lld) must be divisible by R (%d): each rank takes heads/R whole heads",
                 (long long)s->heads, s->R);
    else if (s->Hr % 32)
        snprintf(why, why_size,
                 "H/R = heads*d/R = %lld must be a multiple of 32: each rank's attention output is quantized in MX "
                 "blocks of 32 along its rows (try d = 32 or 64)",
                 (long long)s->Hr);
    else
        return 0;
    return -1;
}

/* ---- Data ----------------------------------------------------------------- */

static int fail(a2amm_error *err, int code, const char *what)
{
    err->code = code;
    snprintf(err->msg, sizeof err->msg, "%s", what);
    return code;
}

/* A deterministic value in [-1, 1): element i of array `stream` (splitmix64). */
static float pseudo_random(uint64_t stream, uint64_t i)
{
    uint64_t h = stream * 0x9E3779B97F4A7C15ull + i * 0xD1B54A32D192ED03ull;
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    h ^= h >> 31;
    return (float)((double)(h >> 11) / 4503599627370496.0 - 1.0);
}
enum { INPUT = 1, W_QKV = 2, W_O = 3 }; /* the streams */

/* MXFP8 rows as the ops and a2amm_matmul take them: codes [rows, cols], one
 * E8M0 scale per 32 values of a row, scales [rows, lds], lds = 2*ceil(cols/64)
 * (the ops' layout: padded to an even count, the pad zero). */
typedef struct mx_rows {
    int64_t rows, cols, lds;
    uint8_t *codes, *scales;
} mx_rows;

static int mx_alloc(mx_rows *q, int64_t rows, int64_t cols, a2amm_error *err)
{
    q->rows = rows, q->cols = cols, q->lds = 2 * ((cols + 63) / 64);
    q->codes = malloc((size_t)(rows * cols));
    q->scales = calloc((size_t)(rows * q->lds), 1);
    return q->codes && q->scales ? A2AMM_OK : fail(err, A2AMM_E_NOMEM, "out of memory for MX rows");
}

static void mx_free(mx_rows *q) { free(q->codes), free(q->scales); }

/* x [rows, cols] fp32 (row stride ldx) -> q, made by mx_alloc. */
static int mx_quantize(const float *x, int64_t ldx, mx_rows *q, a2amm_error *err)
{
    return a2amm_mx_quantize_f32(x, q->rows, q->cols, ldx, FP8, A2AMM_SCALE_RCEIL, q->codes, q->cols, q->scales, q->lds,
                                 err);
}

/* Row `row` of from -> row `to_row` of to (codes and scales: MX blocks run along rows). */
static void mx_copy_row(const mx_rows *from, int64_t row, mx_rows *to, int64_t to_row)
{
    memcpy(to->codes + to_row * to->cols, from->codes + row * from->cols, (size_t)from->cols);
    memcpy(to->scales + to_row * to->lds, from->scales + row * from->lds, (size_t)from->lds);
}

/* The hidden states of `tokens` tokens from first_token on, [tokens, H] MXFP8. */
static int make_input(const block_shape *s, int64_t first_token, int64_t tokens, mx_rows *x, a2amm_error *err)
{
    float *f = malloc(sizeof(float) * (size_t)(tokens * s->H));
    int rc = f ? mx_alloc(x, tokens, s->H, err) : fail(err, A2AMM_E_NOMEM, "out of memory for the input");
    for (int64_t i = 0; !rc && i < tokens * s->H; i++) f[i] = pseudo_random(INPUT, (uint64_t)(first_token * s->H + i));
    if (!rc) rc = mx_quantize(f, s->H, x, err);
    free(f);
    return rc;
}

/* [rows, H] weights, B transposed as a2amm takes it (one row per output
 * feature, MX blocks along the H input features), scaled by 1/sqrt(H). */
static int make_weight(const block_shape *s, int stream, int64_t rows, mx_rows *w, a2amm_error *err)
{
    float *f = malloc(sizeof(float) * (size_t)(rows * s->H));
    int rc = f ? mx_alloc(w, rows, s->H, err) : fail(err, A2AMM_E_NOMEM, "out of memory for the weights");
    for (int64_t i = 0; !rc && i < rows * s->H; i++)
        f[i] = pseudo_random((uint64_t)stream, (uint64_t)i) / sqrtf((float)s->H);
    if (!rc) rc = mx_quantize(f, s->H, w, err);
    free(f);
    return rc;
}

/* The block's weights, the same on every rank, in their plain order:
 *   wqkv [3H, H]: row part*H + h*d + e is feature e of head h's Q (part 0), K (1) or V (2)
 *   wo   [H, H]:  row n is output feature n; its column h*d + e reads feature e of head h */
static int make_weights(const block_shape *s, mx_rows *wqkv, mx_rows *wo, a2amm_error *err)
{
    int rc = make_weight(s, W_QKV, 3 * s->H, wqkv, err);
    return rc ? rc : make_weight(s, W_O, s->H, wo, err);
}

/* wqkv in the order the matmul-alltoall op wants: column block j of its
 * result (rows j*3Hr .. of its B) goes to rank j, so block j holds the Q, K
 * and V rows of rank j's heads: row (3j + part)*Hr + c of the op's B is row
 * part*H + j*Hr + c of wqkv. */
static void qkv_rows_by_rank(const block_shape *s, const mx_rows *wqkv, mx_rows *by_rank)
{
    for (int j = 0; j < s->R; j++)
        for (int part = 0; part < 3; part++)
            for (int64_t c = 0; c < s->Hr; c++)
                mx_copy_row(wqkv, part * s->H + j * s->Hr + c, by_rank, (3 * j + part) * s->Hr + c);
}

/* ---- Attention (plain C, fp32) -------------------------------------------- */

static float bf16_value(uint16_t x)
{
    uint32_t u = (uint32_t)x << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void bf16_to_f32(const uint16_t *x, int64_t n, float *y)
{
    for (int64_t i = 0; i < n; i++) y[i] = bf16_value(x[i]);
}

/* Causal attention of one head over S tokens: token i attends to tokens
 * 0..i. q, k and v are [S, d] with row stride ld; out [S, d] with row stride
 * ldo; p is scratch for S scores. */
static void attend_head(const float *q, const float *k, const float *v, int64_t ld, int64_t S, int64_t d, float *out,
                        int64_t ldo, float *p)
{
    float scale = 1.0f / sqrtf((float)d);
    for (int64_t i = 0; i < S; i++) {
        float top = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i; j++) {
            float dot = 0;
            for (int64_t e = 0; e < d; e++) dot += q[i * ld + e] * k[j * ld + e];
            p[j] = dot * scale;
            top = fmaxf(top, p[j]);
        }
        for (int64_t j = 0; j <= i; j++) sum += p[j] = expf(p[j] - top);
        float *o = out + i * ldo;
        for (int64_t e = 0; e < d; e++) o[e] = 0;
        for (int64_t j = 0; j <= i; j++)
            for (int64_t e = 0; e < d; e++) o[e] += p[j] * v[j * ld + e];
        for (int64_t e = 0; e < d; e++) o[e] /= sum;
    }
}

/* ---- One rank's block ----------------------------------------------------- */

enum { STEP_QKV, STEP_ATTENTION, STEP_QUANTIZE, STEP_PROJ, STEPS };

typedef struct rank_buffers {
    mx_rows x;       /* [M, H]: my tokens' hidden states, MXFP8 */
    uint16_t *qkv;   /* [S, 3Hr] bf16 from the QKV op: rows i*M.. are rank i's tokens (so row t is
                        token t); columns: Q of my heads (head h at h*d), then K, then V */
    float *qkv_f32;  /* the same in fp32 */
    float *attn;     /* [S, Hr] fp32: my heads' attention output, head h at columns h*d */
    mx_rows attn_mx; /* the same in MXFP8: the projection op's A_r, block j (rows j*M..) for rank j */
    uint16_t *out;   /* [M, H] bf16: my tokens after the block */
    float *scores;   /* [S] scratch */
} rank_buffers;

static int buffers_make(const block_shape *s, int me, rank_buffers *b, a2amm_error *err)
{
    b->qkv = malloc(sizeof(uint16_t) * (size_t)(s->S * 3 * s->Hr));
    b->qkv_f32 = malloc(sizeof(float) * (size_t)(s->S * 3 * s->Hr));
    b->attn = malloc(sizeof(float) * (size_t)(s->S * s->Hr));
    b->out = malloc(sizeof(uint16_t) * (size_t)(s->M * s->H));
    b->scores = malloc(sizeof(float) * (size_t)s->S);
    if (!b->qkv || !b->qkv_f32 || !b->attn || !b->out || !b->scores)
        return fail(err, A2AMM_E_NOMEM, "out of memory for the rank's buffers");
    int rc = make_input(s, me * s->M, s->M, &b->x, err);
    return rc ? rc : mx_alloc(&b->attn_mx, s->S, s->Hr, err);
}

static void buffers_free(rank_buffers *b)
{
    mx_free(&b->x), mx_free(&b->attn_mx);
    free(b->qkv), free(b->qkv_f32), free(b->attn), free(b->out), free(b->scores);
}

/* The two ops' configs: the same on every rank (they are shared). */
static a2amm_op_config qkv_config(const block_shape *s)
{
    a2amm_op_config c = A2AMM_OP_CONFIG_INIT;
    c.kind = A2AMM_OP_MATMUL_ALLTOALL; /* X_r [M, H] x B [H, 3H], column block j to rank j */
    c.max_m = s->M, c.k = s->H, c.n = 3 * s->H, c.a_type = FP8, c.b_type = FP8;
    c.path = A2AMM_PATH_PUT; /* the path every transport has (MPI cannot read another rank's memory) */
    return c;
}

static a2amm_op_config proj_config(const block_shape *s)
{
    a2amm_op_config c;
    a2amm_op_config_init(&c);
    /* A_r = my heads' attention output [S, Hr]: row block j (rank j's tokens) goes to rank j, which
     * lays the blocks it receives side by side by source, rank i's heads at columns i*Hr..: head h
     * at columns h*d, the plain order of wo's columns. Then x B [H, H]. */
    c.kind = A2AMM_OP_ALLTOALL_MATMUL;
    c.max_m = s->M, c.k = s->H, c.n = s->H, c.a_type = FP8, c.b_type = FP8;
    c.path = A2AMM_PATH_PUT;
    return c;
}

typedef struct block_ops {
    a2amm_op *qkv, *proj;
} block_ops;

/* Collective: both ops made, their weights set. */
static int ops_make(a2amm_comm *comm, const block_shape *s, const mx_rows *wqkv, const mx_rows *wo, block_ops *ops,
                    a2amm_error *err)
{
    a2amm_op_config qc = qkv_config(s), pc = proj_config(s);
    mx_rows by_rank = {0};
    int rc = mx_alloc(&by_rank, 3 * s->H, s->H, err);
    if (!rc) qkv_rows_by_rank(s, wqkv, &by_rank);
    if (!rc) rc = a2amm_op_create(comm, &qc, &ops->qkv, err);
    if (!rc) rc = a2amm_op_create(comm, &pc, &ops->proj, err);
    if (!rc) rc = a2amm_op_set_weights(ops->qkv, by_rank.codes, by_rank.scales, by_rank.lds, err);
    if (!rc) rc = a2amm_op_set_weights(ops->proj, wo->codes, wo->scales, wo->lds, err);
    mx_free(&by_rank);
    return rc;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Collective: the block on this rank, each step timed into ms. */
static int run_block(const block_shape *s, const block_ops *ops, rank_buffers *b, double ms[STEPS], a2amm_error *err)
{
    double t0 = now_ms();
    int rc = a2amm_op_run(ops->qkv, s->M, b->x.codes, b->x.scales, b->qkv, err);
    double t1 = now_ms();
    if (rc) return rc;
    bf16_to_f32(b->qkv, s->S * 3 * s->Hr, b->qkv_f32);
    for (int64_t h = 0; h < s->Hr / s->d; h++) {
        const float *q = b->qkv_f32 + h * s->d, *k = q + s->Hr, *v = k + s->Hr;
        attend_head(q, k, v, 3 * s->Hr, s->S, s->d, b->attn + h * s->d, s->Hr, b->scores);
    }
    double t2 = now_ms();
    rc = mx_quantize(b->attn, s->Hr, &b->attn_mx, err);
    double t3 = now_ms();
    if (!rc) rc = a2amm_op_run(ops->proj, s->M, b->attn_mx.codes, b->attn_mx.scales, b->out, err);
    double t4 = now_ms();
    ms[STEP_QKV] = t1 - t0, ms[STEP_ATTENTION] = t2 - t1, ms[STEP_QUANTIZE] = t3 - t2, ms[STEP_PROJ] = t4 - t3;
    return rc;
}

/* ---- The check: the block in one process ---------------------------------- */

/* out [m, w->rows] bf16 = a x w^T, with a2amm_matmul on one thread. */
static int matmul(const mx_rows *a, const mx_rows *w, uint16_t *out, a2amm_error *err)
{
    a2amm_weights *prepared = NULL;
    int rc = a2amm_weights_create(w->codes, w->scales, w->rows, w->cols, w->lds, FP8, 1, &prepared, err);
    if (!rc) rc = a2amm_matmul(prepared, a->codes, a->cols, a->scales, a->lds, a->rows, FP8, out, w->rows, 1, err);
    a2amm_weights_destroy(prepared);
    return rc;
}

/* The whole block without ops or AllToAll: out [S, H] bf16, row t token t. */
static int reference_block(const block_shape *s, const mx_rows *wqkv, const mx_rows *wo, uint16_t *out,
                           a2amm_error *err)
{
    mx_rows x = {0}, attn_mx = {0};
    uint16_t *y = malloc(sizeof(uint16_t) * (size_t)(s->S * 3 * s->H)); /* [S, 3H]: Q | K | V of all heads */
    float *yf = malloc(sizeof(float) * (size_t)(s->S * 3 * s->H));        /* the same in fp32 */
    float *attn = malloc(sizeof(float) * (size_t)(s->S * s->H));           /* [S, H]: head h at columns h*d */
    float *p = malloc(sizeof(float) * (size_t)s->S);
    int rc = y && yf && attn && p ? A2AMM_OK : fail(err, A2AMM_E_NOMEM, "out of memory for the check");
    if (!rc) rc = make_input(s, 0, s->S, &x, err);
    if (!rc) rc = matmul(&x, wqkv, y, err);
    if (!rc) bf16_to_f32(y, s->S * 3 * s->H, yf);
    for (int64_t h = 0; !rc && h < s->heads; h++) {
        const float *q = yf + h * s->d, *k = q + s->H, *v = k + s->H;
        attend_head(q, k, v, 3 * s->H, s->S, s->d, attn + h * s->d, s->H, p);
    }
    if (!rc) rc = mx_alloc(&attn_mx, s->S, s->H, err);
    if (!rc) rc = mx_quantize(attn, s->H, &attn_mx, err);
    if (!rc) rc = matmul(&attn_mx, wo, out, err);
    mx_free(&x), mx_free(&attn_mx);
    free(y), free(yf), free(attn), free(p);
    return rc;
}

/* What each rank tells rank 0: its step times and its check. */
typedef struct rank_report {
    double ms[STEPS];
    int64_t checked, off, worst_ulps;
    double worst_abs;
} rank_report;

/* The distance of two bf16 values in ulps (their bits as ordered integers). */
static int64_t bf16_ulps(uint16_t a, uint16_t b)
{
    int64_t ka = a & 0x8000 ? -(int64_t)(a & 0x7FFF) : a, kb = b & 0x8000 ? -(int64_t)(b & 0x7FFF) : b;
    return ka > kb ? ka - kb : kb - ka;
}

/* got [n] against want [n], into r; off: beyond 2 ulps and 2^-12 of max |want|. */
static void compare(const uint16_t *got, const uint16_t *want, int64_t n, rank_report *r)
{
    float top = 0;
    for (int64_t i = 0; i < n; i++) top = fmaxf(top, fabsf(bf16_value(want[i])));
    for (int64_t i = 0; i < n; i++) {
        int64_t ulps = bf16_ulps(got[i], want[i]);
        double diff = fabs((double)bf16_value(got[i]) - (double)bf16_value(want[i]));
        r->off += isnan(diff) || (ulps > 2 && diff > ldexp(top, -12));
        if (ulps > r->worst_ulps) r->worst_ulps = ulps;
        if (diff > r->worst_abs || isnan(diff)) r->worst_abs = diff;
    }
    r->checked = n;
}

/* Collective: every rank's report to every rank (an AllToAll of the same block). */
static int gather_reports(a2amm_comm *comm, const rank_report *mine, rank_report *all, a2amm_error *err)
{
    int R = a2amm_comm_size(comm);
    rank_report *send = malloc(sizeof *send * (size_t)R);
    if (!send) return fail(err, A2AMM_E_NOMEM, "out of memory for the reports");
    for (int j = 0; j < R; j++) send[j] = *mine;
    int rc = a2amm_comm_alltoall(comm, send, all, sizeof *mine, 60, err);
    free(send);
    return rc;
}

static void print_reports(const block_shape *s, const rank_report *all)
{
    const char *kernel = "?";
    a2amm_kernel(&kernel, NULL);
    printf("sequence_parallel: R = %d rank%s x M = %lld tokens (S = %lld), %lld heads x d = %lld (H = %lld), causal "
           "attention, MXFP8 %s, kernel %s\n",
           s->R, s->R > 1 ? "s" : "", (long long)s->M, (long long)s->S, (long long)s->heads, (long long)s->d,
           (long long)s->H, a2amm_fp8_type_name(FP8), kernel);
    printf("  rank  QKV+AllToAll   attention    quantize  AllToAll+proj  (ms)   result vs one process\n");
    double worst[STEPS] = {0};
    for (int r = 0; r < s->R; r++) {
        const rank_report *p = &all[r];
        printf("  %4d  %12.3f  %10.3f  %10.3f  %13.3f         %lld of %lld values off, worst %lld ulp (%.3g)\n", r,
               p->ms[0], p->ms[1], p->ms[2], p->ms[3], (long long)p->off, (long long)p->checked,
               (long long)p->worst_ulps, p->worst_abs);
        for (int k = 0; k < STEPS; k++) worst[k] = fmax(worst[k], p->ms[k]);
    }
    printf("   max  %12.3f  %10.3f  %10.3f  %13.3f\n", worst[0], worst[1], worst[2], worst[3]);
    fflush(stdout);
}

/* ---- The rank's whole run --------------------------------------------------- */

static int sequence_parallel_rank(a2amm_comm *comm, const block_shape *s, a2amm_error *err)
{
    int me = a2amm_comm_rank(comm);
    mx_rows wqkv = {0}, wo = {0};
    rank_buffers b = {0};
    block_ops ops = {0};
    rank_report mine = {0};
    uint16_t *want = malloc(sizeof(uint16_t) * (size_t)(s->S * s->H));
    rank_report *all = calloc((size_t)s->R, sizeof *all);
    int rc = want && all ? make_weights(s, &wqkv, &wo, err) : fail(err, A2AMM_E_NOMEM, "out of memory for the check");
    if (!rc) rc = buffers_make(s, me, &b, err);
    if (!rc) rc = ops_make(comm, s, &wqkv, &wo, &ops, err);
    /* twice: the first pass warms up (the ops' memory is touched on first use), the second is timed */
    for (int pass = 0; !rc && pass < 2; pass++) rc = run_block(s, &ops, &b, mine.ms, err);
    if (!rc) rc = reference_block(s, &wqkv, &wo, want, err);
    if (!rc) compare(b.out, want + me * s->M * s->H, s->M * s->H, &mine);
    if (!rc) rc = gather_reports(comm, &mine, all, err);
    if (!rc && me == 0) print_reports(s, all);
    if (!rc && mine.off) {
        snprintf(err->msg, sizeof err->msg, "%lld of %lld values of its result are off the check (worst %lld ulp)",
                 (long long)mine.off, (long long)mine.checked, (long long)mine.worst_ulps);
        rc = err->code = A2AMM_E_MISMATCH;
    }
    a2amm_op_destroy(ops.qkv), a2amm_op_destroy(ops.proj);
    buffers_free(&b), mx_free(&wqkv), mx_free(&wo);
    free(want), free(all);
    return rc;
}

/* The symmetric memory a rank needs: both ops, and room for the reports' AllToAll. */
static int heap_bytes(const block_shape *s, size_t *bytes, a2amm_error *err)
{
    a2amm_op_config qc = qkv_config(s), pc = proj_config(s);
    size_t q = 0, p = 0;
    int rc = a2amm_op_heap_bytes(&qc, s->R, &q, err);
    if (!rc) rc = a2amm_op_heap_bytes(&pc, s->R, &p, err);
    *bytes = q + p + ((size_t)1 << 20);
    return rc;
}

static void print_ok(void)
{
    printf("sequence_parallel: OK (a2amm %s, built with the header of %s)\n", a2amm_version(), A2AMM_VERSION_STRING);
}

#ifdef WITH_MPI
#include <a2amm_mpi.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int size = 0, me = 0, all = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    block_shape s;
    char why[256];
    if (shape_from_args(argc, argv, size, &s, why, sizeof why)) { /* the same on every rank: they all stop */
        if (me == 0) fprintf(stderr, "sequence_parallel: %s\n", why);
        MPI_Finalize();
        return 2;
    }
    a2amm_comm *comm = NULL;
    a2amm_error err = {0, ""};
    size_t bytes = 0;
    int rc = heap_bytes(&s, &bytes, &err);
    if (!rc) rc = a2amm_mpi_comm_create(MPI_COMM_WORLD, bytes, &comm, &err);
    if (!rc) rc = sequence_parallel_rank(comm, &s, &err);
    if (rc && strncmp(err.msg, "rank ", 5) != 0) /* the example's own message; the library's name the rank */
        fprintf(stderr, "sequence_parallel: rank %d: %s\n", me, err.msg);
    else if (rc)
        fprintf(stderr, "sequence_parallel: %s\n", err.msg);
    MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    a2amm_comm_destroy(comm);
    MPI_Finalize();
    if (rc || all) return 1;
    if (me == 0) print_ok();
    return 0;
}
#else
static int rank_main(a2amm_comm *comm, void *arg)
{
    a2amm_error err = {0, ""};
    int rc = sequence_parallel_rank(comm, arg, &err);
    /* this rank's own failure is the one a2amm_launch reports, its message prefixed "rank N: " (a
     * failure the library already recorded keeps its first message) */
    if (rc && rc != A2AMM_E_PEER) a2amm_comm_fail(comm, rc, err.msg);
    return rc;
}

int main(int argc, char **argv)
{
    block_shape s;
    char why[256];
    if (shape_from_args(argc, argv, 0, &s, why, sizeof why)) {
        fprintf(stderr, "sequence_parallel: %s\n", why);
        return 2;
    }
    a2amm_error err = {0, ""};
    a2amm_launch_options options = A2AMM_LAUNCH_OPTIONS_INIT;
    int rc = heap_bytes(&s, &options.heap_bytes, &err);
    if (!rc) rc = a2amm_launch(s.R, rank_main, &s, &options, &err);
    if (rc) {
        fprintf(stderr, "sequence_parallel: %s\n", err.msg);
        return 1;
    }
    print_ok();
    return 0;
}
#endif
