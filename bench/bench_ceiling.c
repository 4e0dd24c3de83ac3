/*
 * The built-in ceiling probe of `a2amm bench`: peak AMX TDPBF16PS,
 * vdpbf16ps and FMA throughput with independent accumulators, and the
 * streaming read bandwidth from memory, on T threads at once.
 */
#include "bench/bench_ceiling.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_amx_step.h"
#include "cli/args.h"
#include "common/cpu.h"
#include "common/error.h"
#include "gemm/gemm.h"
#include "gemm/gemm_amx.h"
#include "util/llc.h"

/* One probe loop: `iters` trips of thread `thread` of `threads`, returns a
 * sum of its accumulators so the work cannot be dropped. */
typedef double (*probe_fn)(int64_t iters, int thread, int threads);

typedef struct probe {
    probe_fn fn;
    double flop_per_iter; /* per thread (bytes for the read probe) */
    int64_t first_iters;  /* trips to calibrate from (0: 4096) */
} probe;

#define REP24(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) \
                 X(12) X(13) X(14) X(15) X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23)
#define REP12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

/* 24 zmm accumulators, 24 vdpbf16ps per trip: 24 * 16 lanes * 2 products * 2 FLOP. */
__attribute__((target("avx512f,avx512bf16"))) static double probe_bf16_zmm(int64_t iters, int thread, int threads)
{
    (void)thread, (void)threads;
    /* 2^-10 * 2^-10, twice per lane per step: the sums stay small and normal */
    __m512bh x = (__m512bh)_mm512_set1_epi16(0x3A80);
    __m512bh y = (__m512bh)_mm512_set1_epi16(0x3A80);
#define DECL(i) __m512 acc##i = _mm512_set1_ps((float)(i));
    REP24(DECL)
#undef DECL
    for (int64_t n = 0; n < iters; n++) {
#define STEP(i) acc##i = _mm512_dpbf16_ps(acc##i, x, y);
        REP24(STEP)
#undef STEP
        __asm__ volatile("" : "+v"(x)); /* x is not loop-invariant to the compiler */
    }
    __m512 s = _mm512_setzero_ps();
#define SUM(i) s = _mm512_add_ps(s, acc##i);
    REP24(SUM)
#undef SUM
    return (double)_mm512_reduce_add_ps(s);
}

/* 24 zmm accumulators, 24 vfmadd231ps per trip: 24 * 16 lanes * 2 FLOP. */
__attribute__((target("avx512f"))) static double probe_fma_zmm(int64_t iters, int thread, int threads)
{
    (void)thread, (void)threads;
    __m512 x = _mm512_set1_ps(0x1p-10f), y = _mm512_set1_ps(0x1p-10f);
#define DECL(i) __m512 acc##i = _mm512_set1_ps((float)(i));
    REP24(DECL)
#undef DECL
    for (int64_t n = 0; n < iters; n++) {
#define STEP(i) acc##i = _mm512_fmadd_ps(x, y, acc##i);
        REP24(STEP)
#undef STEP
        __asm__ volatile("" : "+v"(x));
    }
    __m512 s = _mm512_setzero_ps();
#define SUM(i) s = _mm512_add_ps(s, acc##i);
    REP24(SUM)
#undef SUM
    return (double)_mm512_reduce_add_ps(s);
}

#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16")))

/* The AMX probes' start: the kernel's tile configuration, accumulators 0-3 zeroed. */
AMX_TARGET static void amx_probe_begin(void)
{
    gemm_amx_begin();
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
}

/* The AMX probes' end: the sum of accumulators 0 and 3 (so the work cannot be dropped), tiles released. */
AMX_TARGET static double amx_probe_end(void)
{
    float sums[16 * 16] __attribute__((aligned(64)));
    double t = 0.0;
    _tile_stored(0, sums, 64);
    for (int i = 0; i < 256; i++) t += (double)sums[i];
    _tile_stored(3, sums, 64);
    for (int i = 0; i < 256; i++) t += (double)sums[i];
    gemm_amx_end();
    return t;
}

/*
 * AMX: 4 accumulator tiles (16 x 16 fp32) fed by 2 A and 2 B tiles loaded
 * once, 4 TDPBF16PS per trip: 4 * 16 * 16 * 32 products * 2 FLOP. The
 * tiles are the kernel's (gemm_amx_begin's configuration).
 */
AMX_TARGET static double probe_bf16_amx(int64_t iters, int thread, int threads)
{
    (void)thread, (void)threads;
    static const uint16_t ONE_1024TH[16 * 32] __attribute__((aligned(64))) = {[0 ... 511] = 0x3A80}; /* 2^-10 */
    amx_probe_begin();
    _tile_loadd(4, ONE_1024TH, 64);
    _tile_loadd(5, ONE_1024TH, 64);
    _tile_loadd(6, ONE_1024TH, 64);
    _tile_loadd(7, ONE_1024TH, 64);
    for (int64_t n = 0; n < iters; n++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    return amx_probe_end();
}

/*
 * The operands of the L2-fed AMX probe, shared read-only by its threads: A
 * as a2amm packs it (rows 2112 bytes apart, a tile 16 of them; 800 KB) and
 * B as its panels (K-pair rows of 256 bytes; 256 KB), together too large for
 * L1 and well inside L2. All values 2^-10.
 */
enum { L2_A_ROW = 2112, L2_A_BYTES = 12 * 32 * L2_A_ROW, L2_B_ROW = 256, L2_B_BYTES = 256 << 10 };
static uint16_t *l2_operands;
static pthread_once_t l2_once = PTHREAD_ONCE_INIT;

static void l2_operands_alloc(void)
{
    size_t words = (size_t)(L2_A_BYTES + L2_B_BYTES) / 2;
    l2_operands = aligned_alloc(64, words * 2);
    for (size_t i = 0; l2_operands && i < words; i++) l2_operands[i] = 0x3A80;
}

/*
 * probe_bf16_amx with its 4 tiles loaded every trip: A walks 64 bytes along
 * its rows, 32 steps, then on to the next group of 32 rows; B walks down its
 * K-pair rows, 16 a trip; both wrap at their size. Needs l2_operands.
 */
AMX_TARGET static double probe_bf16_amx_l2(int64_t iters, int thread, int threads)
{
    (void)thread, (void)threads;
    const char *a_base = (const char *)l2_operands;
    amx_probe_begin();
    bench_amx_l2_steps(a_base, L2_A_ROW, L2_A_BYTES, a_base + L2_A_BYTES, L2_B_ROW, L2_B_BYTES, iters);
    return amx_probe_end();
}

/* 12 ymm accumulators (16 registers in all without AVX-512), 12 vfmadd231ps
 * per trip: 12 * 8 lanes * 2 FLOP. */
__attribute__((target("avx2,fma"))) static double probe_fma_ymm(int64_t iters, int thread, int threads)
{
    (void)thread, (void)threads;
    __m256 x = _mm256_set1_ps(0x1p-10f), y = _mm256_set1_ps(0x1p-10f);
#define DECL(i) __m256 acc##i = _mm256_set1_ps((float)(i));
    REP12(DECL)
#undef DECL
    for (int64_t n = 0; n < iters; n++) {
#define STEP(i) acc##i = _mm256_fmadd_ps(x, y, acc##i);
        REP12(STEP)
#undef STEP
        __asm__ volatile("" : "+x"(x));
    }
    __m256 s = _mm256_setzero_ps();
#define SUM(i) s = _mm256_add_ps(s, acc##i);
    REP12(SUM)
#undef SUM
    float v[8];
    _mm256_storeu_ps(v, s);
    double t = 0.0;
    for (int i = 0; i < 8; i++) t += (double)v[i];
    return t;
}

/*
 * The streaming read: a buffer of twice the last-level cache (at least 512
 * MiB), filled once, read front to back by every trip, thread t of T
 * reading its own T-th of it, and its loads summed so that none can be
 * dropped: what a matmul that is a read of B (small M) can reach at most.
 */
static char *read_buf;
static size_t read_bytes;
static pthread_once_t read_once = PTHREAD_ONCE_INIT;

static void read_buf_alloc(void)
{
    size_t want = 2 * llc_bytes();
    want = (want < ((size_t)512 << 20) ? (size_t)512 << 20 : want) / 4096 * 4096;
    read_buf = aligned_alloc(4096, want);
    if (!read_buf) return;
    memset(read_buf, 1, want); /* every page present before the timing */
    read_bytes = want;
}

/* Thread t's part of the buffer, in whole 256-byte pieces. */
static void read_part(int thread, int threads, const char **from, size_t *bytes)
{
    size_t part = read_bytes / (size_t)threads / 256 * 256;
    *from = read_buf + (size_t)thread * part;
    *bytes = part;
}

/* The sum of a read probe's lanes, in unsigned arithmetic (it wraps: only a value the loads must feed). */
static double lanes_sum(const uint64_t *v, int n)
{
    uint64_t sum = 0;
    for (int i = 0; i < n; i++) sum += v[i];
    return (double)(sum >> 11);
}

__attribute__((target("avx512f"))) static double probe_read_zmm(int64_t iters, int thread, int threads)
{
    const char *p;
    size_t bytes;
    read_part(thread, threads, &p, &bytes);
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    for (int64_t n = 0; n < iters; n++)
        for (size_t off = 0; off < bytes; off += 256) {
            s0 = _mm512_add_epi64(s0, _mm512_load_si512(p + off));
            s1 = _mm512_add_epi64(s1, _mm512_load_si512(p + off + 64));
            s2 = _mm512_add_epi64(s2, _mm512_load_si512(p + off + 128));
            s3 = _mm512_add_epi64(s3, _mm512_load_si512(p + off + 192));
        }
    uint64_t v[8];
    _mm512_storeu_si512(v, _mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
    return lanes_sum(v, 8);
}

__attribute__((target("avx2"))) static double probe_read_ymm(int64_t iters, int thread, int threads)
{
    const char *p;
    size_t bytes;
    read_part(thread, threads, &p, &bytes);
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (int64_t n = 0; n < iters; n++)
        for (size_t off = 0; off < bytes; off += 128) {
            s0 = _mm256_add_epi64(s0, _mm256_load_si256((const __m256i *)(p + off)));
            s1 = _mm256_add_epi64(s1, _mm256_load_si256((const __m256i *)(p + off + 32)));
            s2 = _mm256_add_epi64(s2, _mm256_load_si256((const __m256i *)(p + off + 64)));
            s3 = _mm256_add_epi64(s3, _mm256_load_si256((const __m256i *)(p + off + 96)));
        }
    uint64_t v[4];
    _mm256_storeu_si256((__m256i *)v, _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)));
    return lanes_sum(v, 4);
}

/* ---- Running a probe on T threads at once ------------------------------- */

/* The threads wait until all exist, then start together (go = 1), or give
 * up when one could not be started (go = -1). */
typedef struct probe_start {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int go;
} probe_start;

typedef struct probe_thread {
    const probe *p;
    int64_t iters;
    int thread, threads;
    probe_start *start;
    double t0, t1, sink;
} probe_thread;

static void *probe_thread_main(void *arg)
{
    probe_thread *t = arg;
    pthread_mutex_lock(&t->start->mu);
    while (t->start->go == 0) pthread_cond_wait(&t->start->cv, &t->start->mu);
    int go = t->start->go;
    pthread_mutex_unlock(&t->start->mu);
    if (go < 0) return NULL;
    t->t0 = cli_now();
    t->sink = t->p->fn(t->iters, t->thread, t->threads);
    t->t1 = cli_now();
    return NULL;
}

/* GFLOP/s of `threads` threads running `iters` trips each, from the first
 * start to the last finish. Returns a negative value if threads fail. */
static double run_parallel(const probe *p, int threads, int64_t iters, volatile double *sink)
{
    probe_thread *ts = calloc((size_t)threads, sizeof *ts);
    pthread_t *ids = calloc((size_t)threads, sizeof *ids);
    probe_start start = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    double gflops = -1.0;
    int started = 0;
    for (; ts && ids && started < threads; started++) {
        ts[started] = (probe_thread){p, iters, started, threads, &start, 0.0, 0.0, 0.0};
        if (pthread_create(&ids[started], NULL, probe_thread_main, &ts[started]) != 0) break;
    }
    pthread_mutex_lock(&start.mu);
    start.go = started == threads ? 1 : -1;
    pthread_cond_broadcast(&start.cv);
    pthread_mutex_unlock(&start.mu);
    for (int i = 0; i < started; i++) pthread_join(ids[i], NULL);
    if (started == threads) {
        double t0 = ts[0].t0, t1 = ts[0].t1;
        for (int i = 0; i < threads; i++) {
            t0 = ts[i].t0 < t0 ? ts[i].t0 : t0;
            t1 = ts[i].t1 > t1 ? ts[i].t1 : t1;
            *sink += ts[i].sink;
        }
        gflops = p->flop_per_iter * (double)iters * threads / (t1 - t0) / 1e9;
    }
    pthread_cond_destroy(&start.cv);
    pthread_mutex_destroy(&start.mu);
    free(ts);
    free(ids);
    return gflops;
}

/* The probe's peak over three runs of about seconds/3 each, trips
 * calibrated on one thread first. */
static double measure(const probe *p, int threads, double seconds, volatile double *sink)
{
    int64_t iters = p->first_iters ? p->first_iters : 1 << 12;
    double dt;
    for (;;) {
        double t0 = cli_now();
        *sink += p->fn(iters, 0, threads);
        dt = cli_now() - t0;
        if (dt > 0.01 || iters > (INT64_C(1) << 40)) break;
        iters *= 2;
    }
    double want = (double)iters * (seconds / 3.0) / (dt > 0.0 ? dt : 1e-9);
    iters = want < 1.0 ? 1 : want > 1e12 ? (int64_t)1e12 : (int64_t)want;
    double best = -1.0;
    for (int r = 0; r < 3; r++) {
        double g = run_parallel(p, threads, iters, sink);
        if (g < 0.0) return -1.0;
        best = g > best ? g : best;
    }
    return best;
}

/* "this CPU lacks avx512_bf16" or "A2AMM_CPU_HIDE hides avx512_bf16". */
static const char *missing_why(cpu_feature f)
{
    static char why[2][80];
    static int turn;
    char *w = why[turn++ & 1];
    snprintf(w, sizeof why[0], "%s %s", cpu_detected(f) ? "A2AMM_CPU_HIDE hides" : "this CPU lacks",
             cpu_feature_name(f));
    return w;
}

int bench_ceiling_measure(int threads, double seconds, int fma_on_ymm, bench_ceiling *out, a2amm_error *err)
{
    volatile double sink = 0.0;
    double t0 = cli_now();
    int avx512 = cpu_has(CPU_AVX512F);
    int bf16 = avx512 && cpu_has(CPU_AVX512BF16);
    int fma_zmm = avx512 && !fma_on_ymm;
    int fma = cpu_has(CPU_AVX2) && cpu_has(CPU_FMA);
    int amx = gemm_isa_supported(GEMM_ISA_AMX);
    static char no_amx[200], no_bf16[100], no_fma[100], read_what[100];
    snprintf(no_amx, sizeof no_amx, "n/a: %s", amx ? "" : gemm_isa_why_not(GEMM_ISA_AMX));
    snprintf(no_bf16, sizeof no_bf16, "n/a: %s", missing_why(avx512 ? CPU_AVX512BF16 : CPU_AVX512F));
    snprintf(no_fma, sizeof no_fma, "n/a: %s", missing_why(cpu_has(CPU_AVX2) ? CPU_FMA : CPU_AVX2));
    *out = (bench_ceiling){.threads = threads, .amx_gflops = NAN, .amx_l2_gflops = NAN, .bf16_gflops = NAN,
                           .fma_gflops = NAN, .read_gbs = NAN, .amx_what = no_amx, .amx_l2_what = no_amx,
                           .bf16_what = no_bf16, .fma_what = no_fma, .read_what = "n/a: neither AVX2 nor AVX-512"};
    if (threads < 1) return a2amm_fail(err, A2AMM_E_INVAL, "ceiling probe: threads must be at least 1");
    if (amx) {
        probe p = {probe_bf16_amx, 4.0 * 16 * 16 * 32 * 2, 0};
        out->amx_gflops = measure(&p, threads, seconds, &sink);
        out->amx_what = "tdpbf16ps tiles";
        if (out->amx_gflops < 0.0) goto no_threads;
        pthread_once(&l2_once, l2_operands_alloc);
        if (l2_operands) {
            probe l2 = {probe_bf16_amx_l2, 4.0 * 16 * 16 * 32 * 2, 0};
            out->amx_l2_gflops = measure(&l2, threads, seconds, &sink);
            out->amx_l2_what = "4 tile loads a step";
            if (out->amx_l2_gflops < 0.0) goto no_threads;
        } else {
            out->amx_l2_what = "n/a: out of memory for the probe's operands";
        }
    }
    if (bf16) {
        probe p = {probe_bf16_zmm, 24.0 * 64.0, 0};
        out->bf16_gflops = measure(&p, threads, seconds, &sink);
        out->bf16_what = "vdpbf16ps zmm";
        if (out->bf16_gflops < 0.0) goto no_threads;
    }
    if (fma_zmm || fma) {
        probe p = fma_zmm ? (probe){probe_fma_zmm, 24.0 * 32.0, 0} : (probe){probe_fma_ymm, 12.0 * 16.0, 0};
        out->fma_gflops = measure(&p, threads, seconds, &sink);
        out->fma_what = fma_zmm ? "vfmadd231ps zmm" : "vfmadd231ps ymm";
        if (out->fma_gflops < 0.0) goto no_threads;
    }
    if (avx512 || cpu_has(CPU_AVX2)) {
        pthread_once(&read_once, read_buf_alloc);
        if (read_buf) {
            probe p = {avx512 ? probe_read_zmm : probe_read_ymm, (double)(read_bytes / (size_t)threads / 256 * 256), 1};
            out->read_gbs = measure(&p, threads, seconds, &sink);
            out->read_bytes = (double)read_bytes;
            snprintf(read_what, sizeof read_what, "%s loads over %zu MiB", avx512 ? "512-bit" : "256-bit",
                     read_bytes >> 20);
            out->read_what = read_what;
            if (out->read_gbs < 0.0) goto no_threads;
        } else {
            out->read_what = "n/a: out of memory for the probe's buffer";
        }
    }
    out->seconds = cli_now() - t0;
    return A2AMM_OK;
no_threads:
    return a2amm_fail(err, A2AMM_E_SYS, "ceiling probe: cannot start %d threads", threads);
}

static double peak(double x, double y) { return isnan(x) ? y : isnan(y) ? x : x > y ? x : y; }

bench_ceiling bench_ceiling_peak(const bench_ceiling *a, const bench_ceiling *b)
{
    bench_ceiling c = *a;
    c.amx_gflops = peak(a->amx_gflops, b->amx_gflops);
    c.amx_l2_gflops = peak(a->amx_l2_gflops, b->amx_l2_gflops);
    c.bf16_gflops = peak(a->bf16_gflops, b->bf16_gflops);
    c.fma_gflops = peak(a->fma_gflops, b->fma_gflops);
    c.read_gbs = peak(a->read_gbs, b->read_gbs);
    c.seconds = a->seconds + b->seconds;
    return c;
}
