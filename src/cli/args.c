/* Command-line parsing and printing helpers shared by the subcommands. */
#include "cli/args.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "cli/runner.h"
#include "util/parse.h"
#include "mx/mx.h"

static const char *option_command = "";

void cli_set_command(const char *name) { option_command = name ? name : ""; }

int cli_option(int argc, char **argv, int *i, const char *name, const char **value)
{
    const char *arg = argv[*i];
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0) return 0;
    if (arg[n] == '=') {
        *value = arg + n + 1;
        return 1;
    }
    if (arg[n] != '\0') return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "a2amm%s%s: option %s needs a value\n", *option_command ? " " : "", option_command, name);
        return -1;
    }
    *value = argv[++*i];
    return 1;
}

int cli_parse_i64(const char *cmd, const char *what, const char *s, int64_t min, int64_t max,
                  int64_t *out)
{
    int64_t v = 0;
    if (parse_i64(s, &v) != PARSE_OK || v < min || v > max) {
        fprintf(stderr, "a2amm %s: %s must be a whole number from %" PRId64 " to %" PRId64
                " in decimal digits, got '%s'\n", cmd, what, min, max, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_u64(const char *cmd, const char *what, const char *s, uint64_t *out)
{
    if (parse_u64(s, out) != PARSE_OK) {
        fprintf(stderr, "a2amm %s: %s must be a whole number from 0 to %" PRIu64 " in decimal digits, got '%s'\n",
                cmd, what, UINT64_MAX, s);
        return -1;
    }
    return 0;
}

int cli_parse_double(const char *cmd, const char *what, const char *s, double min, double max,
                     double *out)
{
    double v = 0;
    if (parse_double(s, &v) != PARSE_OK || !(v >= min && v <= max)) {
        fprintf(stderr, "a2amm %s: %s must be a number from %g to %g in decimal digits (like 2.5 or 1e-3), got '%s'\n",
                cmd, what, min, max, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_type(const char *cmd, const char *what, const char *s, a2amm_fp8_type *out)
{
    if (a2amm_fp8_type_parse(s, out, NULL) == A2AMM_OK) return 0;
    fprintf(stderr, "a2amm %s: %s must be e4m3 or e5m2, got '%s'\n", cmd, what, s);
    return -1;
}

int cli_parse_op(const char *cmd, const char *s, op_kind *out)
{
    if (op_kind_parse(s, out) == A2AMM_OK) return 0;
    /* moe: a valid --op that a later --op overrides (the last one wins; where moe is the last one,
     * cli_moe_wanted has sent the command to the MoE op before its options are parsed) */
    if (!strcmp(s, "moe")) return 0;
    fprintf(stderr, "a2amm %s: --op must be alltoall-matmul (the seed's op, the default), matmul-alltoall or moe, "
            "got '%s'\n", cmd, s);
    return -1;
}

int cli_is_help(const char *arg)
{
    return !strcmp(arg, "-h") || !strcmp(arg, "--help") || !strcmp(arg, "help");
}

void cli_print_error(const char *cmd, const a2amm_error *err)
{
    fprintf(stderr, "a2amm %s: error: %s\n", cmd, err->msg[0] ? err->msg : a2amm_strerror(err->code));
}

void cli_print_corner(const char *title, const uint16_t *m, int64_t rows_total, int64_t cols_total,
                      int rows, int cols)
{
    int r = rows_total < rows ? (int)rows_total : rows;
    int c = cols_total < cols ? (int)cols_total : cols;
    printf("  %s (top-left %dx%d):\n", title, r, c);
    for (int i = 0; i < r; i++) {
        printf("    ");
        for (int j = 0; j < c; j++) printf(" %12.5g", (double)mx_bf16_to_f32(m[(int64_t)i * cols_total + j]));
        printf("\n");
    }
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cli_parse_shape(const char *cmd, char **mknr, op_shape *shape, op_sizes *sizes)
{
    static const char *names[4] = {"M", "K", "N", "R"};
    int64_t v[4];
    for (int i = 0; i < 4; i++)
        if (parse_i64(mknr[i], &v[i]) != PARSE_OK) { /* the ranges are op_shape_check's, below */
            fprintf(stderr, "a2amm %s: %s must be a whole number (at least 1) in decimal digits, got '%s'\n", cmd,
                    names[i], mknr[i]);
            return -1;
        }
    shape->M = v[0], shape->K = v[1], shape->N = v[2], shape->R = v[3];
    if (shape->R > RUN_MAX_R) {
        fprintf(stderr, "a2amm %s: R must be at most %d, the most ranks a run takes (got %lld)\n", cmd, RUN_MAX_R,
                (long long)shape->R);
        return -1;
    }
    a2amm_error err;
    if (op_shape_check(shape, sizes, &err) != A2AMM_OK) {
        cli_print_error(cmd, &err);
        return -1;
    }
    return 0;
}

int cli_mode_word(const char *cmd, const char *word, int *given, int *mode)
{
    const int perf = !strcmp(word, "perf");
    if (*given && perf != (*mode == RUN_PERF)) {
        fprintf(stderr, "a2amm %s: precision and perf both given: a run is one or the other\n", cmd);
        return -1;
    }
    ++*given;
    *mode = perf ? RUN_PERF : RUN_PRECISION;
    return 0;
}

int cli_perf_only_options(const char *cmd, int argc, char **argv, int perf)
{
    static const char *const only[] = {"--iters", "--warmup", "--baseline"};
    for (int i = 1; !perf && i < argc; i++)
        for (size_t k = 0; k < sizeof only / sizeof only[0]; k++) {
            size_t n = strlen(only[k]);
            if (strncmp(argv[i], only[k], n) || (argv[i][n] != '\0' && argv[i][n] != '=')) continue;
            fprintf(stderr, "a2amm %s: %s is for perf mode (precision mode runs once): add perf after M K N R, "
                    "or leave %s out\n", cmd, only[k], only[k]);
            return -1;
        }
    return 0;
}

/*
 * Commands that fork rank processes must fork before any library has
 * threads of its own: OpenBLAS starts its pool when it is loaded, and fork
 * waits for those threads (forever under a memory limit, while they retry a
 * failed allocation). The launcher needs none of them (OpenBLAS is only the
 * perf baseline there, which sets its own count inside each rank), so such
 * a command runs itself again with OPENBLAS_NUM_THREADS=1, once.
 */
void cli_without_blas_threads(char **argv)
{
    const char *n = getenv("OPENBLAS_NUM_THREADS");
    if (n && !strcmp(n, "1")) return;
    if (setenv("OPENBLAS_NUM_THREADS", "1", 1) != 0) return;
    fflush(NULL);
    /* by its own path, so the process keeps its name (a2amm, as ps and pkill know it; by /proc/self/exe
     * the kernel names it "exe"); where that path is gone, by /proc/self/exe */
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len > 0) {
        self[len] = '\0';
        execv(self, argv);
    }
    execv("/proc/self/exe", argv);
    /* no /proc: go on as we are */
}


int cli_gen_option(int argc, char **argv, int *i, int *scale_mode, uint64_t *seed)
{
    const char *v;
    int m;
    if ((m = cli_option(argc, argv, i, "--scale-mode", &v))) {
        mx_scale_mode mode;
        if (m < 0) return -1;
        if (mx_scale_mode_parse(v, &mode)) {
            fprintf(stderr, "a2amm gen: --scale-mode must be floor or rceil, got '%s'\n", v);
            return -1;
        }
        *scale_mode = (int)mode;
        return 1;
    }
    if ((m = cli_option(argc, argv, i, "--seed", &v))) return m < 0 || cli_parse_u64("gen", "--seed", v, seed) ? -1 : 1;
    return 0;
}
