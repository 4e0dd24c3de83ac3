/*
 * The operator over the seed's files, for `a2amm run` and the benchmarks:
 * a user of the public API (include/a2amm.h) like any other. It checks every
 * rank's inputs, launches R ranks with a2amm_launch, and in each makes the
 * op, loads DIR/input/<r>/ into the op's input buffers, prepares the
 * weights, and either runs once and writes DIR/output/<r>/npu_out.bin (all
 * ranks' outputs committed as a set) or times repetitions (perf mode).
 */
#ifndef A2AMM_CLI_RUNNER_H
#define A2AMM_CLI_RUNNER_H

#include <signal.h>
#include <stdint.h>

#include "a2amm.h"
#include "common/shape.h"

/* The most ranks a run takes. */
#define RUN_MAX_R 1024

typedef enum run_mode { RUN_PRECISION = 0, RUN_PERF = 1 } run_mode;
typedef enum run_transport {
    RUN_SHM = 0, /* R rank processes forked here, over shared memory */
    RUN_MPI = 1  /* this process is one rank of an MPI job (mpirun -np R) */
} run_transport;

/*
 * The matmul of the perf baseline (what a user writes today): the received
 * rows dequantized to fp32, times the weights, to bf16. The command's own is
 * OpenBLAS sgemm (run_options.gemm NULL); the benchmarks plug in oneDNN's.
 * Each rank calls create once (untimed), run per repetition (timed), idle
 * after it (untimed: lets the library's workers stop spinning), destroy.
 */
typedef struct run_baseline_gemm {
    /* bt: B transposed [N, K] fp32 (may be freed after); *x: where the
       caller writes A [M, K] fp32 before each run; *what: this rank's
       description of the matmul ("oneDNN 2.6.3 fp32 matmul, packed weights") */
    int (*create)(const float *bt, int64_t M, int64_t N, int64_t K, int threads, void **ctx, float **x,
                  const char **what, a2amm_error *err);
    int (*run)(void *ctx, uint16_t *out, a2amm_error *err); /* out: C [M, N] bf16 */
    void (*idle)(void *ctx);                                /* may be NULL */
    void (*destroy)(void *ctx);
} run_baseline_gemm;

typedef struct run_options {
    int64_t tile_m;   /* rows per tile (default 512) */
    int depth;        /* ring slots per source (default 4) */
    int threads;      /* compute threads per rank (0: cores / R, at least 1) */
    a2amm_path path;
    int unfused;      /* whole AllToAll, barrier, then the matmul */
    double timeout_s; /* deadline of every wait (default 60) */
    run_mode mode;
    int iters;        /* perf repetitions (default 10) */
    int warmup;       /* perf warm-up runs of each variant (default 1) */
    int baseline;     /* perf: also time what a user writes today: the whole
                         AllToAll (MPI_Alltoall over MPI), dequantize to fp32,
                         the baseline's matmul */
    const run_baseline_gemm *gemm; /* the baseline's matmul (NULL: OpenBLAS sgemm) */
    run_transport transport;
    int progress;     /* perf: progress of the repetitions on stderr, a terminal's line or plain lines
                         (progress.h; the caller decides: not --quiet, not --json) */
    const char *trace_path; /* --trace FILE: every rank's spans as Chrome trace JSON, or NULL; held to
                               cli_check_output (not a device, not one of the data's files) */
    const volatile sig_atomic_t *stop; /* when set, non-zero stops the run (the
                         caller's SIGINT/SIGTERM handler): nothing is written,
                         run_files returns A2AMM_E_INTERRUPTED */
} run_options;

/* The defaults above, and a path's name (op_args.c, with the options' parser). */
void run_options_default(run_options *o);
const char *run_path_name(a2amm_path p);

/* The variants perf mode times, in the order of run_perf's arrays. */
enum { RUN_V_CONFIGURED, RUN_V_UNFUSED, RUN_V_MATMUL, RUN_V_ALLTOALL, RUN_V_BASELINE, RUN_VARIANTS };

/* Perf figures: per repetition the slowest rank's time, in seconds. */
typedef struct run_perf {
    int iters;
    double *t[RUN_VARIANTS]; /* [iters] each: the configured op (fused, or unfused if
                                asked); the unfused op; the matmul alone (a2amm_matmul on
                                the rows the AllToAll brings, same weights and threads);
                                the AllToAll alone (a2amm_comm_alltoall of A and its
                                scales); the baseline (NULL unless asked) */
    double prepare_s;        /* the slowest rank's weight preparation (once) */
    double flush_bytes;      /* bytes each rank passed over to flush caches */
    char baseline_what[160]; /* how rank 0 ran the baseline: exchange and matmul */
    struct run_rank_breakdown { /* per rank, a timed call of the configured op on average */
        double call_s, matmul_s, wait_s, send_s, barrier_s;
        double *wait_from_s; /* [R]: waiting for each source's rows */
    } *ranks;                /* [R] */
} run_perf;

typedef struct run_result {
    int rank;                 /* RUN_MPI: this process's rank (only rank 0 reports); else 0 */
    int threads;              /* compute threads per rank used */
    const char *kernel;       /* kernel level used */
    int64_t ntiles;           /* tiles of a call */
    a2amm_rank_report *ranks; /* [R] */
    int nranks;               /* R */
    run_perf perf;            /* filled in perf mode */
} run_result;

/*
 * Runs the operator over the seed layout in `dir`; on failure the message
 * names the rank and what it was doing. The result (free it with
 * run_result_free) is filled as far as the run got.
 */
int run_files(const char *dir, const op_shape *shape, const run_options *opt, run_result *result,
              a2amm_error *err);
void run_result_free(run_result *r);

/* Whether this process runs under an MPI launcher (mpirun sets its environment). */
int run_under_mpirun(void);
/* This process's rank in its MPI job (from mpirun's environment), or -1 outside one. */
int run_mpi_rank(void);
/* RUN_MPI: ends MPI (after the result is printed). */
void run_mpi_finalize(void);

/*
 * RUN_MPI, for any op's runner: MPI_Init (once), a check that the job has R
 * ranks, this rank's communicator (heap_bytes), then fn(comm, arg) in it; a
 * failure of fn ends the whole job naming this rank (it does not return).
 * *comm stays for the caller's last collective steps: destroy it after.
 */
struct a2amm_comm;
/* MPI_Init (once) and the check that the job has R ranks: this rank's number. */
int run_mpi_start(int R, int *rank, a2amm_error *err);
int run_mpi_call(int R, size_t heap_bytes, int (*fn)(a2amm_comm *, void *), void *arg, int *rank, a2amm_comm **comm,
                 a2amm_error *err);
/* Every rank's entries of times[n] (entry i is rank i mod R's) into every rank's copy. */
int run_mpi_share(a2amm_comm *comm, double *times, size_t n, double timeout_s, a2amm_error *err);

#endif
