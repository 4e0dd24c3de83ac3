/* The public MX quantization and dequantization, over mx/mx.h; the MoE activation's exp and SiLU (mx/expf.h). */
#include <stdlib.h>

#include "a2amm.h"
#include "common/error.h"
#include "mx/expf.h"
#include "mx/mx.h"
#include "op/swiglu.h"

/* The checks every call makes; 0 or the error. */
static int check_matrix(const char *call, const void *x, const void *codes, const void *scales, int64_t rows,
                        int64_t cols, int64_t ldx, int64_t ldc, int64_t lds, a2amm_fp8_type type, a2amm_error *err)
{
    if (!x || !codes || !scales) return a2amm_fail(err, A2AMM_E_INVAL, "%s: a NULL array", call);
    if (rows < 0 || cols < 0) return a2amm_fail(err, A2AMM_E_INVAL, "%s: rows and cols must not be negative", call);
    if (ldx < cols || ldc < cols || lds < (cols + 31) / 32)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: leading dimensions too small (values %lld and codes %lld must be "
                          ">= cols = %lld, scales %lld >= ceil(cols/32) = %lld)", call, (long long)ldx, (long long)ldc,
                          (long long)cols, (long long)lds, (long long)((cols + 31) / 32));
    if (type != A2AMM_E4M3 && type != A2AMM_E5M2)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: type must be A2AMM_E4M3 or A2AMM_E5M2", call);
    return A2AMM_OK;
}

static int check_mode(const char *call, a2amm_scale_mode mode, a2amm_error *err)
{
    if (mode != A2AMM_SCALE_FLOOR && mode != A2AMM_SCALE_RCEIL)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: mode must be A2AMM_SCALE_FLOOR or A2AMM_SCALE_RCEIL", call);
    return A2AMM_OK;
}

static mx_scale_mode mode_of(a2amm_scale_mode m) { return m == A2AMM_SCALE_RCEIL ? MX_SCALE_RCEIL : MX_SCALE_FLOOR; }

/* Rows of fp32 (bf16 == NULL) or bf16 values quantized (bf16 widened exactly on the way). */
static int quantize_rows(const char *call, const float *f32, const uint16_t *bf16, int64_t rows, int64_t cols,
                         int64_t ldx, a2amm_fp8_type type, a2amm_scale_mode mode, uint8_t *codes, int64_t ldc,
                         uint8_t *scales, int64_t lds, a2amm_error *err)
{
    const void *x = bf16 ? (const void *)bf16 : (const void *)f32;
    int rc = check_matrix(call, x, codes, scales, rows, cols, ldx, ldc, lds, type, err);
    if (!rc) rc = check_mode(call, mode, err);
    if (rc) return rc;
    for (int64_t i = 0; i < rows; i++) {
        if (bf16)
            mx_quantize_row_bf16(bf16 + i * ldx, (size_t)cols, type, mode_of(mode), codes + i * ldc, scales + i * lds);
        else
            mx_quantize_row(f32 + i * ldx, (size_t)cols, type, mode_of(mode), codes + i * ldc, scales + i * lds);
    }
    return A2AMM_OK;
}

int a2amm_mx_quantize_f32(const float *x, int64_t rows, int64_t cols, int64_t ldx, a2amm_fp8_type type,
                          a2amm_scale_mode mode, uint8_t *codes, int64_t ldc, uint8_t *scales, int64_t lds,
                          a2amm_error *err)
{
    return quantize_rows("a2amm_mx_quantize_f32", x, NULL, rows, cols, ldx, type, mode, codes, ldc, scales, lds,
                         err);
}

int a2amm_mx_quantize_bf16(const uint16_t *x, int64_t rows, int64_t cols, int64_t ldx, a2amm_fp8_type type,
                           a2amm_scale_mode mode, uint8_t *codes, int64_t ldc, uint8_t *scales, int64_t lds,
                           a2amm_error *err)
{
    return quantize_rows("a2amm_mx_quantize_bf16", NULL, x, rows, cols, ldx, type, mode, codes, ldc, scales, lds,
                         err);
}

int a2amm_mx_dequantize_f32(const uint8_t *codes, int64_t ldc, const uint8_t *scales, int64_t lds, int64_t rows,
                            int64_t cols, a2amm_fp8_type type, float *y, int64_t ldy, a2amm_error *err)
{
    int rc = check_matrix("a2amm_mx_dequantize_f32", y, codes, scales, rows, cols, ldy, ldc, lds, type, err);
    if (rc) return rc;
    /* value x 2^(scale - 127) in one float multiply: every E8M0 scale but NaN
     * is a float (2^-127 a subnormal), so the product is the exact value
     * rounded once, as mx_dequant's double would be */
    float val[256];
    for (int c = 0; c < 256; c++) val[c] = mx_fp8_to_f32((uint8_t)c, type);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t b0 = 0; b0 < cols; b0 += 32) {
            float sc = mx_e8m0_to_f32(scales[i * lds + b0 / 32]);
            int64_t end = b0 + 32 < cols ? b0 + 32 : cols;
            for (int64_t t = b0; t < end; t++) y[i * ldy + t] = val[codes[i * ldc + t]] * sc;
        }
    return A2AMM_OK;
}

float a2amm_expf(float x) { return mx_expf(x); }
float a2amm_silu(float g) { return mx_silu(g); }

void a2amm_swiglu(const float *g, const float *u, int64_t n, uint16_t *a)
{
    if (g && u && a && n > 0) swiglu_row(g, u, n, a);
}
