/*
 * The C side of a2amm.MoE (a2amm/__init__.py) over a2amm_moe: made once per
 * communicator (collective), weights set locally, one collective call per
 * step on the caller's arrays (2-D here: the Python class flattens the
 * experts' axis). Calls release the GIL and count as calls in flight on
 * the communicator (comm_call_begin), so a close waits for them or refuses.
 */
#include "ext.h"

#include <string.h>
#include <structmember.h>

typedef struct MoEObject {
    PyObject_HEAD
    a2amm_moe *moe; /* NULL once closed */
    CommObject *comm;
    lib_moe_options o;
    int local;      /* experts a rank: E / R */
    int busy;       /* a call of it in flight on some thread */
    PyObject *weakrefs;
} MoEObject;

typedef struct make_args {
    a2amm_comm *comm;
    const lib_moe_options *o;
    a2amm_moe *moe;
} make_args;

static int make_moe(void *arg, a2amm_error *err)
{
    make_args *a = arg;
    return lib_moe_create(a->comm, a->o, &a->moe, err);
}

static int moe_init(MoEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"comm", "experts", "topk", "hidden", "inter", "max_tokens", "max_recv", "a_fmt", "w_fmt",
                             "threads", "timeout", NULL};
    PyObject *co, *afmt = NULL, *wfmt = NULL;
    int experts = 0, topk = 0, threads = 0;
    long long hidden = 0, inter = 0, max_tokens = 0, max_recv = 0;
    double timeout = 0;
    if (self->moe || self->comm) {
        PyErr_SetString(PyExc_ValueError, "a MoE is made once: make another");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O$iiLLLLOOid:MoE", kwlist, &co, &experts, &topk, &hidden, &inter,
                                     &max_tokens, &max_recv, &afmt, &wfmt, &threads, &timeout))
        return -1;
    if (!PyObject_TypeCheck(co, &CommType)) {
        PyErr_Format(PyExc_TypeError, "comm must be an a2amm.Comm (from a2amm.launch or a2amm.Comm.from_mpi); got a "
                     "%.100s", Py_TYPE(co)->tp_name);
        return -1;
    }
    CommObject *c = (CommObject *)co;
    if (comm_check_usable(c, "MoE") < 0) return -1;
    lib_moe_options o = {experts, topk, hidden, inter, max_tokens, max_recv, A2AMM_E4M3, A2AMM_E4M3, threads, timeout};
    if ((afmt && afmt != Py_None && ext_fmt(afmt, "a_fmt", &o.a_type) < 0) ||
        (wfmt && wfmt != Py_None && ext_fmt(wfmt, "w_fmt", &o.b_type) < 0)) {
        comm_fail_for_error(c); /* the other ranks are (or will be) in this collective call */
        return -1;
    }
    a2amm_error err = {0, ""};
    make_args made = {c->comm, &o, NULL};
    int rc;
    if (comm_collective(c, "MoE", make_moe, &made, &err, &rc) < 0) {
        lib_moe_destroy(made.moe);
        return -1;
    }
    a2amm_moe *moe = made.moe;
    if (rc) {
        ext_raise(rc, &err);
        return -1;
    }
    self->moe = moe;
    self->comm = (CommObject *)Py_NewRef(co);
    self->o = o;
    self->local = experts / c->size;
    PyObject *r = PyObject_CallMethod(co, "_track", "O", (PyObject *)self);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}

void moe_close_object(PyObject *o)
{
    MoEObject *self = (MoEObject *)o;
    lib_moe_destroy(self->moe);
    self->moe = NULL;
}

/* 0 when it can be called now, else a ValueError and -1 (closed) or -2 (in a call on another thread: that
 * call goes on, and the refusal must not fail the communicator). */
static int moe_usable(MoEObject *self, const char *call)
{
    if (!self->moe) {
        PyErr_Format(PyExc_ValueError, "%s: the MoE is closed", call);
        return -1;
    }
    if (self->busy) {
        PyErr_Format(PyExc_ValueError, "%s: the MoE is in a call from another thread", call);
        return -2;
    }
    return comm_check_usable(self->comm, call);
}

static PyObject *moe_close(MoEObject *self, PyObject *unused)
{
    (void)unused;
    if (self->busy) {
        PyErr_SetString(PyExc_ValueError, "close: the MoE is in a call from another thread: close it once that call "
                        "has returned");
        return NULL;
    }
    moe_close_object((PyObject *)self);
    Py_RETURN_NONE;
}

/* _set_weights(w13 [E/R*2I, H], s13 [E/R*2I, >= H/32], w2 [E/R*H, I], s2 [E/R*H, >= I/32]): local. */
static PyObject *moe_set_weights(MoEObject *self, PyObject *args)
{
    PyObject *obj[4];
    if (!PyArg_ParseTuple(args, "OOOO:_set_weights", &obj[0], &obj[1], &obj[2], &obj[3])) return NULL;
    if (moe_usable(self, "set_weights") < 0) return NULL;
    static const char *const names[4] = {"w13 codes", "w13 scales", "w2 codes", "w2 scales"};
    const int64_t H = self->o.hidden, I = self->o.inter, L = self->local;
    const int64_t rows[4] = {L * 2 * I, L * 2 * I, L * H, L * H}, cols[4] = {H, H / 32, I, I / 32};
    matrix m[4];
    memset(m, 0, sizeof m);
    int ok = 1;
    for (int i = 0; ok && i < 4; i++) {
        ok = matrix_get(obj[i], names[i], EL_U8, MAT_ROWS, &m[i]) == 0;
        if (ok && (m[i].rows != rows[i] || (i % 2 ? m[i].cols < cols[i] : m[i].cols != cols[i]))) {
            matrix_shape_error(names[i], &m[i], "[%lld, %s%lld] (this rank's %lld experts)", (long long)rows[i],
                               i % 2 ? ">= " : "", (long long)cols[i], (long long)L);
            ok = 0;
        }
    }
    a2amm_error err = {0, ""};
    int rc = 0;
    if (ok) {
        self->busy = 1;
        comm_call_begin(self->comm, "set_weights", 0);
        Py_BEGIN_ALLOW_THREADS
        rc = lib_moe_set_weights(self->moe, (const uint8_t *)m[0].ptr, (const uint8_t *)m[1].ptr, m[1].ld,
                                 (const uint8_t *)m[2].ptr, (const uint8_t *)m[3].ptr, m[3].ld, &err);
        Py_END_ALLOW_THREADS
        comm_call_end(self->comm, 0);
        self->busy = 0;
    }
    for (int i = 0; i < 4; i++) matrix_release(&m[i]);
    if (!ok) return NULL;
    if (rc) return ext_raise(rc, &err);
    Py_RETURN_NONE;
}

/* _run(x [T, H] u8, sx [T, >= H/32] u8, idx [T, k] int32, w [T, k] float32, out [T, H] uint16 or None) -> out:
 * collective. A bad argument fails the communicator (the others are in this call). */
static PyObject *moe_run(MoEObject *self, PyObject *args)
{
    PyObject *xo, *sxo, *io, *wo, *outo;
    if (!PyArg_ParseTuple(args, "OOOOO:_run", &xo, &sxo, &io, &wo, &outo)) return NULL;
    int usable = moe_usable(self, "MoE call");
    if (usable == -2) return NULL; /* the call running on another thread goes on, and so do the others */
    if (usable < 0) {
        comm_fail_for_error(self->comm);
        return NULL;
    }
    const int64_t H = self->o.hidden, k = self->o.topk;
    matrix x, sx, idx, w, out;
    memset(&x, 0, sizeof x), memset(&sx, 0, sizeof sx), memset(&idx, 0, sizeof idx), memset(&w, 0, sizeof w);
    memset(&out, 0, sizeof out);
    PyObject *res = NULL;
    int ok = matrix_get(xo, "x codes", EL_U8, MAT_CONTIGUOUS, &x) == 0;
    const int64_t T = ok ? x.rows : 0;
    if (ok && x.cols != H) ok = matrix_shape_error("x codes", &x, "[tokens, hidden] = [tokens, %lld]", (long long)H) == 0;
    if (ok) ok = matrix_get(sxo, "x scales", EL_U8, MAT_ROWS, &sx) == 0;
    if (ok && (sx.rows != T || sx.cols < H / 32))
        ok = matrix_shape_error("x scales", &sx, "[%lld, >= %lld]", (long long)T, (long long)(H / 32)) == 0;
    if (ok) ok = matrix_get(io, "topk_idx", EL_I32, MAT_CONTIGUOUS, &idx) == 0;
    if (ok && (idx.rows != T || idx.cols != k))
        ok = matrix_shape_error("topk_idx", &idx, "[tokens, topk] = [%lld, %lld]", (long long)T, (long long)k) == 0;
    if (ok) ok = matrix_get(wo, "topk_w", EL_F32, MAT_CONTIGUOUS, &w) == 0;
    if (ok && (w.rows != T || w.cols != k))
        ok = matrix_shape_error("topk_w", &w, "[tokens, topk] = [%lld, %lld]", (long long)T, (long long)k) == 0;
    if (ok) {
        res = outo == Py_None ? ext_new_array(ext_np_u16, T, H) : Py_NewRef(outo);
        ok = res && matrix_get(res, "out", EL_BF16, MAT_CONTIGUOUS | MAT_WRITABLE, &out) == 0;
    }
    if (ok && (out.rows != T || out.cols != H))
        ok = matrix_shape_error("out", &out, "[tokens, hidden] = [%lld, %lld] (bf16)", (long long)T, (long long)H) == 0;
    a2amm_error err = {0, ""};
    int rc = 0, interrupted = 0;
    if (ok) {
        call_guard g;
        self->busy = 1;
        comm_call_begin(self->comm, "MoE call", 1);
        guard_enter(&g, self->comm->comm);
        Py_BEGIN_ALLOW_THREADS
        rc = lib_moe_run(self->moe, T, (const uint8_t *)x.ptr, (const uint8_t *)sx.ptr, sx.ld,
                         (const int32_t *)idx.ptr, (const float *)w.ptr, (uint16_t *)out.ptr, &err);
        Py_END_ALLOW_THREADS
        comm_call_end(self->comm, 1);
        self->busy = 0;
        interrupted = guard_leave(&g) < 0;
    }
    matrix_release(&x), matrix_release(&sx), matrix_release(&idx), matrix_release(&w), matrix_release(&out);
    if (!ok) {
        Py_XDECREF(res);
        comm_fail_for_error(self->comm);
        return NULL;
    }
    if (interrupted || rc) {
        Py_XDECREF(res);
        return interrupted ? NULL : ext_raise(rc, &err);
    }
    return res;
}

static int moe_traverse(MoEObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->comm);
    return 0;
}

static void moe_dealloc(MoEObject *self)
{
    PyObject_GC_UnTrack(self);
    if (self->weakrefs) PyObject_ClearWeakRefs((PyObject *)self);
    moe_close_object((PyObject *)self);
    Py_CLEAR(self->comm);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *moe_enter(PyObject *self, PyObject *unused)
{
    (void)unused;
    return Py_NewRef(self);
}

static PyObject *moe_exit(MoEObject *self, PyObject *args)
{
    (void)args;
    PyObject *r = PyObject_CallMethod((PyObject *)self, "close", NULL);
    if (!r) return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static PyObject *get_closed(MoEObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->moe == NULL);
}

static PyObject *get_comm(MoEObject *self, void *c)
{
    (void)c;
    return Py_NewRef(self->comm ? (PyObject *)self->comm : Py_None);
}

static PyObject *get_fmt(MoEObject *self, void *which)
{
    return PyUnicode_FromString(lib_fmt_name(which ? self->o.b_type : self->o.a_type));
}

static PyGetSetDef MOE_GETSET[] = {
    {"closed", (getter)get_closed, NULL, "whether it is closed", NULL},
    {"comm", (getter)get_comm, NULL, "the communicator it was made on", NULL},
    {"a_fmt", (getter)get_fmt, NULL, "x's fp8 format", NULL},
    {"w_fmt", (getter)get_fmt, NULL, "the experts' weights' fp8 format", (void *)1},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef MOE_MEMBERS[] = {
    {"experts", T_INT, offsetof(MoEObject, o.experts), READONLY, "E: experts over every rank"},
    {"topk", T_INT, offsetof(MoEObject, o.topk), READONLY, "k: slots a token"},
    {"hidden", T_LONGLONG, offsetof(MoEObject, o.hidden), READONLY, "H"},
    {"inter", T_LONGLONG, offsetof(MoEObject, o.inter), READONLY, "I: the experts' inner size"},
    {"max_tokens", T_LONGLONG, offsetof(MoEObject, o.max_tokens), READONLY, "the most tokens of a rank's call"},
    {"local_experts", T_INT, offsetof(MoEObject, local), READONLY, "E / R: this rank's experts"},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef MOE_METHODS[] = {
    {"_set_weights", (PyCFunction)moe_set_weights, METH_VARARGS, NULL},
    {"_run", (PyCFunction)moe_run, METH_VARARGS, NULL},
    {"close", (PyCFunction)moe_close, METH_NOARGS, "close(): local; frees it (refused while a call of it runs)."},
    {"__enter__", moe_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)moe_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

PyTypeObject MoEType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "a2amm._a2amm.MoE",
    .tp_basicsize = sizeof(MoEObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The C side of a2amm.MoE.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)moe_init,
    .tp_dealloc = (destructor)moe_dealloc,
    .tp_traverse = (traverseproc)moe_traverse,
    .tp_weaklistoffset = offsetof(MoEObject, weakrefs),
    .tp_methods = MOE_METHODS,
    .tp_members = MOE_MEMBERS,
    .tp_getset = MOE_GETSET,
};
