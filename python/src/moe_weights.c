/* a2amm.MoEWeights: a rank's experts prepared once, shared by several a2amm.MoE ops (a2amm_moe_weights). */
#include "ext.h"

#include <structmember.h>

/* The four arrays of L experts' weights (ext.h). */
int ext_expert_arrays(PyObject *const *obj, int64_t L, int64_t H, int64_t I, matrix *m)
{
    static const char *const names[4] = {"w13 codes", "w13 scales", "w2 codes", "w2 scales"};
    const int64_t rows[4] = {L * 2 * I, L * 2 * I, L * H, L * H}, cols[4] = {H, H / 32, I, I / 32};
    memset(m, 0, 4 * sizeof *m);
    for (int i = 0; i < 4; i++) {
        int ok = matrix_get(obj[i], names[i], EL_U8, MAT_ROWS, &m[i]) == 0;
        if (ok && (m[i].rows != rows[i] || m[i].cols != cols[i])) {
            matrix_shape_error(names[i], &m[i], "[%lld, %lld] (%lld experts)", (long long)rows[i], (long long)cols[i],
                               (long long)L);
            ok = 0;
        }
        if (!ok) {
            for (int j = 0; j <= i; j++) matrix_release(&m[j]);
            return -1;
        }
    }
    return 0;
}

/* __init__(c13 [L*2I, H], s13 [L*2I, H/32], c2 [L*H, I], s2 [L*H, I/32], *, local_experts, hidden, inter,
 * fmt, max_rows): the MX pairs the Python class makes. */
static int moe_weights_init(MoEWeightsObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"c13", "s13", "c2", "s2", "local_experts", "hidden", "inter", "fmt", "max_rows", NULL};
    PyObject *obj[4], *fmt = NULL;
    int local = 0;
    long long hidden = 0, inter = 0, max_rows = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO$iLLOL:MoEWeights", kwlist, &obj[0], &obj[1], &obj[2], &obj[3],
                                     &local, &hidden, &inter, &fmt, &max_rows))
        return -1;
    if (self->w) {
        PyErr_SetString(PyExc_ValueError, "MoEWeights are made once: make another");
        return -1;
    }
    a2amm_fp8_type type = A2AMM_E4M3;
    if (fmt && fmt != Py_None && ext_fmt(fmt, "w_fmt", &type) < 0) return -1;
    if (local < 1 || hidden < 32 || hidden % 32 || inter < 32 || inter % 32 || max_rows < 1) {
        PyErr_Format(PyExc_ValueError, "MoEWeights: experts, max_rows must be positive and hidden, inter multiples of "
                     "32; got %d experts, hidden %lld, inter %lld, max_rows %lld", local, hidden, inter, max_rows);
        return -1;
    }
    matrix m[4];
    int ok = ext_expert_arrays(obj, local, hidden, inter, m) == 0;
    a2amm_error err = {0, ""};
    a2amm_moe_weights *w = NULL;
    int rc = 0;
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        rc = lib_moe_weights_create(local, hidden, inter, type, max_rows, (const uint8_t *)m[0].ptr,
                                    (const uint8_t *)m[1].ptr, m[1].ld, (const uint8_t *)m[2].ptr,
                                    (const uint8_t *)m[3].ptr, m[3].ld, &w, &err);
        Py_END_ALLOW_THREADS
    }
    for (int i = 0; i < 4; i++) matrix_release(&m[i]);
    if (!ok) return -1;
    if (rc) {
        ext_raise(rc, &err);
        return -1;
    }
    self->w = w, self->local = local, self->hidden = hidden, self->inter = inter, self->max_rows = max_rows;
    self->type = type;
    return 0;
}

static PyObject *moe_weights_close(MoEWeightsObject *self, PyObject *unused)
{
    (void)unused;
    if (self->users > 0) {
        PyErr_Format(PyExc_ValueError, "these MoEWeights are in use by %zd MoE op(s): close them, or give them other "
                     "weights, first", self->users);
        return NULL;
    }
    lib_moe_weights_destroy(self->w);
    self->w = NULL;
    Py_RETURN_NONE;
}

static void moe_weights_dealloc(MoEWeightsObject *self)
{
    lib_moe_weights_destroy(self->w); /* no op uses them: an op holds a reference */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *moe_weights_exit(MoEWeightsObject *self, PyObject *args)
{
    (void)args;
    return moe_weights_close(self, NULL);
}

static PyObject *moe_weights_get_fmt(MoEWeightsObject *self, void *c)
{
    (void)c;
    return PyUnicode_FromString(lib_fmt_name(self->type));
}

static PyObject *moe_weights_get_closed(MoEWeightsObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->w == NULL);
}

int ext_moe_weights_of(PyObject *wo, MoEWeightsObject **out)
{
    if (!PyObject_TypeCheck(wo, &MoEWeightsType)) {
        PyErr_Format(PyExc_TypeError, "weights must be an a2amm.MoEWeights; got a %.100s", Py_TYPE(wo)->tp_name);
        return -1;
    }
    *out = (MoEWeightsObject *)wo;
    if (!(*out)->w) {
        PyErr_SetString(PyExc_ValueError, "these MoEWeights are closed");
        return -1;
    }
    return 0;
}

static PyMethodDef METHODS[] = {
    {"close", (PyCFunction)moe_weights_close, METH_NOARGS, "Frees them (refused while a MoE op uses them)."},
    {"__enter__", ext_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)moe_weights_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef MEMBERS[] = {
    {"local_experts", T_INT, offsetof(MoEWeightsObject, local), READONLY, "the experts they hold"},
    {"hidden", T_LONGLONG, offsetof(MoEWeightsObject, hidden), READONLY, "H"},
    {"inter", T_LONGLONG, offsetof(MoEWeightsObject, inter), READONLY, "I"},
    {"max_rows", T_LONGLONG, offsetof(MoEWeightsObject, max_rows), READONLY,
     "the most rows an expert gets in a call of an op that uses them (R * max_tokens)"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef GETSET[] = {
    {"w_fmt", (getter)moe_weights_get_fmt, NULL, "the fp8 format of the weights", NULL},
    {"closed", (getter)moe_weights_get_closed, NULL, "whether close() freed them", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject MoEWeightsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "a2amm._a2amm.MoEWeights",
    .tp_basicsize = sizeof(MoEWeightsObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)moe_weights_init,
    .tp_dealloc = (destructor)moe_weights_dealloc,
    .tp_methods = METHODS,
    .tp_members = MEMBERS,
    .tp_getset = GETSET,
};
