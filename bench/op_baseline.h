/*
 * The baseline `bench op` times beside the fused op: the whole AllToAll
 * (MPI_Alltoall over MPI), dequantize to fp32, then oneDNN's matmul with
 * its weights packed once (bf16 where oneDNN has a bf16 matmul for this
 * CPU, else fp32), to bf16: what a user writes today with the strongest
 * peer installable here. Plugs into run_options.gemm.
 */
#ifndef A2AMM_BENCH_OP_BASELINE_H
#define A2AMM_BENCH_OP_BASELINE_H

#include "cli/runner.h"

extern const run_baseline_gemm bench_onednn_baseline;

#endif
