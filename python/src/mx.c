/* MX data: quantize and dequantize over the library's (see a2amm/__init__.py for the API). */
#include "ext.h"

/* Scales of a row of `cols` values: ceil(cols/32), or the seed layout's 2*ceil(cols/64). */
int64_t scale_width(int64_t cols) { return (cols + 31) / 32; }
int64_t seed_scale_width(int64_t cols) { return 2 * ((cols + 63) / 64); }

/* 0 when s is [rows, ceil(cols/32)] or [rows, 2*ceil(cols/64)]; else -1 with a ValueError. */
int check_scales(const char *name, const matrix *s, int64_t rows, int64_t cols, const char *rows_what)
{
    int64_t w = scale_width(cols), seed = seed_scale_width(cols);
    if (s->rows == rows && (s->cols == w || s->cols == seed)) return 0;
    if (w == seed)
        return matrix_shape_error(name, s, "[%s, ceil(%lld/32)] = [%lld, %lld] (one E8M0 scale per 32 values)",
                                  rows_what, (long long)cols, (long long)rows, (long long)w);
    return matrix_shape_error(name, s, "[%s, ceil(%lld/32)] = [%lld, %lld] (one E8M0 scale per 32 values), or "
                              "the seed layout's [%lld, %lld]", rows_what, (long long)cols, (long long)rows,
                              (long long)w, (long long)rows, (long long)seed);
}

int ext_values_get(PyObject *obj, const char *name, matrix *m, int *bf16)
{
    *bf16 = ext_holds_bf16(obj);
    if (matrix_get(obj, name, *bf16 ? EL_BF16 : EL_F32, MAT_ROWS, m) == 0) return 0;
    if (PyErr_ExceptionMatches(PyExc_TypeError) && PyObject_CheckBuffer(obj)) {
        Py_buffer v;
        PyErr_Clear(); /* say both choices */
        if (PyObject_GetBuffer(obj, &v, PyBUF_STRIDES | PyBUF_FORMAT) == 0) {
            PyErr_Format(PyExc_TypeError, "%s must be float32 or bfloat16 (numpy.float32, torch.float32, "
                         "torch.bfloat16, or numpy.uint16 holding bf16 bits); got %s elements", name,
                         ext_format_name(v.format, v.itemsize));
            PyBuffer_Release(&v);
        }
    }
    return -1;
}

int ext_holds_bf16(PyObject *obj)
{
    int bf16 = 0;
    Py_buffer peek;
    if (PyObject_CheckBuffer(obj) && PyObject_GetBuffer(obj, &peek, PyBUF_STRIDES | PyBUF_FORMAT) == 0) {
        bf16 = peek.itemsize == 2;
        PyBuffer_Release(&peek);
    } else {
        PyErr_Clear();
    }
    return bf16;
}

PyObject *ext_quantize(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"x", "fmt", "mode", NULL};
    PyObject *xo, *fmt = NULL, *mode = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO:quantize", kwlist, &xo, &fmt, &mode)) return NULL;
    a2amm_fp8_type type = A2AMM_E4M3;
    a2amm_scale_mode smode = A2AMM_SCALE_FLOOR;
    if (fmt && fmt != Py_None && ext_fmt(fmt, "fmt", &type) < 0) return NULL;
    if (mode && mode != Py_None) {
        const char *s = PyUnicode_Check(mode) ? PyUnicode_AsUTF8(mode) : NULL;
        if (!s || lib_mode_parse(s, &smode) != A2AMM_OK) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "mode must be \"floor\" (the OCP scale) or \"rceil\"; got %R", mode);
            return NULL;
        }
    }
    matrix x;
    int bf16;
    if (ext_values_get(xo, "x", &x, &bf16) < 0) return NULL;
    int64_t rows = x.rows, cols = x.cols, sw = scale_width(cols);
    PyObject *codes = ext_new_array(ext_np_u8, rows, cols), *scales = codes ? ext_new_array(ext_np_u8, rows, sw) : NULL;
    matrix c, s;
    int rc = A2AMM_OK, ok = scales && matrix_get(codes, "codes", EL_U8, MAT_CONTIGUOUS | MAT_WRITABLE, &c) == 0;
    if (ok && matrix_get(scales, "scales", EL_U8, MAT_CONTIGUOUS | MAT_WRITABLE, &s) < 0) ok = 0, matrix_release(&c);
    a2amm_error err = {0, ""};
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        rc = bf16 ? lib_quantize_bf16((const uint16_t *)x.ptr, rows, cols, x.ld, type, smode, (uint8_t *)c.ptr,
                                      cols > 0 ? cols : 1, (uint8_t *)s.ptr, sw > 0 ? sw : 1, &err)
                  : lib_quantize_f32((const float *)x.ptr, rows, cols, x.ld, type, smode, (uint8_t *)c.ptr,
                                     cols > 0 ? cols : 1, (uint8_t *)s.ptr, sw > 0 ? sw : 1, &err);
        Py_END_ALLOW_THREADS
        matrix_release(&c);
        matrix_release(&s);
    }
    matrix_release(&x);
    if (!ok || rc) {
        Py_XDECREF(codes);
        Py_XDECREF(scales);
        return ok ? ext_raise(rc, &err) : NULL;
    }
    PyObject *t = PyTuple_Pack(2, codes, scales);
    Py_DECREF(codes);
    Py_DECREF(scales);
    return t;
}

PyObject *ext_dequantize(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"codes", "scales", "fmt", NULL};
    PyObject *co, *so, *fmt = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:dequantize", kwlist, &co, &so, &fmt)) return NULL;
    a2amm_fp8_type type = A2AMM_E4M3;
    if (fmt && fmt != Py_None && ext_fmt(fmt, "fmt", &type) < 0) return NULL;
    matrix c, s;
    if (matrix_get(co, "codes", EL_U8, MAT_ROWS, &c) < 0) return NULL;
    if (matrix_get(so, "scales", EL_U8, MAT_ROWS, &s) < 0 || check_scales("scales", &s, c.rows, c.cols, "rows") < 0) {
        matrix_release(&c);
        matrix_release(&s);
        return NULL;
    }
    PyObject *y = ext_new_array(ext_np_f32, c.rows, c.cols);
    matrix ym;
    int rc = A2AMM_OK, ok = y && matrix_get(y, "y", EL_F32, MAT_CONTIGUOUS | MAT_WRITABLE, &ym) == 0;
    a2amm_error err = {0, ""};
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        rc = lib_dequantize((const uint8_t *)c.ptr, c.ld, (const uint8_t *)s.ptr, s.ld, c.rows, c.cols, type,
                            (float *)ym.ptr, c.cols > 0 ? c.cols : 1, &err);
        Py_END_ALLOW_THREADS
        matrix_release(&ym);
    }
    matrix_release(&c);
    matrix_release(&s);
    if (!ok || rc) {
        Py_XDECREF(y);
        return ok ? ext_raise(rc, &err) : NULL;
    }
    return y;
}
