/* The data folder: --dir and the meta file gen writes in it. */
#include "cli/data_dir.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "io/io.h"

int cli_dir_check(const char *cmd, const char *dir)
{
    if (dir && dir[0]) return 0;
    fprintf(stderr, "a2amm %s: --dir is empty: name a folder (. for this one)\n", cmd);
    return -1;
}

/* Whether the meta file is absent (and not there but unreadable). */
static int meta_absent(const char *dir)
{
    char path[IO_PATH_MAX];
    struct stat st;
    return io_meta_path(path, sizeof path, dir, NULL) == A2AMM_OK && lstat(path, &st) != 0 && errno == ENOENT;
}

/* A type given on the command line against the recorded one; 0 or 2. */
static int hold_type(const char *cmd, const char *path, const char *flag, const char *given, a2amm_fp8_type recorded,
                     a2amm_fp8_type *out)
{
    *out = recorded;
    if (!given) return 0;
    a2amm_fp8_type t;
    if (cli_parse_type(cmd, flag, given, &t)) return 2;
    if (t == recorded) return 0;
    fprintf(stderr, "a2amm %s: %s %s contradicts %s, which says the data is %s: refused (leave %s out to use "
            "what gen recorded)\n", cmd, flag, a2amm_fp8_type_name(t), path, a2amm_fp8_type_name(recorded), flag);
    return 2;
}

int cli_meta_hold(const char *cmd, const char *dir, a2amm_shape *s, const char *at, const char *bt, int need_types)
{
    char path[IO_PATH_MAX];
    a2amm_error err = {0, ""};
    if (io_meta_path(path, sizeof path, dir, &err)) {
        cli_print_error(cmd, &err);
        return 2;
    }
    io_meta meta;
    if (io_meta_read(dir, &meta, &err) != A2AMM_OK) {
        if (!meta_absent(dir)) {
            cli_print_error(cmd, &err);
            return 1;
        }
        if (!need_types) return 0;
        if (!at || !bt) {
            fprintf(stderr, "a2amm %s: %s is missing, so the element types of the data are unknown: make the data "
                    "with a2amm gen (which records them), or name both with --a-type and --b-type\n", cmd, path);
            return 2;
        }
        if (cli_parse_type(cmd, "--a-type", at, &s->a_type) || cli_parse_type(cmd, "--b-type", bt, &s->b_type))
            return 2;
        return 0;
    }
    const a2amm_shape *m = &meta.shape;
    if (m->M != s->M || m->N != s->N || m->R != s->R || (s->K && m->K != s->K)) {
        char given[128], made[128];
        if (s->K)
            snprintf(given, sizeof given, "M=%lld K=%lld N=%lld R=%lld", (long long)s->M, (long long)s->K,
                     (long long)s->N, (long long)s->R);
        else
            snprintf(given, sizeof given, "M=%lld N=%lld R=%lld", (long long)s->M, (long long)s->N, (long long)s->R);
        snprintf(made, sizeof made, "M=%lld K=%lld N=%lld R=%lld", (long long)m->M, (long long)m->K, (long long)m->N,
                 (long long)m->R);
        fprintf(stderr, "a2amm %s: the command line says %s, but %s says the data was made for %s: refused\n", cmd,
                given, path, made);
        return 2;
    }
    int rc = hold_type(cmd, path, "--a-type", at, m->a_type, &s->a_type);
    if (!rc) rc = hold_type(cmd, path, "--b-type", bt, m->b_type, &s->b_type);
    return rc;
}
