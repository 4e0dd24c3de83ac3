/* Every call into liba2amm (see a2amm_lib.h): the one file to change when the C API does. */
#define _GNU_SOURCE
#include "a2amm_lib.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#ifdef A2AMM_PY_MPI
#include "a2amm_mpi.h"
#endif

const char *lib_version(void) { return a2amm_version(); }
int lib_version_number(void) { return a2amm_version_number(); }
const char *lib_header_version(void) { return A2AMM_VERSION_STRING; }
const char *lib_strerror(int status) { return a2amm_strerror(status); }

const char *lib_path(void)
{
    Dl_info info;
    if (dladdr((void *)a2amm_version, &info) && info.dli_fname) return info.dli_fname;
    return "";
}

int lib_fmt_parse(const char *name, a2amm_fp8_type *out) { return a2amm_fp8_type_parse(name, out, NULL); }
const char *lib_fmt_name(a2amm_fp8_type t) { return a2amm_fp8_type_name(t); }

int lib_mode_parse(const char *name, a2amm_scale_mode *out)
{
    if (!strcasecmp(name, "floor")) *out = A2AMM_SCALE_FLOOR;
    else if (!strcasecmp(name, "rceil")) *out = A2AMM_SCALE_RCEIL;
    else return A2AMM_E_INVAL;
    return A2AMM_OK;
}

int lib_kernel(const char **name, a2amm_error *err) { return a2amm_kernel(name, err); }
const char *lib_cpu_model(void) { return a2amm_cpu_model(); }
int lib_cpu_cores(void) { return a2amm_cpu_cores(); }

int lib_quantize_f32(const float *x, int64_t rows, int64_t cols, int64_t ldx, a2amm_fp8_type type,
                     a2amm_scale_mode mode, uint8_t *codes, int64_t ldc, uint8_t *scales, int64_t lds,
                     a2amm_error *err)
{
    return a2amm_mx_quantize_f32(x, rows, cols, ldx, type, mode, codes, ldc, scales, lds, err);
}

int lib_quantize_bf16(const uint16_t *x, int64_t rows, int64_t cols, int64_t ldx, a2amm_fp8_type type,
                      a2amm_scale_mode mode, uint8_t *codes, int64_t ldc, uint8_t *scales, int64_t lds,
                      a2amm_error *err)
{
    return a2amm_mx_quantize_bf16(x, rows, cols, ldx, type, mode, codes, ldc, scales, lds, err);
}

int lib_dequantize(const uint8_t *codes, int64_t ldc, const uint8_t *scales, int64_t lds, int64_t rows,
                   int64_t cols, a2amm_fp8_type type, float *y, int64_t ldy, a2amm_error *err)
{
    return a2amm_mx_dequantize_f32(codes, ldc, scales, lds, rows, cols, type, y, ldy, err);
}

int lib_weights_create(const uint8_t *b, const uint8_t *sb, int64_t n, int64_t k, int64_t ldsb,
                       a2amm_fp8_type type, int threads, a2amm_weights **w, a2amm_error *err)
{
    return a2amm_weights_create(b, sb, n, k, ldsb, type, threads, w, err);
}

void lib_weights_destroy(a2amm_weights *w) { a2amm_weights_destroy(w); }

int lib_matmul(const a2amm_weights *w, const uint8_t *a, int64_t lda, const uint8_t *sa, int64_t ldsa, int64_t m,
               a2amm_fp8_type a_type, uint16_t *out, int64_t ldo, int threads, a2amm_error *err)
{
    return a2amm_matmul(w, a, lda, sa, ldsa, m, a_type, out, ldo, threads, err);
}

int lib_matmul_f32(const a2amm_weights *w, const uint8_t *a, int64_t lda, const uint8_t *sa, int64_t ldsa, int64_t m,
                   a2amm_fp8_type a_type, float *c, int64_t ldc, int threads, a2amm_error *err)
{
    return a2amm_matmul_f32(w, a, lda, sa, ldsa, m, a_type, c, ldc, threads, err);
}

void lib_swiglu(const float *g, const float *u, int64_t n, uint16_t *a) { a2amm_swiglu(g, u, n, a); }

int lib_bf16a_weights_create(const uint8_t *b, const uint8_t *sb, int64_t n, int64_t k, int64_t ldsb,
                             a2amm_fp8_type type, a2amm_bf16a_weights **w, a2amm_error *err)
{
    return a2amm_bf16a_weights_create(b, sb, n, k, ldsb, type, w, err);
}

void lib_bf16a_weights_destroy(a2amm_bf16a_weights *w) { a2amm_bf16a_weights_destroy(w); }

int lib_matmul_bf16a(const a2amm_bf16a_weights *w, const uint16_t *a, int64_t lda, int64_t m, float *y, int64_t ldy,
                     int threads, a2amm_error *err)
{
    return a2amm_matmul_bf16a(w, a, lda, m, y, ldy, threads, err);
}

int lib_launch(int nranks, a2amm_rank_fn fn, void *arg, const lib_launch_options *o, a2amm_error *err)
{
    a2amm_launch_options lo = A2AMM_LAUNCH_OPTIONS_INIT;
    lo.heap_bytes = o->heap_bytes, lo.timeout_s = o->timeout_s, lo.stall_s = o->stall_s, lo.stop = o->stop;
    lo.reports = o->reports;
    return a2amm_launch(nranks, fn, arg, &lo, err);
}

int lib_comm_create(const a2amm_bootstrap *bs, size_t heap_bytes, a2amm_comm **comm, a2amm_error *err)
{
    return a2amm_comm_create(bs, heap_bytes, comm, err);
}

int lib_has_mpi(void)
{
#ifdef A2AMM_PY_MPI
    return 1;
#else
    return 0;
#endif
}

int lib_mpi_comm_create(void *mpi_comm_handle, size_t heap_bytes, a2amm_comm **comm, a2amm_error *err)
{
#ifdef A2AMM_PY_MPI
    return a2amm_mpi_comm_create(*(MPI_Comm *)mpi_comm_handle, heap_bytes, comm, err);
#else
    (void)mpi_comm_handle, (void)heap_bytes, (void)comm;
    if (err) {
        err->code = A2AMM_E_INVAL;
        snprintf(err->msg, sizeof err->msg, "this a2amm was built without liba2amm_mpi (the Open MPI transport): "
                 "rebuild the package where mpicc and liba2amm_mpi are found");
    }
    return A2AMM_E_INVAL;
#endif
}

void lib_comm_destroy(a2amm_comm *comm) { a2amm_comm_destroy(comm); }
int lib_comm_rank(const a2amm_comm *comm) { return a2amm_comm_rank(comm); }
int lib_comm_size(const a2amm_comm *comm) { return a2amm_comm_size(comm); }

int lib_comm_barrier(a2amm_comm *comm, double timeout_s, a2amm_error *err)
{
    return a2amm_comm_barrier(comm, timeout_s, err);
}

int lib_comm_alltoall(a2amm_comm *comm, const void *send, void *recv, size_t block_bytes, double timeout_s,
                      a2amm_error *err)
{
    return a2amm_comm_alltoall(comm, send, recv, block_bytes, timeout_s, err);
}

int lib_comm_alltoallv(a2amm_comm *comm, const void *send, const size_t *send_bytes, const size_t *send_offsets,
                       void *recv, const size_t *recv_room, const size_t *recv_offsets, size_t *recv_bytes,
                       double timeout_s, a2amm_error *err)
{
    return a2amm_comm_alltoallv(comm, send, send_bytes, send_offsets, recv, recv_room, recv_offsets, recv_bytes,
                                timeout_s, err);
}

int lib_comm_fail(a2amm_comm *comm, int code, const char *message) { return a2amm_comm_fail(comm, code, message); }
void lib_comm_say(a2amm_comm *comm, const char *text) { a2amm_comm_say(comm, "%s", text); }
const char *lib_comm_doing(const a2amm_comm *comm) { return a2amm_comm_doing(comm); }

/* ---- ops ---------------------------------------------------------------------- */

const char *lib_op_kind_name(int index) { return index >= 0 ? a2amm_op_kind_name((a2amm_op_kind)index) : NULL; }

static a2amm_op_config config_of(const lib_op_options *o)
{
    a2amm_op_config c = A2AMM_OP_CONFIG_INIT;
    c.max_m = o->max_m, c.k = o->k, c.n = o->n, c.a_type = o->a_type, c.b_type = o->b_type;
    c.tile_m = o->tile_m, c.depth = o->depth, c.threads = o->threads, c.timeout_s = o->timeout_s;
    c.path = o->path_put ? A2AMM_PATH_PUT : A2AMM_PATH_DIRECT;
    c.schedule = o->unfused ? A2AMM_SCHEDULE_UNFUSED : A2AMM_SCHEDULE_FUSED;
    c.kind = (a2amm_op_kind)o->kind;
    return c;
}

int lib_op_geometry(const lib_op_options *o, int nranks, int64_t m, a2amm_op_geometry *g, a2amm_error *err)
{
    a2amm_op_config cfg = config_of(o);
    *g = (a2amm_op_geometry)A2AMM_OP_GEOMETRY_INIT;
    return a2amm_op_geometry_of(&cfg, nranks, m, g, err);
}

size_t lib_op_heap_bytes(const lib_op_options *o, int nranks, a2amm_error *err)
{
    a2amm_op_config cfg = config_of(o);
    size_t bytes = 0;
    return a2amm_op_heap_bytes(&cfg, nranks, &bytes, err) ? 0 : bytes;
}

int lib_op_create(a2amm_comm *comm, const lib_op_options *o, a2amm_op **op, a2amm_error *err)
{
    a2amm_op_config cfg = config_of(o);
    return a2amm_op_create(comm, &cfg, op, err);
}

int lib_op_set_weights(a2amm_op *op, const uint8_t *b, const uint8_t *sb, int64_t ldsb, a2amm_error *err)
{
    return a2amm_op_set_weights(op, b, sb, ldsb, err);
}

int lib_op_use_weights(a2amm_op *op, const a2amm_weights *w, a2amm_error *err)
{
    return a2amm_op_use_weights(op, w, err);
}

int lib_op_input(a2amm_op *op, uint8_t **a, uint8_t **sa, int64_t *lda, int64_t *ldsa, int64_t *block_rows,
                 a2amm_error *err)
{
    return a2amm_op_input(op, a, sa, lda, ldsa, block_rows, err);
}

int lib_op_run(a2amm_op *op, int64_t m, const uint8_t *a, const uint8_t *sa, uint16_t *out, a2amm_error *err)
{
    return a2amm_op_run(op, m, a, sa, out, err);
}

int lib_op_set_observer(a2amm_op *op, a2amm_observer_fn fn, void *arg, a2amm_error *err)
{
    return a2amm_op_set_observer(op, fn, arg, err);
}

void lib_op_destroy(a2amm_op *op) { a2amm_op_destroy(op); }

static a2amm_moe_config moe_config_of(const lib_moe_options *o)
{
    a2amm_moe_config c = A2AMM_MOE_CONFIG_INIT;
    c.experts = o->experts, c.topk = o->topk, c.hidden = o->hidden, c.inter = o->inter;
    c.max_tokens = o->max_tokens, c.max_recv = o->max_recv, c.a_type = o->a_type, c.b_type = o->b_type;
    c.threads = o->threads, c.timeout_s = o->timeout_s;
    c.schedule = (a2amm_schedule)o->schedule;
    return c;
}

int lib_moe_heap_bytes(const lib_moe_options *o, int nranks, size_t *bytes, a2amm_error *err)
{
    a2amm_moe_config c = moe_config_of(o);
    return a2amm_moe_heap_bytes(&c, nranks, bytes, err);
}

int lib_moe_create(a2amm_comm *comm, const lib_moe_options *o, a2amm_moe **moe, a2amm_error *err)
{
    a2amm_moe_config c = moe_config_of(o);
    return a2amm_moe_create(comm, &c, moe, err);
}

int lib_moe_weights_create(int local, int64_t hidden, int64_t inter, a2amm_fp8_type type, int64_t max_rows,
                           const uint8_t *w13, const uint8_t *s13, int64_t ld13, const uint8_t *w2, const uint8_t *s2,
                           int64_t ld2, a2amm_moe_weights **w, a2amm_error *err)
{
    return a2amm_moe_weights_create(local, hidden, inter, type, max_rows, w13, s13, ld13, w2, s2, ld2, w, err);
}

void lib_moe_weights_destroy(a2amm_moe_weights *w) { a2amm_moe_weights_destroy(w); }

int lib_moe_use_weights(a2amm_moe *moe, const a2amm_moe_weights *w, a2amm_error *err)
{
    return a2amm_moe_use_weights(moe, w, err);
}

int lib_moe_set_weights(a2amm_moe *moe, const uint8_t *w13, const uint8_t *s13, int64_t ld13, const uint8_t *w2,
                        const uint8_t *s2, int64_t ld2, a2amm_error *err)
{
    return a2amm_moe_set_weights(moe, w13, s13, ld13, w2, s2, ld2, err);
}

int lib_moe_run(a2amm_moe *moe, int64_t tokens, const uint8_t *x, const uint8_t *sx, int64_t ldsx, const int32_t *idx,
                const float *w, uint16_t *out, a2amm_error *err)
{
    return a2amm_moe_run(moe, tokens, x, sx, ldsx, idx, w, out, err);
}

void lib_moe_destroy(a2amm_moe *moe) { a2amm_moe_destroy(moe); }

int lib_moe_dispatch(a2amm_moe *moe, int64_t tokens, const uint8_t *x, const uint8_t *sx, int64_t ldsx,
                     const int32_t *idx, const float *w, a2amm_moe_batch **batch, a2amm_error *err)
{
    return a2amm_moe_dispatch(moe, tokens, x, sx, ldsx, idx, w, batch, err);
}

int lib_moe_batch_rows(const a2amm_moe_batch *batch, int expert, int64_t *rows, const uint8_t **codes,
                       const uint8_t **scales, a2amm_error *err)
{
    return a2amm_moe_batch_rows(batch, expert, rows, codes, scales, err);
}

int lib_moe_combine(a2amm_moe *moe, a2amm_moe_batch *batch, const float *const *y, uint16_t *out, a2amm_error *err)
{
    return a2amm_moe_combine(moe, batch, y, out, err);
}

void lib_moe_batch_destroy(a2amm_moe_batch *batch) { a2amm_moe_batch_destroy(batch); }

int lib_moe_expert(a2amm_moe *moe, int local_expert, int64_t rows, const uint8_t *codes, const uint8_t *scales,
                   int64_t ldsx, float *y, int64_t ldy, a2amm_error *err)
{
    return a2amm_moe_expert(moe, local_expert, rows, codes, scales, ldsx, y, ldy, err);
}
