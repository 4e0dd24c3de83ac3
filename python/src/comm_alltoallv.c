/*
 * Comm.alltoallv: the uneven AllToAll from Python, over a2amm_comm_alltoallv.
 * A rank passes R buffers (block j for rank j, any sizes) and gets R uint8
 * arrays (what each rank sent it). It does not know beforehand what it
 * receives, so the sizes go first (an a2amm_comm_alltoall of one int64 a
 * pair), then the blocks into one array of the exact total, which the
 * returned arrays are views of.
 */
#include "ext.h"

#include <stdlib.h>
#include <string.h>

/* b as a buffer-protocol object (a new reference): itself, or a torch CPU tensor's numpy view through the
 * package's own _array (its bytes; bf16 as its bits), as every other call takes tensors. */
static PyObject *readable(PyObject *b, int i)
{
    if (PyObject_CheckBuffer(b)) return Py_INCREF(b), b;
    PyObject *mod = PyImport_ImportModule("a2amm");
    if (!mod) return NULL;
    char name[32];
    snprintf(name, sizeof name, "blocks[%d]", i);
    PyObject *r = PyObject_CallMethod(mod, "_array", "Os", b, name);
    Py_DECREF(mod);
    return r;
}

/* The blocks of `seq` (R buffers, C-contiguous) copied into one buffer; their sizes and offsets. */
static int gather_blocks(PyObject *seq, int R, uint8_t **send, size_t *bytes, size_t *offsets)
{
    PyObject *fast = PySequence_Fast(seq, "alltoallv: blocks must be a sequence of one buffer per rank");
    if (!fast) return -1;
    if (PySequence_Fast_GET_SIZE(fast) != R) {
        PyErr_Format(PyExc_ValueError, "alltoallv: blocks must hold one buffer per rank, %d; got %zd", R,
                     PySequence_Fast_GET_SIZE(fast));
        Py_DECREF(fast);
        return -1;
    }
    Py_buffer *views = calloc((size_t)R, sizeof *views);
    int rc = views ? 0 : (PyErr_NoMemory(), -1), got = 0;
    size_t total = 0;
    for (; !rc && got < R; got++) {
        PyObject *b = PySequence_Fast_GET_ITEM(fast, got), *r = readable(b, got);
        if (!r) {
            rc = -1;
            break;
        }
        int bad = PyObject_GetBuffer(r, &views[got], PyBUF_C_CONTIGUOUS) < 0; /* the view holds r */
        Py_DECREF(r);
        if (bad) {
            PyErr_Format(PyExc_TypeError, "alltoallv: blocks[%d] must be a C-contiguous buffer (a numpy array, bytes, "
                         "a torch CPU tensor); got a %.100s", got, Py_TYPE(b)->tp_name);
            rc = -1;
            break;
        }
        offsets[got] = total, bytes[got] = (size_t)views[got].len, total += bytes[got];
    }
    *send = rc ? NULL : malloc(total ? total : 1);
    if (!rc && !*send) rc = (PyErr_NoMemory(), -1);
    for (int p = 0; !rc && p < R; p++) memcpy(*send + offsets[p], views[p].buf, bytes[p]);
    for (int p = 0; p < got; p++) PyBuffer_Release(&views[p]);
    free(views);
    Py_DECREF(fast);
    return rc;
}

PyObject *comm_alltoallv(CommObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"blocks", "timeout", NULL};
    PyObject *seq;
    double timeout = 60;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|d:alltoallv", kwlist, &seq, &timeout)) return NULL;
    if (comm_check_usable(self, "alltoallv") < 0) return NULL;
    const int R = self->size;
    size_t *sizes = calloc((size_t)R * 5, sizeof *sizes); /* send bytes, offsets; recv bytes, offsets; got */
    int64_t *told = calloc((size_t)R * 2, sizeof *told);   /* the sizes each way, for the first AllToAll */
    uint8_t *send = NULL;
    PyObject *all = NULL, *list = NULL;
    if (!sizes || !told) {
        PyErr_NoMemory();
        goto fail_comm;
    }
    size_t *sb = sizes, *so = sizes + R, *rb = sizes + 2 * R, *ro = sizes + 3 * R, *got = sizes + 4 * R;
    if (gather_blocks(seq, R, &send, sb, so) < 0) goto fail_comm;
    if (!(timeout > 0)) {
        ext_value_error("timeout must be positive seconds; got %g", timeout);
        goto fail_comm;
    }
    for (int p = 0; p < R; p++) told[p] = (int64_t)sb[p];
    a2amm_error err = {0, ""};
    int rc;
    call_guard g;
    comm_call_begin(self, "alltoallv", 1);
    guard_enter(&g, self->comm);
    Py_BEGIN_ALLOW_THREADS
    rc = lib_comm_alltoall(self->comm, told, told + R, sizeof *told, timeout, &err);
    Py_END_ALLOW_THREADS
    size_t total = 0;
    for (int p = 0; !rc && p < R; p++) ro[p] = total, rb[p] = (size_t)told[R + p], total += rb[p];
    all = rc ? NULL : ext_new_array(ext_np_u8, 1, (int64_t)total);
    Py_buffer view = {0};
    int have_view = all && PyObject_GetBuffer(all, &view, PyBUF_WRITABLE) == 0;
    if (!rc && have_view) {
        Py_BEGIN_ALLOW_THREADS
        rc = lib_comm_alltoallv(self->comm, send, sb, so, view.buf, rb, ro, got, timeout, &err);
        Py_END_ALLOW_THREADS
    }
    if (have_view) PyBuffer_Release(&view);
    comm_call_end(self, 1);
    if (guard_leave(&g) < 0 || (!rc && !have_view)) goto fail_comm; /* KeyboardInterrupt, or numpy's error */
    if (rc) {
        ext_raise(rc, &err);
        goto done;
    }
    list = PyList_New(R);
    for (int p = 0; list && p < R; p++) {
        PyObject *row = PySequence_GetItem(all, 0);
        PyObject *v = row ? PySequence_GetSlice(row, (Py_ssize_t)ro[p], (Py_ssize_t)(ro[p] + got[p])) : NULL;
        Py_XDECREF(row);
        if (!v) Py_CLEAR(list);
        else PyList_SET_ITEM(list, p, v);
    }
    goto done;
fail_comm:
    comm_fail_for_error(self);
done:
    Py_XDECREF(all);
    free(send), free(sizes), free(told);
    return list;
}
