/* The module a2amm._a2amm: its functions, types and error mapping (see ext.h). */
#include "ext.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

PyObject *ext_Error, *ext_PeerError, *ext_TimeoutError, *ext_ArgumentError;
PyObject *ext_np_empty, *ext_np_u8, *ext_np_u16, *ext_np_f32;

PyObject *ext_raise(int status, const a2amm_error *err)
{
    const char *msg = err && err->msg[0] ? err->msg : lib_strerror(status);
    if (status == A2AMM_E_INTERRUPTED) {
        PyErr_SetString(PyExc_KeyboardInterrupt, msg);
        return NULL;
    }
    PyObject *cls = status == A2AMM_E_PEER      ? ext_PeerError
                    : status == A2AMM_E_TIMEOUT ? ext_TimeoutError
                    : status == A2AMM_E_INVAL   ? ext_ArgumentError
                                                : ext_Error;
    if (!cls) { /* before a2amm/__init__.py set them (never, in the package) */
        PyErr_Format(PyExc_RuntimeError, "a2amm error %d: %s", status, msg);
        return NULL;
    }
    PyObject *exc = PyObject_CallFunction(cls, "is", status, msg);
    if (exc) {
        PyErr_SetObject(cls, exc);
        Py_DECREF(exc);
    }
    return NULL;
}

PyObject *ext_value_error(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    PyErr_SetString(PyExc_ValueError, msg);
    return NULL;
}

PyObject *ext_new_array(PyObject *dtype, int64_t rows, int64_t cols)
{
    PyObject *shape = Py_BuildValue("(LL)", (long long)rows, (long long)cols);
    if (!shape) return NULL;
    PyObject *a = PyObject_CallFunctionObjArgs(ext_np_empty, shape, dtype, NULL);
    Py_DECREF(shape);
    return a;
}

int ext_fmt(PyObject *name, const char *what, a2amm_fp8_type *out)
{
    const char *s = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    if (!s || lib_fmt_parse(s, out) != A2AMM_OK) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_UnicodeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s must be \"e4m3\" or \"e5m2\"; got %R", what, name);
        }
        return -1;
    }
    return 0;
}

/* _set_errors(Error, PeerError, TimeoutError, ArgumentError): the package's exception classes. */
static PyObject *set_errors(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *e, *p, *t, *a;
    if (!PyArg_ParseTuple(args, "OOOO", &e, &p, &t, &a)) return NULL;
    Py_XSETREF(ext_Error, Py_NewRef(e));
    Py_XSETREF(ext_PeerError, Py_NewRef(p));
    Py_XSETREF(ext_TimeoutError, Py_NewRef(t));
    Py_XSETREF(ext_ArgumentError, Py_NewRef(a));
    Py_RETURN_NONE;
}

/* kernel() -> "amx" | "avx512" | "avx2" | "ref": the level ops and matmuls made now run. */
static PyObject *kernel(PyObject *self, PyObject *args)
{
    (void)self, (void)args;
    const char *name = NULL;
    a2amm_error err = {0, ""};
    int rc = lib_kernel(&name, &err);
    if (rc) return ext_raise(rc, &err);
    return PyUnicode_FromString(name);
}

static PyObject *strerror_(PyObject *self, PyObject *arg)
{
    (void)self;
    int code = PyLong_AsLong(arg);
    if (code == -1 && PyErr_Occurred()) return NULL;
    return PyUnicode_FromString(lib_strerror(code));
}

static PyObject *op_kinds(PyObject *self, PyObject *args)
{
    (void)self, (void)args;
    int n = 0;
    while (lib_op_kind_name(n)) n++;
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t && i < n; i++) PyTuple_SET_ITEM(t, i, PyUnicode_FromString(lib_op_kind_name(i)));
    return t;
}

static PyMethodDef METHODS[] = {
    {"_set_errors", set_errors, METH_VARARGS, NULL},
    {"_close_all", ext_close_all, METH_O, NULL},
    {"kernel", kernel, METH_NOARGS,
     "kernel() -> str: the kernel level ops and matmuls made now run (\"amx\", \"avx512\", \"avx2\", \"ref\"):\n"
     "the best this CPU runs, or what A2AMM_ISA forces, less what A2AMM_CPU_HIDE hides."},
    {"strerror", strerror_, METH_O, "strerror(code) -> str: the library's description of a status code."},
    {"_op_kinds", op_kinds, METH_NOARGS, NULL},
    {"quantize", (PyCFunction)(void (*)(void))ext_quantize, METH_VARARGS | METH_KEYWORDS, NULL},
    {"dequantize", (PyCFunction)(void (*)(void))ext_dequantize, METH_VARARGS | METH_KEYWORDS, NULL},
    {"matmul", (PyCFunction)(void (*)(void))ext_matmul, METH_VARARGS | METH_KEYWORDS, NULL},
    {"matmul_bf16a", (PyCFunction)(void (*)(void))ext_matmul_bf16a, METH_VARARGS | METH_KEYWORDS, NULL},
    {"swiglu", ext_swiglu, METH_VARARGS, NULL},
    {"_launch", (PyCFunction)(void (*)(void))ext_launch, METH_VARARGS, NULL},
    {"op_heap_bytes", (PyCFunction)(void (*)(void))ext_op_heap_bytes, METH_VARARGS | METH_KEYWORDS, NULL},
    {"moe_heap_bytes", (PyCFunction)(void (*)(void))ext_moe_heap_bytes, METH_VARARGS | METH_KEYWORDS, NULL},
    {NULL, NULL, 0, NULL},
};

PyObject *ext_enter(PyObject *self, PyObject *unused)
{
    (void)unused;
    return Py_NewRef(self);
}

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "a2amm._a2amm",
                                    "The C extension under the a2amm package (use `import a2amm`).", -1, METHODS,
                                    NULL, NULL, NULL, NULL};

static int add_types(PyObject *m)
{
    comm_type_prepare();
    PyTypeObject *types[] = {&CommType, &OpType, &WeightsType, &InputBufferType, &MoEType, &MoEBatchType,
                             &MoEWeightsType, &BF16AWeightsType};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        if (PyType_Ready(types[i]) < 0) return -1;
        const char *dot = strrchr(types[i]->tp_name, '.');
        if (PyModule_AddObjectRef(m, dot ? dot + 1 : types[i]->tp_name, (PyObject *)types[i]) < 0) return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__a2amm(void)
{
    PyObject *np = PyImport_ImportModule("numpy");
    if (!np) return NULL;
    ext_np_empty = PyObject_GetAttrString(np, "empty");
    ext_np_u8 = PyObject_GetAttrString(np, "uint8");
    ext_np_u16 = PyObject_GetAttrString(np, "uint16");
    ext_np_f32 = PyObject_GetAttrString(np, "float32");
    Py_DECREF(np);
    if (!ext_np_empty || !ext_np_u8 || !ext_np_u16 || !ext_np_f32) return NULL;
    guard_after_fork_child(); /* the importing thread is the main one */
    PyObject *m = PyModule_Create(&MODULE);
    if (!m) return NULL;
    const char *kind0 = lib_op_kind_name(0);
    if (add_types(m) < 0 || op_module_init(m) < 0 || PyModule_AddStringConstant(m, "version", lib_version()) < 0 ||
        PyModule_AddIntConstant(m, "version_number", lib_version_number()) < 0 ||
        PyModule_AddStringConstant(m, "header_version", lib_header_version()) < 0 ||
        PyModule_AddStringConstant(m, "library_path", lib_path()) < 0 ||
        PyModule_AddIntConstant(m, "has_mpi", lib_has_mpi()) < 0 ||
        PyModule_AddStringConstant(m, "cpu_model", lib_cpu_model()) < 0 ||
        PyModule_AddIntConstant(m, "cpu_cores", lib_cpu_cores()) < 0 ||
        PyModule_AddStringConstant(m, "default_kind", kind0) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    static const struct { const char *name; int code; } codes[] = {
        {"E_INVAL", A2AMM_E_INVAL},     {"E_IO", A2AMM_E_IO},           {"E_SIZE", A2AMM_E_SIZE},
        {"E_NOMEM", A2AMM_E_NOMEM},     {"E_OVERFLOW", A2AMM_E_OVERFLOW}, {"E_FORMAT", A2AMM_E_FORMAT},
        {"E_TIMEOUT", A2AMM_E_TIMEOUT}, {"E_PEER", A2AMM_E_PEER},       {"E_SYS", A2AMM_E_SYS},
        {"E_MISMATCH", A2AMM_E_MISMATCH}, {"E_INTERRUPTED", A2AMM_E_INTERRUPTED},
    };
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (PyModule_AddIntConstant(m, codes[i].name, codes[i].code) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    return m;
}
