/*
 * The public API's single-process parts: MX quantization and
 * dequantization of the caller's fp32 and bf16 data (FLOOR and RCEIL,
 * strided rows, partial blocks, NaN and zero blocks, errors), and the
 * single-rank matmul with prepared weights (against sums in double, the
 * same bits for any thread count, errors); the small calls' NULLs and
 * out-of-range types; the calls the header calls thread-safe, on several
 * threads at once.
 */
#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "a2amm.h"
#include "check.h"
#include "common/shape.h"
#include "mx/mx.h"

static float randn(void)
{
    /* Irwin-Hall: good enough for test data, no libm transcendental */
    double s = 0;
    for (int i = 0; i < 12; i++) s += (double)(rng() >> 11) / 9007199254740992.0;
    return (float)(s - 6.0);
}

static float bf16_to_f32(uint16_t h)
{
    return u2f((uint32_t)h << 16);
}

/* Round to nearest even, written out here (NaN stays NaN). */
static uint16_t f32_to_bf16(float f)
{
    uint32_t u = f2u(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* a2amm_swiglu: bf16(silu(g) u) with one rounding (a value whose product lies past a bf16 midpoint goes up). */
static void test_swiglu(void)
{
    enum { N = 4099 };
    static float g[N], u[N];
    static uint16_t a[N + 1];
    for (int i = 0; i < N; i++) g[i] = randn() * 4.0f, u[i] = randn();
    g[0] = 0.0f, g[1] = -100.0f, g[2] = 100.0f, u[3] = 0.0f;
    g[4] = NAN, u[5] = -NAN, g[6] = -INFINITY, u[7] = INFINITY, g[7] = 0.0f; /* each a NaN: 0x7FC0 (a2amm.h) */
    a[N] = 0xBEEF;
    a2amm_swiglu(g, u, N, a);
    long wrong = 0;
    for (int i = 0; i < N; i++) {
        const float v = a2amm_silu(g[i]) * u[i];
        wrong += a[i] != (v != v ? 0x7FC0 : f32_to_bf16(v));
    }
    CHECK(a[4] == 0x7FC0 && a[5] == 0x7FC0 && a[6] == 0x7FC0 && a[7] == 0x7FC0,
          "swiglu: a NaN is 0x7FC0: 0x%04x 0x%04x 0x%04x 0x%04x", a[4], a[5], a[6], a[7]);
    CHECK(wrong == 0, "swiglu: %ld of %d values are not bf16(silu(g) u)", wrong, N);
    CHECK(a[N] == 0xBEEF, "swiglu wrote past n");
    CHECK(bf16_to_f32(a[2]) == bf16_to_f32(f32_to_bf16(100.0f * u[2])), "swiglu: silu(100) is 100");
    a2amm_swiglu(NULL, u, N, a); /* NULLs: nothing, no crash */
}

/* a2amm_matmul_bf16a: within fp32 accumulation of the fp64 sums, and its refusals (the bits: test_moe.c). */
static void test_matmul_bf16a(void)
{
    enum { M = 5, N = 64, K = 96 };
    float bf[N * K], bd[N * K];
    uint8_t b[N * K], sb[N * 3];
    uint16_t a[M * (K + 1)];
    static float y[M * (N + 2)];
    for (int i = 0; i < N * K; i++) bf[i] = randn();
    for (int i = 0; i < M * (K + 1); i++) a[i] = f32_to_bf16(randn());
    a2amm_error err;
    CHECK(a2amm_mx_quantize_f32(bf, N, K, K, A2AMM_E4M3, A2AMM_SCALE_RCEIL, b, K, sb, 3, &err) == 0, "%s", err.msg);
    a2amm_mx_dequantize_f32(b, K, sb, 3, N, K, A2AMM_E4M3, bd, K, &err);
    a2amm_bf16a_weights *w = NULL;
    CHECK(a2amm_bf16a_weights_create(b, sb, N, K, 3, A2AMM_E4M3, &w, &err) == 0, "bf16a weights: %s", err.msg);
    CHECK(a2amm_matmul_bf16a(w, a, K + 1, M, y, N + 2, 1, &err) == 0, "matmul_bf16a: %s", err.msg);
    /* the rows shared out over 2 and 3 threads: the same bits */
    static float y2[M * (N + 2)];
    for (int th = 2; th <= 3; th++)
        CHECK(a2amm_matmul_bf16a(w, a, K + 1, M, y2, N + 2, th, &err) == 0 && !memcmp(y, y2, sizeof y2),
              "matmul_bf16a over %d threads: other bits than over 1 (%s)", th, err.msg);
    CHECK(a2amm_matmul_bf16a(w, a, K + 1, M, y2, N + 2, -1, &err) == A2AMM_E_INVAL && strstr(err.msg, "threads"),
          "matmul_bf16a: threads -1: %s", err.msg);
    long far = 0;
    for (int i = 0; i < M; i++)
        for (int n = 0; n < N; n++) {
            double sum = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)bf16_to_f32(a[i * (K + 1) + k]) * (double)bd[n * K + k];
                sum += p, mag += fabs(p);
            }
            far += fabs((double)y[i * (N + 2) + n] - sum) > ldexp(1, -17) * mag;
        }
    CHECK(far == 0, "matmul_bf16a: %ld of %d outputs off the fp64 sums by more than fp32 sums allow", far, M * N);
    CHECK(a2amm_matmul_bf16a(w, a, K - 1, M, y, N, 0, &err) == A2AMM_E_INVAL && strstr(err.msg, "lda >= k = 96"),
          "matmul_bf16a: lda below k: %s", err.msg);
    CHECK(a2amm_matmul_bf16a(w, a, K, -1, y, N, 0, &err) == A2AMM_E_INVAL, "matmul_bf16a: m = -1 accepted");
    CHECK(a2amm_matmul_bf16a(NULL, a, K, M, y, N, 0, &err) == A2AMM_E_INVAL && strstr(err.msg, "NULL"),
          "matmul_bf16a: NULL weights: %s", err.msg);
    a2amm_bf16a_weights_destroy(w);
    a2amm_bf16a_weights_destroy(NULL);
    w = (a2amm_bf16a_weights *)1;
    CHECK(a2amm_bf16a_weights_create(b, sb, 48, K, 3, A2AMM_E4M3, &w, &err) == A2AMM_E_INVAL && w == NULL &&
              strstr(err.msg, "multiples of 32"), "bf16a weights of n = 48: %s", err.msg);
    CHECK(a2amm_bf16a_weights_create(b, sb, N, K, 2, A2AMM_E4M3, &w, &err) == A2AMM_E_INVAL &&
              strstr(err.msg, "ldsb"), "bf16a weights with a short ldsb: %s", err.msg);
    CHECK(a2amm_bf16a_weights_create(NULL, sb, N, K, 3, A2AMM_E4M3, &w, &err) == A2AMM_E_INVAL,
          "bf16a weights of NULL accepted");
}

static void test_quantize_round_trip(a2amm_fp8_type type, a2amm_scale_mode mode)
{
    enum { ROWS = 9, COLS = 100, LDX = 103, LDC = 107, LDS = 6 };
    float x[ROWS * LDX], y[ROWS * LDX];
    uint8_t codes[ROWS * LDC], scales[ROWS * LDS];
    for (int i = 0; i < ROWS * LDX; i++) x[i] = randn() * (float)(1 << (i % 7)) / 8.0f;
    for (int t = 32; t < 64; t++) x[2 * LDX + t] = 0.0f; /* an all-zero block */
    x[4 * LDX + 70] = NAN;                                 /* a NaN in a block */
    memset(codes, 0xAB, sizeof codes);
    memset(scales, 0xAB, sizeof scales);
    a2amm_error err;
    int rc = a2amm_mx_quantize_f32(x, ROWS, COLS, LDX, type, mode, codes, LDC, scales, LDS, &err);
    CHECK(rc == 0, "quantize: %s", err.msg);
    long pad_touched = 0;
    for (int i = 0; i < ROWS; i++) {
        for (int t = COLS; t < LDC; t++) pad_touched += codes[i * LDC + t] != 0xAB;
        for (int b = 4; b < LDS; b++) pad_touched += scales[i * LDS + b] != 0xAB;
    }
    CHECK(pad_touched == 0, "quantize wrote %ld bytes of padding", pad_touched);
    CHECK(scales[2 * LDS + 1] == 0x00, "an all-zero block has scale 0x00 (got 0x%02x)", scales[2 * LDS + 1]);
    CHECK(scales[4 * LDS + 2] == 0xFF, "a block with a NaN has scale 0xFF (got 0x%02x)", scales[4 * LDS + 2]);
    rc = a2amm_mx_dequantize_f32(codes, LDC, scales, LDS, ROWS, COLS, type, y, LDX, &err);
    CHECK(rc == 0, "dequantize: %s", err.msg);
    /* RNE to 3 (e4m3) or 2 (e5m2) mantissa bits: within half an ulp of the block's scale grid, or saturated */
    double max_code = type == A2AMM_E4M3 ? 448.0 : 57344.0, mant = type == A2AMM_E4M3 ? 3 : 2;
    double min_normal = type == A2AMM_E4M3 ? ldexp(1, -6) : ldexp(1, -14);
    long bad = 0;
    for (int i = 0; i < ROWS; i++)
        for (int t = 0; t < COLS; t++) {
            double v = x[i * LDX + t], got = y[i * LDX + t];
            uint8_t s = scales[i * LDS + t / 32];
            if (s == 0xFF) {
                bad += !isnan(got);
                continue;
            }
            double scale = ldexp(1.0, (int)s - 127), q = fabs(v) / scale;
            double ulp = q >= min_normal ? ldexp(1.0, (int)floor(log2(q)) - (int)mant) : ldexp(min_normal, -(int)mant);
            double want_err = q > max_code ? (q - max_code) * scale : ulp / 2 * scale;
            bad += !(fabs(got - v) <= want_err * 1.0000001);
            if (mode == A2AMM_SCALE_RCEIL) bad += q > max_code * 1.0000001; /* RCEIL never saturates */
        }
    CHECK(bad == 0, "%s %s: %ld values off their block's grid", type == A2AMM_E4M3 ? "e4m3" : "e5m2",
          mode == A2AMM_SCALE_FLOOR ? "floor" : "rceil", bad);

    /* bf16 input: the same codes as fp32 input holding the same (bf16) values */
    uint16_t h[ROWS * LDX];
    float xb[ROWS * LDX];
    for (int i = 0; i < ROWS * LDX; i++) {
        h[i] = (uint16_t)(f2u(x[i]) >> 16);
        xb[i] = bf16_to_f32(h[i]);
    }
    uint8_t c2[ROWS * LDC], s2[ROWS * LDS], c3[ROWS * LDC], s3[ROWS * LDS];
    memset(c2, 0, sizeof c2), memset(s2, 0, sizeof s2), memset(c3, 0, sizeof c3), memset(s3, 0, sizeof s3);
    CHECK(a2amm_mx_quantize_bf16(h, ROWS, COLS, LDX, type, mode, c2, LDC, s2, LDS, &err) == 0, "bf16: %s", err.msg);
    CHECK(a2amm_mx_quantize_f32(xb, ROWS, COLS, LDX, type, mode, c3, LDC, s3, LDS, &err) == 0, "f32: %s", err.msg);
    CHECK(!memcmp(c2, c3, sizeof c2) && !memcmp(s2, s3, sizeof s2), "bf16 and fp32 input of the same values differ");
}

static void test_quantize_errors(void)
{
    float x[64];
    uint8_t c[64], s[2];
    a2amm_error err;
    CHECK(a2amm_mx_quantize_f32(NULL, 1, 64, 64, A2AMM_E4M3, A2AMM_SCALE_FLOOR, c, 64, s, 2, &err) == A2AMM_E_INVAL &&
              strstr(err.msg, "NULL"), "NULL values: %s", err.msg);
    CHECK(a2amm_mx_quantize_f32(x, 1, 64, 64, A2AMM_E4M3, A2AMM_SCALE_FLOOR, c, 64, s, 1, &err) == A2AMM_E_INVAL &&
              strstr(err.msg, "ceil(cols/32) = 2"), "scales too narrow: %s", err.msg);
    CHECK(a2amm_mx_quantize_f32(x, 1, 64, 32, A2AMM_E4M3, A2AMM_SCALE_FLOOR, c, 64, s, 2, &err) == A2AMM_E_INVAL,
          "values stride below cols");
    CHECK(a2amm_mx_quantize_f32(x, 1, 64, 64, (a2amm_fp8_type)7, A2AMM_SCALE_FLOOR, c, 64, s, 2, &err) == A2AMM_E_INVAL,
          "a bad type");
    CHECK(a2amm_mx_quantize_f32(x, 1, 64, 64, A2AMM_E4M3, (a2amm_scale_mode)9, c, 64, s, 2, &err) == A2AMM_E_INVAL,
          "a bad mode");
}

/* The fast dequantize against its reference twin (mx_dequant, in double):
 * every code under every scale, bit for bit (NaN where the scale is NaN). */
static void test_dequantize_all_codes(a2amm_fp8_type type)
{
    static uint8_t codes[256 * 256], scales[256 * 8];
    static float y[256 * 256];
    for (int s = 0; s < 256; s++) {
        for (int c = 0; c < 256; c++) codes[s * 256 + c] = (uint8_t)c;
        for (int b = 0; b < 8; b++) scales[s * 8 + b] = (uint8_t)s;
    }
    a2amm_error err;
    CHECK(a2amm_mx_dequantize_f32(codes, 256, scales, 8, 256, 256, type, y, 256, &err) == 0, "%s", err.msg);
    long wrong = 0;
    for (int s = 0; s < 256; s++)
        for (int c = 0; c < 256; c++) {
            float want = (float)mx_dequant((uint8_t)c, (uint8_t)s, type), got = y[s * 256 + c];
            wrong += isnan(want) ? !isnan(got) : memcmp(&want, &got, sizeof got) != 0;
        }
    CHECK(wrong == 0, "dequantize %s: %ld of 65536 (code, scale) pairs differ from the reference",
          a2amm_fp8_type_name(type), wrong);
}

static void test_matmul(void)
{
    enum { M = 37, N = 70, K = 96 };
    float af[M * K], bf[N * K];
    uint8_t a[M * K], sa[M * 3], b[N * K], sb[N * 4];
    for (int i = 0; i < M * K; i++) af[i] = randn();
    for (int i = 0; i < N * K; i++) bf[i] = randn();
    a2amm_error err;
    CHECK(a2amm_mx_quantize_f32(af, M, K, K, A2AMM_E4M3, A2AMM_SCALE_RCEIL, a, K, sa, 3, &err) == 0, "%s", err.msg);
    CHECK(a2amm_mx_quantize_f32(bf, N, K, K, A2AMM_E5M2, A2AMM_SCALE_FLOOR, b, K, sb, 4, &err) == 0, "%s", err.msg);
    float ad[M * K], bd[N * K];
    a2amm_mx_dequantize_f32(a, K, sa, 3, M, K, A2AMM_E4M3, ad, K, &err);
    a2amm_mx_dequantize_f32(b, K, sb, 4, N, K, A2AMM_E5M2, bd, K, &err);
    a2amm_weights *w = NULL;
    CHECK(a2amm_weights_create(b, sb, N, K, 4, A2AMM_E5M2, 2, &w, &err) == 0, "weights: %s", err.msg);
    uint16_t out[3][M * N];
    for (int t = 0; t < 3; t++)
        CHECK(a2amm_matmul(w, a, K, sa, 3, M, A2AMM_E4M3, out[t], N, t + 1, &err) == 0, "matmul: %s", err.msg);
    CHECK(!memcmp(out[0], out[1], sizeof out[0]) && !memcmp(out[0], out[2], sizeof out[0]),
          "1, 2 and 3 threads give other bits");
    long far = 0;
    for (int i = 0; i < M; i++)
        for (int n = 0; n < N; n++) {
            double sum = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)ad[i * K + k] * (double)bd[n * K + k];
                sum += p, mag += fabs(p);
            }
            far += fabs(bf16_to_f32(out[0][i * N + n]) - sum) > ldexp(1, -8) * fabs(sum) + ldexp(1, -12) * mag;
        }
    CHECK(far == 0, "matmul: %ld of %d outputs off the fp64 sums by more than a bf16 rounding", far, M * N);
    CHECK(a2amm_matmul(w, a, K, sa, 3, M, A2AMM_E4M3, out[0], N - 1, 1, &err) == A2AMM_E_INVAL &&
              strstr(err.msg, "ldo >= n = 70"), "ldo below n: %s", err.msg);
    CHECK(a2amm_matmul(NULL, a, K, sa, 3, M, A2AMM_E4M3, out[0], N, 1, &err) == A2AMM_E_INVAL, "NULL weights");
    /* the fp32 sums: a2amm_matmul's bits once rounded, on any thread count, at any row stride */
    static float sums[2][M * (N + 3)];
    for (int t = 0; t < 2; t++)
        CHECK(a2amm_matmul_f32(w, a, K, sa, 3, M, A2AMM_E4M3, sums[t], N + 3, 2 * t + 1, &err) == 0, "matmul_f32: %s",
              err.msg);
    long unrounded = 0, rounded = 0;
    for (int i = 0; i < M; i++)
        for (int n = 0; n < N; n++) {
            unrounded += memcmp(&sums[0][i * (N + 3) + n], &sums[1][i * (N + 3) + n], sizeof(float)) != 0;
            rounded += f32_to_bf16(sums[0][i * (N + 3) + n]) != out[0][i * N + n];
        }
    CHECK(unrounded == 0, "matmul_f32: 1 and 3 threads differ in %ld sums", unrounded);
    CHECK(rounded == 0, "matmul_f32: %ld sums, rounded to bf16, are not a2amm_matmul's bits", rounded);
    CHECK(a2amm_matmul_f32(w, a, K, sa, 3, M, A2AMM_E4M3, sums[0], N - 1, 1, &err) == A2AMM_E_INVAL &&
              strstr(err.msg, "a2amm_matmul_f32") && strstr(err.msg, "ldc >= n = 70"), "ldc below n: %s", err.msg);
    CHECK(a2amm_matmul_f32(w, a, K, sa, 3, M, A2AMM_E4M3, NULL, N, 1, &err) == A2AMM_E_INVAL && strstr(err.msg, "NULL"),
          "matmul_f32 NULL c: %s", err.msg);
    a2amm_weights_destroy(w);
    /* weights prepared over 1 thread multiply to the same bits as over 2 */
    CHECK(a2amm_weights_create(b, sb, N, K, 4, A2AMM_E5M2, 1, &w, &err) == 0, "weights, 1 thread: %s", err.msg);
    CHECK(a2amm_matmul(w, a, K, sa, 3, M, A2AMM_E4M3, out[1], N, 2, &err) == 0 && !memcmp(out[0], out[1], sizeof out[0]),
          "weights prepared over 1 and 2 threads give other bits");
    a2amm_weights_destroy(w);
    CHECK(a2amm_weights_create(b, sb, N, 100, 4, A2AMM_E5M2, 0, &w, &err) != 0 && w == NULL, "k not a multiple of 32");
    CHECK(a2amm_weights_create(b, sb, N, K, 4, A2AMM_E5M2, -1, &w, &err) == A2AMM_E_INVAL && strstr(err.msg, "threads"),
          "negative threads refused: %s", err.msg);
    const char *kernel = NULL;
    CHECK(a2amm_kernel(&kernel, &err) == 0 && kernel && (!strcmp(kernel, "ref") || !strcmp(kernel, "avx2") ||
          !strcmp(kernel, "avx512") || !strcmp(kernel, "amx")), "a2amm_kernel names a level: %s", kernel ? kernel : err.msg);
}

/* The small calls' NULLs and ranges: a status or a name, never a crash or another type's name. */
static void test_names_and_nulls(void)
{
    a2amm_error err = {0, ""};
    CHECK(op_shape_check(NULL, NULL, &err) == A2AMM_E_INVAL && strstr(err.msg, "shape is NULL"),
          "a NULL shape: %s", err.msg);
    CHECK(op_shape_check(NULL, NULL, NULL) == A2AMM_E_INVAL, "a NULL shape, no error record");
    a2amm_fp8_type t = A2AMM_E4M3;
    CHECK(a2amm_fp8_type_parse("E5M2", NULL, &err) == A2AMM_E_INVAL && strstr(err.msg, "NULL"), "parse into NULL: %s",
          err.msg);
    CHECK(a2amm_fp8_type_parse(NULL, &t, NULL) == A2AMM_E_INVAL, "parse of NULL");
    CHECK(a2amm_fp8_type_parse("E5M2", &t, &err) == A2AMM_OK && t == A2AMM_E5M2, "parse of E5M2");
    CHECK(a2amm_fp8_type_parse("e4m3x", &t, &err) == A2AMM_E_INVAL && t == A2AMM_E5M2 && strstr(err.msg, "'e4m3x'"),
          "parse of e4m3x leaves *out, and says why: %s", err.msg);
    CHECK(!strcmp(a2amm_fp8_type_name(A2AMM_E4M3), "e4m3") && !strcmp(a2amm_fp8_type_name(A2AMM_E5M2), "e5m2"),
          "the two names");
    CHECK(!strcmp(a2amm_fp8_type_name((a2amm_fp8_type)7), "(not an fp8 type)") &&
              !strcmp(a2amm_fp8_type_name((a2amm_fp8_type)-1), "(not an fp8 type)"),
          "type 7 is no type: %s", a2amm_fp8_type_name((a2amm_fp8_type)7));
}

/* ---- the calls the header says are thread-safe, on several threads at once ---- */
enum { TS_THREADS = 4, TS_M = 40, TS_N = 48, TS_K = 96, TS_ROUNDS = 20 };

typedef struct ts_job {
    const a2amm_weights *w;
    const float *x;                       /* [TS_M, TS_K] to quantize */
    uint8_t codes[TS_M * TS_K], scales[TS_M * 3];
    uint16_t out[TS_M * TS_N];            /* the matmul of those codes */
    int rc;
} ts_job;

static void *ts_run(void *arg)
{
    ts_job *j = arg;
    a2amm_error err;
    const char *kernel = NULL;
    op_sizes z;
    op_shape s = {TS_M, TS_K, TS_N, 3, A2AMM_E4M3, A2AMM_E4M3, OP_ALLTOALL_MATMUL}; /* K/R = 32 */
    for (int i = 0; !j->rc && i < TS_ROUNDS; i++) {
        j->rc = a2amm_mx_quantize_f32(j->x, TS_M, TS_K, TS_K, A2AMM_E4M3, A2AMM_SCALE_RCEIL, j->codes, TS_K, j->scales,
                                      3, &err);
        if (!j->rc) j->rc = a2amm_matmul(j->w, j->codes, TS_K, j->scales, 3, TS_M, A2AMM_E4M3, j->out, TS_N, 1, &err);
        if (!j->rc) j->rc = a2amm_kernel(&kernel, &err);
        if (!j->rc) j->rc = op_shape_check(&s, &z, &err);
    }
    return NULL;
}

static void test_thread_safe_calls(void)
{
    static float x[TS_M * TS_K], bf[TS_N * TS_K];
    static uint8_t b[TS_N * TS_K], sb[TS_N * 3];
    for (int i = 0; i < TS_M * TS_K; i++) x[i] = randn();
    for (int i = 0; i < TS_N * TS_K; i++) bf[i] = randn();
    a2amm_error err;
    a2amm_weights *w = NULL;
    CHECK(a2amm_mx_quantize_f32(bf, TS_N, TS_K, TS_K, A2AMM_E4M3, A2AMM_SCALE_RCEIL, b, TS_K, sb, 3, &err) == 0 &&
              a2amm_weights_create(b, sb, TS_N, TS_K, 3, A2AMM_E4M3, 1, &w, &err) == 0,
          "thread-safe calls' weights: %s", err.msg);
    if (!w) return;
    static ts_job one, many[TS_THREADS];
    one = (ts_job){.w = w, .x = x};
    ts_run(&one);
    pthread_t t[TS_THREADS];
    for (int i = 0; i < TS_THREADS; i++) {
        many[i] = (ts_job){.w = w, .x = x};
        CHECK(pthread_create(&t[i], NULL, ts_run, &many[i]) == 0, "thread %d", i);
    }
    for (int i = 0; i < TS_THREADS; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < TS_THREADS; i++)
        CHECK(one.rc == 0 && many[i].rc == 0 && !memcmp(one.codes, many[i].codes, sizeof one.codes) &&
                  !memcmp(one.scales, many[i].scales, sizeof one.scales) && !memcmp(one.out, many[i].out, sizeof one.out),
              "thread %d of %d: quantize, matmul on one weights, kernel and shape check at once give other results "
              "(rc %d)", i, TS_THREADS, many[i].rc);
    a2amm_weights_destroy(w);
}

/* The op kinds by name, and the geometry of a call, from the library's op-kind table, against the contract's
 * formulas (a2amm.h): both kinds, a layout older than ours (only its fields written), and refusals. */
static void test_op_geometry(void)
{
    CHECK(a2amm_op_kind_name(A2AMM_OP_ALLTOALL_MATMUL) && !strcmp(a2amm_op_kind_name(A2AMM_OP_ALLTOALL_MATMUL),
                                                                  "alltoall-matmul"), "kind 0's name");
    CHECK(a2amm_op_kind_name(A2AMM_OP_MATMUL_ALLTOALL) && !strcmp(a2amm_op_kind_name(A2AMM_OP_MATMUL_ALLTOALL),
                                                                  "matmul-alltoall"), "kind 1's name");
    CHECK(!a2amm_op_kind_name((a2amm_op_kind)2) && !a2amm_op_kind_name((a2amm_op_kind)-1), "no kind 2 or -1");

    a2amm_error err = {0, ""};
    a2amm_op_config c = A2AMM_OP_CONFIG_INIT;
    c.max_m = 8, c.k = 256, c.n = 64;
    a2amm_op_geometry g = A2AMM_OP_GEOMETRY_INIT;
    int rc = a2amm_op_geometry_of(&c, 4, 5, &g, &err);
    CHECK(rc == 0 && g.a_blocks == 4 && g.a_rows == 20 && g.lda == 64 && g.ldsa == 2 && g.out_rows == 5 &&
              g.out_cols == 64 && g.b_rows == 64 && g.b_cols == 256 && g.ldsb == 8,
          "alltoall-matmul R 4 K 256 N 64 m 5: A [4*5, 64] (scales 2 a row), out [5, 64], B [64, 256] (scales 8): "
          "got %d (%s) blocks %lld rows %lld lda %lld ldsa %lld out [%lld, %lld] b [%lld, %lld] ldsb %lld", rc, err.msg,
          (long long)g.a_blocks, (long long)g.a_rows, (long long)g.lda, (long long)g.ldsa, (long long)g.out_rows,
          (long long)g.out_cols, (long long)g.b_rows, (long long)g.b_cols, (long long)g.ldsb);
    c.kind = A2AMM_OP_MATMUL_ALLTOALL, c.k = 96;
    rc = a2amm_op_geometry_of(&c, 4, 5, &g, &err);
    CHECK(rc == 0 && g.a_blocks == 1 && g.a_rows == 5 && g.lda == 96 && g.ldsa == 4 && g.out_rows == 20 &&
              g.out_cols == 16 && g.b_rows == 64 && g.b_cols == 96 && g.ldsb == 4,
          "matmul-alltoall R 4 K 96 N 64 m 5: X [5, 96] (scales 4), out [4*5, 16]: got %d (%s) blocks %lld rows %lld "
          "lda %lld ldsa %lld out [%lld, %lld]", rc, err.msg, (long long)g.a_blocks, (long long)g.a_rows,
          (long long)g.lda, (long long)g.ldsa, (long long)g.out_rows, (long long)g.out_cols);

    /* a program built with a layout that ended after a_rows: nothing past it is written */
    struct { a2amm_op_geometry g; } old;
    memset(&old, 0x5A, sizeof old);
    old.g.size = offsetof(a2amm_op_geometry, lda);
    rc = a2amm_op_geometry_of(&c, 4, 5, &old.g, &err);
    CHECK(rc == 0 && old.g.a_blocks == 1 && old.g.a_rows == 5 && old.g.lda == 0x5A5A5A5A5A5A5A5All,
          "a shorter layout: its fields filled, none past it (got %d, lda %llx)", rc, (unsigned long long)old.g.lda);

    struct { int64_t m; const char *why; a2amm_op_kind kind; int64_t k, n; size_t size; } bad[] = {
        {0, "m must be 1 to max_m", A2AMM_OP_MATMUL_ALLTOALL, 96, 64, sizeof g},
        {9, "m must be 1 to max_m = 8 (got 9)", A2AMM_OP_MATMUL_ALLTOALL, 96, 64, sizeof g},
        {5, "N must be divisible by R", A2AMM_OP_MATMUL_ALLTOALL, 96, 66, sizeof g},
        {5, "K / R must be a multiple of 32", A2AMM_OP_ALLTOALL_MATMUL, 48 * 4, 64, sizeof g},
        {5, "kind must be", (a2amm_op_kind)7, 96, 64, sizeof g},
        {5, "A2AMM_OP_GEOMETRY_INIT", A2AMM_OP_MATMUL_ALLTOALL, 96, 64, 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        c.kind = bad[i].kind, c.k = bad[i].k, c.n = bad[i].n;
        g.size = bad[i].size;
        err = (a2amm_error){0, ""};
        rc = a2amm_op_geometry_of(&c, 4, bad[i].m, &g, &err);
        CHECK(rc == A2AMM_E_INVAL && strstr(err.msg, bad[i].why) && strstr(err.msg, "a2amm_op_geometry_of"),
              "refused, saying '%s': got %d (%s)", bad[i].why, rc, err.msg);
    }
    g.size = sizeof g;
    CHECK(a2amm_op_geometry_of(&c, 0, 1, &g, &err) == A2AMM_E_INVAL && strstr(err.msg, "nranks"), "nranks 0: %s",
          err.msg);
    CHECK(a2amm_op_geometry_of(NULL, 2, 1, &g, &err) == A2AMM_E_INVAL, "NULL config");
    c.kind = A2AMM_OP_MATMUL_ALLTOALL, c.k = 96, c.n = 64;
    CHECK(a2amm_op_geometry_of(&c, 4, 1, NULL, &err) == A2AMM_E_INVAL && strstr(err.msg, "geometry"),
          "NULL geometry: %s", err.msg);
    CHECK(a2amm_op_geometry_of(&c, 1 << 20, 1, &g, &err) == A2AMM_E_INVAL && strstr(err.msg, "nranks"),
          "nranks 2^20: %s", err.msg);
    a2amm_op_config unsized = c;
    unsized.size = 0;
    CHECK(a2amm_op_geometry_of(&unsized, 4, 1, &g, &err) == A2AMM_E_INVAL, "a config of size 0: %s", err.msg);
}

int main(void)
{
    test_op_geometry();
    test_names_and_nulls();
    test_thread_safe_calls();
    test_dequantize_all_codes(A2AMM_E4M3);
    test_dequantize_all_codes(A2AMM_E5M2);
    rng_state = 0xA2A3A4A5A6A7A8A9ull;
    for (int t = 0; t < 2; t++)
        for (int m = 0; m < 2; m++) test_quantize_round_trip((a2amm_fp8_type)t, (a2amm_scale_mode)m);
    test_quantize_errors();
    test_matmul();
    test_swiglu();
    test_matmul_bf16a();
    return check_summary("test_api");
}
