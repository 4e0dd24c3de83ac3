/* The data folder: --dir and the meta file gen writes in it. */
#include "cli/data_dir.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <fcntl.h>
#include <unistd.h>
#include <signal.h>
#include <time.h>

#include "cli/args.h"
#include "io/io.h"

int cli_dir_check(const char *cmd, const char *dir)
{
    if (dir && dir[0]) return 0;
    fprintf(stderr, "a2amm %s: --dir is empty: name a folder (. for this one)\n", cmd);
    return -1;
}

int cli_dir_existing(const char *cmd, const char *dir)
{
    if (cli_dir_check(cmd, dir)) return -1;
    struct stat st;
    if (stat(dir, &st) != 0) {
        int e = errno;
        if (e == ENOENT) fprintf(stderr, "a2amm %s: --dir %s: no such folder (a2amm gen makes one with the data)\n", cmd, dir);
        else fprintf(stderr, "a2amm %s: --dir %s: %s\n", cmd, dir, strerror(e));
        return -1;
    }
    if (S_ISDIR(st.st_mode)) return 0;
    fprintf(stderr, "a2amm %s: --dir %s: not a folder\n", cmd, dir);
    return -1;
}

int cli_space_check(const char *cmd, const char *dir, double bytes, const char *what)
{
    char at[4096];
    snprintf(at, sizeof at, "%s", dir);
    struct statvfs fs;
    while (statvfs(at, &fs) != 0) { /* a folder gen makes: its nearest existing parent's file system */
        if (errno != ENOENT) return 0;
        char *slash = strrchr(at, '/');
        if (!slash) { snprintf(at, sizeof at, "."); continue; }
        if (slash == at) slash[1] = '\0';
        else *slash = '\0';
        if (!strcmp(at, "/") && statvfs(at, &fs) != 0) return 0;
    }
    const double avail = (double)fs.f_bavail * (double)fs.f_frsize;
    if (bytes <= avail) return 0;
    fprintf(stderr, "a2amm %s: %s needs %.3g GB, and %s's file system has %.3g GB free: refused (nothing written)\n",
            cmd, what, bytes / 1e9, at, avail / 1e9);
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

/*
 * The seed's form without a meta file: the seed's launcher is built for
 * E4M3 x E4M3 and runs on data from the seed's own scripts, which write
 * none; the types not named are taken as E4M3, and said so on stderr.
 */
static int assume_seed_types(const char *cmd, const char *path, const char *at, const char *bt, op_shape *s)
{
    s->a_type = s->b_type = A2AMM_E4M3;
    if ((at && cli_parse_type(cmd, "--a-type", at, &s->a_type)) || (bt && cli_parse_type(cmd, "--b-type", bt, &s->b_type)))
        return 2;
    if (!at || !bt)
        fprintf(stderr, "a2amm: note: %s is missing, so nothing records the data's element types: assuming the "
                "seed's E4M3 for %s (the seed's launcher is built for E4M3 x E4M3); name others with --a-type and "
                "--b-type e4m3|e5m2\n", path, at ? "B" : bt ? "A" : "A and B");
    return 0;
}

int cli_op_hold(const char *cmd, const char *dir, const char *given, op_kind *kind)
{
    *kind = OP_ALLTOALL_MATMUL;
    if (given && cli_parse_op(cmd, given, kind)) return 2;
    io_meta meta;
    char path[IO_PATH_MAX];
    if (io_meta_path(path, sizeof path, dir, NULL) || io_meta_read(dir, &meta, NULL)) return 0;
    if (!given) {
        *kind = meta.shape.kind;
        return 0;
    }
    if (*kind == meta.shape.kind) return 0;
    fprintf(stderr, "a2amm %s: --op %s contradicts %s, which says the data was made for --op %s: refused (leave "
            "--op out to use what gen recorded)\n", cmd, op_kind_name(*kind), path, op_kind_name(meta.shape.kind));
    return 2;
}

int cli_meta_hold(const char *cmd, const char *dir, op_shape *s, const char *at, const char *bt,
                  cli_types_rule rule)
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
        if (rule == CLI_TYPES_UNUSED) return 0;
        if (rule == CLI_TYPES_SEED) return assume_seed_types(cmd, path, at, bt, s);
        if (!at || !bt) {
            fprintf(stderr, "a2amm %s: %s is missing, so the element types of the data are unknown: make the data "
                    "with a2amm gen (which records them), or name both with --a-type and --b-type (the seed's form, "
                    "a2amm M K N R, takes the seed's E4M3 for those not named)\n", cmd, path);
            return 2;
        }
        if (cli_parse_type(cmd, "--a-type", at, &s->a_type) || cli_parse_type(cmd, "--b-type", bt, &s->b_type))
            return 2;
        return 0;
    }
    const op_shape *m = &meta.shape;
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
    if (m->kind != s->kind) { /* cli_op_hold has said so already where the command calls it first */
        fprintf(stderr, "a2amm %s: the op is %s, but %s says the data was made for %s: refused\n", cmd,
                op_kind_name(s->kind), path, op_kind_name(m->kind));
        return 2;
    }
    int rc = hold_type(cmd, path, "--a-type", at, m->a_type, &s->a_type);
    if (!rc) rc = hold_type(cmd, path, "--b-type", bt, m->b_type, &s->b_type);
    return rc;
}

int cli_dir_lock(const char *cmd, const char *dir, int create)
{
    a2amm_error err = {0, ""};
    if (create && io_mkdirs(dir, &err)) {
        cli_print_error(cmd, &err);
        return -1;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "a2amm %s: %s: cannot open the folder: %s\n", cmd, dir, strerror(errno));
        return -1;
    }
    /* a moment's grace: a run just killed holds the lock until its guard has cleaned up (milliseconds) */
    int locked = 0, e = 0;
    for (int tries = 0; tries <= 100; tries++) { /* 2 s */
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            locked = 1;
            break;
        }
        e = errno;
        if (e != EWOULDBLOCK && e != EINTR) break;
        struct timespec pause = {0, 20000000};
        nanosleep(&pause, NULL);
    }
    if (!locked) {
        close(fd);
        if (e == EWOULDBLOCK)
            fprintf(stderr, "a2amm %s: %s is in use by another a2amm gen or run (it holds the folder's lock): "
                    "wait for it to end, or use another folder\n", cmd, dir);
        else
            fprintf(stderr, "a2amm %s: %s: cannot lock the folder: %s\n", cmd, dir, strerror(e));
        return -1;
    }
    int completed = 0, removed = io_remove_stale(dir, NULL, &completed);
    if (completed)
        fprintf(stderr, "a2amm %s: completed putting in place the outputs of a run that was killed while doing so "
                "(%d file%s) in %s\n", cmd, completed, completed == 1 ? "" : "s", dir);
    if (removed)
        fprintf(stderr, "a2amm %s: removed %d temporary file%s an interrupted run left in %s\n", cmd, removed,
                removed == 1 ? "" : "s", dir);
    return fd;
}

static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig) { stop_signal = sig; }

const volatile sig_atomic_t *cli_catch_stop_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    return &stop_signal;
}

int cli_exit_code_for_stop(void) { return stop_signal ? 128 + stop_signal : 0; }
