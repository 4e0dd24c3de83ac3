/*
 * a2amm: the fused AllToAll + MXFP8 quantized matmul across R ranks.
 *
 * This header is the library's manual. One rule for failures: every call
 * that can fail returns an int status, 0 (A2AMM_OK) on success or a
 * negative A2AMM_E_* code, and takes an `a2amm_error *` last that, when not
 * NULL, is filled with a message naming the rank or argument, what was
 * expected and what was found. (The calls that cannot fail return their
 * value: a name, a count, a rank.) The library never prints.
 *
 * The structs a caller fills (a2amm_op_config, a2amm_launch_options) carry
 * their size as first field, set by their initializer (A2AMM_*_INIT or
 * a2amm_*_init, both from this header): a library of a later version reads
 * such a struct as the program's header laid it out, and fields added since
 * take their defaults, so a program built against this header keeps working
 * with later libraries of the same major version.
 *
 * Each call below is marked:
 *  - Collective: every rank of the communicator makes it, in the same order
 *    as its other collective calls (on the same op, with the arguments the
 *    call names as shared). Each such call first agrees with every rank on
 *    which call it is, on which op and with which arguments: a rank in
 *    another call, on another op or with another argument is an error on
 *    every rank, naming both ranks and what each passed (never a wrong
 *    result or a wait to the deadline). On shared memory, a rank that
 *    ended (its function under a2amm_launch returned, or it left a
 *    communicator of a2amm_comm_create with a2amm_comm_destroy) while
 *    others wait in a collective call fails those calls at once, naming it
 *    (over MPI: a2amm_mpi.h). Any error of a
 *    collective call fails the communicator: the other ranks' collective
 *    calls fail too (A2AMM_E_PEER, or their own error where they found the
 *    same difference), and every later collective call on it returns
 *    A2AMM_E_PEER at once. That holds for a refusal of one rank's own
 *    arguments too (a NULL array, a size that overflows, a timeout_s that
 *    is not positive): that rank gets its error, the others A2AMM_E_PEER
 *    at once with a message naming the rank and its reason (the reason
 *    travels even where the refusing rank passed a NULL err). Only a
 *    second thread's call on a communicator or op already in a call leaves
 *    it alone (below), and a verdict every rank reaches alike (a block over
 *    its room in a2amm_comm_alltoallv, rows over max_recv, a heap too
 *    small at a2amm_moe_create) fails that call on every rank and leaves
 *    the communicator usable, as those calls say.
 *  - Local: this rank alone; no other rank takes part or waits.
 *  - Thread-safe: may run on several threads at once. Collective calls on
 *    one communicator go one at a time: a second thread's collective call
 *    while one runs is refused (A2AMM_E_INVAL, nothing else changed), and
 *    an op takes one call at a time (a2amm_op_run, or its local calls, on
 *    an op another thread is in are refused the same way). Calls with no
 *    mark on threads are for one thread at a time per object.
 *
 * The contract the operator implements is docs/op-contract.md.
 */
#ifndef A2AMM_H
#define A2AMM_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Version ----------------------------------------------------------------
 * The header's version; a2amm_version() is the library's, which a program
 * may compare with the header it was built against. Within one major
 * version the calls and the layout of every struct a caller fills stay
 * compatible (structs grow only at their end, behind their size field). */
#define A2AMM_VERSION_MAJOR 0
#define A2AMM_VERSION_MINOR 3
#define A2AMM_VERSION_PATCH 0
#define A2AMM_VERSION_STRING "0.3.0"
/* One number that orders versions: 10000 * major + 100 * minor + patch. */
#define A2AMM_VERSION (A2AMM_VERSION_MAJOR * 10000 + A2AMM_VERSION_MINOR * 100 + A2AMM_VERSION_PATCH)

/* What the shared library exports (it builds with -fvisibility=hidden). */
#if defined(__GNUC__)
#define A2AMM_API __attribute__((visibility("default")))
#else
#define A2AMM_API
#endif

/* ---- Status codes ------------------------------------------------------ */
enum {
    A2AMM_OK = 0,
    A2AMM_E_INVAL = -1,    /* a bad argument or a shape that breaks a rule */
    A2AMM_E_IO = -2,       /* a file could not be opened, read or written */
    A2AMM_E_SIZE = -3,     /* a file is shorter or longer than the shape says */
    A2AMM_E_NOMEM = -4,    /* an allocation failed */
    A2AMM_E_OVERFLOW = -5, /* a size does not fit in the address space */
    A2AMM_E_FORMAT = -6,   /* a file's content is not what it should be */
    A2AMM_E_TIMEOUT = -7,  /* a wait outlived its deadline */
    A2AMM_E_PEER = -8,     /* another rank failed */
    A2AMM_E_SYS = -9,      /* an operating-system call failed */
    A2AMM_E_MISMATCH = -10, /* verification found results outside tolerance */
    A2AMM_E_INTERRUPTED = -11 /* stopped on request (a signal) */
};

/* The library's version, "0.3.0" (A2AMM_VERSION_STRING of the header it was
 * built from), and as one number (A2AMM_VERSION). */
A2AMM_API const char *a2amm_version(void);
A2AMM_API int a2amm_version_number(void);

/* A short, static description of a status code ("file size mismatch").
 * Thread-safe, as are the fp8 type calls, the MX calls,
 * a2amm_kernel and a2amm_matmul. */
A2AMM_API const char *a2amm_strerror(int status);

/* The detail of a failure: the status and a message for a person. */
typedef struct a2amm_error {
    int code;
    char msg[1024];
} a2amm_error;

/* ---- Element types ------------------------------------------------------ */
typedef enum a2amm_fp8_type {
    A2AMM_E4M3 = 0, /* OFP8 E4M3FN: bias 7, max 448, no Inf, S.1111.111 NaN */
    A2AMM_E5M2 = 1  /* OFP8 E5M2: bias 15, max 57344, IEEE-like Inf/NaN */
} a2amm_fp8_type;

/* "e4m3" / "e5m2"; "(not an fp8 type)" for any other value. */
A2AMM_API const char *a2amm_fp8_type_name(a2amm_fp8_type t);
/* Parses "e4m3" or "e5m2" (case-insensitive) into *out; A2AMM_E_INVAL for
 * anything else, or a NULL s or out (*out is then left alone). */
A2AMM_API int a2amm_fp8_type_parse(const char *s, a2amm_fp8_type *out, a2amm_error *err);

/* ---- MX data -------------------------------------------------------------- */
/*
 * Quantizing the caller's data to MXFP8 (OCP MX v1.0): each row of `cols`
 * values in blocks of 32 along the row (a last partial block allowed), one
 * E8M0 scale per block, codes rounded to nearest even and saturated.
 * FLOOR is the OCP scale (2^(floor(log2 amax)) - emax); RCEIL rounds amax
 * up to the format's range (2^ceil(log2(amax / max))). A block with a NaN or
 * Inf gets scale 0xFF (NaN); an all-zero block scale 0x00.
 */
typedef enum a2amm_scale_mode { A2AMM_SCALE_FLOOR = 0, A2AMM_SCALE_RCEIL = 1 } a2amm_scale_mode;

/* x [rows, ldx] fp32 -> codes [rows, ldc] and scales [rows, lds]
 * (ldc >= cols, lds >= ceil(cols/32)). */
A2AMM_API int a2amm_mx_quantize_f32(const float *x, int64_t rows, int64_t cols, int64_t ldx, a2amm_fp8_type type,
                          a2amm_scale_mode mode, uint8_t *codes, int64_t ldc, uint8_t *scales, int64_t lds,
                          a2amm_error *err);
/* The same from bf16 [rows, ldx]. */
A2AMM_API int a2amm_mx_quantize_bf16(const uint16_t *x, int64_t rows, int64_t cols, int64_t ldx, a2amm_fp8_type type,
                           a2amm_scale_mode mode, uint8_t *codes, int64_t ldc, uint8_t *scales, int64_t lds,
                           a2amm_error *err);
/* codes/scales back to fp32 [rows, ldy] (exact: every MXFP8 value is a float,
 * or +-Inf past float's range; NaN where the scale is 0xFF). */
A2AMM_API int a2amm_mx_dequantize_f32(const uint8_t *codes, int64_t ldc, const uint8_t *scales, int64_t lds, int64_t rows,
                            int64_t cols, a2amm_fp8_type type, float *y, int64_t ldy, a2amm_error *err);
/*
 * The exp and SiLU of the MoE op's activation (docs/op-contract.md): e^x
 * within 2 ulp of the C library's expf, and silu(g) = g / (1 + e^-g) in
 * fp32 as written; plain fp32 arithmetic in a fixed order, so the same bits
 * on every CPU and kernel level (what a caller's own experts need to match
 * the op's). Local, thread-safe.
 */
A2AMM_API float a2amm_expf(float x);
A2AMM_API float a2amm_silu(float g);
/* a[i] = bf16(silu(g[i]) * u[i]) for i < n: the MoE op's activation of an
 * expert's gate and up sums (one fp32 product, one rounding to bf16, round
 * to nearest even; a NaN as the quiet NaN 0x7FC0). Local, thread-safe. */
A2AMM_API void a2amm_swiglu(const float *g, const float *u, int64_t n, uint16_t *a);

/* ---- This CPU and the kernels ---------------------------------------------- */
/*
 * What the library finds on this CPU at run time, less what the environment
 * variable A2AMM_CPU_HIDE hides (a comma-separated list of amx, avx512bf16,
 * avx512, avx2: each hides its feature and every one above it, as on a CPU
 * that lacks them). Local, thread-safe; the strings are static.
 */
/* The CPU's model name ("AMD EPYC 9B14"), or "unknown"; the cores this
 * process may run on. */
A2AMM_API const char *a2amm_cpu_model(void);
A2AMM_API int a2amm_cpu_cores(void);
/* A2AMM_OK when A2AMM_CPU_HIDE is unset, empty, "none" or a list of known
 * names; A2AMM_E_INVAL naming the bad entry otherwise (nothing is hidden then). */
A2AMM_API int a2amm_cpu_env_check(a2amm_error *err);
/* The features the kernels use, index 0 .. a2amm_cpu_feature_count() - 1:
 * the name as /proc/cpuinfo spells it ("avx512_bf16"), whether the CPU has
 * it, whether A2AMM_CPU_HIDE hides it, and whether the library uses it (had
 * and not hidden). Each pointer may be NULL. A2AMM_E_INVAL past the end. */
A2AMM_API int a2amm_cpu_feature_count(void);
A2AMM_API int a2amm_cpu_feature(int index, const char **name, int *detected, int *hidden, int *used,
                                a2amm_error *err);
/* The kernel levels, index 0 .. a2amm_kernel_level_count() - 1, from the
 * plainest ("ref", "avx2", "avx512", "amx"): *why_not is NULL where the
 * level runs here, else why not ("this CPU lacks avx512_bf16"). */
A2AMM_API int a2amm_kernel_level_count(void);
A2AMM_API int a2amm_kernel_level(int index, const char **name, const char **why_not, a2amm_error *err);
/* The kernel level ops and matmuls made now would run ("amx", "avx512",
 * "avx2" or "ref"): the best this CPU runs, or what A2AMM_ISA forces, less
 * what A2AMM_CPU_HIDE hides. A2AMM_E_INVAL, saying why, when A2AMM_ISA asks
 * for a level this CPU or build cannot run. */
A2AMM_API int a2amm_kernel(const char **name, a2amm_error *err);

/* ---- The single-rank matmul ------------------------------------------------ */
/*
 * out [m, n] bf16 = A [m, k] x B [k, n] on MXFP8 data, one rank, with the
 * weights prepared once: the matmul the operator is made of. B is stored
 * transposed, b [n, k] with scales sb [n, ldsb]; A is a [m, lda] with scales
 * sa [m, ldsa]; k a multiple of 32. Sums in fp32 in a fixed order, one bf16
 * rounding: the same bits for any thread count.
 */
typedef struct a2amm_weights a2amm_weights;

/* Prepares B for the best kernel this CPU runs (A2AMM_ISA, A2AMM_CPU_HIDE
 * apply), over `threads` threads (0: every core). The arrays may be freed
 * afterwards. Weights can also serve ops: a2amm_op_use_weights. */
A2AMM_API int a2amm_weights_create(const uint8_t *b, const uint8_t *sb, int64_t n, int64_t k, int64_t ldsb,
                         a2amm_fp8_type b_type, int threads, a2amm_weights **w, a2amm_error *err);
A2AMM_API void a2amm_weights_destroy(a2amm_weights *w);
/* out [m, ldo] = A x B; threads 0: every core. Thread-safe on one weights. */
A2AMM_API int a2amm_matmul(const a2amm_weights *w, const uint8_t *a, int64_t lda, const uint8_t *sa, int64_t ldsa, int64_t m,
                 a2amm_fp8_type a_type, uint16_t *out, int64_t ldo, int threads, a2amm_error *err);
/* c [m, ldc] fp32 = A x B: the sums a2amm_matmul rounds to bf16, unrounded
 * (the MoE op's gate and up sums g and u of a token's row are these). */
A2AMM_API int a2amm_matmul_f32(const a2amm_weights *w, const uint8_t *a, int64_t lda, const uint8_t *sa, int64_t ldsa,
                               int64_t m, a2amm_fp8_type a_type, float *c, int64_t ldc, int threads, a2amm_error *err);

/*
 * The MoE op's down projection as a matmul of its own: B [n, k] in MXFP8
 * (stored transposed as for a2amm_weights: b [n, k], scales sb [n, ldsb]; n
 * and k multiples of 32) prepared for an A of bf16 values. y [m, ldy] fp32 =
 * a [m, lda] (bf16 bits) x B by the op's rule for y_e = a x W2_e (each
 * output summed over k in fp32, docs/op-contract.md), on the kernel level
 * a2amm_weights_create would pick: with W2_e and the a of a2amm_swiglu,
 * the op's bits. Local; a2amm_matmul_bf16a (rows shared out over `threads`,
 * 0: every core; the same bits on any count) is thread-safe on one weights.
 */
typedef struct a2amm_bf16a_weights a2amm_bf16a_weights;
A2AMM_API int a2amm_bf16a_weights_create(const uint8_t *b, const uint8_t *sb, int64_t n, int64_t k, int64_t ldsb,
                                         a2amm_fp8_type b_type, a2amm_bf16a_weights **w, a2amm_error *err);
A2AMM_API void a2amm_bf16a_weights_destroy(a2amm_bf16a_weights *w);
A2AMM_API int a2amm_matmul_bf16a(const a2amm_bf16a_weights *w, const uint16_t *a, int64_t lda, int64_t m, float *y,
                                 int64_t ldy, int threads, a2amm_error *err);

/* ---- Communicators ------------------------------------------------------ */
/*
 * A communicator: R ranks, each in its own process, that can make ops
 * together. Collective calls (marked so below) must be made by every rank of
 * the communicator, in the same order (see the top of this header).
 *
 * a2amm_launch is the embedded launcher: it forks `nranks` processes over
 * a2amm's shared-memory transport (nothing to install or start, nothing left
 * in /dev/shm) and calls fn(comm, arg) in each with that rank's
 * communicator; it returns once every rank has ended: A2AMM_OK when every fn
 * returned A2AMM_OK, else the first failure's status with its message (the
 * rank, and what it was doing). A rank that fails, returns an error or dies
 * fails the communicator: every other rank's collective call returns
 * A2AMM_E_PEER within seconds, and a rank that still does not end is killed
 * after a grace period. A rank whose function returns A2AMM_OK while others
 * still wait for it in a collective call fails the launch too: their calls
 * return A2AMM_E_PEER at once, naming it ("rank 1 ended (its function
 * returned 0) before making the collective call rank 0 waits in ..."); a
 * rank that returns after its last collective call is fine. A rank whose
 * function returns an error the library reported on its thread (a local
 * call's refusal, say) is named with that error's message ("rank 1:
 * returned -1 (invalid argument); its last error: ..."). Call it from a
 * thread that outlives the call (the ranks die with it).
 */
typedef struct a2amm_comm a2amm_comm;
typedef int (*a2amm_rank_fn)(a2amm_comm *comm, void *arg);

/* How one rank of a launch ended (a2amm_launch_options.reports). */
typedef struct a2amm_rank_report {
    int started;            /* 0: never forked (the launch stopped first) */
    int status;             /* what its function returned; A2AMM_E_PEER when it
                               stopped for another's failure, or died */
    int exit_code;          /* its process's exit code, -1 when killed by a signal */
    int signal;             /* the signal that killed it, or 0 */
    int failed_first;       /* its failure is the one that ended the launch */
    int killed_by_launcher; /* it outlived the others' failure (or a stall) and was killed */
    char doing[160];        /* what it said it was doing last (a2amm_comm_say, the op's own) */
} a2amm_rank_report;

typedef struct a2amm_launch_options {
    size_t size;       /* sizeof(a2amm_launch_options) as the program was built:
                          set by A2AMM_LAUNCH_OPTIONS_INIT / a2amm_launch_options_init */
    size_t heap_bytes; /* symmetric memory per rank for the ops made on it
                          (0: 1 GiB; reserved, not touched, until used; an op
                          needs a2amm_op_heap_bytes, a MoE op
                          a2amm_moe_heap_bytes) */
    double timeout_s;  /* the longest the whole launch may take (0: no limit;
                          negative or NaN: A2AMM_E_INVAL) */
    double stall_s;    /* a rank that shows no sign of life for this long
                          (a2amm_comm_say, any call of an op, any wait) fails
                          the launch, named (0: no such watch; negative or
                          NaN: A2AMM_E_INVAL) */
    const volatile sig_atomic_t *stop; /* NULL, or a flag the caller's signal
                          handler sets: non-zero stops every rank, and the
                          launch returns A2AMM_E_INTERRUPTED */
    a2amm_rank_report *reports; /* NULL, or [nranks]: how each rank ended */
} a2amm_launch_options;

/* What the initializers below do: every byte of a sized struct 0, then its
 * first field, its size, set. */
static inline void a2amm_sized_init(void *object, size_t size)
{
    unsigned char *bytes = (unsigned char *)object;
    for (size_t i = 0; i < size; i++) bytes[i] = 0;
    *(size_t *)object = size;
}

/* The options' initializer: size set, every other field 0 (the defaults). */
#ifdef __cplusplus
#define A2AMM_LAUNCH_OPTIONS_INIT {sizeof(a2amm_launch_options)}
#else
#define A2AMM_LAUNCH_OPTIONS_INIT {.size = sizeof(a2amm_launch_options)}
#endif
static inline void a2amm_launch_options_init(a2amm_launch_options *options)
{
    a2amm_sized_init(options, sizeof *options);
}

A2AMM_API int a2amm_launch(int nranks, a2amm_rank_fn fn, void *arg, const a2amm_launch_options *options, a2amm_error *err);
/*
 * A communicator from processes another engine started on this machine (an
 * MPI job, a framework's workers), through a bootstrap the caller supplies:
 * its rank and size, an allgather (every rank's `bytes` from `mine` into
 * `all` [size][bytes], in rank order) and a barrier, each returning 0 on
 * success. Collective. Every rank passes the same heap_bytes (0: 1 GiB),
 * and each rank is claimed by one process: two processes that claim one
 * rank are refused here (A2AMM_E_INVAL on every process, naming the rank
 * and both pids). The ranks share memory as under a2amm_launch (nothing is
 * left in /dev/shm); a rank whose process dies before a2amm_comm_destroy
 * fails the communicator, naming it: every other rank's collective call
 * returns A2AMM_E_PEER within a fraction of a second; one that calls
 * a2amm_comm_destroy while the others wait in a collective call fails
 * their calls at once, as a returned rank does under a2amm_launch. The
 * bootstrap is used only inside this call. Ranks on other machines:
 * liba2amm_mpi.
 */
typedef struct a2amm_bootstrap {
    int rank, size;
    void *arg; /* passed to the two calls */
    int (*allgather)(void *arg, const void *mine, void *all, size_t bytes);
    int (*barrier)(void *arg);
} a2amm_bootstrap;

A2AMM_API int a2amm_comm_create(const a2amm_bootstrap *bootstrap, size_t heap_bytes, a2amm_comm **comm,
                                a2amm_error *err);
/* Local. Ends this rank's part of a communicator made by a2amm_comm_create
 * (or a2amm_mpi_comm_create), once it is done with every op made on it
 * (destroy them first). NULL is fine. */
A2AMM_API void a2amm_comm_destroy(a2amm_comm *comm);

/* Local. Says what this rank is doing now ("loading the weights"): it appears in
 * failure messages and reports, and counts as a sign of life. */
A2AMM_API void a2amm_comm_say(a2amm_comm *comm, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* What this rank said it was doing last (a2amm_comm_say, or the op's own
 * "tile 3/8: waiting for rows from rank 2 ..."): for a caller's report. */
A2AMM_API const char *a2amm_comm_doing(const a2amm_comm *comm);
/* This rank's number (0..size-1) and the number of ranks. Local, thread-safe. */
A2AMM_API int a2amm_comm_rank(const a2amm_comm *comm);
A2AMM_API int a2amm_comm_size(const a2amm_comm *comm);
/* Local. A2AMM_OK while the communicator has not failed; once it has, the
 * first failure's status with its message in *err ("rank 2: ..."): what a
 * caller prints before it gives up (over MPI, before MPI_Abort). */
A2AMM_API int a2amm_comm_status(a2amm_comm *comm, a2amm_error *err);
/* Collective: every rank waits for the others (at most timeout_s seconds,
 * positive; each rank's own). */
A2AMM_API int a2amm_comm_barrier(a2amm_comm *comm, double timeout_s, a2amm_error *err);
/*
 * Collective: the plain AllToAll of `block_bytes` per pair: block j of this
 * rank's `send` [size][block_bytes] lands as block r of rank j's `recv`,
 * where r is this rank. Every rank passes the same block_bytes (shared: a
 * difference is an error on every rank naming both sizes, before a byte
 * moves). Staged through symmetric memory on shm: the first call (and any
 * later call with larger blocks) takes size * block_bytes of it, kept for
 * the calls after (count it in heap_bytes of the launch); send and recv may
 * not overlap. Every wait ends at timeout_s (each rank's own).
 */
A2AMM_API int a2amm_comm_alltoall(a2amm_comm *comm, const void *send, void *recv, size_t block_bytes, double timeout_s,
                                  a2amm_error *err);
/*
 * Collective: the AllToAll of uneven blocks. This rank sends send_bytes[j]
 * bytes at send + send_offsets[j] to rank j (its own block too), and takes
 * rank i's block for it at recv + recv_offsets[i], where it has room for
 * recv_room[i] bytes; recv_bytes[i] says how many came (0 included). A rank
 * need not know beforehand what it receives: the sizes go first, every
 * rank's to every rank (2 * size numbers a rank), so that a block over its
 * room fails the call on every rank with A2AMM_E_SIZE, naming both ranks
 * and both sizes, before a byte is moved (each rank finds it alone: the
 * communicator stays usable). send may be NULL where every send_bytes is
 * 0; recv may be NULL, and then has room for nothing whatever recv_room
 * says: a call that sends it no byte works, one that sends it a block
 * fails on every rank as a block over its room does. Blocks may lie
 * anywhere in send and recv (recv's must not overlap). Staged through symmetric memory on
 * shm, as a2amm_comm_alltoall (size slots as large as the largest block of
 * the call, kept for the calls after); over MPI, one message per pair.
 * Every wait ends at timeout_s (each rank's own).
 */
A2AMM_API int a2amm_comm_alltoallv(a2amm_comm *comm, const void *send, const size_t *send_bytes,
                                   const size_t *send_offsets, void *recv, const size_t *recv_room,
                                   const size_t *recv_offsets, size_t *recv_bytes, double timeout_s,
                                   a2amm_error *err);
/* Local. Fails the communicator on purpose with a message: every other rank's
 * collective call returns A2AMM_E_PEER. Returns code (a negative status). */
A2AMM_API int a2amm_comm_fail(a2amm_comm *comm, int code, const char *message);

/* ---- The operator -------------------------------------------------------- */
/*
 * Two kinds of op, each an AllToAll fused with an MXFP8 matmul (fp8 values
 * with E8M0 scales per 32 values along K; B_r [K, N] stored transposed
 * [N, K] with scales per 32 values of K; bf16 results). The contract:
 * docs/op-contract.md.
 *
 * alltoall-matmul (the seed's; sequence parallelism's exchange after
 * attention, fused with the output projection): out_r = (AllToAll of every
 * rank's A) x B_r. Rank r holds A_r with R blocks of m rows (block j goes to
 * rank j) of K/R values each; it receives block r of every rank's A_j and
 * multiplies [m, K] (the blocks side by side along K, rank j's as K range
 * j*K/R..) by B_r, writing bf16 [m, N]. K/R a multiple of 32.
 *
 * matmul-alltoall (the reverse; the exchange after the QKV projection,
 * expert parallelism's combine): Y_r = X_r x B_r, then the AllToAll of
 * Y_r's column blocks. Rank r holds X_r [m, K]; column block j of Y_r
 * (columns j*N/R .. (j+1)*N/R) goes to rank j, and rank r writes bf16
 * [R*m, N/R]: rows i*m .. (i+1)*m are rank i's block. Each value is one
 * dot product over K in fp32 in a fixed order and one bf16 rounding: the
 * same bits as a2amm_matmul of X_r by B_r, sliced. K a multiple of 32, N
 * divisible by R. A rank computes the block for one rank while the one
 * before travels.
 *
 * An op is made once per communicator with the largest m it will see; each
 * call may use any m from 1 to it, with no rebuild.
 */
typedef struct a2amm_op a2amm_op;

typedef enum a2amm_op_kind {
    A2AMM_OP_ALLTOALL_MATMUL = 0, /* the AllToAll of A, then the matmul (the default) */
    A2AMM_OP_MATMUL_ALLTOALL = 1  /* the matmul, then the AllToAll of its column blocks */
} a2amm_op_kind;

typedef enum a2amm_path {
    A2AMM_PATH_DIRECT = 0, /* read rows straight from the owner's memory */
    A2AMM_PATH_PUT = 1     /* the owner puts rows into a ring of slots and signals */
} a2amm_path;

typedef enum a2amm_schedule {
    A2AMM_SCHEDULE_FUSED = 0,   /* tile by tile: later tiles travel while earlier ones multiply (MoE: by size,
                                   below) */
    A2AMM_SCHEDULE_UNFUSED = 1, /* the whole AllToAll, a barrier, then the matmul (for comparison) */
    A2AMM_SCHEDULE_OVERLAP = 2  /* MoE only: two chunks wherever max_tokens is over 64 (below) */
} a2amm_schedule;

/* Every field but threads is shared: every rank passes the same. Made
 * with A2AMM_OP_CONFIG_INIT or a2amm_op_config_init (a config whose size
 * is 0 is refused, saying so), then the fields set. */
typedef struct a2amm_op_config {
    size_t size;            /* sizeof(a2amm_op_config) as the program was built: set by the initializer */
    int64_t max_m;          /* the largest m of any call (rows per destination) */
    int64_t k, n;           /* K and N (alltoall-matmul: K divisible by R, K/R a multiple
                               of 32; matmul-alltoall: K a multiple of 32, N divisible by R) */
    a2amm_fp8_type a_type, b_type;
    int64_t tile_m;         /* rows per pipeline tile (0: 512) */
    int depth;              /* ring slots per source on the put path (0: 4); matmul-alltoall
                               has a place for every tile of a call and no ring */
    int threads;            /* compute threads of this rank (0: cores / R, at least 1);
                               this rank's own: ranks may differ */
    a2amm_path path;
    double timeout_s;       /* deadline of every wait between ranks (0: 60; positive;
                               NaN is refused) */
    a2amm_schedule schedule; /* fused (0, the default) or unfused */
    a2amm_op_kind kind;     /* alltoall-matmul (0, the default) or matmul-alltoall */
} a2amm_op_config;

/* The config's initializer: size set, every other field 0 (the defaults
 * said above; max_m, k and n are the caller's to set). */
#ifdef __cplusplus
#define A2AMM_OP_CONFIG_INIT {sizeof(a2amm_op_config)}
#else
#define A2AMM_OP_CONFIG_INIT {.size = sizeof(a2amm_op_config)}
#endif
static inline void a2amm_op_config_init(a2amm_op_config *config) { a2amm_sized_init(config, sizeof *config); }

/* *bytes = the symmetric memory one rank needs for an op of this config on
 * nranks ranks (count it in a2amm_launch_options.heap_bytes or
 * a2amm_comm_create's; a MoE op's: a2amm_moe_heap_bytes). A config that
 * breaks a rule is A2AMM_E_INVAL, saying which. Thread-safe. */
A2AMM_API int a2amm_op_heap_bytes(const a2amm_op_config *config, int nranks, size_t *bytes, a2amm_error *err);

/*
 * The op kinds and their geometry, from the library's own table (so a
 * program, or a binding, never re-derives them). a2amm_op_kind_name: the
 * kind's name ("alltoall-matmul", "matmul-alltoall"), NULL for a value past
 * the last kind: list the kinds by counting up from 0 until NULL.
 */
A2AMM_API const char *a2amm_op_kind_name(a2amm_op_kind kind);

/* The arrays of a call with m rows on an op of this config on nranks ranks. */
typedef struct a2amm_op_geometry {
    size_t size;         /* sizeof(a2amm_op_geometry) as the program was built: set by the initializer */
    int64_t a_blocks;    /* the input's blocks of m rows: nranks (alltoall-matmul: one per destination) or 1 */
    int64_t a_rows;      /* its rows: a_blocks * m */
    int64_t lda, ldsa;   /* its bytes a row, and its scale bytes a row */
    int64_t out_rows;    /* the output's rows: m, or nranks * m (matmul-alltoall: one block per source) */
    int64_t out_cols;    /* its columns: n, or n / nranks (matmul-alltoall) */
    int64_t b_rows, b_cols, ldsb; /* the weights: [n, k] and the scale bytes a row of them (2*ceil(k/64)) */
} a2amm_op_geometry;

#ifdef __cplusplus
#define A2AMM_OP_GEOMETRY_INIT {sizeof(a2amm_op_geometry)}
#else
#define A2AMM_OP_GEOMETRY_INIT {.size = sizeof(a2amm_op_geometry)}
#endif

/* *geometry (its size set by A2AMM_OP_GEOMETRY_INIT; the fields its layout has are filled) for calls of m
 * rows, 1 <= m <= max_m. A config that breaks a rule, or an m out of range, is A2AMM_E_INVAL saying which.
 * Thread-safe. */
A2AMM_API int a2amm_op_geometry_of(const a2amm_op_config *config, int nranks, int64_t m,
                                   a2amm_op_geometry *geometry, a2amm_error *err);

/*
 * Collective. Makes the op: checks the config (the shared fields the same
 * on every rank: a difference is an error on every rank, naming the field
 * and both values), takes its symmetric memory, starts its threads. Ops
 * are numbered on their communicator in the order they are made (1, 2,
 * ...; the same number on every rank), and each call of an op carries its
 * number: two ops called in a different order on two ranks is an error on
 * both, naming both ops. The op's memory is placed where it is free on
 * every rank, so ranks may destroy their ops in different orders and
 * between different calls. The kernel level is the best this CPU runs
 * (A2AMM_ISA and A2AMM_CPU_HIDE apply).
 */
A2AMM_API int a2amm_op_create(a2amm_comm *comm, const a2amm_op_config *config, a2amm_op **op, a2amm_error *err);

/*
 * Local. Sets this rank's weights: b [n, k] fp8 (B transposed), sb its
 * scales [n, ldsb] (ldsb >= k/32). Prepared once (packed for the kernel;
 * where every matmul of the op has few rows, min(max_m, tile_m) at most
 * 32 on the amx kernel level, 6 on avx512 and avx2, kept in fp8 only and read so:
 * no more memory than b and sb themselves); replace them by calling again (between calls of a2amm_op_run: while
 * another thread is in a call of the op it is refused). The arrays may be
 * freed afterwards.
 */
A2AMM_API int a2amm_op_set_weights(a2amm_op *op, const uint8_t *b, const uint8_t *sb, int64_t ldsb, a2amm_error *err);

/*
 * Local. Uses weights prepared by a2amm_weights_create (n, k and b_type as
 * the op's) instead of a copy of the op's own: several ops, and
 * a2amm_matmul, can share one preparation. The op borrows them: keep them
 * alive, unchanged, until the op is destroyed or given other weights.
 * Refused while another thread is in a call of the op.
 */
A2AMM_API int a2amm_op_use_weights(a2amm_op *op, const a2amm_weights *w, a2amm_error *err);

/*
 * Local. Where to write the input for zero-copy calls. alltoall-matmul: the
 * rows of A_r for destination j start at a + j * block_rows * lda (lda =
 * K/R bytes a row), their scales at sa + j * block_rows * ldsa (ldsa =
 * 2*ceil(K/R/64)); a call with m uses the first m rows of each block.
 * matmul-alltoall: X_r's rows at a (lda = K), their scales at sa (ldsa =
 * 2*ceil(K/64)), one block of block_rows rows. Write them only between
 * calls: a call reads them until it returns on every rank.
 */
A2AMM_API int a2amm_op_input(a2amm_op *op, uint8_t **a, uint8_t **sa, int64_t *lda, int64_t *ldsa, int64_t *block_rows,
                             a2amm_error *err);

/*
 * Collective. One call of the op for 1 <= m <= max_m (m is shared: a
 * difference fails every rank; the op too: each rank must call the same
 * op). a and sa are this rank's input, copied in: A_r [R*m, K/R] and its
 * scales [R*m, ldsa] (alltoall-matmul), or X_r [m, K] and its scales
 * [m, ldsa] (matmul-alltoall); or both NULL for the input already written
 * at a2amm_op_input. out receives bf16 [m, n] (alltoall-matmul) or
 * [R*m, n/R] (matmul-alltoall). Needs weights set. A wrong
 * argument (m out of range, out NULL, no weights) returns A2AMM_E_INVAL on
 * this rank, on every transport, and fails the communicator: the others'
 * calls return A2AMM_E_PEER. Returns A2AMM_E_PEER when another rank failed,
 * and every wait ends at the config's timeout_s. A second thread's call
 * on an op already in a call is refused with A2AMM_E_INVAL ("op 1 is
 * busy"); the call running goes on.
 */
A2AMM_API int a2amm_op_run(a2amm_op *op, int64_t m, const uint8_t *a, const uint8_t *sa, uint16_t *out, a2amm_error *err);

/*
 * Watching the pipeline. An observer, when set, is called on this rank's
 * thread that runs the call, at each event below, with the event's details
 * and the time it happened; it must be quick. Spans come as a _BEGIN and an
 * _END event, properly nested on the rank's thread: CALL holds BARRIERs and
 * TILEs (fused) or an EXCHANGE and TILEs (unfused); a TILE holds, for each
 * source in turn, a WAIT for its rows (put path, other ranks) and a MATMUL of
 * them; SENDs of later tiles and SIGNALs follow a tile's matmuls. For
 * matmul-alltoall a TILE holds, for each destination in turn (its own block
 * last), a MATMUL of the block (peer: the destination, k: K) and, for the
 * others, a SEND of it (and its SIGNAL); after the last TILE come the WAITs
 * for every other rank's blocks (peer: the source), each with the SIGNAL of
 * its release on the put and direct paths. Unfused, the TILEs (their
 * MATMULs) come first, then the EXCHANGE, and no WAIT. Inside each
 * MATMUL span, once its work is done, come WORK events: one per piece of it a
 * compute thread ran, with that thread's number and times. Returning
 * non-zero (a negative A2AMM_E_* status) at A2AMM_EVENT_TILE stops the call
 * there: it fails with that status on this rank (and A2AMM_E_PEER on the
 * others), as a failure of this rank would; the answer to any other event is
 * ignored. Without an observer the call costs nothing more.
 */
typedef enum a2amm_event_kind {
    A2AMM_EVENT_TILE = 0,       /* a tile of the call begins: tile, tiles, rows */
    A2AMM_EVENT_TILE_END,       /* its rows of the output are written */
    A2AMM_EVENT_WAIT_BEGIN,     /* waiting for the tile's rows from `peer`: slot, signal (the value awaited) */
    A2AMM_EVENT_WAIT_END,       /* they are here: bytes (codes and scales) */
    A2AMM_EVENT_MATMUL_BEGIN,   /* the tile's rows from `peer` multiplied: rows, k (columns) */
    A2AMM_EVENT_MATMUL_END,
    A2AMM_EVENT_SEND_BEGIN,     /* tile's rows to `peer` (put path), slot, bytes; waits for the slot first */
    A2AMM_EVENT_SEND_END,
    A2AMM_EVENT_SIGNAL,         /* a signal set at `peer`: slot (-1: a slot's release), signal (the value) */
    A2AMM_EVENT_EXCHANGE_BEGIN, /* unfused: the whole AllToAll, bytes received */
    A2AMM_EVENT_EXCHANGE_END,
    A2AMM_EVENT_BARRIER_BEGIN,  /* all ranks meet (the call's start and end) */
    A2AMM_EVENT_BARRIER_END,
    A2AMM_EVENT_CALL_BEGIN,     /* a2amm_op_run: rows (m), tiles */
    A2AMM_EVENT_CALL_END,
    A2AMM_EVENT_WORK,           /* a compute thread's share of the matmul just done, reported after it
                                   (on the rank's thread): thread, time_ns (its start), duration_ns, rows */
    A2AMM_EVENT_KINDS
} a2amm_event_kind;

typedef struct a2amm_event {
    a2amm_event_kind kind;
    int rank;          /* this rank */
    uint64_t call;     /* the call's number on this op, from 1 */
    int64_t tile;      /* the tile's number in the call, from 0 (-1: not a tile's event) */
    int64_t tiles;     /* tiles in the call */
    int64_t rows;      /* rows of the tile (CALL: m) */
    int peer;          /* the other rank (WAIT, MATMUL: the source; SEND, SIGNAL: the destination); else -1 */
    int slot;          /* the ring slot, or -1 */
    int64_t k;         /* MATMUL: the columns of A multiplied (K / R) */
    int64_t bytes;     /* WAIT_END, SEND: bytes moved; EXCHANGE: bytes received */
    uint64_t signal;   /* WAIT_BEGIN: the value awaited; SIGNAL: the value set */
    int64_t time_ns;   /* CLOCK_MONOTONIC, ns: one clock for every rank of a machine */
    int thread;        /* WORK: 0 the rank's own thread (it computes too), 1.. its compute threads */
    int64_t duration_ns; /* WORK: how long that thread computed */
} a2amm_event;

typedef int (*a2amm_observer_fn)(void *arg, const a2amm_event *event);

/* Local. Sets (or with NULL removes) this rank's observer of op (refused
 * with A2AMM_E_INVAL while another thread is in a call of the op). */
A2AMM_API int a2amm_op_set_observer(a2amm_op *op, a2amm_observer_fn fn, void *arg, a2amm_error *err);

/* Local. Frees the op; its handle is no longer valid (a call on it is
 * refused as not a live op). NULL is fine. Ranks may destroy their ops in
 * any order, and at any point between their collective calls: the other
 * ranks' ops and the ops made later are not affected (an op made while
 * another rank still holds memory this rank gave back is placed above it:
 * leave room for that in heap_bytes). Not while another thread is in a
 * call of this op. */
A2AMM_API void a2amm_op_destroy(a2amm_op *op);

/* ---- Expert parallelism: the MoE op (docs/op-contract.md, "The MoE op") --- */
/*
 * Tokens go to the ranks of their top-k experts, each rank runs its experts
 * (SwiGLU: W1 and W3 from x, silu, W2) on the rows that arrive, and the
 * weighted results come back, summed, to each token's rank. A separate
 * object from a2amm_op: its call takes a different input (this rank's own
 * token count, which differs between ranks and calls; expert ids and
 * weights per token), holds a set of weights per local expert, and its rows
 * travel in uneven counts. E experts, E divisible by R; rank r owns experts
 * r*E/R .. (r+1)*E/R - 1.
 *
 * Two schedules (config.schedule). Unfused: the whole dispatch (each token
 * once to each rank that owns one of its experts), the experts, then the
 * whole combine. Fused (the default): each rank's tokens in chunks of at
 * least 64 (up to 4 chunks, as many as max_tokens allows: 1 where it is 64
 * or less, so that a decode call reads each hit expert's weights once), the
 * dispatch of chunk c + 1 and the combine of chunk c - 1 on a thread of the
 * op's own while the experts run on chunk c: the exchange hides behind the
 * experts of a prefill call. Both give the same bits (a token's rows, its
 * experts' results and its sums do not depend on the chunks). The gate and
 * up projections run on the kernel level's matmul,
 * the down projection (a bf16 operand) on vector levels of its own. The
 * counts travel with the rows (no collective before the exchange) at the
 * default max_recv, where no rank can receive more than its room; with a
 * smaller max_recv every rank's row counts go to every rank first (one
 * allgather of R numbers a rank), so a call whose rows exceed a rank's room
 * fails on every rank before any output is written. The experts are shared
 * out over the rank's threads. On shared memory the exchanges go through
 * the communicator's stage in its symmetric memory, sized for the worst
 * case: about R * max_tokens * 2 * hidden bytes a rank (the partials; the
 * records take R * max_tokens * (hidden + hidden/32 + 8 * topk + 8)),
 * taken at a2amm_moe_create: count a2amm_moe_heap_bytes in heap_bytes.
 * Results do not depend on the thread count or the transport.
 */
typedef struct a2amm_moe a2amm_moe;

/* Every field but threads is shared: every rank passes the same. */
typedef struct a2amm_moe_config {
    size_t size;          /* sizeof(a2amm_moe_config) as the program was built: set by the initializer */
    int experts;          /* E: all of them, over every rank (divisible by R) */
    int topk;             /* k: slots per token, 1 to 32 */
    int64_t hidden;       /* H: a multiple of 32 */
    int64_t inter;        /* I: the experts' inner size, a multiple of 32 */
    int64_t max_tokens;   /* the most tokens of a rank's call */
    int64_t max_recv;     /* the most rows (token, rank) a rank may receive in a call (0: R * max_tokens) */
    a2amm_fp8_type a_type, b_type; /* x's codes; the experts' weights' */
    int threads;          /* this rank's compute threads (0: cores / R, at least 1); its own: ranks may differ */
    double timeout_s;     /* every wait between ranks (0: 60) */
    a2amm_schedule schedule; /* fused (0, the default), unfused or overlap: the same bits. Overlap: each rank's
                                tokens in two chunks (where max_tokens is over 64), one chunk's dispatch and
                                combine while the other's experts run, each chunk reading every hit expert's
                                weights again. Fused: overlap where each local expert gets at least 256 rows a
                                chunk on average (R * max_tokens * topk / experts / 2), so that the second read
                                costs little beside the experts' work; else one pass, as unfused. */
} a2amm_moe_config;

#ifdef __cplusplus
#define A2AMM_MOE_CONFIG_INIT {sizeof(a2amm_moe_config)}
#else
#define A2AMM_MOE_CONFIG_INIT {.size = sizeof(a2amm_moe_config)}
#endif
static inline void a2amm_moe_config_init(a2amm_moe_config *config) { a2amm_sized_init(config, sizeof *config); }

/* *bytes = the symmetric memory one rank needs for a MoE op of this config
 * on nranks ranks over shared memory: the communicator's stage its
 * exchanges go through (the larger of R * max_tokens records and
 * R * max_tokens * 2 * hidden bytes of partials; above). The stage is the
 * communicator's, shared with its other MoE ops and AllToAlls (the largest
 * of them counts, once); count it in a2amm_launch_options.heap_bytes or
 * a2amm_comm_create's beside a2amm_op_heap_bytes of every a2amm_op. Over
 * MPI the exchanges take none. A config that breaks a rule is
 * A2AMM_E_INVAL, saying which, as at a2amm_moe_create. Thread-safe. */
A2AMM_API int a2amm_moe_heap_bytes(const a2amm_moe_config *config, int nranks, size_t *bytes, a2amm_error *err);

/* Collective. Makes the MoE op: checks the config (the shared fields alike
 * on every rank, as a2amm_op_create does; a message shows the values as
 * passed: max_recv 0, not R * max_tokens), and takes the stage its calls
 * need in symmetric memory (a2amm_moe_heap_bytes) on shared memory: where
 * the heap cannot hold it, A2AMM_E_NOMEM on every rank, naming the bytes
 * needed and free and a2amm_moe_heap_bytes (the communicator stays
 * usable). It is numbered among the communicator's ops. */
A2AMM_API int a2amm_moe_create(a2amm_comm *comm, const a2amm_moe_config *config, a2amm_moe **moe, a2amm_error *err);

/*
 * Local. This rank's E/R experts: w13 [E/R, 2I, H] fp8 (per expert, rows
 * 0..I-1 the gate W1, I..2I-1 the up projection W3; row n is output column
 * n), its scales [E/R, 2I, ld13] (ld13 >= H/32: 2*ceil(H/64) in the seed's
 * layout); w2 [E/R, H, I] fp8, its scales [E/R, H, ld2] (ld2 >= I/32).
 * Prepared once (the arrays may go afterwards); call again to replace them.
 */
A2AMM_API int a2amm_moe_set_weights(a2amm_moe *moe, const uint8_t *w13, const uint8_t *s13, int64_t ld13,
                                    const uint8_t *w2, const uint8_t *s2, int64_t ld2, a2amm_error *err);

/*
 * Local. A rank's experts prepared once for several MoE ops (a decode op
 * and a prefill op of one layer, say), as a2amm_moe_set_weights prepares
 * them: local_experts experts of w13 [2 inter, hidden] and w2 [hidden,
 * inter] (the layouts above); max_rows: the most rows an expert gets in a
 * call of the ops that will use them (R * max_tokens of the largest: where
 * the kernel level reads so few rows' weights in fp8, they are kept in fp8
 * only). The arrays may go afterwards.
 */
typedef struct a2amm_moe_weights a2amm_moe_weights;
A2AMM_API int a2amm_moe_weights_create(int local_experts, int64_t hidden, int64_t inter, a2amm_fp8_type b_type,
                                       int64_t max_rows, const uint8_t *w13, const uint8_t *s13, int64_t ld13,
                                       const uint8_t *w2, const uint8_t *s2, int64_t ld2, a2amm_moe_weights **weights,
                                       a2amm_error *err);
/* Local. NULL is fine; not while an op uses them. */
A2AMM_API void a2amm_moe_weights_destroy(a2amm_moe_weights *weights);
/*
 * Local. The op borrows them instead of a copy of its own (refused where
 * the experts' count, hidden, inter or type differ from the op's, or
 * max_rows is below the op's R * max_tokens): keep them alive, unchanged,
 * until the op is destroyed or given other weights.
 */
A2AMM_API int a2amm_moe_use_weights(a2amm_moe *moe, const a2amm_moe_weights *weights, a2amm_error *err);

/*
 * Collective. One call: this rank's `tokens` tokens (0 <= tokens <=
 * max_tokens; each rank its own), x [tokens, H] fp8 with scales
 * [tokens, ldsx] (ldsx >= H/32), topk_idx [tokens, k] (an expert in
 * [0, E), or -1 for an unused slot; an expert at most once a token),
 * topk_w [tokens, k] finite fp32; out [tokens, H] bf16, x's order (a token
 * with no valid slot gets zeros). A bad argument is refused on this rank
 * naming the token and slot (A2AMM_E_INVAL) and fails the communicator
 * (A2AMM_E_PEER on the others); rows over a rank's max_recv fail the call
 * on every rank with A2AMM_E_SIZE, naming the rank and the count, out
 * untouched (each rank finds it alone: the communicator stays usable).
 */
A2AMM_API int a2amm_moe_run(a2amm_moe *moe, int64_t tokens, const uint8_t *x, const uint8_t *sx, int64_t ldsx,
                            const int32_t *topk_idx, const float *topk_w, uint16_t *out, a2amm_error *err);

/*
 * The exchange alone, for callers who run their own experts: a2amm_moe_run
 * is a2amm_moe_dispatch, the experts, a2amm_moe_combine. Collective,
 * dispatch takes a call's arguments as a2amm_moe_run does (no weights
 * needed) and gives a batch: the rows this rank received, grouped by local
 * expert (a2amm_moe_batch_rows: expert le's count, codes [rows, H] and
 * scales [rows, H/32], local, valid until the batch is destroyed). Collective,
 * combine takes y[le], fp32 [rows of expert le, H], the experts' outputs for
 * those rows in that order (NULL where it has none), and writes out as
 * a2amm_moe_run does: each token's w * y summed over its slots per owner,
 * then over owners, with the op's roundings (given the op's own y, its bits).
 * Every rank combines each of its batches, in the order it dispatched them.
 */
typedef struct a2amm_moe_batch a2amm_moe_batch;
A2AMM_API int a2amm_moe_dispatch(a2amm_moe *moe, int64_t tokens, const uint8_t *x, const uint8_t *sx, int64_t ldsx,
                                 const int32_t *topk_idx, const float *topk_w, a2amm_moe_batch **batch,
                                 a2amm_error *err);
A2AMM_API int a2amm_moe_batch_rows(const a2amm_moe_batch *batch, int local_expert, int64_t *rows,
                                   const uint8_t **codes, const uint8_t **scales, a2amm_error *err);
A2AMM_API int a2amm_moe_combine(a2amm_moe *moe, a2amm_moe_batch *batch, const float *const *y, uint16_t *out,
                                a2amm_error *err);
/* Local. Frees a batch (after its combine; NULL is fine). */
A2AMM_API void a2amm_moe_batch_destroy(a2amm_moe_batch *batch);
/*
 * Local. The op's own computation of this rank's local expert le (expert
 * rank*E/R + le, from the weights set) on `rows` rows of x: codes [rows,
 * hidden] and scales (ldsx a row, >= hidden/32): y [rows, hidden] fp32
 * (ldy a row), the bits a2amm_moe_run computes for those rows (g and u in
 * fp32 as the matmul sums them, a = bf16(silu(g) u), y = a x W2). With
 * a2amm_moe_dispatch and a2amm_moe_combine it gives a2amm_moe_run's bits;
 * a caller may put its own work between. On the calling thread.
 */
A2AMM_API int a2amm_moe_expert(a2amm_moe *moe, int local_expert, int64_t rows, const uint8_t *codes,
                               const uint8_t *scales, int64_t ldsx, float *y, int64_t ldy, a2amm_error *err);

/*
 * Local. Sets (or with NULL removes) this rank's observer of the MoE op's
 * a2amm_moe_run calls: the events of a call are kept as they happen and
 * reported on the calling thread at the call's end, in time order (the
 * fused schedule's exchanges run on a thread of their own); the observer's
 * answers are ignored. CALL_BEGIN/END (rows: this rank's tokens);
 * EXCHANGE_BEGIN/END for each chunk's dispatch (slot 0) and combine (slot 1)
 * (tile: the chunk, rows: its tokens, bytes at END: received);
 * MATMUL_BEGIN/END around each chunk's experts (rows: expert rows); WORK
 * for each expert with rows (slot: the local expert, rows, thread,
 * time_ns its start, duration_ns). Refused while another thread is in a call.
 */
A2AMM_API int a2amm_moe_set_observer(a2amm_moe *moe, a2amm_observer_fn fn, void *arg, a2amm_error *err);

/* Local. Frees it; NULL is fine. Not while another thread is in a call of it. */
A2AMM_API void a2amm_moe_destroy(a2amm_moe *moe);

#ifdef __cplusplus
}
#endif
#endif
