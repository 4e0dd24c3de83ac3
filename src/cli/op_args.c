/* Parsing the pipeline options that run and bench op share. */
#include "cli/op_args.h"

#include <stdio.h>
#include <string.h>

#include "cli/args.h"

void run_options_default(run_options *o)
{
    *o = (run_options){.tile_m = 512, .depth = 4, .threads = 0, .path = A2AMM_PATH_DIRECT, .unfused = 0,
                       .timeout_s = 60, .mode = RUN_PRECISION, .iters = 10, .warmup = 1};
}

const char *run_path_name(a2amm_path p) { return p == A2AMM_PATH_PUT ? "put" : "direct"; }

int cli_op_option(const char *cmd, int argc, char **argv, int *i, run_options *o)
{
    const char *v;
    int m;
    int64_t x;
    if ((m = cli_option(argc, argv, i, "--tile-m", &v)))
        return m < 0 || cli_parse_i64(cmd, "--tile-m", v, 1, INT64_C(1) << 40, &o->tile_m) ? -1 : 1;
    if ((m = cli_option(argc, argv, i, "--depth", &v))) {
        if (m < 0 || cli_parse_i64(cmd, "--depth", v, 1, 1024, &x)) return -1;
        o->depth = (int)x;
        return 1;
    }
    if ((m = cli_option(argc, argv, i, "--threads", &v))) {
        if (m < 0 || cli_parse_i64(cmd, "--threads", v, 1, 1024, &x)) return -1;
        o->threads = (int)x; /* 0 (automatic) is only the default: every command's --threads takes 1 to 1024 */
        return 1;
    }
    if ((m = cli_option(argc, argv, i, "--iters", &v))) {
        if (m < 0 || cli_parse_i64(cmd, "--iters", v, 1, 100000, &x)) return -1;
        o->iters = (int)x;
        return 1;
    }
    if ((m = cli_option(argc, argv, i, "--timeout", &v)))
        return m < 0 || cli_parse_double(cmd, "--timeout", v, 0.001, 1e7, &o->timeout_s) ? -1 : 1;
    if ((m = cli_option(argc, argv, i, "--transport", &v))) {
        if (m < 0) return -1;
        if (!strcmp(v, "shm")) o->transport = RUN_SHM;
        else if (!strcmp(v, "mpi")) o->transport = RUN_MPI;
        else {
            fprintf(stderr, "a2amm %s: --transport must be shm or mpi, got '%s'\n", cmd, v);
            return -1;
        }
        return 1;
    }
    if ((m = cli_option(argc, argv, i, "--trace", &v))) {
        if (m < 0) return -1;
        if (!*v) {
            fprintf(stderr, "a2amm %s: --trace needs a file name (FILE.json)\n", cmd);
            return -1;
        }
        o->trace_path = v;
        return 1;
    }
    if ((m = cli_option(argc, argv, i, "--path", &v))) {
        if (m < 0) return -1;
        if (!strcmp(v, "direct")) o->path = A2AMM_PATH_DIRECT;
        else if (!strcmp(v, "put")) o->path = A2AMM_PATH_PUT;
        else {
            fprintf(stderr, "a2amm %s: --path must be direct or put, got '%s'\n", cmd, v);
            return -1;
        }
        return 1;
    }
    return 0;
}
