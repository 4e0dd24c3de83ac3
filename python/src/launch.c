/*
 * a2amm.launch over a2amm_launch: the library forks R processes and calls
 * rank_main in each, which re-enters Python. A forked child may use the
 * interpreter only when the thread that forked held the GIL, as os.fork
 * does (PyOS_BeforeFork, fork, PyOS_AfterFork_Child in the child): so the
 * launching thread keeps the GIL for the whole launch (other Python threads
 * of the launching process wait until it returns; the ranks are processes
 * of their own). What each rank's function returns, or how it failed,
 * travels back pickled through a memfd of its own (a2amm/_launch.py): no
 * pipe to fill while the launcher waits, nothing in /dev/shm.
 */
#include "ext.h"

#include <stdlib.h>
#include <string.h>

typedef struct launch_ctx {
    PyObject *runner; /* a2amm._launch.run_rank(comm, fn, args, fds) -> (status, message) */
    PyObject *fn, *args, *fds;
} launch_ctx;

/* In each rank's process, right after the fork. */
static int rank_main(a2amm_comm *comm, void *arg)
{
    PyOS_AfterFork_Child(); /* the GIL, the import lock, threading, os.register_at_fork(after_in_child=...) */
    guard_after_fork_child();
    launch_ctx *lc = arg;
    int status = A2AMM_E_SYS;
    const char *why = "a2amm.launch: the rank could not start its Python function";
    CommObject *c = comm_wrap(comm, 0, 0, NULL);
    PyObject *res = c ? PyObject_CallFunctionObjArgs(lc->runner, (PyObject *)c, lc->fn, lc->args, lc->fds, NULL) : NULL;
    if (res && PyTuple_Check(res) && PyTuple_GET_SIZE(res) == 2) {
        status = (int)PyLong_AsLong(PyTuple_GET_ITEM(res, 0));
        PyObject *m = PyTuple_GET_ITEM(res, 1);
        why = m != Py_None ? PyUnicode_AsUTF8(m) : NULL;
    }
    if (PyErr_Occurred()) PyErr_Print();
    /* the message names the exception: the launch's error, and the others' PeerError, say it */
    if (status != A2AMM_OK && status != A2AMM_E_PEER && why) lib_comm_fail(comm, status, why);
    /* a call another thread still runs: a local one is waited for, a collective one stopped (the
     * communicator failed, saying so) and waited for; then its ops end with the rank's function */
    char stopped[300];
    int calls = c ? comm_stop_calls(c, "its function returned", 60, stopped, sizeof stopped) : 0;
    if (calls == 1 && status == A2AMM_OK) status = A2AMM_E_INVAL;
    if (c && calls >= 0) comm_close(c, 0);
    Py_XDECREF(c);
    Py_XDECREF(res);
    return status;
}

static volatile sig_atomic_t launch_stop;

static void on_launch_sigint(int sig) { launch_stop = sig; }

/* _launch(nranks, runner, fn, args, fds, heap_bytes, timeout, stall) -> (status, message, [failed_first...]) */
PyObject *ext_launch(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self, (void)kw;
    int nranks;
    PyObject *runner, *fn, *fargs, *fds;
    unsigned long long heap;
    double timeout, stall;
    if (!PyArg_ParseTuple(args, "iOOOOKdd:_launch", &nranks, &runner, &fn, &fargs, &fds, &heap, &timeout, &stall))
        return NULL;
    launch_ctx lc = {runner, fn, fargs, fds};
    a2amm_rank_report *reports = calloc((size_t)(nranks > 0 ? nranks : 1), sizeof *reports);
    if (!reports) return PyErr_NoMemory();
    /* Ctrl-C stops every rank (the launcher's stop flag) */
    struct sigaction old, sa;
    int installed = 0;
    launch_stop = 0;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_launch_sigint;
    sigemptyset(&sa.sa_mask);
    if (guard_main_thread() && sigaction(SIGINT, NULL, &old) == 0 && old.sa_handler != SIG_IGN)
        installed = sigaction(SIGINT, &sa, NULL) == 0;
    lib_launch_options o = {.heap_bytes = (size_t)heap, .timeout_s = timeout, .stall_s = stall, .stop = &launch_stop,
                            .reports = reports};
    a2amm_error err = {0, ""};
    PyOS_BeforeFork();
    int rc = lib_launch(nranks, rank_main, &lc, &o, &err); /* with the GIL: see the top */
    PyOS_AfterFork_Parent();
    if (installed) sigaction(SIGINT, &old, NULL);
    PyObject *ranks = PyList_New(0);
    for (int r = 0; ranks && r < nranks; r++) {
        PyObject *d = Py_BuildValue("{s:i,s:i,s:i,s:i,s:i,s:i,s:s}", "started", reports[r].started, "status",
                                    reports[r].status, "exit_code", reports[r].exit_code, "signal", reports[r].signal,
                                    "failed_first", reports[r].failed_first, "killed_by_launcher",
                                    reports[r].killed_by_launcher, "doing", reports[r].doing);
        if (!d || PyList_Append(ranks, d) < 0) Py_CLEAR(ranks);
        Py_XDECREF(d);
    }
    free(reports);
    if (!ranks) return NULL;
    if (launch_stop) {
        /* Python's own handler decides (KeyboardInterrupt, or the program's) */
#if PY_VERSION_HEX >= 0x030A0000
        PyErr_SetInterruptEx(SIGINT);
#else
        PyErr_SetInterrupt();
#endif
        if (PyErr_CheckSignals() < 0) {
            Py_DECREF(ranks);
            return NULL;
        }
    }
    return Py_BuildValue("(isN)", rc, rc ? err.msg : "", ranks);
}
