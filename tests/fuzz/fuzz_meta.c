/*
 * libFuzzer target: the meta file parser (io_meta_parse) on any bytes. It
 * must never crash or read out of bounds; what it accepts must hold every
 * rule (types e4m3/e5m2, dimensions 1..2^62, one of the two ops) and survive a round trip
 * through io_meta_format unchanged; what it refuses must say so with a
 * message naming the file.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    io_meta m, back;
    a2amm_error err = {0, ""};
    int rc = io_meta_parse((const char *)data, size, "fuzz/a2amm-meta.txt", &m, &err);
    if (rc != A2AMM_OK) {
        if (rc != A2AMM_E_FORMAT || strncmp(err.msg, "fuzz/a2amm-meta.txt", 19) != 0) abort();
        return 0;
    }
    const op_shape *s = &m.shape;
    if (s->M < 1 || s->K < 1 || s->N < 1 || s->R < 1) abort();
    if ((s->a_type != A2AMM_E4M3 && s->a_type != A2AMM_E5M2) || (s->b_type != A2AMM_E4M3 && s->b_type != A2AMM_E5M2))
        abort();
    if (s->kind != OP_ALLTOALL_MATMUL && s->kind != OP_MATMUL_ALLTOALL) abort();
    char text[1024];
    size_t n = io_meta_format(&m, text, sizeof text);
    if (io_meta_parse(text, n, "round trip", &back, &err) != A2AMM_OK) abort();
    if (memcmp(&back.shape, &m.shape, sizeof m.shape) || back.seed != m.seed || strcmp(back.dist, m.dist) ||
        strcmp(back.scale_mode, m.scale_mode))
        abort();
    return 0;
}
