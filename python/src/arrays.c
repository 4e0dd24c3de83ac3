/* The caller's arrays through the buffer protocol, checked (see ext.h). */
#include "ext.h"

#include <stdarg.h>
#include <string.h>

/* A buffer's format without its byte-order prefix (native little-endian here). */
static const char *bare_format(const char *f)
{
    if (!f) return "B";
    if (*f == '@' || *f == '=' || *f == '<') f++;
    return f;
}

const char *ext_format_name(const char *format, Py_ssize_t itemsize)
{
    const char *f = bare_format(format);
    if (f[0] && !f[1]) switch (f[0]) {
        case 'B': return "uint8";
        case 'b': return "int8";
        case 'c': return "char";
        case '?': return "bool";
        case 'H': return "uint16";
        case 'h': return "int16";
        case 'e': return "float16";
        case 'f': return "float32";
        case 'd': return "float64";
        case 'g': return "longdouble";
        case 'i': return "int32";
        case 'I': return "uint32";
        case 'l': case 'q': return itemsize == 8 ? "int64" : "int32";
        case 'L': case 'Q': return itemsize == 8 ? "uint64" : "uint32";
        case 'Z': return "complex";
        }
    return "an unsupported element type";
}

static const char *kind_name(elem_kind kind)
{
    switch (kind) {
    case EL_U8: return "uint8 (numpy.uint8 or torch.uint8)";
    case EL_F32: return "float32 (numpy.float32 or torch.float32)";
    case EL_BF16: return "bfloat16 (torch.bfloat16, or numpy.uint16 holding bf16 bits)";
    case EL_I32: return "int32 (numpy.int32 or torch.int32)";
    }
    return "?";
}

static int format_ok(const Py_buffer *v, elem_kind kind)
{
    const char *f = bare_format(v->format);
    if (f[0] == '\0' || f[1] != '\0') return 0;
    switch (kind) {
    case EL_U8: return v->itemsize == 1 && (f[0] == 'B' || f[0] == 'c');
    case EL_F32: return v->itemsize == 4 && f[0] == 'f';
    case EL_I32: return v->itemsize == 4 && (f[0] == 'i' || f[0] == 'l');
    case EL_BF16: return v->itemsize == 2 && f[0] == 'H'; /* int16 is a number, not bf16 bits */
    }
    return 0;
}

static void shape_text(char *buf, size_t size, const Py_buffer *v)
{
    size_t used = 0;
    used += (size_t)snprintf(buf + used, size - used, "(");
    for (int i = 0; i < v->ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%zd", i ? ", " : "", v->shape[i]);
    if (used < size) snprintf(buf + used, size - used, v->ndim == 1 ? ",)" : ")");
}

int matrix_get(PyObject *obj, const char *name, elem_kind kind, int flags, matrix *m)
{
    memset(m, 0, sizeof *m);
    if (obj == NULL || obj == Py_None) {
        PyErr_Format(PyExc_TypeError, "%s is missing: it must be a 2-D array of %s", name, kind_name(kind));
        return -1;
    }
    if (!PyObject_CheckBuffer(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a 2-D array of %s (a numpy array, a torch CPU tensor or another "
                     "buffer); got a %.100s", name, kind_name(kind), Py_TYPE(obj)->tp_name);
        return -1;
    }
    int want = PyBUF_STRIDES | PyBUF_FORMAT | ((flags & MAT_WRITABLE) ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &m->view, want) != 0) {
        if ((flags & MAT_WRITABLE) && PyObject_GetBuffer(obj, &m->view, PyBUF_STRIDES | PyBUF_FORMAT) == 0) {
            PyBuffer_Release(&m->view);
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s is read-only: the result is written into it", name);
        }
        return -1;
    }
    m->held = 1;
    Py_buffer *v = &m->view;
    char shape[160];
    shape_text(shape, sizeof shape, v);
    if (!format_ok(v, kind)) {
        PyErr_Format(PyExc_TypeError, "%s must be %s; got %s elements (shape %s)", name, kind_name(kind),
                     ext_format_name(v->format, v->itemsize), shape);
        goto fail;
    }
    if (v->ndim != 2) {
        PyErr_Format(PyExc_ValueError, "%s must be a 2-D array; got %d-D, shape %s", name, v->ndim, shape);
        goto fail;
    }
    Py_ssize_t rows = v->shape[0], cols = v->shape[1], isz = v->itemsize;
    Py_ssize_t rs = v->strides ? v->strides[0] : cols * isz, cs = v->strides ? v->strides[1] : isz;
    /* a dimension of one element may have any stride, and an empty array any strides */
    int rows_ok = cols <= 1 || rows == 0 || cs == isz;
    int ld_ok = rows <= 1 || cols == 0 || (rs > 0 && rs % isz == 0 && rs / isz >= cols);
    int contiguous = rows_ok && (rows <= 1 || rs == cols * isz);
    if ((flags & MAT_CONTIGUOUS) && !contiguous) {
        PyErr_Format(PyExc_ValueError, "%s must be C-contiguous (strides (%zd, %zd) bytes for shape %s; got (%zd, "
                     "%zd)); numpy.ascontiguousarray(x), or x.contiguous() for a tensor, is",
                     name, cols * isz, isz, shape, rs, cs);
        goto fail;
    }
    if (!rows_ok || !ld_ok) {
        PyErr_Format(PyExc_ValueError, "%s must have contiguous rows (its last dimension's stride one element, "
                     "the rows in order; got strides (%zd, %zd) bytes for shape %s); numpy.ascontiguousarray(x), or "
                     "x.contiguous() for a tensor, has",
                     name, rs, cs, shape);
        goto fail;
    }
    m->ptr = v->buf;
    m->rows = rows, m->cols = cols;
    m->ld = rows <= 1 ? (cols > 0 ? cols : 1) : rs / isz;
    if (m->ld < 1) m->ld = 1;
    return 0;
fail:
    matrix_release(m);
    return -1;
}

void matrix_release(matrix *m)
{
    if (m->held) PyBuffer_Release(&m->view);
    m->held = 0;
}

int matrix_shape_error(const char *name, const matrix *m, const char *want_fmt, ...)
{
    char want[256];
    va_list ap;
    va_start(ap, want_fmt);
    vsnprintf(want, sizeof want, want_fmt, ap);
    va_end(ap);
    PyErr_Format(PyExc_ValueError, "%s must have shape %s; got (%lld, %lld)", name, want, (long long)m->rows,
                 (long long)m->cols);
    return -1;
}
