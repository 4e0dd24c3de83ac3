/* What the public communicator wraps: the transport's per-rank context. */
#ifndef A2AMM_API_INTERNAL_H
#define A2AMM_API_INTERNAL_H

#include "a2amm.h"
#include "comm/comm.h"

struct a2amm_comm {
    comm_ctx *ctx;
};

#endif
