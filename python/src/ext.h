/*
 * The extension module a2amm._a2amm: what its files share. Python objects
 * over the library's communicators, ops and weights; the checks of the
 * arrays callers hand in (the buffer protocol); the error mapping; Ctrl-C
 * during blocking calls. Every call into liba2amm is in a2amm_lib.c.
 */
#ifndef A2AMM_PY_EXT_H
#define A2AMM_PY_EXT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h> /* PyMemberDef */
#include <signal.h>
#include <stdint.h>

#include "a2amm_lib.h"

/* ---- module state (module.c) --------------------------------------------- */
/* a2amm.Error and its subclasses, set by a2amm/__init__.py (_set_errors). */
extern PyObject *ext_Error, *ext_PeerError, *ext_TimeoutError, *ext_ArgumentError;
/* numpy.empty, for results; numpy's uint8, uint16, float32 dtypes. */
extern PyObject *ext_np_empty, *ext_np_u8, *ext_np_u16, *ext_np_f32;

/* Raises the a2amm exception for a failed call (status and the library's
 * message): PeerError, TimeoutError, ArgumentError (also a ValueError) or
 * Error; KeyboardInterrupt for A2AMM_E_INTERRUPTED. Returns NULL. */
PyObject *ext_raise(int status, const a2amm_error *err);
/* A ValueError with a printf message (PyErr_Format has no %g). Returns NULL. */
PyObject *ext_value_error(const char *fmt, ...);
/* A new numpy array of dtype [rows, cols] (uninitialized), or NULL. */
PyObject *ext_new_array(PyObject *dtype, int64_t rows, int64_t cols);
/* The fp8 format named by a str ("e4m3", "e5m2"): 0, or -1 with a ValueError naming `what`. */
int ext_fmt(PyObject *name, const char *what, a2amm_fp8_type *out);

/* ---- arrays (arrays.c) ------------------------------------------------------ */
typedef enum elem_kind {
    EL_U8,   /* fp8 codes, E8M0 scales: uint8 */
    EL_F32,  /* float32 */
    EL_BF16, /* bf16 bits: uint16 (a torch.bfloat16 tensor arrives as a uint16 view: a2amm._array) */
    EL_I32,  /* int32 (the MoE op's expert ids) */
} elem_kind;

/* A 2-D array of the caller's, held (its buffer) for the call. */
typedef struct matrix {
    Py_buffer view;
    int held;
    char *ptr;
    int64_t rows, cols, ld; /* ld: elements from one row to the next */
} matrix;

enum { MAT_ROWS = 1, MAT_CONTIGUOUS = 2, MAT_WRITABLE = 4 };
/*
 * obj as a 2-D array of `kind` (flags: MAT_ROWS contiguous rows, any row
 * stride; MAT_CONTIGUOUS C-contiguous; MAT_WRITABLE). 0, or -1 with a
 * TypeError (not an array; the wrong dtype) or ValueError (not 2-D, not
 * contiguous, read-only) that names `name` and says what it must be.
 */
int matrix_get(PyObject *obj, const char *name, elem_kind kind, int flags, matrix *m);
void matrix_release(matrix *m);
/* A ValueError: "`name` must have shape [want]; got (rows, cols)". Returns -1. */
int matrix_shape_error(const char *name, const matrix *m, const char *want_fmt, ...);
/* MX scales of a row of `cols` values: ceil(cols/32); the seed layout's 2*ceil(cols/64) (mx.c). */
int64_t scale_width(int64_t cols);
int64_t seed_scale_width(int64_t cols);
/* 0 when s is [rows, either width]; else -1 with a ValueError naming it. */
int check_scales(const char *name, const matrix *s, int64_t rows, int64_t cols, const char *rows_what);
/* Whether obj is a buffer of 2-byte elements (bf16 bits to quantize; else float32 is expected). */
int ext_holds_bf16(PyObject *obj);
/* A 2-D array of float32 or bf16 values (*bf16 says which; rows contiguous): 0, or -1 with an exception that
 * names both choices where the element type is neither. */
int ext_values_get(PyObject *obj, const char *name, matrix *m, int *bf16);
/* "uint8", "float32", ... of a buffer's format (for messages). */
const char *ext_format_name(const char *format, Py_ssize_t itemsize);

/* ---- Ctrl-C during a blocking call (interrupt.c) ---------------------------- */
/* Set by the SIGINT handler installed during a call. */
extern volatile sig_atomic_t ext_interrupted;
typedef struct call_guard {
    struct sigaction old;
    int installed;
} call_guard;
/*
 * Around a blocking call (GIL held at both ends): on the main thread,
 * SIGINT sets ext_interrupted (an op's observer stops the call at its next
 * tile) and wakes a thread that fails `comm` (so waits end too: the other
 * ranks get PeerError); comm may be NULL. guard_leave restores the handler
 * and, after a SIGINT, hands it to Python's own handler: it returns -1 with
 * KeyboardInterrupt (or whatever that handler raised) set, else 0.
 */
void guard_enter(call_guard *g, a2amm_comm *comm);
int guard_leave(call_guard *g);
/* After fork, in the child (launch.c): this thread is the main one now. */
void guard_after_fork_child(void);
/* Whether the calling thread is the one that handles signals. */
int guard_main_thread(void);

/* ---- types --------------------------------------------------------------------- */
typedef struct CommObject {
    PyObject_HEAD
    a2amm_comm *comm;   /* NULL once ended (destroyed, or its launch rank's function returned) */
    int closed;         /* close() called: no more calls */
    int owned;          /* 1: made by from_mpi, destroyed at close; 0: a launch rank's */
    int mpi_transport;  /* 1: the Open MPI transport (only put path) */
    int rank, size;
    int busy;           /* a collective call in progress (one at a time) */
    int inflight;       /* calls on it or its ops with the GIL released, on any thread (comm_call_begin) */
    const char *inflight_call; /* the name of the last of them to begin ("op call", "set_weights", ...) */
    Py_ssize_t exports; /* op input views alive: the comm's memory stays until they go */
    PyObject *ops;      /* list of weakrefs to the ops made on it */
    PyObject *keep;     /* what must outlive it (the mpi4py communicator), or NULL */
    PyObject *weakrefs;
} CommObject;

extern PyTypeObject CommType, OpType, WeightsType, InputBufferType, MoEType, MoEBatchType, MoEWeightsType,
    BF16AWeightsType;

/* comm_alltoallv.c: Comm.alltoallv(blocks, timeout=60.0) -> [R uint8 arrays]. */
PyObject *comm_alltoallv(CommObject *self, PyObject *args, PyObject *kw);
/* Puts from_mpi among Comm's methods (before PyType_Ready). */
void comm_type_prepare(void);
/* A Comm over comm (owned: destroyed at close). */
CommObject *comm_wrap(a2amm_comm *comm, int owned, int mpi_transport, PyObject *keep);
/* Closes its ops and, when owned and no view of its memory is alive, ends it; with force (the
 * process ends), the ops and the communicator end whatever views are alive. No call may be in flight:
 * close() refuses then (comm.c), and the implicit closes first call comm_stop_calls. */
void comm_close(CommObject *c, int force);
/*
 * Before an implicit close (a launch rank's function returned; the program ends): waits, the GIL
 * released, until no call on c or its ops is in flight on another thread. A collective call among them
 * is stopped first: the communicator is failed with "<who> while another thread was in a call (<name>)
 * ...", that text copied to why (size bytes). 0: none was in flight; 1: a collective call was stopped;
 * 2: a local one was waited for; -1: calls were still in flight after `seconds` (said on stderr; c must
 * not be closed then, as they still use it).
 */
int comm_stop_calls(CommObject *c, const char *who, double seconds, char *why, size_t size);
/* A call on c or on one of its ops releases the GIL (name: for messages; collective: it holds c, and a
 * second collective call on c is refused while it runs) / has taken it back. */
void comm_call_begin(CommObject *c, const char *name, int collective);
void comm_call_end(CommObject *c, int collective);
/* Runs fn(arg, err) as the collective call `name` on c: in flight (comm_call_begin), the GIL released,
 * Ctrl-C watched (guard_enter). Its status into *rc; -1 when Ctrl-C came (the exception set), else 0. */
int comm_collective(CommObject *c, const char *name, int (*fn)(void *arg, a2amm_error *err), void *arg,
                    a2amm_error *err, int *rc);
/* 0, or a ValueError and -1 when c is closed, -2 when a collective call on it is in flight on another
 * thread (that call goes on: a refusal for being busy must not fail the communicator). */
int comm_check_usable(CommObject *c, const char *call);
/* Fails the communicator with a Python-side argument error (the error set
 * stays set), so the other ranks' collective calls end with PeerError. */
void comm_fail_for_error(CommObject *c);
/* A view of an op's input (op.c) is made / released: the communicator's
 * memory stays mapped while one is alive. */
void comm_export_taken(CommObject *c);
void comm_export_released(CommObject *c);
/* comm_mpi.c: whether MPI_Finalize has run (0 without MPI): an MPI
 * transport's communicator can no longer be ended then. */
int ext_mpi_finalized(void);

typedef struct WeightsObject {
    PyObject_HEAD
    a2amm_weights *w;
    int64_t n, k;
    a2amm_fp8_type type;
    Py_ssize_t users; /* ops that use them */
} WeightsObject;

/* Weights' n, k (members), fmt and closed (getters): BF16AWeights shares them (an object of the same layout). */
extern PyMemberDef ext_weights_members[];
extern PyGetSetDef ext_weights_getset[];

/* __enter__ of the extension's types: the object itself (module.c). */
PyObject *ext_enter(PyObject *self, PyObject *unused);

/* 0 with wo's open weights, or -1 with a TypeError/ValueError (weights.c). */
int ext_weights_of(PyObject *wo, WeightsObject **out);

typedef struct MoEWeightsObject {
    PyObject_HEAD
    a2amm_moe_weights *w;
    int local;
    long long hidden, inter, max_rows;
    a2amm_fp8_type type;
    Py_ssize_t users; /* MoE ops that use them */
} MoEWeightsObject;

/* The four arrays of L experts' weights as set_weights and MoEWeights take them: w13 codes [L*2I, H], their
 * scales [L*2I, H/32], w2 codes [L*H, I], their scales [L*H, I/32], uint8; 0 with m[4] to release, or -1
 * with the error set and nothing held (moe_weights.c). */
int ext_expert_arrays(PyObject *const *obj, int64_t L, int64_t H, int64_t I, matrix *m);

/* 0 with wo's open MoE weights, or -1 with a TypeError/ValueError (moe_weights.c). */
int ext_moe_weights_of(PyObject *wo, MoEWeightsObject **out);

/* op.c: the Event type and the names of the events, into the module. */
int op_module_init(PyObject *m);
/* moe.c: a MoE op closes (comm.c calls it for those of a closing comm): no more calls, freed. */
void moe_close_object(PyObject *moe);
/* op.c: an op closes (comm.c calls it for the ops of a closing comm): no more calls; the library's op
 * (its input memory) ends once no view of it from input() is alive, or at once with force. */
void op_close_object(PyObject *op, int force);

/* launch.c, comm_mpi.c, op.c, mx.c, weights.c: the module's functions. */
PyObject *ext_launch(PyObject *self, PyObject *args, PyObject *kw);
extern PyMethodDef ext_from_mpi_method; /* Comm.from_mpi (comm_mpi.c) */
PyObject *ext_close_all(PyObject *self, PyObject *why);
PyObject *ext_quantize(PyObject *self, PyObject *args, PyObject *kw);
PyObject *ext_dequantize(PyObject *self, PyObject *args, PyObject *kw);
PyObject *ext_matmul(PyObject *self, PyObject *args, PyObject *kw);
/* bf16a.c: the matmul of a bf16 A over BF16AWeights, and the MoE activation. */
PyObject *ext_matmul_bf16a(PyObject *self, PyObject *args, PyObject *kw);
PyObject *ext_swiglu(PyObject *self, PyObject *args);
PyObject *ext_op_heap_bytes(PyObject *self, PyObject *args, PyObject *kw);
/* moe.c: a2amm_moe_heap_bytes of a MoE's config. */
PyObject *ext_moe_heap_bytes(PyObject *self, PyObject *args, PyObject *kw);

#endif
