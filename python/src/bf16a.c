/*
 * a2amm.BF16AWeights (MX weights prepared for a bf16 A: the MoE op's down
 * projection), matmul_bf16a over them, and swiglu (the MoE activation):
 * with matmul(..., f32=True) a caller's own experts give the MoE op's bits.
 */
#include "ext.h"

typedef struct BF16AWeightsObject {
    PyObject_HEAD
    a2amm_bf16a_weights *w;
    int64_t n, k;
    a2amm_fp8_type type;
    Py_ssize_t users; /* matmul_bf16a calls running with the GIL released */
} BF16AWeightsObject;

/* Weights' members and getters serve this type too: the same fields at the same places. */
#define SAME_PLACE(f) (offsetof(BF16AWeightsObject, f) == offsetof(WeightsObject, f))
_Static_assert(SAME_PLACE(w) && SAME_PLACE(n) && SAME_PLACE(k) && SAME_PLACE(type) && SAME_PLACE(users),
               "BF16AWeightsObject is laid out as WeightsObject");

static int bf16a_init(BF16AWeightsObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"b_codes", "b_scales", "fmt", NULL};
    PyObject *bo, *sbo, *fmt = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:BF16AWeights", kwlist, &bo, &sbo, &fmt)) return -1;
    if (self->w) {
        PyErr_SetString(PyExc_ValueError, "BF16AWeights are made once: make another BF16AWeights object");
        return -1;
    }
    a2amm_fp8_type type = A2AMM_E4M3;
    if (fmt && fmt != Py_None && ext_fmt(fmt, "fmt", &type) < 0) return -1;
    matrix b, sb;
    if (matrix_get(bo, "b_codes", EL_U8, MAT_ROWS, &b) < 0) return -1;
    if (b.rows == 0 || b.cols == 0 || b.rows % 32 || b.cols % 32) {
        matrix_shape_error("b_codes", &b, "[n, k] with n and k positive multiples of 32 (B transposed: one row per "
                           "output column)");
        matrix_release(&b);
        return -1;
    }
    if (matrix_get(sbo, "b_scales", EL_U8, MAT_ROWS, &sb) < 0 || check_scales("b_scales", &sb, b.rows, b.cols, "n") < 0) {
        matrix_release(&b);
        matrix_release(&sb);
        return -1;
    }
    a2amm_error err = {0, ""};
    a2amm_bf16a_weights *w = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = lib_bf16a_weights_create((const uint8_t *)b.ptr, (const uint8_t *)sb.ptr, b.rows, b.cols, sb.ld, type, &w,
                                  &err);
    Py_END_ALLOW_THREADS
    matrix_release(&b);
    matrix_release(&sb);
    if (rc) {
        ext_raise(rc, &err);
        return -1;
    }
    self->w = w, self->n = b.rows, self->k = b.cols, self->type = type;
    return 0;
}

static PyObject *bf16a_close(BF16AWeightsObject *self, PyObject *unused)
{
    (void)unused;
    if (self->users > 0) {
        PyErr_Format(PyExc_ValueError, "these BF16AWeights are in use by %zd matmul_bf16a call(s): close them once "
                     "those have returned", self->users);
        return NULL;
    }
    lib_bf16a_weights_destroy(self->w);
    self->w = NULL;
    Py_RETURN_NONE;
}

static void bf16a_dealloc(BF16AWeightsObject *self)
{
    lib_bf16a_weights_destroy(self->w); /* a running call holds a reference: none runs now */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *bf16a_exit(BF16AWeightsObject *self, PyObject *args)
{
    (void)args;
    return bf16a_close(self, NULL);
}

static PyMethodDef BF16A_METHODS[] = {
    {"close", (PyCFunction)bf16a_close, METH_NOARGS, "Frees the prepared weights (refused while a call uses them)."},
    {"__enter__", ext_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)bf16a_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

PyTypeObject BF16AWeightsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "a2amm._a2amm.BF16AWeights",
    .tp_basicsize = sizeof(BF16AWeightsObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)bf16a_init,
    .tp_dealloc = (destructor)bf16a_dealloc,
    .tp_methods = BF16A_METHODS,
    .tp_members = ext_weights_members,
    .tp_getset = ext_weights_getset,
};

/* matmul_bf16a(a [m, k] bf16 bits, weights, out=None, threads=0) -> y [m, n] float32: local, the GIL released. */
PyObject *ext_matmul_bf16a(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"a", "weights", "out", "threads", NULL};
    PyObject *ao, *wo, *outo = NULL;
    int threads = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|Oi:matmul_bf16a", kwlist, &ao, &wo, &outo, &threads)) return NULL;
    if (threads < 0) return PyErr_Format(PyExc_ValueError, "threads must be 0 (every core) or positive; got %d", threads);
    if (!PyObject_TypeCheck(wo, &BF16AWeightsType))
        return PyErr_Format(PyExc_TypeError, "weights must be an a2amm.BF16AWeights (prepared once from b_codes and "
                            "b_scales); got a %.100s", Py_TYPE(wo)->tp_name);
    BF16AWeightsObject *w = (BF16AWeightsObject *)wo;
    if (!w->w) {
        PyErr_SetString(PyExc_ValueError, "these BF16AWeights are closed");
        return NULL;
    }
    matrix a, y;
    if (matrix_get(ao, "a", EL_BF16, MAT_ROWS, &a) < 0) return NULL;
    if (a.cols != w->k) {
        matrix_shape_error("a", &a, "[m, k] bf16 with k = %lld (the weights')", (long long)w->k);
        matrix_release(&a);
        return NULL;
    }
    PyObject *res = outo && outo != Py_None ? Py_NewRef(outo) : ext_new_array(ext_np_f32, a.rows, w->n);
    int ok = res && matrix_get(res, "out", EL_F32, MAT_ROWS | MAT_WRITABLE, &y) == 0;
    if (ok && (y.rows != a.rows || y.cols != w->n)) {
        matrix_shape_error("out", &y, "[m, n] = [%lld, %lld] (float32)", (long long)a.rows, (long long)w->n);
        matrix_release(&y);
        ok = 0;
    }
    a2amm_error err = {0, ""};
    int rc = A2AMM_OK;
    if (ok) {
        Py_INCREF(w); /* the weights stay, and stay open, while the GIL is released */
        w->users++;
        Py_BEGIN_ALLOW_THREADS
        rc = lib_matmul_bf16a(w->w, (const uint16_t *)a.ptr, a.ld, a.rows, (float *)y.ptr, y.ld, threads, &err);
        Py_END_ALLOW_THREADS
        w->users--;
        Py_DECREF(w);
        matrix_release(&y);
    }
    matrix_release(&a);
    if (!ok || rc) {
        Py_XDECREF(res);
        return ok ? ext_raise(rc, &err) : NULL;
    }
    return res;
}

/* swiglu(g [m, n] float32, u [m, n] float32) -> a [m, n] bf16 bits: bf16(silu(g) u), the MoE op's rule. */
PyObject *ext_swiglu(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *go, *uo;
    if (!PyArg_ParseTuple(args, "OO:swiglu", &go, &uo)) return NULL;
    matrix g, u, a;
    if (matrix_get(go, "g", EL_F32, MAT_ROWS, &g) < 0) return NULL;
    if (matrix_get(uo, "u", EL_F32, MAT_ROWS, &u) < 0) {
        matrix_release(&g);
        return NULL;
    }
    PyObject *res = NULL;
    if (u.rows != g.rows || u.cols != g.cols)
        matrix_shape_error("u", &u, "g's shape [%lld, %lld]", (long long)g.rows, (long long)g.cols);
    else
        res = ext_new_array(ext_np_u16, g.rows, g.cols);
    if (res && matrix_get(res, "a", EL_BF16, MAT_CONTIGUOUS | MAT_WRITABLE, &a) == 0) {
        for (int64_t i = 0; i < g.rows; i++)
            lib_swiglu((const float *)g.ptr + i * g.ld, (const float *)u.ptr + i * u.ld, g.cols,
                       (uint16_t *)a.ptr + i * a.ld);
        matrix_release(&a);
    } else {
        Py_CLEAR(res);
    }
    matrix_release(&g);
    matrix_release(&u);
    return res;
}
