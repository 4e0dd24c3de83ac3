/*
 * Every call the extension makes into liba2amm goes through this header and
 * a2amm_lib.c, and nothing else in python/src calls an a2amm_* function: a
 * change of the C API is a change of a2amm_lib.c. The rest of the extension
 * uses the header's types (a2amm_comm, a2amm_op, a2amm_event, ...) and its
 * status codes, never its calls.
 */
#ifndef A2AMM_PY_LIB_H
#define A2AMM_PY_LIB_H

#include <stddef.h>
#include <stdint.h>

#include "a2amm.h"

/* Versions: the library's at run time, the header's at build time. */
const char *lib_version(void);
int lib_version_number(void);
const char *lib_header_version(void);
/* The file the library was loaded from ("" when unknown). */
const char *lib_path(void);
const char *lib_strerror(int status);

/* "e4m3" / "e5m2" (case-insensitive): 0, or A2AMM_E_INVAL. */
int lib_fmt_parse(const char *name, a2amm_fp8_type *out);
const char *lib_fmt_name(a2amm_fp8_type t);
/* "floor" / "rceil": 0, or A2AMM_E_INVAL. */
int lib_mode_parse(const char *name, a2amm_scale_mode *out);
/* The kernel level ops and matmuls made now run ("amx", ...), or an error. */
int lib_kernel(const char **name, a2amm_error *err);
const char *lib_cpu_model(void);
int lib_cpu_cores(void);

/* MX data (see a2amm.h). */
int lib_quantize_f32(const float *x, int64_t rows, int64_t cols, int64_t ldx, a2amm_fp8_type type,
                     a2amm_scale_mode mode, uint8_t *codes, int64_t ldc, uint8_t *scales, int64_t lds,
                     a2amm_error *err);
int lib_quantize_bf16(const uint16_t *x, int64_t rows, int64_t cols, int64_t ldx, a2amm_fp8_type type,
                      a2amm_scale_mode mode, uint8_t *codes, int64_t ldc, uint8_t *scales, int64_t lds,
                      a2amm_error *err);
int lib_dequantize(const uint8_t *codes, int64_t ldc, const uint8_t *scales, int64_t lds, int64_t rows,
                   int64_t cols, a2amm_fp8_type type, float *y, int64_t ldy, a2amm_error *err);

/* The single-rank matmul. */
int lib_weights_create(const uint8_t *b, const uint8_t *sb, int64_t n, int64_t k, int64_t ldsb,
                       a2amm_fp8_type type, int threads, a2amm_weights **w, a2amm_error *err);
void lib_weights_destroy(a2amm_weights *w);
int lib_matmul(const a2amm_weights *w, const uint8_t *a, int64_t lda, const uint8_t *sa, int64_t ldsa, int64_t m,
               a2amm_fp8_type a_type, uint16_t *out, int64_t ldo, int threads, a2amm_error *err);
/* The fp32 sums a2amm_matmul rounds; the MoE activation; the matmul of a bf16 A (the MoE down projection). */
int lib_matmul_f32(const a2amm_weights *w, const uint8_t *a, int64_t lda, const uint8_t *sa, int64_t ldsa, int64_t m,
                   a2amm_fp8_type a_type, float *c, int64_t ldc, int threads, a2amm_error *err);
void lib_swiglu(const float *g, const float *u, int64_t n, uint16_t *a);
int lib_bf16a_weights_create(const uint8_t *b, const uint8_t *sb, int64_t n, int64_t k, int64_t ldsb,
                             a2amm_fp8_type type, a2amm_bf16a_weights **w, a2amm_error *err);
void lib_bf16a_weights_destroy(a2amm_bf16a_weights *w);
int lib_matmul_bf16a(const a2amm_bf16a_weights *w, const uint16_t *a, int64_t lda, int64_t m, float *y, int64_t ldy,
                     int threads, a2amm_error *err);

/* Communicators. */
typedef struct lib_launch_options {
    size_t heap_bytes;  /* 0: the library's default */
    double timeout_s;   /* 0: none */
    double stall_s;     /* 0: none */
    const volatile sig_atomic_t *stop;
    a2amm_rank_report *reports; /* [nranks] or NULL */
} lib_launch_options;
int lib_launch(int nranks, a2amm_rank_fn fn, void *arg, const lib_launch_options *o, a2amm_error *err);
int lib_comm_create(const a2amm_bootstrap *bs, size_t heap_bytes, a2amm_comm **comm, a2amm_error *err);
/* 0, or A2AMM_E_INVAL when the library was built without its MPI transport. */
int lib_mpi_comm_create(void *mpi_comm_handle, size_t heap_bytes, a2amm_comm **comm, a2amm_error *err);
int lib_has_mpi(void);
void lib_comm_destroy(a2amm_comm *comm);
int lib_comm_rank(const a2amm_comm *comm);
int lib_comm_size(const a2amm_comm *comm);
int lib_comm_barrier(a2amm_comm *comm, double timeout_s, a2amm_error *err);
int lib_comm_alltoall(a2amm_comm *comm, const void *send, void *recv, size_t block_bytes, double timeout_s,
                      a2amm_error *err);
int lib_comm_alltoallv(a2amm_comm *comm, const void *send, const size_t *send_bytes, const size_t *send_offsets,
                       void *recv, const size_t *recv_room, const size_t *recv_offsets, size_t *recv_bytes,
                       double timeout_s, a2amm_error *err);
int lib_comm_fail(a2amm_comm *comm, int code, const char *message);
void lib_comm_say(a2amm_comm *comm, const char *text);
const char *lib_comm_doing(const a2amm_comm *comm);

/* Ops. The options as the extension holds them; a2amm_lib.c turns them
 * into the library's config. */
/* The library's a2amm_op_kind values (0, 1, ... as its table has them). */
typedef int lib_op_kind;
enum { LIB_OP_KINDS_MAX = 16 };
/* The kinds this library runs, by name ("alltoall-matmul", "matmul-alltoall"); NULL past the end. */
const char *lib_op_kind_name(int index);
typedef struct lib_op_options {
    lib_op_kind kind;
    int64_t max_m, k, n;
    a2amm_fp8_type a_type, b_type;
    int64_t tile_m;   /* 0: the library's default */
    int depth;        /* 0: the library's default */
    int threads;      /* 0: cores / R */
    int path_put;     /* 0: the direct path, 1: put */
    double timeout_s; /* 0: the library's default */
    int unfused;      /* 0: fused, 1: the unfused schedule */
} lib_op_options;
/* The op's arrays for a call of m rows on nranks ranks (a2amm_op_geometry_of). */
int lib_op_geometry(const lib_op_options *o, int nranks, int64_t m, a2amm_op_geometry *g, a2amm_error *err);
/* Symmetric memory one rank needs for this op on R ranks (0: a bad config). */
size_t lib_op_heap_bytes(const lib_op_options *o, int nranks, a2amm_error *err);
int lib_op_create(a2amm_comm *comm, const lib_op_options *o, a2amm_op **op, a2amm_error *err);
int lib_op_set_weights(a2amm_op *op, const uint8_t *b, const uint8_t *sb, int64_t ldsb, a2amm_error *err);
int lib_op_use_weights(a2amm_op *op, const a2amm_weights *w, a2amm_error *err);
int lib_op_input(a2amm_op *op, uint8_t **a, uint8_t **sa, int64_t *lda, int64_t *ldsa, int64_t *block_rows,
                 a2amm_error *err);
int lib_op_run(a2amm_op *op, int64_t m, const uint8_t *a, const uint8_t *sa, uint16_t *out, a2amm_error *err);
int lib_op_set_observer(a2amm_op *op, a2amm_observer_fn fn, void *arg, a2amm_error *err);
void lib_op_destroy(a2amm_op *op);

/* The MoE op (a2amm.h, "Expert parallelism"). */
typedef struct lib_moe_options {
    int experts, topk;
    int64_t hidden, inter, max_tokens, max_recv; /* max_recv 0: R * max_tokens */
    a2amm_fp8_type a_type, b_type;
    int threads;      /* 0: cores / R */
    double timeout_s; /* 0: 60 */
    int schedule;     /* a2amm_moe_config.schedule: 0 fused, 1 unfused, 2 overlap */
} lib_moe_options;
/* The symmetric memory one rank needs for this MoE op on nranks ranks (a2amm_moe_heap_bytes). */
int lib_moe_heap_bytes(const lib_moe_options *o, int nranks, size_t *bytes, a2amm_error *err);
int lib_moe_create(a2amm_comm *comm, const lib_moe_options *o, a2amm_moe **moe, a2amm_error *err);
int lib_moe_set_weights(a2amm_moe *moe, const uint8_t *w13, const uint8_t *s13, int64_t ld13, const uint8_t *w2,
                        const uint8_t *s2, int64_t ld2, a2amm_error *err);
int lib_moe_run(a2amm_moe *moe, int64_t tokens, const uint8_t *x, const uint8_t *sx, int64_t ldsx, const int32_t *idx,
                const float *w, uint16_t *out, a2amm_error *err);
void lib_moe_destroy(a2amm_moe *moe);
int lib_moe_weights_create(int local, int64_t hidden, int64_t inter, a2amm_fp8_type type, int64_t max_rows,
                           const uint8_t *w13, const uint8_t *s13, int64_t ld13, const uint8_t *w2, const uint8_t *s2,
                           int64_t ld2, a2amm_moe_weights **w, a2amm_error *err);
void lib_moe_weights_destroy(a2amm_moe_weights *w);
int lib_moe_use_weights(a2amm_moe *moe, const a2amm_moe_weights *w, a2amm_error *err);
int lib_moe_dispatch(a2amm_moe *moe, int64_t tokens, const uint8_t *x, const uint8_t *sx, int64_t ldsx,
                     const int32_t *idx, const float *w, a2amm_moe_batch **batch, a2amm_error *err);
int lib_moe_batch_rows(const a2amm_moe_batch *batch, int expert, int64_t *rows, const uint8_t **codes,
                       const uint8_t **scales, a2amm_error *err);
int lib_moe_combine(a2amm_moe *moe, a2amm_moe_batch *batch, const float *const *y, uint16_t *out, a2amm_error *err);
int lib_moe_expert(a2amm_moe *moe, int local_expert, int64_t rows, const uint8_t *codes, const uint8_t *scales,
                   int64_t ldsx, float *y, int64_t ldy, a2amm_error *err);
void lib_moe_batch_destroy(a2amm_moe_batch *batch);

#endif
