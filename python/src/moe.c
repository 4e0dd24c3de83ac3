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
#include <time.h>

typedef struct MoEObject {
    PyObject_HEAD
    a2amm_moe *moe; /* NULL once closed */
    CommObject *comm;
    lib_moe_options o;
    int local;      /* experts a rank: E / R */
    int busy;       /* a call of it in flight on some thread */
    PyObject *shared; /* the a2amm.MoEWeights it borrows (use_weights), or NULL */
    PyObject *weakrefs;
} MoEObject;

/* Lets go of the MoEWeights it borrowed, if any. */
static void drop_shared(MoEObject *self)
{
    if (!self->shared) return;
    ((MoEWeightsObject *)self->shared)->users--;
    Py_CLEAR(self->shared);
}

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
                             "threads", "timeout", "schedule", NULL};
    PyObject *co, *afmt = NULL, *wfmt = NULL;
    int experts = 0, topk = 0, threads = 0, schedule = 0;
    long long hidden = 0, inter = 0, max_tokens = 0, max_recv = 0;
    double timeout = 0;
    if (self->moe || self->comm) {
        PyErr_SetString(PyExc_ValueError, "a MoE is made once: make another");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O$iiLLLLOOidi:MoE", kwlist, &co, &experts, &topk, &hidden, &inter,
                                     &max_tokens, &max_recv, &afmt, &wfmt, &threads, &timeout, &schedule))
        return -1;
    if (!PyObject_TypeCheck(co, &CommType)) {
        PyErr_Format(PyExc_TypeError, "comm must be an a2amm.Comm (from a2amm.launch or a2amm.Comm.from_mpi); got a "
                     "%.100s", Py_TYPE(co)->tp_name);
        return -1;
    }
    CommObject *c = (CommObject *)co;
    if (comm_check_usable(c, "MoE") < 0) return -1;
    lib_moe_options o = {experts, topk, hidden, inter, max_tokens, max_recv, A2AMM_E4M3, A2AMM_E4M3, threads, timeout,
                         schedule};
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

/* moe_heap_bytes(R, experts, topk, hidden, inter, max_tokens, max_recv, a_fmt, w_fmt, schedule) -> bytes:
 * a2amm_moe_heap_bytes of the config MoE(...) would make (schedule as moe_init takes it: 0 fused, 1 unfused,
 * 2 overlap). */
PyObject *ext_moe_heap_bytes(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"R", "experts", "topk", "hidden", "inter", "max_tokens", "max_recv", "a_fmt", "w_fmt",
                             "schedule", NULL};
    PyObject *afmt = NULL, *wfmt = NULL;
    int R = 0, experts = 0, topk = 0, schedule = 0;
    long long hidden = 0, inter = 0, max_tokens = 0, max_recv = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "i|$iiLLLLOOi:moe_heap_bytes", kwlist, &R, &experts, &topk, &hidden,
                                     &inter, &max_tokens, &max_recv, &afmt, &wfmt, &schedule))
        return NULL;
    lib_moe_options o = {experts, topk, hidden, inter, max_tokens, max_recv, A2AMM_E4M3, A2AMM_E4M3, 0, 0, schedule};
    if ((afmt && afmt != Py_None && ext_fmt(afmt, "a_fmt", &o.a_type) < 0) ||
        (wfmt && wfmt != Py_None && ext_fmt(wfmt, "w_fmt", &o.b_type) < 0))
        return NULL;
    a2amm_error err = {0, ""};
    size_t bytes = 0;
    int rc = lib_moe_heap_bytes(&o, R, &bytes, &err);
    if (rc) return ext_raise(rc, &err);
    return PyLong_FromSize_t(bytes);
}

void moe_close_object(PyObject *o)
{
    MoEObject *self = (MoEObject *)o;
    lib_moe_destroy(self->moe);
    self->moe = NULL;
    drop_shared(self);
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

/* A local call of the library on this rank's op (name): busy, counted on its communicator (a close waits for
 * it), the GIL released. fn's status. */
static int moe_local(MoEObject *self, const char *name, int (*fn)(void *arg, a2amm_error *err), void *arg,
                     a2amm_error *err)
{
    int rc;
    self->busy = 1;
    comm_call_begin(self->comm, name, 0);
    Py_BEGIN_ALLOW_THREADS
    rc = fn(arg, err);
    Py_END_ALLOW_THREADS
    comm_call_end(self->comm, 0);
    self->busy = 0;
    return rc;
}

typedef struct set_weights_args {
    a2amm_moe *moe;
    const matrix *m; /* w13, s13, w2, s2 */
} set_weights_args;

static int do_set_weights(void *p, a2amm_error *err)
{
    const set_weights_args *a = p;
    const matrix *m = a->m;
    return lib_moe_set_weights(a->moe, (const uint8_t *)m[0].ptr, (const uint8_t *)m[1].ptr, m[1].ld,
                               (const uint8_t *)m[2].ptr, (const uint8_t *)m[3].ptr, m[3].ld, err);
}

/* _set_weights(w13 [E/R*2I, H], s13 [E/R*2I, H/32], w2 [E/R*H, I], s2 [E/R*H, I/32]): local (a2amm.MoE.set_weights
 * checks the 3-D shapes the caller gave). */
static PyObject *moe_set_weights(MoEObject *self, PyObject *args)
{
    PyObject *obj[4];
    if (!PyArg_ParseTuple(args, "OOOO:_set_weights", &obj[0], &obj[1], &obj[2], &obj[3])) return NULL;
    if (moe_usable(self, "set_weights") < 0) return NULL;
    matrix m[4];
    int ok = ext_expert_arrays(obj, self->local, self->o.hidden, self->o.inter, m) == 0;
    a2amm_error err = {0, ""};
    int rc = 0;
    if (ok) {
        set_weights_args a = {self->moe, m};
        rc = moe_local(self, "set_weights", do_set_weights, &a, &err);
    }
    for (int i = 0; i < 4; i++) matrix_release(&m[i]);
    if (!ok) return NULL;
    if (rc) return ext_raise(rc, &err);
    drop_shared(self); /* its own copy now */
    Py_RETURN_NONE;
}

/* _use_weights(weights): local; borrows prepared a2amm.MoEWeights (kept alive by a reference). */
static PyObject *moe_use_weights(MoEObject *self, PyObject *wo)
{
    MoEWeightsObject *w;
    if (moe_usable(self, "use_weights") < 0 || ext_moe_weights_of(wo, &w) < 0) return NULL;
    a2amm_error err = {0, ""};
    int rc = lib_moe_use_weights(self->moe, w->w, &err);
    if (rc) return ext_raise(rc, &err);
    drop_shared(self);
    self->shared = Py_NewRef(wo);
    w->users++;
    Py_RETURN_NONE;
}

static PyObject *moe_get_weights(MoEObject *self, void *c)
{
    (void)c;
    return Py_NewRef(self->shared ? self->shared : Py_None);
}

/* A call's token arrays, checked: x [T, H] u8 with sx [T, >= H/32] u8, or x [T, H] float32 / bf16 values
 * quantized here (into codes and scales of its own); idx [T, k] int32, w [T, k] float32. */
typedef struct tokens_in {
    matrix x, sx, idx, w;
    int64_t T;
    const uint8_t *codes, *scales; /* x's codes and scales: the caller's, or `owned` */
    int64_t ldsx;
    uint8_t *owned;                /* the quantized x's codes [T, H] then scales [T, H/32] */
} tokens_in;

static void release_tokens(tokens_in *in)
{
    matrix_release(&in->x), matrix_release(&in->sx), matrix_release(&in->idx), matrix_release(&in->w);
    free(in->owned);
    in->owned = NULL;
}

/* x as values (float32, or bf16 bits), quantized with `mode` ("rceil" or "floor") in C, the GIL released:
 * the call's own quantization, not a Python step before it. 0, or -1 with the error set. */
static int quantize_tokens(const MoEObject *self, PyObject *xo, PyObject *modeo, tokens_in *in)
{
    const int64_t H = self->o.hidden, sw = H / 32;
    const char *mode = PyUnicode_AsUTF8(modeo);
    a2amm_scale_mode smode;
    if (!mode || lib_mode_parse(mode, &smode) != A2AMM_OK) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "mode must be \"rceil\" or \"floor\"; got %R", modeo);
        return -1;
    }
    int bf16;
    if (ext_values_get(xo, "x", &in->x, &bf16) < 0) return -1;
    if (in->x.cols != H) return matrix_shape_error("x", &in->x, "[tokens, hidden] = [tokens, %lld]", (long long)H);
    const int64_t T = in->T = in->x.rows;
    in->owned = malloc((size_t)(T * (H + sw)) + 1);
    if (!in->owned) {
        PyErr_NoMemory();
        return -1;
    }
    a2amm_error err = {0, ""};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = bf16 ? lib_quantize_bf16((const uint16_t *)in->x.ptr, T, H, in->x.ld, self->o.a_type, smode, in->owned, H,
                                  in->owned + T * H, sw, &err)
              : lib_quantize_f32((const float *)in->x.ptr, T, H, in->x.ld, self->o.a_type, smode, in->owned, H,
                                 in->owned + T * H, sw, &err);
    Py_END_ALLOW_THREADS
    if (rc) {
        ext_raise(rc, &err);
        return -1;
    }
    in->codes = in->owned, in->scales = in->owned + T * H, in->ldsx = sw;
    return 0;
}

/* sxo: x's scales, or the mode (a str) when x holds values to quantize. */
static int take_tokens(const MoEObject *self, PyObject *xo, PyObject *sxo, PyObject *io, PyObject *wo, tokens_in *in)
{
    memset(in, 0, sizeof *in);
    const int64_t H = self->o.hidden, k = self->o.topk;
    int ok;
    if (PyUnicode_Check(sxo)) {
        ok = quantize_tokens(self, xo, sxo, in) == 0;
    } else {
        ok = matrix_get(xo, "x codes", EL_U8, MAT_CONTIGUOUS, &in->x) == 0;
        in->T = ok ? in->x.rows : 0;
        if (ok && in->x.cols != H)
            ok = matrix_shape_error("x codes", &in->x, "[tokens, hidden] = [tokens, %lld]", (long long)H) == 0;
        if (ok) ok = matrix_get(sxo, "x scales", EL_U8, MAT_ROWS, &in->sx) == 0;
        if (ok && (in->sx.rows != in->T || in->sx.cols != H / 32))
            ok = matrix_shape_error("x scales", &in->sx, "[tokens, hidden/32] = [%lld, %lld]", (long long)in->T,
                                    (long long)(H / 32)) == 0;
        if (ok) in->codes = (const uint8_t *)in->x.ptr, in->scales = (const uint8_t *)in->sx.ptr, in->ldsx = in->sx.ld;
    }
    const int64_t T = in->T;
    if (ok) ok = matrix_get(io, "topk_idx", EL_I32, MAT_CONTIGUOUS, &in->idx) == 0;
    if (ok && (in->idx.rows != T || in->idx.cols != k))
        ok = matrix_shape_error("topk_idx", &in->idx, "[tokens, topk] = [%lld, %lld]", (long long)T, (long long)k) == 0;
    if (ok) ok = matrix_get(wo, "topk_w", EL_F32, MAT_CONTIGUOUS, &in->w) == 0;
    if (ok && (in->w.rows != T || in->w.cols != k))
        ok = matrix_shape_error("topk_w", &in->w, "[tokens, topk] = [%lld, %lld]", (long long)T, (long long)k) == 0;
    if (!ok) release_tokens(in);
    return ok ? 0 : -1;
}

/* A call's start: usable (busy: refused, the running call goes on), else the communicator failed for the
 * error set. 0, or -1 with the error set. */
static int begin_collective(MoEObject *self, const char *call)
{
    int usable = moe_usable(self, call);
    if (usable == -1) comm_fail_for_error(self->comm);
    return usable < 0 ? -1 : 0;
}

/* What a collective call hands the library: the op, the call's tokens, and where results go. */
typedef struct call_args {
    a2amm_moe *moe;
    const tokens_in *in;
    uint16_t *out;
    a2amm_moe_batch *batch;
    const float *const *y;
} call_args;

static int do_run(void *p, a2amm_error *err)
{
    call_args *a = p;
    return lib_moe_run(a->moe, a->in->T, a->in->codes, a->in->scales, a->in->ldsx,
                       (const int32_t *)a->in->idx.ptr, (const float *)a->in->w.ptr, a->out, err);
}

static int do_dispatch(void *p, a2amm_error *err)
{
    call_args *a = p;
    return lib_moe_dispatch(a->moe, a->in->T, a->in->codes, a->in->scales, a->in->ldsx,
                            (const int32_t *)a->in->idx.ptr, (const float *)a->in->w.ptr, &a->batch, err);
}

static int do_combine(void *p, a2amm_error *err)
{
    call_args *a = p;
    return lib_moe_combine(a->moe, a->batch, a->y, a->out, err);
}

/* One collective call of the MoE (name): busy, counted on its communicator, the GIL released, Ctrl-C watched
 * (comm_collective); fn's status into *rc. -1 when Ctrl-C came (the exception set), else 0. */
static int moe_collective(MoEObject *self, const char *name, int (*fn)(void *arg, a2amm_error *err), call_args *a,
                          a2amm_error *err, int *rc)
{
    self->busy = 1;
    int interrupted = comm_collective(self->comm, name, fn, a, err, rc);
    self->busy = 0;
    return interrupted;
}

/* A collective call's outcome: res (the result array), or NULL with the exception: a refused argument
 * (!ok: the error set, and the communicator failed for it, as the others are in this call), Ctrl-C, or the
 * library's error. */
static PyObject *call_result(MoEObject *self, int ok, int interrupted, int rc, const a2amm_error *err, PyObject *res)
{
    if (!ok) comm_fail_for_error(self->comm);
    if (ok && !interrupted && !rc) return res;
    Py_XDECREF(res);
    return ok && !interrupted ? ext_raise(rc, err) : NULL;
}

/* _run(x [T, H] u8, sx [T, >= H/32] u8, idx [T, k] int32, w [T, k] float32, out [T, H] uint16 or None) -> out:
 * collective. With sx a mode ("rceil" or "floor"), x is float32 or bf16 values, quantized in this call. A bad argument fails the communicator (the others are in this call). */
static PyObject *moe_run(MoEObject *self, PyObject *args)
{
    PyObject *xo, *sxo, *io, *wo, *outo;
    if (!PyArg_ParseTuple(args, "OOOOO:_run", &xo, &sxo, &io, &wo, &outo)) return NULL;
    if (begin_collective(self, "MoE call") < 0) return NULL;
    const int64_t H = self->o.hidden;
    tokens_in in;
    matrix out;
    memset(&out, 0, sizeof out);
    PyObject *res = NULL;
    int ok = take_tokens(self, xo, sxo, io, wo, &in) == 0;
    const int64_t T = in.T;
    if (ok) {
        res = outo == Py_None ? ext_new_array(ext_np_u16, T, H) : Py_NewRef(outo);
        ok = res && matrix_get(res, "out", EL_BF16, MAT_CONTIGUOUS | MAT_WRITABLE, &out) == 0;
        if (ok && (out.rows != T || out.cols != H))
            ok = matrix_shape_error("out", &out, "[tokens, hidden] = [%lld, %lld] (bf16)", (long long)T, (long long)H) == 0;
    }
    a2amm_error err = {0, ""};
    int rc = 0, interrupted = 0;
    if (ok) {
        call_args a = {self->moe, &in, (uint16_t *)out.ptr, NULL, NULL};
        interrupted = moe_collective(self, "MoE call", do_run, &a, &err, &rc) < 0;
        release_tokens(&in);
    }
    matrix_release(&out);
    return call_result(self, ok, interrupted, rc, &err, res);
}

/* _c_loop(x, sx, idx, w, out, iters) -> [seconds]: the library's call alone, each after a barrier, timed, for
 * the benchmark beside the Python call (python/bench/bench_moe.py), as a C program calls it. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static PyObject *moe_c_loop(MoEObject *self, PyObject *args)
{
    PyObject *xo, *sxo, *io, *wo, *outo;
    int iters;
    if (!PyArg_ParseTuple(args, "OOOOOi:_c_loop", &xo, &sxo, &io, &wo, &outo, &iters)) return NULL;
    if (iters < 1 || iters > 1000000) return PyErr_Format(PyExc_ValueError, "_c_loop: iters 1 to 10^6; got %d", iters);
    if (moe_usable(self, "_c_loop") < 0) return NULL;
    tokens_in in;
    if (take_tokens(self, xo, sxo, io, wo, &in) < 0) return NULL;
    matrix out;
    if (matrix_get(outo, "out", EL_BF16, MAT_CONTIGUOUS | MAT_WRITABLE, &out) < 0 || out.rows != in.T ||
        out.cols != self->o.hidden) {
        if (!PyErr_Occurred()) matrix_shape_error("out", &out, "[tokens, hidden] (bf16)");
        matrix_release(&out);
        release_tokens(&in);
        return NULL;
    }
    double *t = calloc((size_t)iters, sizeof *t);
    a2amm_error err = {0, ""};
    int rc = t ? 0 : A2AMM_E_NOMEM;
    self->busy = 1;
    comm_call_begin(self->comm, "MoE call", 1);
    Py_BEGIN_ALLOW_THREADS
    for (int i = 0; !rc && i < iters; i++) {
        rc = lib_comm_barrier(self->comm->comm, self->o.timeout_s > 0 ? self->o.timeout_s : 60, &err);
        double t0 = now_s();
        if (!rc) rc = lib_moe_run(self->moe, in.T, in.codes, in.scales, in.ldsx,
                                  (const int32_t *)in.idx.ptr, (const float *)in.w.ptr, (uint16_t *)out.ptr, &err);
        t[i] = now_s() - t0;
    }
    Py_END_ALLOW_THREADS
    comm_call_end(self->comm, 1);
    self->busy = 0;
    matrix_release(&out);
    release_tokens(&in);
    PyObject *list = NULL;
    if (rc) {
        if (t) ext_raise(rc, &err);
        else PyErr_NoMemory();
    } else {
        list = PyList_New(iters);
        for (int i = 0; list && i < iters; i++) PyList_SET_ITEM(list, i, PyFloat_FromDouble(t[i]));
    }
    free(t);
    return list;
}

/* ---- dispatch and combine alone: a batch between them -------------------------------------------------- */

typedef struct MoEBatchObject {
    PyObject_HEAD
    a2amm_moe_batch *b; /* NULL once combined */
    MoEObject *owner;
    int64_t tokens;     /* the dispatch's: the combine's out has as many rows */
    char torch;         /* set by a2amm.MoE.dispatch: the call took torch tensors */
} MoEBatchObject;

static void batch_dealloc(MoEBatchObject *self)
{
    lib_moe_batch_destroy(self->b);
    Py_XDECREF(self->owner);
    PyObject_Free(self);
}

static PyMemberDef BATCH_MEMBERS[] = {
    {"tokens", T_LONGLONG, offsetof(MoEBatchObject, tokens), READONLY, "the dispatch's tokens on this rank"},
    {"torch", T_BOOL, offsetof(MoEBatchObject, torch), 0, "whether the dispatch took torch tensors"},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject MoEBatchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "a2amm._a2amm.MoEBatch",
    .tp_basicsize = sizeof(MoEBatchObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "What a2amm.MoE.dispatch received, for its combine (once).",
    .tp_dealloc = (destructor)batch_dealloc,
    .tp_members = BATCH_MEMBERS,
};

/* A new array [rows, cols] of uint8 holding a copy of rows x cols bytes. */
static PyObject *u8_copy(const uint8_t *p, int64_t rows, int64_t cols)
{
    PyObject *a = ext_new_array(ext_np_u8, rows, cols);
    Py_buffer v;
    if (!a || PyObject_GetBuffer(a, &v, PyBUF_WRITABLE) < 0) {
        Py_XDECREF(a);
        return NULL;
    }
    if (rows > 0 && cols > 0) memcpy(v.buf, p, (size_t)(rows * cols));
    PyBuffer_Release(&v);
    return a;
}

/* _dispatch(x, sx or mode, idx, w) -> (batch, [(codes [n, H], scales [n, H/32]) per local expert]): collective. */
static PyObject *moe_dispatch(MoEObject *self, PyObject *args)
{
    PyObject *xo, *sxo, *io, *wo;
    if (!PyArg_ParseTuple(args, "OOOO:_dispatch", &xo, &sxo, &io, &wo)) return NULL;
    if (begin_collective(self, "dispatch") < 0) return NULL;
    tokens_in in;
    if (take_tokens(self, xo, sxo, io, wo, &in) < 0) {
        comm_fail_for_error(self->comm);
        return NULL;
    }
    a2amm_error err = {0, ""};
    call_args a = {self->moe, &in, NULL, NULL, NULL};
    int rc;
    int interrupted = moe_collective(self, "dispatch", do_dispatch, &a, &err, &rc) < 0;
    release_tokens(&in);
    a2amm_moe_batch *b = a.batch;
    if (interrupted) {
        lib_moe_batch_destroy(b);
        return NULL;
    }
    if (rc) return ext_raise(rc, &err);
    MoEBatchObject *bo = PyObject_New(MoEBatchObject, &MoEBatchType);
    if (!bo) {
        lib_moe_batch_destroy(b);
        return NULL;
    }
    bo->b = b, bo->owner = (MoEObject *)Py_NewRef(self), bo->tokens = in.T, bo->torch = 0;
    PyObject *rows = PyList_New(self->local);
    for (int le = 0; rows && le < self->local; le++) {
        int64_t n = 0;
        const uint8_t *codes = NULL, *scales = NULL;
        lib_moe_batch_rows(b, le, &n, &codes, &scales, &err);
        PyObject *pair = Py_BuildValue("(NN)", u8_copy(codes, n, self->o.hidden), u8_copy(scales, n, self->o.hidden / 32));
        if (!pair) Py_CLEAR(rows);
        else PyList_SET_ITEM(rows, le, pair);
    }
    if (!rows) {
        Py_DECREF(bo);
        return NULL;
    }
    return Py_BuildValue("(NN)", (PyObject *)bo, rows);
}

typedef struct expert_args {
    a2amm_moe *moe;
    int le;
    const matrix *codes, *scales, *y;
    int64_t H;
} expert_args;

static int do_expert(void *p, a2amm_error *err)
{
    const expert_args *a = p;
    return lib_moe_expert(a->moe, a->le, a->codes->rows, (const uint8_t *)a->codes->ptr,
                          (const uint8_t *)a->scales->ptr, a->scales->ld, (float *)a->y->ptr, a->H, err);
}

/* _expert(le, codes [n, H] u8, scales [n, H/32] u8) -> y [n, H] float32: local, the op's own computation of
 * local expert le on those rows (a2amm_moe_expert), the GIL released. */
static PyObject *moe_expert(MoEObject *self, PyObject *args)
{
    int le;
    PyObject *co, *so;
    if (!PyArg_ParseTuple(args, "iOO:_expert", &le, &co, &so)) return NULL;
    if (moe_usable(self, "expert") < 0) return NULL;
    const int64_t H = self->o.hidden;
    matrix c, s;
    memset(&c, 0, sizeof c), memset(&s, 0, sizeof s);
    int ok = matrix_get(co, "codes", EL_U8, MAT_CONTIGUOUS, &c) == 0;
    if (ok && c.cols != H)
        ok = matrix_shape_error("codes", &c, "[rows, hidden] = [rows, %lld]", (long long)H) == 0;
    if (ok) ok = matrix_get(so, "scales", EL_U8, MAT_ROWS, &s) == 0;
    if (ok && (s.rows != c.rows || s.cols != H / 32))
        ok = matrix_shape_error("scales", &s, "[rows, hidden/32] = [%lld, %lld]", (long long)c.rows,
                                (long long)(H / 32)) == 0;
    PyObject *y = ok ? ext_new_array(ext_np_f32, c.rows, H) : NULL;
    matrix ym;
    memset(&ym, 0, sizeof ym);
    ok = y && matrix_get(y, "y", EL_F32, MAT_CONTIGUOUS | MAT_WRITABLE, &ym) == 0;
    a2amm_error err = {0, ""};
    int rc = 0;
    if (ok) {
        expert_args a = {self->moe, le, &c, &s, &ym, H};
        rc = moe_local(self, "expert", do_expert, &a, &err);
    }
    matrix_release(&ym), matrix_release(&c), matrix_release(&s);
    if (!ok || rc) {
        Py_XDECREF(y);
        return ok ? ext_raise(rc, &err) : NULL;
    }
    return y;
}

/* _combine(batch, ys, out) -> out: collective. ys: per local expert, float32 [n, H] (None where n is 0). */
static PyObject *moe_combine(MoEObject *self, PyObject *args)
{
    PyObject *bo, *yso, *outo;
    if (!PyArg_ParseTuple(args, "O!OO:_combine", &MoEBatchType, &bo, &yso, &outo)) return NULL;
    if (begin_collective(self, "combine") < 0) return NULL;
    MoEBatchObject *batch = (MoEBatchObject *)bo;
    const int64_t H = self->o.hidden;
    const int L = self->local;
    PyObject *fast = PySequence_Fast(yso, "combine: ys must be a sequence of one array per local expert");
    matrix *ys = calloc((size_t)L, sizeof *ys), out;
    const float **yp = calloc((size_t)L, sizeof *yp);
    memset(&out, 0, sizeof out);
    PyObject *res = NULL;
    int ok = fast && ys && yp && batch->owner == self && batch->b;
    if (fast && ys && yp && !ok)
        PyErr_SetString(PyExc_ValueError, "combine: the batch is not from this MoE's dispatch, or was combined already");
    if (ok && PySequence_Fast_GET_SIZE(fast) != L) {
        PyErr_Format(PyExc_ValueError, "combine: ys must hold one array per local expert, %d; got %zd", L,
                     PySequence_Fast_GET_SIZE(fast));
        ok = 0;
    }
    for (int le = 0; ok && le < L; le++) {
        int64_t n = 0;
        a2amm_error e = {0, ""};
        lib_moe_batch_rows(batch->b, le, &n, NULL, NULL, &e);
        PyObject *yo = PySequence_Fast_GET_ITEM(fast, le);
        if (n == 0 && yo == Py_None) continue;
        char name[40];
        snprintf(name, sizeof name, "ys[%d]", le);
        ok = matrix_get(yo, name, EL_F32, MAT_CONTIGUOUS, &ys[le]) == 0;
        if (ok && (ys[le].rows != n || ys[le].cols != H))
            ok = matrix_shape_error(name, &ys[le], "[%lld, %lld] (the rows expert %d received, float32)", (long long)n,
                                    (long long)H, le) == 0;
        if (ok) yp[le] = (const float *)ys[le].ptr;
    }
    const int64_t T = batch->tokens;
    if (ok) {
        res = outo == Py_None ? ext_new_array(ext_np_u16, T, H) : Py_NewRef(outo);
        ok = res && matrix_get(res, "out", EL_BF16, MAT_CONTIGUOUS | MAT_WRITABLE, &out) == 0;
        if (ok && (out.rows != T || out.cols != H))
            ok = matrix_shape_error("out", &out, "[tokens, hidden] = [%lld, %lld] (bf16: the dispatch's tokens)",
                                    (long long)T, (long long)H) == 0;
    }
    a2amm_error err = {0, ""};
    int rc = 0, interrupted = 0;
    if (ok) {
        call_args a = {self->moe, NULL, (uint16_t *)out.ptr, batch->b, yp};
        interrupted = moe_collective(self, "combine", do_combine, &a, &err, &rc) < 0;
        lib_moe_batch_destroy(batch->b); /* combined once */
        batch->b = NULL;
    }
    for (int le = 0; ys && le < L; le++) matrix_release(&ys[le]);
    matrix_release(&out);
    free(ys), free(yp);
    Py_XDECREF(fast);
    return call_result(self, ok, interrupted, rc, &err, res);
}

static int moe_traverse(MoEObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->comm);
    Py_VISIT(self->shared);
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
    {"weights", (getter)moe_get_weights, NULL, "the a2amm.MoEWeights it uses (use_weights), or None", NULL},
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
    {"_use_weights", (PyCFunction)moe_use_weights, METH_O, NULL},
    {"_run", (PyCFunction)moe_run, METH_VARARGS, NULL},
    {"_dispatch", (PyCFunction)moe_dispatch, METH_VARARGS, NULL},
    {"_c_loop", (PyCFunction)moe_c_loop, METH_VARARGS, NULL},
    {"_combine", (PyCFunction)moe_combine, METH_VARARGS, NULL},
    {"_expert", (PyCFunction)moe_expert, METH_VARARGS, NULL},
    {"close", (PyCFunction)moe_close, METH_NOARGS, "close(): local; frees it (refused while a call of it runs)."},
    {"__enter__", ext_enter, METH_NOARGS, NULL},
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
