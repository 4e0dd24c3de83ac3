/*
 * libFuzzer target: the command line of run and bench op (the shape M K N
 * R and the pipeline options) on any argv, the input split at NUL bytes. It
 * must never crash; an accepted shape passes the contract's shape check and
 * accepted options are within their documented ranges.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/op_args.h"

/* The parsers explain every refusal on stderr (millions of lines here): it
 * points at /dev/null while they run, and back for libFuzzer's reports (a
 * crash inside them still leaves its input under build-fuzz/crashes/). */
static int quiet_fd = -1, saved_fd = -1;

static void quiet(int on)
{
    fflush(stderr);
    if (quiet_fd < 0) quiet_fd = open("/dev/null", O_WRONLY);
    if (on) {
        saved_fd = dup(2);
        dup2(quiet_fd, 2);
    } else {
        dup2(saved_fd, 2);
        close(saved_fd);
    }
}

static int parse_and_check(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    quiet(1);
    int rc = parse_and_check(data, size);
    quiet(0);
    return rc;
}

static int parse_and_check(const uint8_t *data, size_t size)
{
    if (size > 512) return 0;
    char buf[513];
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[64];
    int argc = 0;
    argv[argc++] = "run";
    for (size_t at = 0; at <= size && argc < 63;) {
        argv[argc++] = buf + at;
        at += strlen(buf + at) + 1;
    }
    argv[argc] = NULL;
    run_options o;
    run_options_default(&o);
    char *pos[4];
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        int m = cli_op_option("run", argc, argv, &i, &o);
        if (m < 0) return 0;
        if (m) continue;
        if (npos < 4) pos[npos++] = argv[i];
    }
    if (o.tile_m < 1 || o.depth < 1 || o.depth > 1024 || o.threads < 0 || o.threads > 1024 || o.iters < 1 ||
        !(o.timeout_s >= 0.001 && o.timeout_s <= 1e7))
        abort();
    if (npos != 4) return 0;
    op_shape s = {0, 0, 0, 0, A2AMM_E4M3, A2AMM_E4M3, OP_ALLTOALL_MATMUL};
    op_sizes z;
    if (cli_parse_shape("run", pos, &s, &z)) return 0;
    a2amm_error err;
    if (op_shape_check(&s, &z, &err) != A2AMM_OK) abort();
    if (s.K % s.R || (s.K / s.R) % 32) abort();
    return 0;
}
