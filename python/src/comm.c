/* a2amm.Comm: a communicator from a launch rank or an MPI job (see a2amm/__init__.py). */
#include "ext.h"

#include <stdio.h>
#include <structmember.h>
#include <time.h>

/* Weak references to the communicators from_mpi made (closed at exit: _close_all). */
static PyObject *owned_comms;

CommObject *comm_wrap(a2amm_comm *comm, int owned, int mpi_transport, PyObject *keep)
{
    CommObject *c = PyObject_New(CommObject, &CommType);
    if (!c) return NULL;
    c->comm = comm;
    c->closed = 0;
    c->owned = owned;
    c->mpi_transport = mpi_transport;
    c->rank = lib_comm_rank(comm);
    c->size = lib_comm_size(comm);
    c->busy = 0;
    c->inflight = 0;
    c->inflight_call = NULL;
    c->exports = 0;
    c->ops = PyList_New(0);
    c->keep = Py_XNewRef(keep);
    c->weakrefs = NULL;
    if (!c->ops) {
        Py_DECREF(c);
        return NULL;
    }
    if (owned) {
        PyObject *ref = PyWeakref_NewRef((PyObject *)c, NULL);
        if (!owned_comms) owned_comms = PyList_New(0);
        if (!ref || !owned_comms || PyList_Append(owned_comms, ref) < 0) PyErr_Clear(); /* then not closed at exit */
        Py_XDECREF(ref);
    }
    return c;
}

/* _close_all(why): at exit, every communicator still open is closed; with why (the program ends
 * with an unhandled exception), failed first, so that the other ranks stop at once. A call still in
 * flight on another (daemon) thread is waited for first, stopped when it is collective. */
PyObject *ext_close_all(PyObject *self, PyObject *why)
{
    (void)self;
    const char *text = why != Py_None ? PyUnicode_AsUTF8(why) : NULL;
    if (why != Py_None && !text) return NULL;
    for (Py_ssize_t i = 0; owned_comms && i < PyList_GET_SIZE(owned_comms); i++) {
        PyObject *c = PyWeakref_GetObject(PyList_GET_ITEM(owned_comms, i));
        if (!c || c == Py_None) continue;
        CommObject *co = (CommObject *)c;
        if (co->closed || !co->comm) continue;
        if (text) {
            char msg[900];
            snprintf(msg, sizeof msg, "ended with an unhandled %s", text);
            lib_comm_fail(co->comm, A2AMM_E_INVAL, msg);
        }
        char stopped[300];
        Py_INCREF(c); /* the wait releases the GIL: the list may change meanwhile */
        int calls = comm_stop_calls(co, "the program ended", 60, stopped, sizeof stopped);
        if (calls >= 0) {
            co->exports = 0; /* the process ends: its views go with it */
            comm_close(co, 1);
        }
        Py_DECREF(c);
    }
    Py_CLEAR(owned_comms);
    Py_RETURN_NONE;
}

void comm_call_begin(CommObject *c, const char *name, int collective)
{
    c->inflight++;
    c->inflight_call = name;
    if (collective) c->busy = 1;
}

void comm_call_end(CommObject *c, int collective)
{
    c->inflight--;
    if (collective) c->busy = 0;
}

int comm_collective(CommObject *c, const char *name, int (*fn)(void *arg, a2amm_error *err), void *arg,
                    a2amm_error *err, int *rc)
{
    call_guard g;
    comm_call_begin(c, name, 1);
    guard_enter(&g, c->comm);
    Py_BEGIN_ALLOW_THREADS
    *rc = fn(arg, err);
    Py_END_ALLOW_THREADS
    comm_call_end(c, 1);
    return guard_leave(&g);
}

static double monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int comm_stop_calls(CommObject *c, const char *who, double seconds, char *why, size_t size)
{
    if (size) why[0] = '\0';
    if (c->inflight == 0) return 0;
    c->closed = 1; /* no new call while the wait lets other threads run */
    int outcome = 2;
    if (c->busy && c->comm) { /* a collective call: the other ranks are (or will be) in it; it cannot end well */
        snprintf(why, size, "%s while another thread was in a call (%s) on its communicator: that call was stopped",
                 who, c->inflight_call ? c->inflight_call : "a collective call");
        lib_comm_fail(c->comm, A2AMM_E_INVAL, why);
        outcome = 1;
    }
    const double deadline = monotonic_s() + seconds;
    const struct timespec pause = {0, 1000000};
    while (c->inflight > 0 && monotonic_s() < deadline) {
        Py_BEGIN_ALLOW_THREADS
        nanosleep(&pause, NULL);
        Py_END_ALLOW_THREADS
    }
    if (c->inflight == 0) return outcome;
    fprintf(stderr, "a2amm: %s while another thread was in a call (%s) that has not returned after %.0f s: its "
            "communicator is left open\n", who, c->inflight_call ? c->inflight_call : "?", seconds);
    return -1;
}

/* Ends the library's communicator, unless a view of its memory is still alive. */
static void comm_end(CommObject *c)
{
    if (!c->comm || c->exports > 0) return;
    if (c->owned && !(c->mpi_transport && ext_mpi_finalized())) lib_comm_destroy(c->comm);
    c->comm = NULL;
    Py_CLEAR(c->keep);
}

void comm_close(CommObject *c, int force)
{
    c->closed = 1;
    /* its ops first: an op must not outlive its communicator */
    PyObject *ops = c->ops;
    c->ops = PyList_New(0);
    for (Py_ssize_t i = 0; ops && i < PyList_GET_SIZE(ops); i++) {
        PyObject *op = PyWeakref_GetObject(PyList_GET_ITEM(ops, i));
        if (op && op != Py_None && PyObject_TypeCheck(op, &MoEType)) moe_close_object(op);
        else if (op && op != Py_None) op_close_object(op, force);
    }
    Py_XDECREF(ops);
    if (c->owned) comm_end(c);
    else c->comm = NULL; /* a launch rank's: it ends with the rank's function */
}

void comm_export_taken(CommObject *c) { c->exports++; }

void comm_export_released(CommObject *c)
{
    if (--c->exports == 0 && c->closed && c->inflight == 0) comm_end(c);
}

int comm_check_usable(CommObject *c, const char *call)
{ /* -1: closed; -2: busy (the call running goes on: no reason to fail the communicator) */
    if (c->closed || !c->comm) {
        PyErr_Format(PyExc_ValueError, "%s: the communicator is closed", call);
        return -1;
    }
    if (c->busy) {
        PyErr_Format(PyExc_ValueError, "%s: the communicator is in a call from another thread: a rank makes its "
                     "collective calls one at a time, in the same order on every rank", call);
        return -2;
    }
    return 0;
}

void comm_fail_for_error(CommObject *c)
{
    if (!c || c->closed || !c->comm || !PyErr_Occurred()) return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *text = value ? PyObject_Str(value) : NULL;
    const char *s = text ? PyUnicode_AsUTF8(text) : NULL;
    char msg[900];
    snprintf(msg, sizeof msg, "%s: %s", type ? ((PyTypeObject *)type)->tp_name : "error", s ? s : "");
    PyErr_Clear();
    Py_XDECREF(text);
    lib_comm_fail(c->comm, A2AMM_E_INVAL, msg);
    PyErr_Restore(type, value, tb);
}

static void comm_dealloc(CommObject *self)
{
    if (self->weakrefs) PyObject_ClearWeakRefs((PyObject *)self);
    if (self->owned && self->comm) {
        self->exports = 0; /* none alive: each holds its op, which holds this */
        comm_end(self);
    }
    Py_XDECREF(self->ops);
    Py_XDECREF(self->keep);
    PyObject_Free(self);
}

static PyObject *comm_close_method(CommObject *self, PyObject *unused)
{
    (void)unused;
    if (self->inflight) {
        PyErr_Format(PyExc_ValueError, "close: the communicator is in a call from another thread (%s): close it "
                     "once that call has returned", self->inflight_call ? self->inflight_call : "?");
        return NULL;
    }
    comm_close(self, 0);
    Py_RETURN_NONE;
}

static PyObject *comm_barrier(CommObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"timeout", NULL};
    double timeout = 60;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|d:barrier", kwlist, &timeout)) return NULL;
    if (comm_check_usable(self, "barrier") < 0) return NULL;
    if (!(timeout > 0)) {
        ext_value_error("timeout must be positive seconds; got %g", timeout);
        comm_fail_for_error(self);
        return NULL;
    }
    a2amm_error err = {0, ""};
    int rc;
    call_guard g;
    comm_call_begin(self, "barrier", 1);
    guard_enter(&g, self->comm);
    Py_BEGIN_ALLOW_THREADS
    rc = lib_comm_barrier(self->comm, timeout, &err);
    Py_END_ALLOW_THREADS
    comm_call_end(self, 1);
    if (guard_leave(&g) < 0) return NULL;
    if (rc) return ext_raise(rc, &err);
    Py_RETURN_NONE;
}

static PyObject *comm_alltoall(CommObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"send", "recv", "timeout", NULL};
    PyObject *so, *ro = NULL;
    double timeout = 60;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|Od:alltoall", kwlist, &so, &ro, &timeout)) return NULL;
    if (comm_check_usable(self, "alltoall") < 0) return NULL;
    Py_buffer s, r;
    if (PyObject_GetBuffer(so, &s, PyBUF_C_CONTIGUOUS) < 0) {
        comm_fail_for_error(self);
        return NULL;
    }
    if (ro == NULL || ro == Py_None) {
        PyObject *np = PyImport_ImportModule("numpy");
        ro = np ? PyObject_CallMethod(np, "empty_like", "O", so) : NULL;
        Py_XDECREF(np);
    } else {
        Py_INCREF(ro);
    }
    if (!ro || PyObject_GetBuffer(ro, &r, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&s);
        Py_XDECREF(ro);
        comm_fail_for_error(self);
        return NULL;
    }
    PyObject *res = NULL;
    if (s.len != r.len || s.len % self->size != 0) {
        PyErr_Format(PyExc_ValueError, "alltoall: send and recv must be of equal size, a multiple of the %d ranks "
                     "(got %zd and %zd bytes)", self->size, s.len, r.len);
        comm_fail_for_error(self);
    } else if (!(timeout > 0)) {
        ext_value_error("timeout must be positive seconds; got %g", timeout);
        comm_fail_for_error(self);
    } else {
        a2amm_error err = {0, ""};
        int rc;
        call_guard g;
        comm_call_begin(self, "alltoall", 1);
        guard_enter(&g, self->comm);
        Py_BEGIN_ALLOW_THREADS
        rc = lib_comm_alltoall(self->comm, s.buf, r.buf, (size_t)(s.len / self->size), timeout, &err);
        Py_END_ALLOW_THREADS
        comm_call_end(self, 1);
        if (guard_leave(&g) == 0) res = rc ? ext_raise(rc, &err) : Py_NewRef(ro);
    }
    PyBuffer_Release(&s);
    PyBuffer_Release(&r);
    Py_DECREF(ro);
    return res;
}

static PyObject *comm_say(CommObject *self, PyObject *arg)
{
    const char *s = PyUnicode_AsUTF8(arg);
    if (!s || comm_check_usable(self, "say") < 0) return NULL;
    lib_comm_say(self->comm, s);
    Py_RETURN_NONE;
}

static PyObject *comm_fail_method(CommObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"message", "code", NULL};
    const char *msg;
    int code = A2AMM_E_INVAL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|i:fail", kwlist, &msg, &code)) return NULL;
    if (self->closed || !self->comm) {
        PyErr_SetString(PyExc_ValueError, "fail: the communicator is closed");
        return NULL;
    }
    if (code >= 0) {
        PyErr_Format(PyExc_ValueError, "code must be a negative a2amm status (a2amm.E_*); got %d", code);
        return NULL;
    }
    lib_comm_fail(self->comm, code, msg);
    Py_RETURN_NONE;
}

static PyObject *comm_exit(CommObject *self, PyObject *args)
{
    PyObject *type = NULL, *value = NULL, *tb = NULL;
    if (!PyArg_ParseTuple(args, "|OOO", &type, &value, &tb)) return NULL;
    if (value && value != Py_None && self->owned && !self->closed && self->comm &&
        !PyObject_TypeCheck(value, (PyTypeObject *)ext_PeerError)) {
        /* an exception leaves the block: the other ranks stop with PeerError instead of waiting */
        PyObject *text = PyObject_Str(value);
        const char *s = text ? PyUnicode_AsUTF8(text) : NULL;
        char msg[900];
        snprintf(msg, sizeof msg, "%s: %s", Py_TYPE(value)->tp_name, s ? s : "");
        PyErr_Clear();
        Py_XDECREF(text);
        lib_comm_fail(self->comm, A2AMM_E_INVAL, msg);
    }
    PyObject *r = comm_close_method(self, NULL);
    if (!r) return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

/* _track(op): an op made on it, closed with it. */
static PyObject *comm_track(CommObject *self, PyObject *op)
{
    PyObject *ref = PyWeakref_NewRef(op, NULL);
    if (!ref) return NULL;
    /* forget ops already gone */
    Py_ssize_t n = PyList_GET_SIZE(self->ops), j = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyList_GET_ITEM(self->ops, i);
        if (PyWeakref_GetObject(r) != Py_None) {
            Py_INCREF(r);
            PyList_SetItem(self->ops, j++, r);
        }
    }
    if (PyList_SetSlice(self->ops, j, n, NULL) < 0 || PyList_Append(self->ops, ref) < 0) {
        Py_DECREF(ref);
        return NULL;
    }
    Py_DECREF(ref);
    Py_RETURN_NONE;
}

static PyObject *get_doing(CommObject *self, void *c)
{
    (void)c;
    return PyUnicode_FromString(self->comm && !self->closed ? lib_comm_doing(self->comm) : "");
}

static PyObject *get_closed(CommObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->closed || !self->comm);
}

static PyObject *get_transport(CommObject *self, void *c)
{
    (void)c;
    return PyUnicode_FromString(self->mpi_transport ? "mpi" : "shm");
}

static PyObject *comm_repr(CommObject *self)
{
    if (self->closed || !self->comm) return PyUnicode_FromString("a2amm.Comm(closed)");
    return PyUnicode_FromFormat("a2amm.Comm(rank %d of %d, transport %s)", self->rank, self->size,
                                self->mpi_transport ? "mpi" : "shm");
}

static PyMethodDef COMM_METHODS[] = {
    {NULL, NULL, 0, NULL}, /* from_mpi (comm_mpi.c), filled in at the module's start */
    {"barrier", (PyCFunction)(void (*)(void))comm_barrier, METH_VARARGS | METH_KEYWORDS,
     "barrier(timeout=60.0): collective; every rank waits for the others (at most timeout seconds)."},
    {"alltoall", (PyCFunction)(void (*)(void))comm_alltoall, METH_VARARGS | METH_KEYWORDS,
     "alltoall(send, recv=None, timeout=60.0) -> recv: collective; the plain AllToAll. send: an array\n"
     "whose first dimension is the ranks (C-contiguous); block j goes to rank j, and block r of rank j's\n"
     "recv (made like send when None) comes from rank r. Staged through the communicator's memory."},
    {"alltoallv", (PyCFunction)(void (*)(void))comm_alltoallv, METH_VARARGS | METH_KEYWORDS,
     "alltoallv(blocks, timeout=60.0) -> [recv_0, ..., recv_{R-1}]: collective; the uneven AllToAll. blocks:\n"
     "one buffer per rank (C-contiguous, any sizes, 0 included), block j for rank j; returns what each rank\n"
     "sent this one, as uint8 arrays (views of one array: .view(dtype).reshape(...) gives them their type).\n"
     "Nobody needs to know beforehand what it receives: the sizes go first, then the blocks."},
    {"say", (PyCFunction)comm_say, METH_O,
     "say(text): what this rank is doing now; it appears in failure messages and counts as a sign of life."},
    {"fail", (PyCFunction)(void (*)(void))comm_fail_method, METH_VARARGS | METH_KEYWORDS,
     "fail(message, code=a2amm.E_INVAL): fails the communicator on purpose: every other rank's collective\n"
     "call raises a2amm.PeerError (over the MPI transport: the MPI job ends)."},
    {"close", (PyCFunction)comm_close_method, METH_NOARGS,
     "close(): closes the ops made on it, then ends this rank's part of the communicator (local)."},
    {"__enter__", ext_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)comm_exit, METH_VARARGS, NULL},
    {"_track", (PyCFunction)comm_track, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef COMM_MEMBERS[] = {
    {"rank", T_INT, offsetof(CommObject, rank), READONLY, "this rank's number, 0 .. size-1"},
    {"size", T_INT, offsetof(CommObject, size), READONLY, "the number of ranks"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef COMM_GETSET[] = {
    {"doing", (getter)get_doing, NULL, "what this rank said it was doing last (say(), or the op's own)", NULL},
    {"closed", (getter)get_closed, NULL, "whether it is closed (or its launch rank ended)", NULL},
    {"transport", (getter)get_transport, NULL, "\"shm\" (shared memory, one machine) or \"mpi\" (Open MPI)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

void comm_type_prepare(void) { COMM_METHODS[0] = ext_from_mpi_method; }

PyTypeObject CommType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "a2amm._a2amm.Comm",
    .tp_basicsize = sizeof(CommObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A communicator: made by a2amm.launch (each rank's) or a2amm.Comm.from_mpi.",
    .tp_dealloc = (destructor)comm_dealloc,
    .tp_repr = (reprfunc)comm_repr,
    .tp_weaklistoffset = offsetof(CommObject, weakrefs),
    .tp_methods = COMM_METHODS,
    .tp_members = COMM_MEMBERS,
    .tp_getset = COMM_GETSET,
};
