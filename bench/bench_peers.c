/*
 * The benchmark's peers: oneDNN's bf16 matmul with packed weights (fp32
 * where oneDNN has no bf16 matmul for the CPU) and
 * OpenBLAS sgemm, each set up once and then run on demand.
 */
#include "bench/bench_peers.h"

#include <cblas.h>
#include <dlfcn.h>
#include <dnnl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/cpu.h"
#include "common/error.h"

/* ---- oneDNN ------------------------------------------------------------ */

struct bench_onednn {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_primitive_t matmul;
    dnnl_memory_t a, b, c; /* b: the weights in oneDNN's packed layout */
    int f32;               /* 1: the fp32 fallback runs (no bf16 matmul here) */
    char impl[128];
    char bf16_why[160];
    int threads;
    const char *threads_how;
};

static int dnnl_failed(a2amm_error *err, dnnl_status_t st, const char *what)
{
    return a2amm_fail(err, A2AMM_E_SYS, "oneDNN: %s failed (status %d%s)", what, (int)st,
                      st == dnnl_unimplemented ? ": no implementation on this CPU" : "");
}

enum { ONEDNN_SETTLE_NS = 30000000 }; /* longer than libgomp's default spin (measured) */

#define DNNL_TRY(call, what)                                   \
    do {                                                       \
        dnnl_status_t st_ = (call);                            \
        if (st_ != dnnl_success) {                             \
            rc = dnnl_failed(err, st_, what);                  \
            goto done;                                         \
        }                                                      \
    } while (0)

/*
 * Debian's oneDNN runs on OpenMP (libgomp), which reads OMP_NUM_THREADS
 * once, when it is loaded, so setting the variable now would change
 * nothing: the count is set through omp_set_num_threads, looked up in the
 * libgomp that oneDNN brought in (a2amm itself does not link OpenMP).
 */
static void set_omp_threads(bench_onednn *o, int threads)
{
    void (*set)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    int (*get)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "omp_get_max_threads");
    if (set) set(threads);
    o->threads = get ? get() : -1;
    o->threads_how = set ? "omp_set_num_threads" : "oneDNN's own default (no OpenMP runtime found)";
}

static int dnnl_copy_in(dnnl_memory_t m, const void *src, size_t bytes, a2amm_error *err)
{
    void *p = NULL;
    dnnl_status_t st = dnnl_memory_get_data_handle(m, &p);
    if (st != dnnl_success || !p) return dnnl_failed(err, st, "dnnl_memory_get_data_handle");
    memcpy(p, src, bytes);
    return A2AMM_OK;
}

static const char *isa_cap_name;

const char *bench_onednn_cap_isa(void)
{
    if (getenv("ONEDNN_MAX_CPU_ISA") || getenv("DNNL_MAX_CPU_ISA")) return NULL; /* the user's own cap */
    struct {
        cpu_feature hidden;
        dnnl_cpu_isa_t cap;
        const char *name;
    } const caps[] = {{CPU_AVX2, dnnl_cpu_isa_sse41, "sse41"},
                      {CPU_AVX512F, dnnl_cpu_isa_avx2, "avx2"},
                      {CPU_AVX512BF16, dnnl_cpu_isa_avx512_core_vnni, "avx512_core_vnni"},
                      {CPU_AMX_TILE, dnnl_cpu_isa_avx512_core_bf16, "avx512_core_bf16"}};
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++)
        if (cpu_hidden(caps[i].hidden) && cpu_detected(caps[i].hidden)) {
            if (isa_cap_name) return isa_cap_name;
            isa_cap_name = dnnl_set_max_cpu_isa(caps[i].cap) == dnnl_success ? caps[i].name : NULL;
            return isa_cap_name;
        }
    return NULL;
}

/*
 * The matmul C = A x B of one data type (bf16 in and out, or fp32 in and
 * out), the weights reordered into oneDNN's packed layout once. `a` is
 * [M, K] and `bt` [N, K], of that type. dnnl_unimplemented comes back as
 * such, for the caller to fall back.
 */
static int onednn_build(bench_onednn *o, dnnl_data_type_t dt, const void *a, const void *bt, int64_t M, int64_t N,
                        int64_t K, dnnl_status_t *pd_status, a2amm_error *err)
{
    int rc = A2AMM_OK;
    size_t elem = dt == dnnl_f32 ? 4 : 2;
    dnnl_primitive_desc_t pd = NULL, rpd = NULL;
    dnnl_primitive_t reorder = NULL;
    dnnl_memory_t b_user = NULL;
    dnnl_memory_desc_t a_md, b_user_md, b_any_md, c_md;
    dnnl_dims_t a_dims = {M, K}, b_dims = {K, N}, c_dims = {M, N};
    dnnl_matmul_desc_t mm_d;
    const char *impl = NULL;

    *pd_status = dnnl_success;
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&a_md, 2, a_dims, dt, dnnl_ab), "A descriptor");
    /* B is [K, N] logically; stored as B^T [N, K], i.e. K innermost: tag ba */
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&b_user_md, 2, b_dims, dt, dnnl_ba), "B descriptor");
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&b_any_md, 2, b_dims, dt, dnnl_format_tag_any), "B (any) descriptor");
    /* bf16 out, as a2amm's, when the inputs are bf16: the output a user of the operator wants */
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&c_md, 2, c_dims, dt, dnnl_ab), "C descriptor");
    DNNL_TRY(dnnl_matmul_desc_init(&mm_d, &a_md, &b_any_md, NULL, &c_md), "dnnl_matmul_desc_init");
    *pd_status = dnnl_primitive_desc_create(&pd, &mm_d, NULL, o->engine, NULL);
    DNNL_TRY(*pd_status, "matmul primitive descriptor");
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
        snprintf(o->impl, sizeof o->impl, "%s", impl);
    else
        snprintf(o->impl, sizeof o->impl, "?");
    const dnnl_memory_desc_t *w_md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    if (!w_md) {
        rc = a2amm_fail(err, A2AMM_E_SYS, "oneDNN: the matmul reports no weights layout");
        goto done;
    }
    DNNL_TRY(dnnl_primitive_create(&o->matmul, pd), "matmul primitive");

    DNNL_TRY(dnnl_memory_create(&o->a, &a_md, o->engine, DNNL_MEMORY_ALLOCATE), "A memory");
    DNNL_TRY(dnnl_memory_create(&o->c, &c_md, o->engine, DNNL_MEMORY_ALLOCATE), "C memory");
    DNNL_TRY(dnnl_memory_create(&b_user, &b_user_md, o->engine, DNNL_MEMORY_ALLOCATE), "B memory");
    DNNL_TRY(dnnl_memory_create(&o->b, w_md, o->engine, DNNL_MEMORY_ALLOCATE), "packed B memory");
    rc = dnnl_copy_in(o->a, a, (size_t)M * (size_t)K * elem, err);
    if (!rc) rc = dnnl_copy_in(b_user, bt, (size_t)N * (size_t)K * elem, err);
    if (rc) goto done;

    /* the weights into oneDNN's packed layout, once */
    DNNL_TRY(dnnl_reorder_primitive_desc_create(&rpd, &b_user_md, o->engine, w_md, o->engine, NULL),
             "B reorder descriptor");
    DNNL_TRY(dnnl_primitive_create(&reorder, rpd), "B reorder primitive");
    dnnl_exec_arg_t rargs[2] = {{DNNL_ARG_FROM, b_user}, {DNNL_ARG_TO, o->b}};
    DNNL_TRY(dnnl_primitive_execute(reorder, o->stream, 2, rargs), "B reorder");
    DNNL_TRY(dnnl_stream_wait(o->stream), "B reorder (wait)");

done:
    if (reorder) dnnl_primitive_destroy(reorder);
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    if (b_user) dnnl_memory_destroy(b_user);
    if (pd) dnnl_primitive_desc_destroy(pd);
    return rc;
}

int bench_onednn_create(const uint16_t *a, const uint16_t *bt, const float *af, const float *btf, int64_t M,
                        int64_t N, int64_t K, int threads, bench_onednn **out, a2amm_error *err)
{
    *out = NULL;
    bench_onednn *o = calloc(1, sizeof *o);
    if (!o) return a2amm_fail(err, A2AMM_E_NOMEM, "oneDNN: out of memory");
    set_omp_threads(o, threads);
    int rc = A2AMM_OK;
    dnnl_status_t pd_status = dnnl_success;
    DNNL_TRY(dnnl_engine_create(&o->engine, dnnl_cpu, 0), "dnnl_engine_create");
    DNNL_TRY(dnnl_stream_create(&o->stream, o->engine, dnnl_stream_default_flags), "dnnl_stream_create");
    rc = onednn_build(o, dnnl_bf16, a, bt, M, N, K, &pd_status, err);
    if (rc && pd_status == dnnl_unimplemented) {
        /* no bf16 matmul on this CPU (oneDNN's needs AVX-512 or AVX2-VNNI-2 there): fp32 is the peer */
        snprintf(o->bf16_why, sizeof o->bf16_why, "oneDNN %s has no bf16 matmul for this CPU (ISA %s)",
                 bench_onednn_version(), bench_onednn_isa());
        o->f32 = 1;
        rc = onednn_build(o, dnnl_f32, af, btf, M, N, K, &pd_status, err);
    }
done:
    if (rc) {
        bench_onednn_free(o);
        return rc;
    }
    *out = o;
    return A2AMM_OK;
}

int bench_onednn_run(bench_onednn *o, a2amm_error *err)
{
    int rc = A2AMM_OK;
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, o->a}, {DNNL_ARG_WEIGHTS, o->b}, {DNNL_ARG_DST, o->c}};
    DNNL_TRY(dnnl_primitive_execute(o->matmul, o->stream, 3, args), "matmul");
    DNNL_TRY(dnnl_stream_wait(o->stream), "matmul (wait)");
done:
    return rc;
}

void *bench_onednn_input(const bench_onednn *o)
{
    void *p = NULL;
    return dnnl_memory_get_data_handle(o->a, &p) == dnnl_success ? p : NULL;
}

const void *bench_onednn_result(const bench_onednn *o)
{
    void *p = NULL;
    return dnnl_memory_get_data_handle(o->c, &p) == dnnl_success ? p : NULL;
}

int bench_onednn_is_f32(const bench_onednn *o) { return o->f32; }
const char *bench_onednn_bf16_why_not(const bench_onednn *o) { return o->f32 ? o->bf16_why : NULL; }

const char *bench_onednn_isa(void)
{
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    default: break;
    }
    static char other[32];
    snprintf(other, sizeof other, "0x%x", (unsigned)dnnl_get_effective_cpu_isa());
    return other;
}

const char *bench_onednn_impl(const bench_onednn *o) { return o->impl; }
int bench_onednn_threads(const bench_onednn *o) { return o->threads; }
const char *bench_onednn_threads_how(const bench_onednn *o) { return o->threads_how; }

void bench_onednn_free(bench_onednn *o)
{
    if (!o) return;
    if (o->matmul) dnnl_primitive_destroy(o->matmul);
    if (o->a) dnnl_memory_destroy(o->a);
    if (o->b) dnnl_memory_destroy(o->b);
    if (o->c) dnnl_memory_destroy(o->c);
    if (o->stream) dnnl_stream_destroy(o->stream);
    if (o->engine) dnnl_engine_destroy(o->engine);
    free(o);
}

const char *bench_onednn_version(void)
{
    static char buf[64];
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, sizeof buf, "%d.%d.%d", v->major, v->minor, v->patch);
    return buf;
}

/* ---- OpenBLAS ------------------------------------------------------------ */

struct bench_openblas {
    const float *a, *bt;
    float *c;
    int M, N, K;
};

int bench_openblas_create(const float *a, const float *bt, int64_t M, int64_t N, int64_t K, int threads,
                          bench_openblas **out, a2amm_error *err)
{
    *out = NULL;
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX)
        return a2amm_fail(err, A2AMM_E_INVAL, "OpenBLAS: its dimensions are 32-bit ints (got M=%lld N=%lld K=%lld)",
                          (long long)M, (long long)N, (long long)K);
    bench_openblas *o = calloc(1, sizeof *o);
    float *c = malloc((size_t)M * (size_t)N * sizeof *c);
    if (!o || !c) {
        free(o);
        free(c);
        return a2amm_fail(err, A2AMM_E_NOMEM, "OpenBLAS: cannot allocate C (%.1f MB)",
                          (double)M * (double)N * 4.0 / 1e6);
    }
    *o = (bench_openblas){a, bt, c, (int)M, (int)N, (int)K};
    openblas_set_num_threads(threads);
    *out = o;
    return A2AMM_OK;
}

int bench_openblas_run(bench_openblas *o, a2amm_error *err)
{
    (void)err;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, o->M, o->N, o->K, 1.0f, o->a, o->K, o->bt, o->K, 0.0f,
                o->c, o->N);
    return A2AMM_OK;
}

void bench_onednn_idle(void *ctx)
{
    (void)ctx;
    struct timespec settle = {0, ONEDNN_SETTLE_NS};
    nanosleep(&settle, NULL);
}

const float *bench_openblas_result(const bench_openblas *o) { return o->c; }

int blas_thread_shutdown_(void); /* OpenBLAS's own, exported; used at fork */

void bench_openblas_idle(void *ctx)
{
    (void)ctx;
    blas_thread_shutdown_();
}

void bench_openblas_free(bench_openblas *o)
{
    if (!o) return;
    free(o->c);
    free(o);
}

const char *bench_openblas_corename(void) { return openblas_get_corename(); }
const char *bench_openblas_coretype_env(void) { return getenv("OPENBLAS_CORETYPE"); }
const char *bench_openblas_config(void) { return openblas_get_config(); }
int bench_openblas_threads(void) { return openblas_get_num_threads(); }
