/*
 * a2amm.Op over a2amm_op: made once per communicator (collective), weights
 * set locally, one collective call per step on the caller's arrays; its
 * input memory as zero-copy views; its events to a Python observer and to
 * a recorder for op.trace(). The Python class a2amm.Op (a2amm/__init__.py)
 * adds torch tensors on top. Both kinds of op (a2amm.h): alltoall-matmul
 * takes A_r [R*m, K/R] (R blocks of m rows) and gives [m, n];
 * matmul-alltoall takes X_r [m, K] (one block) and gives [R*m, n/R].
 */
#include "ext.h"

#include <stdio.h>
#include <string.h>
#include <structmember.h>
#include <time.h>

/* One span of the recorder (op.trace): as a2amm/_trace.py reads them. */
typedef struct span_rec {
    int64_t t0, t1;
    int32_t kind, peer, slot, thread;
    int64_t call, tile, rows, k, bytes;
    uint64_t signal;
} span_rec;
enum { SPAN_CALL, SPAN_BARRIER, SPAN_TILE, SPAN_WAIT, SPAN_MATMUL, SPAN_SEND, SPAN_SIGNAL, SPAN_EXCHANGE, SPAN_WORK };
#define MAX_SPANS ((size_t)1 << 20) /* about 80 MB a rank; the rest are counted as dropped */

typedef struct recorder {
    int on;
    span_rec *recs;
    size_t n, cap, dropped;
    a2amm_event open[A2AMM_EVENT_KINDS]; /* each open span's begin */
} recorder;

typedef struct OpObject {
    PyObject_HEAD
    a2amm_op *op;          /* the library's op: NULL once ended (closed, and no input view alive) */
    int closed;            /* close() (or its comm's): no more calls */
    CommObject *comm;
    lib_op_options o;
    int R, rank;
    int reverse;           /* matmul-alltoall (its words and views; the sizes below are the library's) */
    int64_t out_blocks;    /* the output's rows per m (a2amm_op_geometry_of at m = 1) */
    int64_t out_cols;
    int64_t ka;            /* columns of a row of the input: K/R (alltoall-matmul) or K (matmul-alltoall) */
    int64_t blocks;        /* row blocks of the input: R (block j for rank j), or 1 (matmul-alltoall) */
    int64_t ldsa, block_rows;
    uint8_t *in_a, *in_sa; /* the op's input memory (a2amm_op_input) */
    PyObject *weights;     /* the Weights it uses (use_weights), or NULL */
    int has_weights;
    int busy;
    Py_ssize_t exports;    /* input views alive */
    unsigned long long calls;
    recorder rec;
    PyObject *observer;    /* a Python callable, or NULL */
    int observer_raised;   /* it raised during the call: the exception is kept here */
    PyObject *observer_type, *observer_exc, *observer_tb;
    int observer_status;   /* a negative status it returned (stops the call at the next tile) */
    PyObject *weakrefs;
} OpObject;

/* ---- the events ------------------------------------------------------------------ */

static const char *const EVENT_NAMES[A2AMM_EVENT_KINDS] = {
    [A2AMM_EVENT_TILE] = "tile",           [A2AMM_EVENT_TILE_END] = "tile_end",
    [A2AMM_EVENT_WAIT_BEGIN] = "wait_begin", [A2AMM_EVENT_WAIT_END] = "wait_end",
    [A2AMM_EVENT_MATMUL_BEGIN] = "matmul_begin", [A2AMM_EVENT_MATMUL_END] = "matmul_end",
    [A2AMM_EVENT_SEND_BEGIN] = "send_begin", [A2AMM_EVENT_SEND_END] = "send_end",
    [A2AMM_EVENT_SIGNAL] = "signal",       [A2AMM_EVENT_EXCHANGE_BEGIN] = "exchange_begin",
    [A2AMM_EVENT_EXCHANGE_END] = "exchange_end", [A2AMM_EVENT_BARRIER_BEGIN] = "barrier_begin",
    [A2AMM_EVENT_BARRIER_END] = "barrier_end", [A2AMM_EVENT_CALL_BEGIN] = "call_begin",
    [A2AMM_EVENT_CALL_END] = "call_end",   [A2AMM_EVENT_WORK] = "work",
};
static PyObject *event_name_objs[A2AMM_EVENT_KINDS];

static PyStructSequence_Field EVENT_FIELDS[] = {
    {"kind", "\"tile\", \"tile_end\", \"wait_begin\", ... (a2amm.h's A2AMM_EVENT_*, lower case)"},
    {"rank", "this rank"},
    {"call", "the call's number on this op, from 1"},
    {"tile", "the tile's number in the call, from 0 (-1: not a tile's event)"},
    {"tiles", "tiles in the call"},
    {"rows", "rows of the tile (call_begin: m)"},
    {"peer", "the other rank (wait, matmul: the source; send, signal: the destination), or -1"},
    {"slot", "the ring slot, or -1"},
    {"k", "matmul: the columns of A multiplied (K / R)"},
    {"bytes", "wait_end, send: bytes moved; exchange: bytes received"},
    {"signal", "wait_begin: the value awaited; signal: the value set"},
    {"time_ns", "CLOCK_MONOTONIC, ns (time.monotonic_ns()): one clock for every rank of a machine"},
    {"thread", "work: 0 the rank's own thread, 1.. its compute threads"},
    {"duration_ns", "work: how long that thread computed"},
    {NULL, NULL},
};
static PyStructSequence_Desc EVENT_DESC = {"a2amm.Event", "One event of an op's call (see a2amm.h, a2amm_event).",
                                           EVENT_FIELDS, 14};
static PyTypeObject EventType;

static void record_span(recorder *r, const span_rec *s)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 4096;
        if (cap > MAX_SPANS) cap = MAX_SPANS;
        span_rec *p = cap > r->cap ? realloc(r->recs, cap * sizeof *p) : NULL;
        if (!p) {
            r->dropped++;
            return;
        }
        r->recs = p, r->cap = cap;
    }
    r->recs[r->n++] = *s;
}

/* The span an end event closes, and the event that opened it. */
static int span_of(a2amm_event_kind end, int *kind, a2amm_event_kind *begin)
{
    static const struct { a2amm_event_kind end, begin; int kind; } map[] = {
        {A2AMM_EVENT_TILE_END, A2AMM_EVENT_TILE, SPAN_TILE},
        {A2AMM_EVENT_WAIT_END, A2AMM_EVENT_WAIT_BEGIN, SPAN_WAIT},
        {A2AMM_EVENT_MATMUL_END, A2AMM_EVENT_MATMUL_BEGIN, SPAN_MATMUL},
        {A2AMM_EVENT_SEND_END, A2AMM_EVENT_SEND_BEGIN, SPAN_SEND},
        {A2AMM_EVENT_EXCHANGE_END, A2AMM_EVENT_EXCHANGE_BEGIN, SPAN_EXCHANGE},
        {A2AMM_EVENT_BARRIER_END, A2AMM_EVENT_BARRIER_BEGIN, SPAN_BARRIER},
        {A2AMM_EVENT_CALL_END, A2AMM_EVENT_CALL_BEGIN, SPAN_CALL},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (map[i].end == end) {
            *kind = map[i].kind, *begin = map[i].begin;
            return 1;
        }
    return 0;
}

static void record_event(recorder *r, const a2amm_event *ev)
{
    int kind;
    a2amm_event_kind begin;
    if (ev->kind >= 0 && ev->kind < A2AMM_EVENT_KINDS) r->open[ev->kind] = *ev;
    if (ev->kind == A2AMM_EVENT_WORK) {
        span_rec s = {ev->time_ns, ev->time_ns + ev->duration_ns, SPAN_WORK, ev->peer, -1, ev->thread,
                      (int64_t)ev->call, ev->tile, ev->rows, ev->k, 0, 0};
        record_span(r, &s);
    } else if (ev->kind == A2AMM_EVENT_SIGNAL) {
        span_rec s = {ev->time_ns, ev->time_ns, SPAN_SIGNAL, ev->peer, ev->slot, 0, (int64_t)ev->call, ev->tile,
                      ev->rows, 0, 0, ev->signal};
        record_span(r, &s);
    } else if (span_of(ev->kind, &kind, &begin)) {
        const a2amm_event *b = &r->open[begin];
        span_rec s = {b->time_ns, ev->time_ns, kind, b->peer, b->slot, 0, (int64_t)b->call, b->tile, b->rows, b->k,
                      ev->bytes ? ev->bytes : b->bytes, b->signal};
        record_span(r, &s);
    }
}

static PyObject *event_object(const a2amm_event *ev)
{
    PyObject *e = PyStructSequence_New(&EventType);
    if (!e) return NULL;
    PyObject *name = ev->kind >= 0 && ev->kind < A2AMM_EVENT_KINDS ? event_name_objs[ev->kind] : NULL;
    PyStructSequence_SET_ITEM(e, 0, name ? Py_NewRef(name) : PyLong_FromLong(ev->kind));
    PyStructSequence_SET_ITEM(e, 1, PyLong_FromLong(ev->rank));
    PyStructSequence_SET_ITEM(e, 2, PyLong_FromUnsignedLongLong(ev->call));
    PyStructSequence_SET_ITEM(e, 3, PyLong_FromLongLong(ev->tile));
    PyStructSequence_SET_ITEM(e, 4, PyLong_FromLongLong(ev->tiles));
    PyStructSequence_SET_ITEM(e, 5, PyLong_FromLongLong(ev->rows));
    PyStructSequence_SET_ITEM(e, 6, PyLong_FromLong(ev->peer));
    PyStructSequence_SET_ITEM(e, 7, PyLong_FromLong(ev->slot));
    PyStructSequence_SET_ITEM(e, 8, PyLong_FromLongLong(ev->k));
    PyStructSequence_SET_ITEM(e, 9, PyLong_FromLongLong(ev->bytes));
    PyStructSequence_SET_ITEM(e, 10, PyLong_FromUnsignedLongLong(ev->signal));
    PyStructSequence_SET_ITEM(e, 11, PyLong_FromLongLong(ev->time_ns));
    PyStructSequence_SET_ITEM(e, 12, PyLong_FromLong(ev->thread));
    PyStructSequence_SET_ITEM(e, 13, PyLong_FromLongLong(ev->duration_ns));
    if (PyErr_Occurred()) {
        Py_DECREF(e);
        return NULL;
    }
    return e;
}

/* The Python observer, with the GIL taken for it (the call runs without). */
static void call_python_observer(OpObject *self, const a2amm_event *ev)
{
    PyGILState_STATE g = PyGILState_Ensure();
    if (self->observer && !self->observer_raised) {
        PyObject *e = event_object(ev);
        PyObject *r = e ? PyObject_CallOneArg(self->observer, e) : NULL;
        Py_XDECREF(e);
        if (!r) {
            self->observer_raised = 1;
            PyErr_Fetch(&self->observer_type, &self->observer_exc, &self->observer_tb);
        } else {
            if (PyLong_Check(r)) {
                long v = PyLong_AsLong(r);
                if (v < 0 && ev->kind == A2AMM_EVENT_TILE) self->observer_status = (int)v;
                PyErr_Clear();
            }
            Py_DECREF(r);
        }
    }
    PyGILState_Release(g);
}

/* The op's observer, set for its whole life: the recorder, the Python observer, and the stop path. */
static int op_observer(void *arg, const a2amm_event *ev)
{
    OpObject *self = arg;
    if (self->rec.on) record_event(&self->rec, ev);
    if (self->observer) call_python_observer(self, ev);
    if (ev->kind == A2AMM_EVENT_TILE) {
        if (ext_interrupted) { /* Ctrl-C: stop at this tile, saying why (the first failure's message stays) */
            char why[96];
            snprintf(why, sizeof why, "interrupted (SIGINT, Ctrl-C) at tile %lld of call %llu", (long long)ev->tile,
                     (unsigned long long)ev->call);
            lib_comm_fail(self->comm->comm, A2AMM_E_INTERRUPTED, why);
            return A2AMM_E_INTERRUPTED;
        }
        if (self->observer_raised) return A2AMM_E_INTERRUPTED;
        if (self->observer_status) return self->observer_status;
    }
    return A2AMM_OK;
}

/* ---- making and closing -------------------------------------------------------- */

static const char *const PATHS[] = {"direct", "put"}, *const SCHEDULES[] = {"fused", "unfused"};

static int parse_choice(PyObject *v, const char *what, const char *const *names, int n, int *out)
{
    const char *s = v && PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : NULL;
    for (int i = 0; s && i < n; i++)
        if (!strcmp(s, names[i])) {
            *out = i;
            return 0;
        }
    PyErr_Clear();
    char list[160] = "";
    size_t used = 0;
    for (int i = 0; i < n; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s\"%s\"", i ? (i + 1 < n ? ", " : " or ") : "",
                                 names[i]);
    PyErr_Format(PyExc_ValueError, "%s must be %s; got %R", what, list, v ? v : Py_None);
    return -1;
}

/* kind: one of the op kinds this library runs (a2amm.OP_KINDS). */
static int parse_kind(PyObject *v, int *out)
{
    const char *kinds[LIB_OP_KINDS_MAX];
    int n = 0;
    while (n < LIB_OP_KINDS_MAX && (kinds[n] = lib_op_kind_name(n))) n++;
    return parse_choice(v, "kind (the op kinds this library runs)", kinds, n, out);
}

typedef struct make_args {
    a2amm_comm *comm;
    const lib_op_options *o;
    a2amm_op *op;
} make_args;

static int make_op(void *arg, a2amm_error *err)
{
    make_args *a = arg;
    return lib_op_create(a->comm, a->o, &a->op, err);
}

static int op_init(OpObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"comm", "kind", "max_m", "k", "n", "a_fmt", "b_fmt", "tile_m", "depth", "threads",
                             "path", "timeout", "schedule", NULL};
    PyObject *co, *kind = NULL, *afmt = NULL, *bfmt = NULL, *path = Py_None, *sched = NULL;
    long long max_m = -1, k = -1, n = -1, tile_m = 0;
    int depth = 0, threads = 0;
    double timeout = 0;
    if (self->op || self->comm) {
        PyErr_SetString(PyExc_ValueError, "an Op is made once: make another");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O$LLLOOLiiOdO:Op", kwlist, &co, &kind, &max_m, &k, &n, &afmt,
                                     &bfmt, &tile_m, &depth, &threads, &path, &timeout, &sched))
        return -1;
    if (!PyObject_TypeCheck(co, &CommType)) {
        PyErr_Format(PyExc_TypeError, "comm must be an a2amm.Comm (from a2amm.launch or a2amm.Comm.from_mpi); got a "
                     "%.100s", Py_TYPE(co)->tp_name);
        return -1;
    }
    CommObject *c = (CommObject *)co;
    if (comm_check_usable(c, "Op") < 0) return -1;
    /* a bad argument fails the communicator: the other ranks are (or will be) in this collective call */
    lib_op_options o = {0};
    int ki = 0, pi = 0, si = 0;
    if (kind && parse_kind(kind, &ki) < 0) goto bad;
    if (max_m < 1 || k < 1 || n < 1) {
        PyErr_Format(PyExc_ValueError, "max_m, k and n must be given, each at least 1 (got max_m=%lld, k=%lld, "
                     "n=%lld)", max_m, k, n);
        goto bad;
    }
    o.kind = (lib_op_kind)ki, o.max_m = max_m, o.k = k, o.n = n;
    o.a_type = o.b_type = A2AMM_E4M3;
    if (afmt && ext_fmt(afmt, "a_fmt", &o.a_type) < 0) goto bad;
    if (bfmt && ext_fmt(bfmt, "b_fmt", &o.b_type) < 0) goto bad;
    if (tile_m < 0 || depth < 0 || depth > 1024 || threads < 0 || threads > 1024 || timeout < 0) {
        ext_value_error("tile_m (got %lld) and timeout (got %g) must be 0 (the default) or positive, "
                     "depth 0 (4) to 1024 (got %d), threads 0 (cores / R) to 1024 (got %d)",
                     tile_m, timeout, depth, threads);
        goto bad;
    }
    if (path == Py_None) pi = c->mpi_transport; /* put over MPI, the only path it runs; else the library's default */
    else if (parse_choice(path, "path", PATHS, 2, &pi) < 0) goto bad;
    if (pi == 0 && c->mpi_transport) {
        PyErr_SetString(PyExc_ValueError, "path=\"direct\" needs shared memory: this communicator's transport is MPI, "
                        "which runs the put path only (path=\"put\", or None)");
        goto bad;
    }
    if (sched && parse_choice(sched, "schedule", SCHEDULES, 2, &si) < 0) goto bad;
    o.tile_m = tile_m, o.depth = depth, o.threads = threads, o.path_put = pi, o.timeout_s = timeout, o.unfused = si;

    a2amm_error err = {0, ""};
    make_args made = {c->comm, &o, NULL};
    int rc;
    if (comm_collective(c, "Op", make_op, &made, &err, &rc) < 0) {
        lib_op_destroy(made.op);
        return -1;
    }
    a2amm_op *op = made.op;
    if (rc) {
        ext_raise(rc, &err);
        return -1;
    }
    self->op = op;
    self->comm = (CommObject *)Py_NewRef(co);
    self->o = o;
    self->R = c->size, self->rank = c->rank;
    /* the arrays' sizes from the library's op-kind table; reverse only picks the words and views */
    self->reverse = !strcmp(lib_op_kind_name(o.kind), "matmul-alltoall");
    a2amm_op_geometry g;
    if (lib_op_geometry(&o, c->size, 1, &g, &err)) {
        ext_raise(err.code ? err.code : A2AMM_E_INVAL, &err);
        return -1;
    }
    self->ka = g.lda, self->blocks = g.a_blocks, self->out_blocks = g.out_rows, self->out_cols = g.out_cols;
    if (lib_op_input(op, &self->in_a, &self->in_sa, NULL, &self->ldsa, &self->block_rows, &err) ||
        lib_op_set_observer(op, op_observer, self, &err)) {
        ext_raise(err.code ? err.code : A2AMM_E_INVAL, &err);
        return -1;
    }
    PyObject *r = PyObject_CallMethod(co, "_track", "O", (PyObject *)self);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
bad:
    comm_fail_for_error(c);
    return -1;
}

static void release_weights(OpObject *self)
{
    if (self->weights) ((WeightsObject *)self->weights)->users--;
    Py_CLEAR(self->weights);
}

/* The library's op ends: its memory may serve the next op made. */
static void op_end(OpObject *self)
{
    lib_op_destroy(self->op);
    self->op = NULL;
}

void op_close_object(PyObject *o, int force)
{
    OpObject *self = (OpObject *)o;
    self->closed = 1;
    release_weights(self);
    /* a view of its input from input() keeps the memory (and the op) until it goes: written through after
     * the close, it must not reach the next op's input there (input_releasebuffer ends it) */
    if (self->op && (force || self->exports == 0)) op_end(self);
}

static PyObject *op_close(OpObject *self, PyObject *unused)
{
    (void)unused;
    if (self->busy) {
        PyErr_SetString(PyExc_ValueError, "close: the op is in a call from another thread: close it once that call "
                        "has returned");
        return NULL;
    }
    op_close_object((PyObject *)self, 0);
    Py_RETURN_NONE;
}

static int op_traverse(OpObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->observer);
    Py_VISIT(self->comm);
    Py_VISIT(self->weights);
    return 0;
}

static int op_clear(OpObject *self)
{
    Py_CLEAR(self->observer);
    return 0;
}

static void op_dealloc(OpObject *self)
{
    PyObject_GC_UnTrack(self);
    if (self->weakrefs) PyObject_ClearWeakRefs((PyObject *)self);
    op_close_object((PyObject *)self, 1); /* no view is alive: each holds the op */
    free(self->rec.recs);
    Py_CLEAR(self->observer);
    Py_CLEAR(self->observer_exc);
    Py_CLEAR(self->observer_type);
    Py_CLEAR(self->observer_tb);
    Py_CLEAR(self->comm);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* 0 when the op can be called now, else a ValueError and -1 (closed) or -2 (in a call from another
 * thread: that call goes on, and the refusal must not fail the communicator). */
static int op_usable(OpObject *self, const char *call)
{
    if (self->closed || !self->op) {
        PyErr_Format(PyExc_ValueError, "%s: the op is closed", call);
        return -1;
    }
    if (self->busy) {
        PyErr_Format(PyExc_ValueError, "%s: the op is in a call from another thread", call);
        return -2;
    }
    return comm_check_usable(self->comm, call);
}

/* ---- weights -------------------------------------------------------------------- */

static PyObject *op_set_weights(OpObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"b_codes", "b_scales", NULL};
    PyObject *bo, *sbo;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:set_weights", kwlist, &bo, &sbo)) return NULL;
    if (op_usable(self, "set_weights") < 0) return NULL;
    matrix b, sb;
    if (matrix_get(bo, "b_codes", EL_U8, MAT_ROWS, &b) < 0) return NULL;
    if (b.rows != self->o.n || b.cols != self->o.k) {
        matrix_shape_error("b_codes", &b, "[n, k] = [%lld, %lld] (B transposed)", (long long)self->o.n,
                           (long long)self->o.k);
        matrix_release(&b);
        return NULL;
    }
    if (matrix_get(sbo, "b_scales", EL_U8, MAT_ROWS, &sb) < 0 || check_scales("b_scales", &sb, b.rows, b.cols, "n") < 0) {
        matrix_release(&b);
        matrix_release(&sb);
        return NULL;
    }
    a2amm_error err = {0, ""};
    int rc;
    self->busy = 1;
    comm_call_begin(self->comm, "set_weights", 0);
    Py_BEGIN_ALLOW_THREADS
    rc = lib_op_set_weights(self->op, (const uint8_t *)b.ptr, (const uint8_t *)sb.ptr, sb.ld, &err);
    Py_END_ALLOW_THREADS
    comm_call_end(self->comm, 0);
    self->busy = 0;
    matrix_release(&b);
    matrix_release(&sb);
    if (rc) return ext_raise(rc, &err);
    release_weights(self);
    self->has_weights = 1;
    Py_RETURN_NONE;
}

static PyObject *op_use_weights(OpObject *self, PyObject *wo)
{
    WeightsObject *w;
    if (op_usable(self, "use_weights") < 0 || ext_weights_of(wo, &w) < 0) return NULL;
    if (w->n != self->o.n || w->k != self->o.k || w->type != self->o.b_type)
        return PyErr_Format(PyExc_ValueError, "use_weights: the weights are n %lld, k %lld, %s; the op's are n %lld, k "
                            "%lld, %s", (long long)w->n, (long long)w->k, lib_fmt_name(w->type), (long long)self->o.n,
                            (long long)self->o.k, lib_fmt_name(self->o.b_type));
    a2amm_error err = {0, ""};
    int rc = lib_op_use_weights(self->op, w->w, &err);
    if (rc) return ext_raise(rc, &err);
    release_weights(self);
    self->weights = Py_NewRef(wo); /* borrowed by the op: kept alive, and open, while it uses them */
    w->users++;
    self->has_weights = 1;
    Py_RETURN_NONE;
}

/* ---- the input memory (zero-copy) ---------------------------------------------- */

typedef struct InputBufferObject {
    PyObject_HEAD
    OpObject *op;
    char *ptr;
    Py_ssize_t len;
} InputBufferObject;

static int input_getbuffer(InputBufferObject *self, Py_buffer *view, int flags)
{
    if (self->op->closed || !self->op->op) {
        PyErr_SetString(PyExc_ValueError, "the op is closed: no new view of its input memory");
        return -1;
    }
    if (PyBuffer_FillInfo(view, (PyObject *)self, self->ptr, self->len, 0, flags) < 0) return -1;
    self->op->exports++;
    comm_export_taken(self->op->comm);
    return 0;
}

static void input_releasebuffer(InputBufferObject *self, Py_buffer *view)
{
    (void)view;
    OpObject *op = self->op;
    if (--op->exports == 0 && op->closed && op->op) op_end(op); /* the last view of a closed op's memory */
    comm_export_released(op->comm);
}

static PyBufferProcs INPUT_BUFFER_PROCS = {(getbufferproc)input_getbuffer, (releasebufferproc)input_releasebuffer};

static void input_dealloc(InputBufferObject *self)
{
    Py_XDECREF(self->op);
    PyObject_Free(self);
}

PyTypeObject InputBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "a2amm._a2amm.InputBuffer",
    .tp_basicsize = sizeof(InputBufferObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An op's input memory, for numpy.frombuffer (see Op.input).",
    .tp_dealloc = (destructor)input_dealloc,
    .tp_as_buffer = &INPUT_BUFFER_PROCS,
};

/* _input_buffers() -> (a_buffer, sa_buffer, block_rows, ldsa): the op's input memory. */
static PyObject *op_input_buffers(OpObject *self, PyObject *unused)
{
    (void)unused;
    if (op_usable(self, "input") < 0) return NULL;
    InputBufferObject *b[2];
    char *ptr[2] = {(char *)self->in_a, (char *)self->in_sa};
    Py_ssize_t len[2] = {(Py_ssize_t)(self->blocks * self->block_rows * self->ka),
                         (Py_ssize_t)(self->blocks * self->block_rows * self->ldsa)};
    for (int i = 0; i < 2; i++) {
        b[i] = PyObject_New(InputBufferObject, &InputBufferType);
        if (!b[i]) {
            if (i) Py_DECREF(b[0]);
            return NULL;
        }
        b[i]->op = (OpObject *)Py_NewRef(self);
        b[i]->ptr = ptr[i], b[i]->len = len[i];
    }
    return Py_BuildValue("(NNLL)", b[0], b[1], (long long)self->block_rows, (long long)self->ldsa);
}

/* ---- the call ------------------------------------------------------------------------ */

/* Whether obj is the op's own input of `width` columns over rows of ld bytes
 * at base, as op.input() views it: [R, m, width] (R blocks of block_rows
 * rows) when stacked, else [m, width] (matmul-alltoall's one block); the m
 * its shape says into *m. 1 when it is, 0 when it is something else. */
static int placed_input(PyObject *obj, const uint8_t *base, int stacked, int64_t R, int64_t block_rows,
                        int64_t width, int64_t ld, int64_t *m)
{
    if (!PyObject_CheckBuffer(obj)) return 0;
    Py_buffer v;
    if (PyObject_GetBuffer(obj, &v, PyBUF_STRIDES | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        return 0;
    }
    const int nd = stacked ? 3 : 2, row = nd - 2, col = nd - 1; /* the dimensions of rows and columns */
    int yes = v.buf == base && v.ndim == nd && v.itemsize == 1 && v.strides &&
              (!stacked || (v.shape[0] == R && v.strides[0] == block_rows * ld)) && v.shape[row] >= 1 &&
              v.shape[row] <= block_rows && v.shape[col] == width && (v.shape[row] == 1 || v.strides[row] == ld) &&
              (v.shape[col] == 1 || v.strides[col] == 1);
    if (yes) *m = v.shape[row];
    PyBuffer_Release(&v);
    return yes;
}

/* Copies rows of a (2-D, [blocks*m, ...], any row stride) into the op's input blocks (block j at j*block_rows
 * rows). */
static void copy_in(uint8_t *dst, int64_t ld_dst, const matrix *src, int64_t blocks, int64_t m, int64_t block_rows,
                    int64_t width)
{
    for (int64_t j = 0; j < blocks; j++)
        for (int64_t i = 0; i < m; i++)
            memcpy(dst + (j * block_rows + i) * ld_dst, src->ptr + (j * m + i) * src->ld, (size_t)width);
}

/* The call's input: the op's own (placed), or the caller's arrays checked. */
typedef struct call_input {
    int placed;      /* already in the op's memory: a2amm_op_run(NULL, NULL) */
    int copied;      /* copied in by us (a layout the library does not take) */
    matrix a, sa;    /* the caller's, when given and not placed */
    int64_t m;
} call_input;

/* What a_codes must be, for messages: "[R*m, K/R] = [2*m, 32] ..." or "[m, K] = [m, 64] ...". */
static void input_shape_text(const OpObject *self, char *buf, size_t size)
{
    if (self->reverse)
        snprintf(buf, size, "[m, K] = [m, %lld] with 1 <= m <= max_m = %lld (X_r: this rank's rows)",
                 (long long)self->ka, (long long)self->o.max_m);
    else
        snprintf(buf, size, "[R*m, K/R] = [%lld*m, %lld] with m >= 1 (R blocks of m rows: block j for rank j)",
                 (long long)self->R, (long long)self->ka);
}

/* The call's m: -1 when not given (None), else 1 .. max_m; -2 with a ValueError for anything else. */
static long long call_m(const OpObject *self, PyObject *mo)
{
    if (mo == Py_None) return -1;
    if (!PyLong_Check(mo) || PyBool_Check(mo)) {
        PyErr_Format(PyExc_ValueError, "m must be an int from 1 to max_m = %lld, or None; got a %.100s",
                     (long long)self->o.max_m, Py_TYPE(mo)->tp_name);
        return -2;
    }
    int overflow = 0;
    long long m = PyLong_AsLongLongAndOverflow(mo, &overflow);
    if (overflow || m < 1 || m > self->o.max_m) {
        PyErr_Format(PyExc_ValueError, "m must be 1 to max_m = %lld; got %R", (long long)self->o.max_m, mo);
        return -2;
    }
    return m;
}

/* m_arg: the call's m (call_m: -1 when not given). */
static int take_input(OpObject *self, PyObject *ao, PyObject *sao, long long m_arg, call_input *in)
{
    memset(in, 0, sizeof *in);
    const int64_t R = self->R, ka = self->ka, sw = scale_width(ka), max_m = self->o.max_m, blocks = self->blocks;
    char shape[160]; /* what a_codes must be, made for a message only */
    if ((ao == Py_None) != (sao == Py_None)) {
        PyErr_SetString(PyExc_ValueError, "a_codes and a_scales must both be given, or both be None (the input "
                        "written into op.input())");
        return -1;
    }
    if (ao == Py_None) {
        in->placed = 1;
        in->m = m_arg;
        if (m_arg < 1) {
            PyErr_Format(PyExc_ValueError, "m must be given when a_codes and a_scales are not (the input written "
                         "into op.input()): 1 to max_m = %lld", (long long)max_m);
            return -1;
        }
        return 0;
    }
    int64_t ma = 0, ms = 0;
    int pa = placed_input(ao, self->in_a, !self->reverse, R, self->block_rows, ka, ka, &ma);
    int ps = placed_input(sao, self->in_sa, !self->reverse, R, self->block_rows, sw, self->ldsa, &ms);
    if (pa && ps && ma == ms) {
        in->placed = 1;
        in->m = ma;
    } else {
        if (matrix_get(ao, "a_codes", EL_U8, MAT_ROWS, &in->a) < 0) {
            if (PyErr_ExceptionMatches(PyExc_ValueError)) {
                PyObject *t, *v, *tb;
                PyErr_Fetch(&t, &v, &tb);
                PyObject *s = v ? PyObject_Str(v) : NULL;
                input_shape_text(self, shape, sizeof shape);
                PyErr_Format(PyExc_ValueError, "%s (a_codes is %s; or the op's own from op.input())",
                             s ? PyUnicode_AsUTF8(s) : "", shape);
                Py_XDECREF(s), Py_XDECREF(t), Py_XDECREF(v), Py_XDECREF(tb);
            }
            return -1;
        }
        if (in->a.cols != ka || in->a.rows % blocks != 0 || in->a.rows == 0) {
            input_shape_text(self, shape, sizeof shape);
            matrix_shape_error("a_codes", &in->a, "%s", shape);
            return -1;
        }
        in->m = in->a.rows / blocks;
        if (in->m > max_m) {
            if (self->reverse)
                PyErr_Format(PyExc_ValueError, "a_codes has m = %lld rows, over the op's max_m = %lld",
                             (long long)in->m, (long long)max_m);
            else
                PyErr_Format(PyExc_ValueError, "a_codes has m = %lld rows per rank (%lld rows / R = %lld), over the "
                             "op's max_m = %lld", (long long)in->m, (long long)in->a.rows, (long long)R,
                             (long long)max_m);
            return -1;
        }
        if (matrix_get(sao, "a_scales", EL_U8, MAT_ROWS, &in->sa) < 0 ||
            check_scales("a_scales", &in->sa, in->a.rows, ka, self->reverse ? "m" : "R*m") < 0)
            return -1;
        int a_lib = in->a.ld == ka || in->a.rows == 1;
        int sa_lib = in->sa.cols == self->ldsa && (in->sa.ld == self->ldsa || in->sa.rows == 1);
        in->copied = !(a_lib && sa_lib);
    }
    if (m_arg >= 1 && m_arg != in->m) {
        PyErr_Format(PyExc_ValueError, "m = %lld, but a_codes has m = %lld rows%s", m_arg, (long long)in->m,
                     self->reverse ? "" : " per rank");
        return -1;
    }
    return 0;
}

static void release_input(call_input *in)
{
    matrix_release(&in->a);
    matrix_release(&in->sa);
}

/* After a call: -1 with the observer's exception set when it raised one (raise_it), else 0. */
static int observer_outcome(OpObject *self, int raise_it)
{
    self->observer_status = 0;
    if (!self->observer_raised) return 0;
    self->observer_raised = 0;
    PyObject *t = self->observer_type, *v = self->observer_exc, *tb = self->observer_tb;
    self->observer_type = self->observer_exc = self->observer_tb = NULL;
    if (raise_it && t) {
        PyErr_Restore(t, v, tb);
        return -1;
    }
    Py_XDECREF(t), Py_XDECREF(v), Py_XDECREF(tb);
    return 0;
}

/* The output of a call with m: [m, n] (alltoall-matmul) or [R*m, n/R] (matmul-alltoall, rows i*m.. from rank i). */
static int64_t out_rows(const OpObject *self, int64_t m) { return self->out_blocks * m; }
static int64_t out_cols(const OpObject *self) { return self->out_cols; }

static int out_shape_error(const OpObject *self, const matrix *out, int64_t m)
{
    if (self->reverse)
        return matrix_shape_error("out", out, "[R*m, n/R] = [%lld, %lld] (bf16; rows i*m .. from rank i)",
                                  (long long)out_rows(self, m), (long long)out_cols(self));
    return matrix_shape_error("out", out, "[m, n] = [%lld, %lld] (bf16)", (long long)m, (long long)out_cols(self));
}

/* _run(a_codes, a_scales, out, m) -> out: the collective call (see Op.__call__); m None or an int. */
static PyObject *op_run(OpObject *self, PyObject *args)
{
    PyObject *ao, *sao, *outo, *mo;
    if (!PyArg_ParseTuple(args, "OOOO", &ao, &sao, &outo, &mo)) return NULL;
    int usable = op_usable(self, "op call");
    if (usable == -2) return NULL; /* busy: the call running on another thread goes on, and so do the others */
    if (usable < 0) goto fail_comm;
    long long m_arg = call_m(self, mo);
    if (m_arg == -2) goto fail_comm;
    if (!self->has_weights) {
        PyErr_SetString(PyExc_ValueError, "the op has no weights: call op.set_weights(b_codes, b_scales) or "
                        "op.use_weights(weights) first");
        goto fail_comm;
    }
    call_input in;
    if (take_input(self, ao, sao, m_arg, &in) < 0) {
        release_input(&in);
        goto fail_comm;
    }
    const int64_t m = in.m, rows = out_rows(self, m), cols = out_cols(self);
    PyObject *res = outo == Py_None ? ext_new_array(ext_np_u16, rows, cols) : Py_NewRef(outo);
    matrix out;
    if (!res || matrix_get(res, "out", EL_BF16, MAT_CONTIGUOUS | MAT_WRITABLE, &out) < 0) {
        Py_XDECREF(res);
        release_input(&in);
        goto fail_comm;
    }
    if (out.rows != rows || out.cols != cols) {
        out_shape_error(self, &out, m);
        matrix_release(&out);
        Py_DECREF(res);
        release_input(&in);
        goto fail_comm;
    }
    a2amm_error err = {0, ""};
    int rc;
    call_guard g;
    self->busy = 1;
    comm_call_begin(self->comm, "op call", 1);
    guard_enter(&g, self->comm->comm);
    Py_BEGIN_ALLOW_THREADS
    const uint8_t *a = NULL, *sa = NULL;
    if (!in.placed && in.copied) {
        copy_in(self->in_a, self->ka, &in.a, self->blocks, m, self->block_rows, self->ka);
        copy_in(self->in_sa, self->ldsa, &in.sa, self->blocks, m, self->block_rows, in.sa.cols);
    } else if (!in.placed) {
        a = (const uint8_t *)in.a.ptr, sa = (const uint8_t *)in.sa.ptr;
    }
    rc = lib_op_run(self->op, m, a, sa, (uint16_t *)out.ptr, &err);
    Py_END_ALLOW_THREADS
    comm_call_end(self->comm, 1);
    self->busy = 0;
    self->calls++;
    matrix_release(&out);
    release_input(&in);
    int interrupted = guard_leave(&g) < 0; /* KeyboardInterrupt first; the observer's exception then */
    if (observer_outcome(self, !interrupted) < 0 || interrupted) {
        Py_DECREF(res);
        return NULL;
    }
    if (rc) {
        Py_DECREF(res);
        return ext_raise(rc, &err);
    }
    return res;
fail_comm:
    if (self->comm) comm_fail_for_error(self->comm);
    return NULL;
}

/* _c_loop(a_codes, a_scales, out, iters, barrier) -> [seconds]: the library's call alone, timed, for the
 * benchmark beside the Python call (no observer, as a C program calls it). */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static PyObject *op_c_loop(OpObject *self, PyObject *args)
{
    PyObject *ao, *sao, *outo;
    int iters, barrier;
    if (!PyArg_ParseTuple(args, "OOOip", &ao, &sao, &outo, &iters, &barrier)) return NULL;
    if (op_usable(self, "_c_loop") < 0) return NULL;
    matrix a, sa, out;
    if (matrix_get(ao, "a_codes", EL_U8, MAT_CONTIGUOUS, &a) < 0) return NULL;
    if (matrix_get(sao, "a_scales", EL_U8, MAT_CONTIGUOUS, &sa) < 0) {
        matrix_release(&a);
        return NULL;
    }
    if (matrix_get(outo, "out", EL_BF16, MAT_CONTIGUOUS | MAT_WRITABLE, &out) < 0) {
        matrix_release(&a), matrix_release(&sa);
        return NULL;
    }
    PyObject *list = NULL;
    double *t = calloc((size_t)(iters > 0 ? iters : 1), sizeof *t);
    int64_t m = a.rows / self->blocks;
    if (!t || a.cols != self->ka || sa.cols != self->ldsa || a.rows % self->blocks || sa.rows != a.rows ||
        out.rows != out_rows(self, m) || out.cols != out_cols(self) || m < 1 || m > self->o.max_m) {
        PyErr_SetString(PyExc_ValueError, "_c_loop: contiguous input [R*m, K/R] (matmul-alltoall: [m, K]), scales "
                        "[rows, ldsa] and out [m, n] (matmul-alltoall: [R*m, n/R]) arrays");
        goto done;
    }
    a2amm_error err = {0, ""};
    int rc = A2AMM_OK;
    a2amm_op *op = self->op;
    a2amm_comm *comm = self->comm->comm;
    double timeout = self->o.timeout_s > 0 ? self->o.timeout_s : 60;
    self->busy = 1;
    comm_call_begin(self->comm, "op call", 1);
    Py_BEGIN_ALLOW_THREADS
    rc = lib_op_set_observer(op, NULL, NULL, &err);
    for (int i = 0; !rc && i < iters; i++) {
        if (barrier) rc = lib_comm_barrier(comm, timeout, &err);
        double t0 = now_s();
        if (!rc) rc = lib_op_run(op, m, (const uint8_t *)a.ptr, (const uint8_t *)sa.ptr, (uint16_t *)out.ptr, &err);
        t[i] = now_s() - t0;
    }
    if (!rc) rc = lib_op_set_observer(op, op_observer, self, &err);
    Py_END_ALLOW_THREADS
    comm_call_end(self->comm, 1);
    self->busy = 0;
    if (rc) {
        ext_raise(rc, &err);
        goto done;
    }
    list = PyList_New(iters);
    for (int i = 0; list && i < iters; i++) PyList_SET_ITEM(list, i, PyFloat_FromDouble(t[i]));
done:
    free(t);
    matrix_release(&a), matrix_release(&sa), matrix_release(&out);
    return list;
}

/* ---- observer and recorder ------------------------------------------------------ */

static PyObject *op_set_observer(OpObject *self, PyObject *fn)
{
    if (op_usable(self, "set_observer") < 0) return NULL;
    if (fn != Py_None && !PyCallable_Check(fn))
        return PyErr_Format(PyExc_TypeError, "the observer must be callable (fn(event) -> None, or a negative "
                            "a2amm.E_* at a \"tile\" event to stop the call), or None; got a %.100s",
                            Py_TYPE(fn)->tp_name);
    Py_XSETREF(self->observer, fn == Py_None ? NULL : Py_NewRef(fn));
    Py_RETURN_NONE;
}

/* _record(on): starts (clearing what was kept) or stops keeping spans. */
static PyObject *op_record(OpObject *self, PyObject *on)
{
    int v = PyObject_IsTrue(on);
    if (v < 0) return NULL;
    if (self->busy) return PyErr_Format(PyExc_ValueError, "trace: the op is in a call from another thread");
    if (v) self->rec.n = 0, self->rec.dropped = 0;
    self->rec.on = v;
    Py_RETURN_NONE;
}

/* _spans() -> (bytes, dropped): the spans kept, as span_rec records. */
static PyObject *op_spans(OpObject *self, PyObject *unused)
{
    (void)unused;
    return Py_BuildValue("(y#n)", (const char *)self->rec.recs, (Py_ssize_t)(self->rec.n * sizeof(span_rec)),
                         (Py_ssize_t)self->rec.dropped);
}

/* ---- the type ------------------------------------------------------------------------ */

static PyObject *op_exit(OpObject *self, PyObject *args)
{
    (void)args;
    PyObject *r = PyObject_CallMethod((PyObject *)self, "close", NULL);
    if (!r) return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

#define GET(name, expr)                                                                                         \
    static PyObject *get_##name(OpObject *self, void *c)                                                         \
    {                                                                                                            \
        (void)c;                                                                                                 \
        return expr;                                                                                             \
    }
GET(kind, PyUnicode_FromString(lib_op_kind_name(self->o.kind)))
GET(a_fmt, PyUnicode_FromString(lib_fmt_name(self->o.a_type)))
GET(b_fmt, PyUnicode_FromString(lib_fmt_name(self->o.b_type)))
GET(path, PyUnicode_FromString(self->o.path_put ? "put" : "direct"))
GET(schedule, PyUnicode_FromString(self->o.unfused ? "unfused" : "fused"))
GET(closed, PyBool_FromLong(self->closed || self->op == NULL))
GET(comm, Py_NewRef(self->comm ? (PyObject *)self->comm : Py_None))
GET(observer, Py_NewRef(self->observer ? self->observer : Py_None))
GET(timeout, PyFloat_FromDouble(self->o.timeout_s > 0 ? self->o.timeout_s : 60))
GET(tile_m, PyLong_FromLongLong(self->o.tile_m > 0 ? self->o.tile_m : 512))
GET(depth, PyLong_FromLong(self->o.depth > 0 ? self->o.depth : 4))
GET(threads, PyLong_FromLong(self->o.threads))
GET(max_m, PyLong_FromLongLong(self->o.max_m))
GET(k, PyLong_FromLongLong(self->o.k))
GET(n, PyLong_FromLongLong(self->o.n))
GET(weights, Py_NewRef(self->weights ? self->weights : Py_None))

static PyGetSetDef OP_GETSET[] = {
    {"kind", (getter)get_kind, NULL, "the op's kind (\"alltoall-matmul\" or \"matmul-alltoall\")", NULL},
    {"a_fmt", (getter)get_a_fmt, NULL, "A's fp8 format", NULL},
    {"b_fmt", (getter)get_b_fmt, NULL, "B's fp8 format", NULL},
    {"path", (getter)get_path, NULL, "\"direct\" or \"put\"", NULL},
    {"schedule", (getter)get_schedule, NULL, "\"fused\" or \"unfused\"", NULL},
    {"closed", (getter)get_closed, NULL, "whether it is closed", NULL},
    {"comm", (getter)get_comm, NULL, "the communicator it was made on", NULL},
    {"observer", (getter)get_observer, NULL, "the Python observer, or None", NULL},
    {"timeout", (getter)get_timeout, NULL, "the deadline of every wait between ranks, seconds", NULL},
    {"tile_m", (getter)get_tile_m, NULL, "rows per pipeline tile", NULL},
    {"depth", (getter)get_depth, NULL, "ring slots per source on the put path", NULL},
    {"threads", (getter)get_threads, NULL, "compute threads of this rank (0: cores / R)", NULL},
    {"max_m", (getter)get_max_m, NULL, "the largest m of any call (rows per destination)", NULL},
    {"k", (getter)get_k, NULL, "K", NULL},
    {"n", (getter)get_n, NULL, "N", NULL},
    {"weights", (getter)get_weights, NULL, "the a2amm.Weights it uses (use_weights), or None", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef OP_MEMBERS[] = {
    {"ka", T_LONGLONG, offsetof(OpObject, ka), READONLY,
     "the columns of a row of this rank's input: K / R (alltoall-matmul) or K (matmul-alltoall)"},
    {"calls", T_ULONGLONG, offsetof(OpObject, calls), READONLY, "calls made so far"},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef OP_METHODS[] = {
    {"_run", (PyCFunction)op_run, METH_VARARGS, NULL},
    {"_c_loop", (PyCFunction)op_c_loop, METH_VARARGS, NULL},
    {"_input_buffers", (PyCFunction)op_input_buffers, METH_NOARGS, NULL},
    {"_set_weights", (PyCFunction)(void (*)(void))op_set_weights, METH_VARARGS | METH_KEYWORDS, NULL},
    {"use_weights", (PyCFunction)op_use_weights, METH_O,
     "use_weights(weights): local; the op borrows prepared a2amm.Weights (n, k and fmt as the op's) instead\n"
     "of a copy of its own: several ops and a2amm.matmul can share one preparation."},
    {"set_observer", (PyCFunction)op_set_observer, METH_O,
     "set_observer(fn): local; fn(event) is called at each event of this rank's calls (a2amm.Event), on the\n"
     "thread that makes the call, with the GIL: it must be quick. Returning a negative a2amm.E_* at a\n"
     "\"tile\" event stops the call there (it fails on this rank, PeerError on the others); an exception\n"
     "it raises stops the call at the next tile and is raised by the call. None removes it."},
    {"_record", (PyCFunction)op_record, METH_O, NULL},
    {"_spans", (PyCFunction)op_spans, METH_NOARGS, NULL},
    {"close", (PyCFunction)op_close, METH_NOARGS, "close(): local; frees the op (its views from input() too)."},
    {"__enter__", ext_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)op_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

int op_module_init(PyObject *m)
{
    if (PyStructSequence_InitType2(&EventType, &EVENT_DESC) < 0) return -1;
    for (int i = 0; i < A2AMM_EVENT_KINDS; i++)
        if (EVENT_NAMES[i] && !(event_name_objs[i] = PyUnicode_InternFromString(EVENT_NAMES[i]))) return -1;
    return PyModule_AddObjectRef(m, "Event", (PyObject *)&EventType);
}

PyTypeObject OpType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "a2amm._a2amm.Op",
    .tp_basicsize = sizeof(OpObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The C side of a2amm.Op.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)op_init,
    .tp_dealloc = (destructor)op_dealloc,
    .tp_traverse = (traverseproc)op_traverse,
    .tp_clear = (inquiry)op_clear,
    .tp_weaklistoffset = offsetof(OpObject, weakrefs),
    .tp_methods = OP_METHODS,
    .tp_members = OP_MEMBERS,
    .tp_getset = OP_GETSET,
};

/* op_heap_bytes(R, max_m, k, n, a_fmt, b_fmt, tile_m, depth, path, schedule, kind) -> bytes */
PyObject *ext_op_heap_bytes(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"R", "max_m", "k", "n", "a_fmt", "b_fmt", "tile_m", "depth", "path", "schedule",
                             "kind", NULL};
    int R, depth = 0, pi = 0, si = 0;
    long long max_m, k, n, tile_m = 0;
    const char *afmt = "e4m3", *bfmt = "e4m3";
    PyObject *kind = NULL, *path = NULL, *sched = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iLLL|ssLiOOO:op_heap_bytes", kwlist, &R, &max_m, &k, &n, &afmt,
                                     &bfmt, &tile_m, &depth, &path, &sched, &kind))
        return NULL;
    int ki = 0;
    if (kind && kind != Py_None && parse_kind(kind, &ki) < 0) return NULL;
    /* the Op's own choices, so that a misspelt one is an error here as there, not a size for another op */
    if (path && path != Py_None && parse_choice(path, "path", PATHS, 2, &pi) < 0) return NULL;
    if (sched && sched != Py_None && parse_choice(sched, "schedule", SCHEDULES, 2, &si) < 0) return NULL;
    lib_op_options o = {.kind = (lib_op_kind)ki, .max_m = max_m, .k = k, .n = n, .tile_m = tile_m, .depth = depth,
                        .path_put = pi, .unfused = si};
    if (lib_fmt_parse(afmt, &o.a_type) || lib_fmt_parse(bfmt, &o.b_type))
        return PyErr_Format(PyExc_ValueError, "a_fmt and b_fmt must be \"e4m3\" or \"e5m2\"");
    a2amm_error err = {0, ""};
    size_t bytes = lib_op_heap_bytes(&o, R, &err);
    if (!bytes) return ext_raise(A2AMM_E_INVAL, &err);
    return PyLong_FromSize_t(bytes);
}
