/*
 * a2amm.Comm.from_mpi: a communicator from an mpi4py communicator. Where
 * every rank of it runs on this machine (MPI_Comm_split_type shared gives
 * one group of the same size) the ranks share memory as under a2amm.launch
 * (a2amm_comm_create, bootstrapped by MPI_Allgather and MPI_Barrier): the
 * direct path works, and a rank that fails or dies makes the others' calls
 * raise PeerError; otherwise (or with transport="mpi") rows travel as MPI
 * messages (liba2amm_mpi: the put path only; a failure ends the MPI job).
 */
#include "ext.h"

#include <string.h>

#ifdef A2AMM_PY_MPI
#include <mpi.h>

int ext_mpi_finalized(void)
{
    int done = 0;
    MPI_Finalized(&done);
    return done;
}

static int mpi_allgather(void *arg, const void *mine, void *all, size_t bytes)
{
    return MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, *(MPI_Comm *)arg) != MPI_SUCCESS;
}

static int mpi_barrier(void *arg) { return MPI_Barrier(*(MPI_Comm *)arg) != MPI_SUCCESS; }

/* Whether every rank of c runs on this machine (the same answer on every rank). */
static int all_on_one_machine(MPI_Comm c)
{
    MPI_Comm node;
    int size = 0, node_size = -1;
    MPI_Comm_size(c, &size);
    if (MPI_Comm_split_type(c, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS) return 0;
    MPI_Comm_size(node, &node_size);
    MPI_Comm_free(&node);
    return node_size == size;
}

/* The shared-memory transport over ranks that MPI started. */
static int shm_comm(MPI_Comm c, size_t heap_bytes, a2amm_comm **out, a2amm_error *err)
{
    MPI_Comm boot; /* a duplicate: the bootstrap's messages never meet the program's */
    if (MPI_Comm_dup(c, &boot) != MPI_SUCCESS) {
        snprintf(err->msg, sizeof err->msg, "Comm.from_mpi: MPI_Comm_dup failed");
        return err->code = A2AMM_E_SYS;
    }
    int rank = 0, size = 0;
    MPI_Comm_rank(boot, &rank);
    MPI_Comm_size(boot, &size);
    a2amm_bootstrap bs = {.rank = rank, .size = size, .arg = &boot, .allgather = mpi_allgather,
                          .barrier = mpi_barrier};
    int rc = lib_comm_create(&bs, heap_bytes, out, err);
    MPI_Comm_free(&boot);
    return rc;
}

static PyObject *from_mpi(PyObject *cls, PyObject *args, PyObject *kw)
{
    (void)cls;
    static char *kwlist[] = {"comm", "transport", "heap_bytes", NULL};
    PyObject *mc;
    const char *transport = "auto";
    unsigned long long heap = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|sK:from_mpi", kwlist, &mc, &transport, &heap)) return NULL;
    int want; /* -1 auto, 0 shm, 1 mpi */
    if (!strcmp(transport, "auto")) want = -1;
    else if (!strcmp(transport, "shm")) want = 0;
    else if (!strcmp(transport, "mpi")) want = 1;
    else return PyErr_Format(PyExc_ValueError, "transport must be \"auto\", \"shm\" or \"mpi\"; got \"%s\"", transport);
    PyObject *MPI = PyImport_ImportModule("mpi4py.MPI");
    if (!MPI) return NULL;
    PyObject *intracomm = PyObject_GetAttrString(MPI, "Intracomm");
    int is = intracomm ? PyObject_IsInstance(mc, intracomm) : -1;
    Py_XDECREF(intracomm);
    PyObject *size_o = is == 1 ? PyObject_CallMethod(MPI, "_sizeof", "O", mc) : NULL;
    PyObject *addr_o = size_o ? PyObject_CallMethod(MPI, "_addressof", "O", mc) : NULL;
    Py_DECREF(MPI);
    if (is == 0)
        PyErr_Format(PyExc_TypeError, "comm must be an mpi4py intracommunicator (MPI.COMM_WORLD, comm.Split(...)); "
                     "got a %.100s", Py_TYPE(mc)->tp_name);
    long hsize = size_o ? PyLong_AsLong(size_o) : -1;
    void *addr = addr_o ? PyLong_AsVoidPtr(addr_o) : NULL;
    Py_XDECREF(size_o);
    Py_XDECREF(addr_o);
    if (PyErr_Occurred()) return NULL;
    if (hsize != (long)sizeof(MPI_Comm) || !addr)
        return PyErr_Format(PyExc_TypeError, "comm: mpi4py's MPI_Comm is %ld bytes, a2amm's MPI %zu: mpi4py and "
                            "liba2amm_mpi were built against different MPI libraries", hsize, sizeof(MPI_Comm));
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited || ext_mpi_finalized())
        return PyErr_Format(PyExc_ValueError, "Comm.from_mpi: MPI is %s", inited ? "finalized" : "not initialized");
    MPI_Comm c = *(MPI_Comm *)addr;
    if (c == MPI_COMM_NULL) return PyErr_Format(PyExc_ValueError, "comm is MPI.COMM_NULL");
    a2amm_error err = {0, ""};
    a2amm_comm *comm = NULL;
    int rc, mpi_transport = want;
    Py_BEGIN_ALLOW_THREADS
    if (mpi_transport < 0) mpi_transport = !all_on_one_machine(c);
    rc = mpi_transport ? lib_mpi_comm_create(&c, (size_t)heap, &comm, &err) : shm_comm(c, (size_t)heap, &comm, &err);
    Py_END_ALLOW_THREADS
    if (rc) return ext_raise(rc, &err);
    return (PyObject *)comm_wrap(comm, 1, mpi_transport, mc);
}
#else
int ext_mpi_finalized(void) { return 0; }

static PyObject *from_mpi(PyObject *cls, PyObject *args, PyObject *kw)
{
    (void)cls, (void)args, (void)kw;
    return PyErr_Format(PyExc_RuntimeError, "this a2amm was built without MPI (no mpicc or liba2amm_mpi where it "
                        "was built): Comm.from_mpi needs them");
}
#endif

PyMethodDef ext_from_mpi_method = {
    "from_mpi", (PyCFunction)(void (*)(void))from_mpi, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
    "Comm.from_mpi(comm, transport=\"auto\", heap_bytes=0) -> Comm: collective over the mpi4py communicator.\n"
    "transport \"auto\": shared memory when every rank runs on this machine, else Open MPI messages;\n"
    "\"shm\" or \"mpi\" to choose. heap_bytes: this rank's memory for the ops made on it (0: 1 GiB,\n"
    "reserved, not touched until used). Close it (or leave its with block) before MPI_Finalize."};
