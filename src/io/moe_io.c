/* The MoE op's files: sizes per rank, loads and saves, and its meta file. */
#include "io/moe_io.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "mx/mx.h"
#include "util/parse.h"

static const char *const ROUTE_NAMES[MOE_ROUTE_COUNT] = {"uniform", "skewed", "hot", "empty"};

const char *moe_io_route_name(moe_io_route r)
{
    return (unsigned)r < MOE_ROUTE_COUNT ? ROUTE_NAMES[r] : "?";
}

int moe_io_route_parse(const char *s, moe_io_route *out)
{
    for (int i = 0; i < MOE_ROUTE_COUNT; i++)
        if (!strcmp(s, ROUTE_NAMES[i])) {
            *out = (moe_io_route)i;
            return 0;
        }
    return -1;
}

int moe_io_shape_check(const moe_io_shape *s, a2amm_error *err)
{
    if (s->R < 1 || s->R > MOE_IO_MAX_R)
        return a2amm_fail(err, A2AMM_E_INVAL, "R must be 1 to %d (got %d)", MOE_IO_MAX_R, s->R);
    if (s->E < 1 || s->E % s->R || s->E / s->R > MOE_IO_MAX_LOCAL)
        return a2amm_fail(err, A2AMM_E_INVAL, "--experts must be a positive multiple of R, at most %d a rank: rank r "
                          "owns experts r*E/R .. (r+1)*E/R-1 (got E=%d, R=%d)", MOE_IO_MAX_LOCAL, s->E, s->R);
    if (s->H < 32 || s->H % 32 || s->I < 32 || s->I % 32)
        return a2amm_fail(err, A2AMM_E_INVAL, "H and I must be positive multiples of 32, whole MX blocks (got "
                          "H=%lld, I=%lld)", (long long)s->H, (long long)s->I);
    if (s->K < 1 || s->K > s->E || s->K > MOE_IO_MAX_TOPK)
        return a2amm_fail(err, A2AMM_E_INVAL, "--topk must be 1 to min(E, %d): an expert at most once a token "
                          "(got K=%d, E=%d)", MOE_IO_MAX_TOPK, s->K, s->E);
    const int64_t lim = INT64_C(1) << 40;
    if (s->T < 0 || s->T > lim || s->H > lim / 2 || s->I > lim / 2 || (s->T && s->H > lim / s->T) ||
        (int64_t)(s->E / s->R) * 2 > lim / s->I / s->H)
        return a2amm_fail(err, A2AMM_E_INVAL, "the shape is too large (T=%lld, H=%lld, I=%lld, E/R=%d)",
                          (long long)s->T, (long long)s->H, (long long)s->I, s->E / s->R);
    for (int r = 0; r < s->R; r++)
        if (s->tokens[r] < 0 || s->tokens[r] > s->T)
            return a2amm_fail(err, A2AMM_E_INVAL, "rank %d's tokens must be 0 to T=%lld (got %lld)", r,
                              (long long)s->T, (long long)s->tokens[r]);
    return A2AMM_OK;
}

const io_rank_file moe_io_inputs[MOE_IO_INPUTS] = {
    {"input", "input_x.bin", "x"},
    {"input", "input_scaleX.bin", "x's scales"},
    {"input", "input_topk_idx.bin", "top-k expert ids"},
    {"input", "input_topk_w.bin", "top-k weights"},
    {"input", "input_w13.bin", "W1/W3 (gate and up)"},
    {"input", "input_scaleW13.bin", "W1/W3's scales"},
    {"input", "input_w2.bin", "W2 (down)"},
    {"input", "input_scaleW2.bin", "W2's scales"},
};

void moe_io_rank_bytes(const moe_io_shape *s, int r, size_t b[MOE_IO_INPUTS])
{
    const size_t T = (size_t)s->tokens[r], H = (size_t)s->H, I = (size_t)s->I, L = (size_t)(s->E / s->R);
    const size_t K = (size_t)s->K;
    b[0] = T * H, b[1] = T * (size_t)moe_io_scale_row(s->H);
    b[2] = T * K * sizeof(int32_t), b[3] = T * K * sizeof(float);
    b[4] = L * 2 * I * H, b[5] = L * 2 * I * (size_t)moe_io_scale_row(s->H);
    b[6] = L * H * I, b[7] = L * H * (size_t)moe_io_scale_row(s->I);
}

/* The rank's arrays in the files' order. */
static void **rank_arrays(moe_io_rank *d, void **a)
{
    a[0] = &d->x, a[1] = &d->sx, a[2] = &d->idx, a[3] = &d->w;
    a[4] = &d->w13, a[5] = &d->s13, a[6] = &d->w2, a[7] = &d->s2;
    return a;
}

int moe_io_rank_alloc(const moe_io_shape *s, int r, moe_io_rank *d, a2amm_error *err)
{
    memset(d, 0, sizeof *d);
    d->T = s->tokens[r];
    size_t b[MOE_IO_INPUTS];
    void *a[MOE_IO_INPUTS];
    moe_io_rank_bytes(s, r, b);
    rank_arrays(d, a);
    for (int i = 0; i < MOE_IO_INPUTS; i++) {
        void *p = calloc(b[i] + 8, 1); /* + 8: never a zero-size allocation */
        if (!p) {
            moe_io_rank_free(d);
            return a2amm_fail(err, A2AMM_E_NOMEM, "rank %d: cannot allocate %zu bytes for %s", r, b[i],
                              moe_io_inputs[i].what);
        }
        memcpy(a[i], &p, sizeof p);
    }
    return A2AMM_OK;
}

void moe_io_rank_free(moe_io_rank *d)
{
    free(d->x), free(d->sx), free(d->idx), free(d->w), free(d->w13), free(d->s13), free(d->w2), free(d->s2);
    memset(d, 0, sizeof *d);
}

/* The address of array i of d. */
static void *array_of(const moe_io_rank *d, int i)
{
    void *a[MOE_IO_INPUTS], *p;
    rank_arrays((moe_io_rank *)d, a);
    memcpy(&p, a[i], sizeof p);
    return p;
}

int moe_io_rank_load(const char *dir, const moe_io_shape *s, int r, moe_io_rank *d, a2amm_error *err)
{
    size_t b[MOE_IO_INPUTS];
    moe_io_rank_bytes(s, r, b);
    for (int i = 0; i < MOE_IO_INPUTS; i++) {
        char path[IO_PATH_MAX];
        int rc = io_rank_path(path, sizeof path, dir, "input", r, moe_io_inputs[i].name, err);
        if (!rc) rc = io_read_exact(path, array_of(d, i), b[i], err);
        if (rc) {
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s", err->msg);
            return a2amm_fail(err, rc, "rank %d's %s (T_r = %lld tokens): %s", r, moe_io_inputs[i].what,
                              (long long)s->tokens[r], why);
        }
    }
    return A2AMM_OK;
}

int moe_io_rank_save(const char *dir, const moe_io_shape *s, int r, const moe_io_rank *d, a2amm_error *err)
{
    size_t b[MOE_IO_INPUTS];
    moe_io_rank_bytes(s, r, b);
    for (int i = 0; i < MOE_IO_INPUTS; i++) {
        char path[IO_PATH_MAX];
        int rc = io_rank_path(path, sizeof path, dir, "input", r, moe_io_inputs[i].name, err);
        if (!rc) rc = io_write_atomic(path, array_of(d, i), b[i], err);
        if (rc) return rc;
    }
    return A2AMM_OK;
}

/* ---- the meta file ---------------------------------------------------------------- */

enum { MM_OP, MM_T, MM_H, MM_I, MM_R, MM_E, MM_K, MM_TOKENS, MM_A, MM_B, MM_ROUTE, MM_SCALE, MM_SEED, MM_COUNT };
static const char *const MOE_KEYS[MM_COUNT] = {"op", "T", "H", "I", "R", "experts", "topk", "tokens", "a_type",
                                               "b_type", "route", "scale_mode", "seed"};
#define MOE_META_MAX_BYTES (4096 + 24 * MOE_IO_MAX_R)

int moe_io_meta_write(const char *dir, const moe_io_meta *m, a2amm_error *err)
{
    char path[IO_PATH_MAX];
    int rc = io_meta_path(path, sizeof path, dir, err);
    if (rc) return rc;
    char *text = malloc(MOE_META_MAX_BYTES);
    if (!text) return a2amm_fail(err, A2AMM_E_NOMEM, "out of memory");
    const moe_io_shape *s = &m->shape;
    size_t n = (size_t)snprintf(text, MOE_META_MAX_BYTES, "a2amm-meta 1\nop moe\nT %lld\nH %lld\nI %lld\nR %d\n"
                                "experts %d\ntopk %d\ntokens ", (long long)s->T, (long long)s->H, (long long)s->I,
                                s->R, s->E, s->K);
    for (int r = 0; r < s->R; r++)
        n += (size_t)snprintf(text + n, MOE_META_MAX_BYTES - n, "%s%lld", r ? "," : "", (long long)s->tokens[r]);
    n += (size_t)snprintf(text + n, MOE_META_MAX_BYTES - n,
                          "\na_type %s\nb_type %s\nroute %s\nscale_mode %s\nseed %" PRIu64 "\n",
                          a2amm_fp8_type_name(s->a_type), a2amm_fp8_type_name(s->b_type),
                          moe_io_route_name(m->route), m->scale_mode, m->seed);
    rc = io_write_atomic(path, text, n, err);
    free(text);
    return rc;
}

/* "T0,T1,..." into s->tokens (s->R of them, R seen before or after: counted into *count). */
static const char *parse_tokens(const char *v, moe_io_shape *s, int *count)
{
    int n = 0;
    for (const char *p = v;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        uint64_t u;
        if (n == MOE_IO_MAX_R) return "more token counts than the most ranks a data set has (256)";
        if (len == 0 || parse_u64_n(p, len, &u) != PARSE_OK || u > (UINT64_C(1) << 40))
            return "tokens must be the ranks' token counts, decimal numbers separated by commas";
        s->tokens[n++] = (int64_t)u;
        if (!comma) break;
        p = comma + 1;
    }
    *count = n;
    return NULL;
}

static const char *meta_line(const char *line, size_t len, moe_io_meta *m, unsigned *seen, int *ntok)
{
    const char *sp = memchr(line, ' ', len);
    if (!sp) return "expected 'key value' (one space between)";
    size_t klen = (size_t)(sp - line), vlen = len - klen - 1;
    if (vlen == 0 || memchr(sp + 1, ' ', vlen)) return "expected 'key value' (one space between)";
    int k = 0;
    while (k < MM_COUNT && !(strlen(MOE_KEYS[k]) == klen && !memcmp(line, MOE_KEYS[k], klen))) k++;
    if (k == MM_COUNT && klen == 1 && (line[0] == 'M' || line[0] == 'N'))
        return "the data is for a matmul op, not --op moe (its meta file has M, K and N: run and verify it "
               "without --op moe, or gen --op moe into another folder)";
    if (k == MM_COUNT)
        return "unknown key (a MoE meta file has op, T, H, I, R, experts, topk, tokens, a_type, b_type, route, "
               "scale_mode and seed)";
    if (*seen & (1u << k)) return "the key appears twice";
    *seen |= 1u << k;
    char v[24 * MOE_IO_MAX_R];
    if (vlen >= sizeof v) return "the value is too long";
    memcpy(v, sp + 1, vlen);
    v[vlen] = '\0';
    uint64_t u = 0;
    moe_io_shape *s = &m->shape;
    switch (k) {
    case MM_OP:
        if (!strcmp(v, "alltoall-matmul") || !strcmp(v, "matmul-alltoall"))
            return "the data is for a matmul op, not --op moe (its meta file says op alltoall-matmul or "
                   "matmul-alltoall: run and verify it without --op moe)";
        return strcmp(v, "moe") ? "op must be moe in a MoE meta file" : NULL;
    case MM_T: case MM_H: case MM_I: case MM_R: case MM_E: case MM_K:
        if (parse_u64(v, &u) != PARSE_OK || u > (UINT64_C(1) << 40) || (u == 0 && k != MM_T))
            return "the value must be a whole number (at least 1; T at least 0) in decimal digits";
        if (k == MM_T) s->T = (int64_t)u;
        else if (k == MM_H) s->H = (int64_t)u;
        else if (k == MM_I) s->I = (int64_t)u;
        else if (u > (1u << 20)) return "the value is too large";
        else if (k == MM_R) s->R = (int)u;
        else if (k == MM_E) s->E = (int)u;
        else s->K = (int)u;
        return NULL;
    case MM_TOKENS: return parse_tokens(v, s, ntok);
    case MM_A: case MM_B:
        if (strcmp(v, "e4m3") && strcmp(v, "e5m2")) return "the type must be e4m3 or e5m2";
        a2amm_fp8_type_parse(v, k == MM_A ? &s->a_type : &s->b_type, NULL);
        return NULL;
    case MM_ROUTE: return moe_io_route_parse(v, &m->route) ? "route must be uniform, skewed, hot or empty" : NULL;
    case MM_SCALE: {
        mx_scale_mode sm;
        if (mx_scale_mode_parse(v, &sm)) return "scale_mode must be floor or rceil";
        snprintf(m->scale_mode, sizeof m->scale_mode, "%s", mx_scale_mode_name(sm));
        return NULL;
    }
    default:
        return parse_u64(v, &m->seed) != PARSE_OK ? "seed must be a whole number in decimal digits" : NULL;
    }
}

int moe_io_meta_parse(const char *text, size_t len, const char *path, moe_io_meta *m, a2amm_error *err)
{
    memset(m, 0, sizeof *m);
    unsigned seen = 0;
    int ntok = 0;
    size_t at = 0;
    for (int lineno = 1; at < len; lineno++) {
        const char *line = text + at, *nl = memchr(line, '\n', len - at);
        size_t ll = nl ? (size_t)(nl - line) : len - at;
        at += ll + (nl ? 1 : 0);
        const char *why = io_text_line_problem(line, ll);
        if (!why && lineno == 1) why = ll == 12 && !memcmp(line, "a2amm-meta 1", 12) ? NULL : "expected 'a2amm-meta 1'";
        else if (!why) why = meta_line(line, ll, m, &seen, &ntok);
        if (why) return io_meta_line_fail(err, path, lineno, why, line, ll);
    }
    for (int k = 0; k < MM_COUNT; k++)
        if (!(seen & (1u << k)))
            return a2amm_fail(err, A2AMM_E_FORMAT, "%s: incomplete: no '%s' line (gen --op moe writes op, T, H, I, "
                              "R, experts, topk, tokens, a_type, b_type, route, scale_mode and seed)", path,
                              MOE_KEYS[k]);
    if (ntok != m->shape.R)
        return a2amm_fail(err, A2AMM_E_FORMAT, "%s: tokens lists %d counts, R is %d: one a rank", path, ntok,
                          m->shape.R);
    a2amm_error why = {0, ""};
    if (moe_io_shape_check(&m->shape, &why))
        return a2amm_fail(err, A2AMM_E_FORMAT, "%s: the shape breaks a rule: %s", path, why.msg);
    return A2AMM_OK;
}

/* The meta file's text (at most MOE_META_MAX_BYTES) into a new buffer; its length in *len. */
static char *read_meta(const char *dir, char *path, size_t *len, a2amm_error *err)
{
    if (io_meta_path(path, IO_PATH_MAX, dir, err)) return NULL;
    struct stat st;
    int fd = io_open_regular(path, &st, err);
    if (fd < 0) return NULL;
    char *text = malloc(MOE_META_MAX_BYTES + 1);
    ssize_t n = text ? read(fd, text, MOE_META_MAX_BYTES + 1) : -1;
    int e = errno;
    close(fd);
    if (n < 0 || n > MOE_META_MAX_BYTES) {
        if (!text) a2amm_fail(err, A2AMM_E_NOMEM, "out of memory");
        else if (n < 0) a2amm_fail(err, A2AMM_E_IO, "%s: cannot read: %s", path, strerror(e));
        else a2amm_fail(err, A2AMM_E_FORMAT, "%s: more than %d bytes, more than a meta file has", path,
                        MOE_META_MAX_BYTES);
        free(text);
        return NULL;
    }
    *len = (size_t)n;
    return text;
}

int moe_io_meta_read(const char *dir, moe_io_meta *m, a2amm_error *err)
{
    char path[IO_PATH_MAX];
    size_t len = 0;
    char *text = read_meta(dir, path, &len, err);
    if (!text) return err->code ? err->code : A2AMM_E_IO;
    int rc = moe_io_meta_parse(text, len, path, m, err);
    free(text);
    return rc;
}

int moe_io_dir_is_moe(const char *dir)
{
    char path[IO_PATH_MAX];
    size_t len = 0;
    char *text = read_meta(dir, path, &len, NULL);
    if (!text) return 0;
    int moe = 0;
    for (size_t at = 0; at < len && !moe;) {
        const char *line = text + at, *nl = memchr(line, '\n', len - at);
        size_t ll = nl ? (size_t)(nl - line) : len - at;
        moe = ll == 6 && !memcmp(line, "op moe", 6);
        at += ll + 1;
    }
    free(text);
    return moe;
}
