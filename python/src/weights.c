/* a2amm.Weights (prepared once) and the single-rank matmul over them. */
#include "ext.h"

#include <structmember.h>

static int weights_init(WeightsObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"b_codes", "b_scales", "fmt", "threads", NULL};
    PyObject *bo, *sbo, *fmt = NULL;
    int threads = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|Oi:Weights", kwlist, &bo, &sbo, &fmt, &threads)) return -1;
    if (self->w) {
        PyErr_SetString(PyExc_ValueError, "Weights are made once: make another Weights object");
        return -1;
    }
    a2amm_fp8_type type = A2AMM_E4M3;
    if (fmt && fmt != Py_None && ext_fmt(fmt, "fmt", &type) < 0) return -1;
    if (threads < 0) {
        PyErr_Format(PyExc_ValueError, "threads must be 0 (every core) or positive; got %d", threads);
        return -1;
    }
    matrix b, sb;
    if (matrix_get(bo, "b_codes", EL_U8, MAT_ROWS, &b) < 0) return -1;
    if (b.cols % 32 != 0 || b.cols == 0 || b.rows == 0) {
        matrix_shape_error("b_codes", &b, "[n, k] with n >= 1 and k a positive multiple of 32 (B transposed: one row "
                           "per output column)");
        matrix_release(&b);
        return -1;
    }
    if (matrix_get(sbo, "b_scales", EL_U8, MAT_ROWS, &sb) < 0 || check_scales("b_scales", &sb, b.rows, b.cols, "n") < 0) {
        matrix_release(&b);
        matrix_release(&sb);
        return -1;
    }
    a2amm_error err = {0, ""};
    a2amm_weights *w = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = lib_weights_create((const uint8_t *)b.ptr, (const uint8_t *)sb.ptr, b.rows, b.cols, sb.ld, type, threads, &w,
                            &err);
    Py_END_ALLOW_THREADS
    matrix_release(&b);
    matrix_release(&sb);
    if (rc) {
        ext_raise(rc, &err);
        return -1;
    }
    self->w = w;
    self->n = b.rows, self->k = b.cols, self->type = type;
    return 0;
}

static PyObject *weights_close(WeightsObject *self, PyObject *unused)
{
    (void)unused;
    if (self->users > 0) {
        PyErr_Format(PyExc_ValueError, "these Weights are in use by %zd op(s) or matmul call(s): close the ops, or "
                     "give them other weights, first", self->users);
        return NULL;
    }
    lib_weights_destroy(self->w);
    self->w = NULL;
    Py_RETURN_NONE;
}

static void weights_dealloc(WeightsObject *self)
{
    lib_weights_destroy(self->w); /* no op uses them: an op holds a reference */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *weights_exit(WeightsObject *self, PyObject *args)
{
    (void)args;
    return weights_close(self, NULL);
}

static PyObject *weights_get_fmt(WeightsObject *self, void *c)
{
    (void)c;
    return PyUnicode_FromString(lib_fmt_name(self->type));
}

static PyObject *weights_get_closed(WeightsObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->w == NULL);
}

static PyMethodDef WEIGHTS_METHODS[] = {
    {"close", (PyCFunction)weights_close, METH_NOARGS, "Frees the prepared weights (refused while an op uses them)."},
    {"__enter__", ext_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)weights_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

/* Shared with BF16AWeights (bf16a.c), whose object has the same layout. */
PyMemberDef ext_weights_members[] = {
    {"n", T_LONGLONG, offsetof(WeightsObject, n), READONLY, "output columns (rows of B transposed)"},
    {"k", T_LONGLONG, offsetof(WeightsObject, k), READONLY, "the inner dimension"},
    {NULL, 0, 0, 0, NULL},
};

PyGetSetDef ext_weights_getset[] = {
    {"fmt", (getter)weights_get_fmt, NULL, "the fp8 format of B", NULL},
    {"closed", (getter)weights_get_closed, NULL, "whether close() freed them", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject WeightsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "a2amm._a2amm.Weights",
    .tp_basicsize = sizeof(WeightsObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)weights_init,
    .tp_dealloc = (destructor)weights_dealloc,
    .tp_methods = WEIGHTS_METHODS,
    .tp_members = ext_weights_members,
    .tp_getset = ext_weights_getset,
};

/* 0 with the prepared weights of w, or -1 with a TypeError/ValueError. */
static int weights_of(PyObject *wo, WeightsObject **out)
{
    if (!PyObject_TypeCheck(wo, &WeightsType)) {
        PyErr_Format(PyExc_TypeError, "weights must be an a2amm.Weights (prepared once from b_codes and b_scales); "
                     "got a %.100s", Py_TYPE(wo)->tp_name);
        return -1;
    }
    *out = (WeightsObject *)wo;
    if (!(*out)->w) {
        PyErr_SetString(PyExc_ValueError, "these Weights are closed");
        return -1;
    }
    return 0;
}

int ext_weights_of(PyObject *wo, WeightsObject **out) { return weights_of(wo, out); }

PyObject *ext_matmul(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"a_codes", "a_scales", "weights", "fmt", "out", "threads", "f32", NULL};
    PyObject *ao, *sao, *wo, *fmt = NULL, *outo = NULL;
    int threads = 0, f32 = 0; /* f32: the fp32 sums (a2amm_matmul_f32), not their bf16 rounding */
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|OOip:matmul", kwlist, &ao, &sao, &wo, &fmt, &outo, &threads,
                                     &f32))
        return NULL;
    WeightsObject *w;
    a2amm_fp8_type type = A2AMM_E4M3;
    if (weights_of(wo, &w) < 0 || (fmt && fmt != Py_None && ext_fmt(fmt, "fmt", &type) < 0)) return NULL;
    if (threads < 0) return PyErr_Format(PyExc_ValueError, "threads must be 0 (every core) or positive; got %d", threads);
    matrix a, sa, out;
    if (matrix_get(ao, "a_codes", EL_U8, MAT_ROWS, &a) < 0) return NULL;
    if (a.cols != w->k) {
        matrix_shape_error("a_codes", &a, "[m, k] with k = %lld (the weights')", (long long)w->k);
        matrix_release(&a);
        return NULL;
    }
    if (matrix_get(sao, "a_scales", EL_U8, MAT_ROWS, &sa) < 0 || check_scales("a_scales", &sa, a.rows, a.cols, "m") < 0) {
        matrix_release(&a);
        matrix_release(&sa);
        return NULL;
    }
    PyObject *res = NULL;
    if (outo && outo != Py_None) res = Py_NewRef(outo);
    else res = ext_new_array(f32 ? ext_np_f32 : ext_np_u16, a.rows, w->n);
    int ok = res && matrix_get(res, "out", f32 ? EL_F32 : EL_BF16, MAT_ROWS | MAT_WRITABLE, &out) == 0;
    if (ok && (out.rows != a.rows || out.cols != w->n)) {
        matrix_shape_error("out", &out, "[m, n] = [%lld, %lld] (%s)", (long long)a.rows, (long long)w->n,
                           f32 ? "float32" : "bf16");
        matrix_release(&out);
        ok = 0;
    }
    a2amm_error err = {0, ""};
    int rc = A2AMM_OK;
    if (ok) {
        Py_INCREF(w); /* the weights stay, and stay open, while the GIL is released */
        w->users++;
        Py_BEGIN_ALLOW_THREADS
        rc = f32 ? lib_matmul_f32(w->w, (const uint8_t *)a.ptr, a.ld, (const uint8_t *)sa.ptr, sa.ld, a.rows, type,
                                  (float *)out.ptr, out.ld, threads, &err)
                 : lib_matmul(w->w, (const uint8_t *)a.ptr, a.ld, (const uint8_t *)sa.ptr, sa.ld, a.rows, type,
                              (uint16_t *)out.ptr, out.ld, threads, &err);
        Py_END_ALLOW_THREADS
        w->users--;
        Py_DECREF(w);
        matrix_release(&out);
    }
    matrix_release(&a);
    matrix_release(&sa);
    if (!ok || rc) {
        Py_XDECREF(res);
        return ok ? ext_raise(rc, &err) : NULL;
    }
    return res;
}
