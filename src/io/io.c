/* The seed's file layout: exact-size reads, atomic writes, the meta file. */
#include "io/io.h"
#include "io/moe_io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "util/parse.h"
#include "util/dist.h"
#include "mx/mx.h"

#define META_NAME "a2amm-meta.txt"

/* A path as messages show it: whole when short, else its start and end
 * (messages hold 1024 bytes; a path may have 4095). Thread-local buffers,
 * four in turn, so that one message can show two paths. */
static const char *shown(const char *path)
{
    static __thread char buf[4][200];
    static __thread unsigned turn;
    size_t n = strlen(path);
    if (n < 160) return path;
    char *b = buf[turn++ % 4];
    snprintf(b, sizeof buf[0], "%.60s...%s (a path of %zu characters)", path, path + n - 80, n);
    return b;
}


/* A path under dir that does not fit: named by its start and its length,
 * so that the message itself is never cut off. */
static int path_too_long(a2amm_error *err, const char *dir, int n, size_t len)
{
    return a2amm_fail(err, A2AMM_E_INVAL, "a path under the folder '%.60s%s' (%zu characters) would be %d characters, "
                      "more than the %zu allowed: use a shorter folder", dir, strlen(dir) > 60 ? "..." : "",
                      strlen(dir), n, len - 1);
}

const io_rank_file io_rank_files[IO_RANK_FILES] = {
    {"input", "input_a.bin", "A"},         {"input", "input_scaleA.bin", "A's scales"},
    {"input", "input_b.bin", "B"},         {"input", "input_scaleB.bin", "B's scales"},
    {"output", "cpu_output.bin", "golden"}, {"output", "npu_out.bin", "output"},
};

int io_rank_path(char *buf, size_t len, const char *dir, const char *sub, int rank,
                 const char *name, a2amm_error *err)
{
    int n = snprintf(buf, len, "%s/%s/%d/%s", dir, sub, rank, name);
    if (n < 0 || (size_t)n >= len) return path_too_long(err, dir, n, len);
    return A2AMM_OK;
}

/* What a file that is not a regular one is, for messages. */
static const char *kind_of(mode_t mode)
{
    return S_ISDIR(mode)    ? "a directory"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISSOCK(mode) ? "a socket"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
                            : "not a regular file";
}

int io_open_regular(const char *path, struct stat *st, a2amm_error *err)
{
    /* O_NONBLOCK: a FIFO in a file's place must not block the open */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            return a2amm_fail(err, A2AMM_E_IO, "%s is missing", shown(path));
        return a2amm_fail(err, A2AMM_E_IO, "%s: cannot open: %s", shown(path), strerror(e));
    }
    if (fstat(fd, st) != 0) {
        int e = errno;
        close(fd);
        return a2amm_fail(err, A2AMM_E_IO, "%s: cannot stat: %s", shown(path), strerror(e));
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return a2amm_fail(err, A2AMM_E_IO, "%s is %s, not a file", shown(path), kind_of(st->st_mode));
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
}

int io_read_exact(const char *path, void *buf, size_t bytes, a2amm_error *err)
{
    struct stat st;
    int fd = io_open_regular(path, &st, err);
    if (fd < 0) {
        if (err) {
            size_t n = strlen(err->msg);
            snprintf(err->msg + n, sizeof err->msg - n, " (expected a file of %zu bytes)", bytes);
        }
        return fd;
    }
    if ((uint64_t)st.st_size != (uint64_t)bytes) {
        close(fd);
        return a2amm_fail(err, A2AMM_E_SIZE, "%s: expected %zu bytes, found %lld bytes (%s)", shown(path),
                          bytes, (long long)st.st_size,
                          (uint64_t)st.st_size < (uint64_t)bytes ? "file is short" : "file is long");
    }
    size_t got = 0;
    while (got < bytes) {
        ssize_t n = read(fd, (char *)buf + got, bytes - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int e = n < 0 ? errno : 0;
            close(fd);
            return a2amm_fail(err, A2AMM_E_IO, "%s: read %zu of %zu bytes%s%s", shown(path), got, bytes,
                              e ? ": " : " (the file shrank)", e ? strerror(e) : "");
        }
        got += (size_t)n;
    }
    close(fd);
    return A2AMM_OK;
}

int io_mkdirs(const char *path, a2amm_error *err)
{
    char tmp[IO_PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof tmp)
        return a2amm_fail(err, A2AMM_E_INVAL, "bad folder path '%s'", shown(path));
    memcpy(tmp, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (tmp[i] != '/' && tmp[i] != '\0') continue;
        char saved = tmp[i];
        tmp[i] = '\0';
        if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
            return a2amm_fail(err, A2AMM_E_IO, "%s: cannot create folder: %s", shown(tmp), strerror(errno));
        tmp[i] = saved;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return a2amm_fail(err, A2AMM_E_IO, "%s: not a folder", shown(path));
    return A2AMM_OK;
}

/* Creates the folder that holds `path`. */
static int mkdirs_parent(const char *path, a2amm_error *err)
{
    char parent[IO_PATH_MAX];
    size_t n = strlen(path);
    if (n >= sizeof parent)
        return a2amm_fail(err, A2AMM_E_INVAL, "path '%s' is too long", shown(path));
    memcpy(parent, path, n + 1);
    char *slash = strrchr(parent, '/');
    if (!slash || slash == parent) return A2AMM_OK;
    *slash = '\0';
    return io_mkdirs(parent, err);
}

/* path.tmp.<tag>; A2AMM_E_INVAL when it does not fit. */
static int staged_name(char *buf, size_t len, const char *path, const char *tag, a2amm_error *err)
{
    int n = snprintf(buf, len, "%s.tmp.%s", path, tag);
    if (n < 0 || (size_t)n >= len)
        return a2amm_fail(err, A2AMM_E_INVAL, "path '%s' is too long for its temporary name", shown(path));
    return A2AMM_OK;
}

/* Writes all of buf to fd; 0 or errno. */
static int write_all(int fd, const void *buf, size_t bytes, size_t *put)
{
    *put = 0;
    while (*put < bytes) {
        ssize_t n = write(fd, (const char *)buf + *put, bytes - *put);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return n < 0 ? errno : ENOSPC;
        *put += (size_t)n;
    }
    return 0;
}

int io_write_staged(const char *path, const char *tag, const void *buf, size_t bytes, a2amm_error *err)
{
    int rc = mkdirs_parent(path, err);
    if (rc) return rc;
    char tmp[IO_PATH_MAX], parent[IO_PATH_MAX];
    rc = staged_name(tmp, sizeof tmp, path, tag, err);
    if (rc) return rc;
    snprintf(parent, sizeof parent, "%s", path);
    char *slash = strrchr(parent, '/');
    if (slash == parent) slash[1] = '\0';
    else if (slash) *slash = '\0';
    else snprintf(parent, sizeof parent, ".");
    /*
     * An unnamed file (O_TMPFILE) gets its name only once it is complete:
     * a crash at any moment before leaves nothing behind. Where the file
     * system has no O_TMPFILE, the temporary name is written directly.
     */
    int named = 0;
    int fd = open(parent, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
        named = 1;
    }
    if (fd < 0)
        return a2amm_fail(err, A2AMM_E_IO, "%s: cannot create: %s", shown(named ? tmp : path), strerror(errno));
    size_t put = 0;
    int e = write_all(fd, buf, bytes, &put);
    if (!e && !named) {
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        unlink(tmp); /* a stale one of the same tag */
        if (linkat(AT_FDCWD, proc, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) != 0) e = errno;
    }
    if (close(fd) != 0 && !e) e = errno;
    if (e) {
        if (named) unlink(tmp);
        return a2amm_fail(err, A2AMM_E_IO, "%s: write failed after %zu of %zu bytes: %s", shown(path), put, bytes,
                          strerror(e));
    }
    return A2AMM_OK;
}

int io_commit_staged(const char *path, const char *tag, a2amm_error *err)
{
    char tmp[IO_PATH_MAX];
    int rc = staged_name(tmp, sizeof tmp, path, tag, err);
    if (rc) return rc;
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return a2amm_fail(err, A2AMM_E_IO, "%s: cannot rename from %s: %s", shown(path), shown(tmp), strerror(e));
    }
    return A2AMM_OK;
}

void io_discard_staged(const char *path, const char *tag)
{
    char tmp[IO_PATH_MAX];
    if (staged_name(tmp, sizeof tmp, path, tag, NULL) == A2AMM_OK) unlink(tmp);
}

int io_write_atomic(const char *path, const void *buf, size_t bytes, a2amm_error *err)
{
    char tag[32];
    snprintf(tag, sizeof tag, "%ld", (long)getpid());
    int rc = io_write_staged(path, tag, buf, bytes, err);
    return rc ? rc : io_commit_staged(path, tag, err);
}

int io_check_destination(const char *path, a2amm_error *err)
{
    struct stat st;
    if (!path[0]) return a2amm_fail(err, A2AMM_E_INVAL, "an empty file name: name a file");
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return a2amm_fail(err, A2AMM_E_INVAL, "%s is a folder, not a file: name a file (in it, or elsewhere)",
                              shown(path));
        if (!S_ISREG(st.st_mode))
            return a2amm_fail(err, A2AMM_E_INVAL, "%s is %s, not a regular file: refused (a2amm writes a new file "
                              "and renames it over the old one, which would replace it; name a file)", shown(path),
                              kind_of(st.st_mode));
    } else if (errno != ENOENT) {
        return a2amm_fail(err, A2AMM_E_IO, "%s: %s", shown(path), strerror(errno));
    }
    char folder[IO_PATH_MAX];
    const char *slash = strrchr(path, '/');
    int n = slash ? snprintf(folder, sizeof folder, "%.*s", slash == path ? 1 : (int)(slash - path), path)
                  : snprintf(folder, sizeof folder, ".");
    if (n < 0 || (size_t)n >= sizeof folder)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: the path is too long", shown(path));
    if (stat(folder, &st) != 0 || !S_ISDIR(st.st_mode))
        return a2amm_fail(err, A2AMM_E_IO, "%s: the folder %s does not exist", shown(path), shown(folder));
    if (access(folder, W_OK) != 0)
        return a2amm_fail(err, A2AMM_E_IO, "%s: cannot write in %s: %s", shown(path), shown(folder), strerror(errno));
    return A2AMM_OK;
}

int io_write_stream(const char *path, int (*fill)(FILE *f, void *arg), void *arg, a2amm_error *err)
{
    int rc = io_check_destination(path, err);
    if (rc) return rc;
    char tmp[IO_PATH_MAX + 32];
    int w = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (w < 0 || (size_t)w >= sizeof tmp)
        return a2amm_fail(err, A2AMM_E_INVAL, "cannot write %s: the path is too long", shown(path));
    /* O_NOFOLLOW: a link left at the temporary name is not written through */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
    if (!f) {
        int e = errno;
        if (fd >= 0) close(fd), unlink(tmp);
        return a2amm_fail(err, A2AMM_E_IO, "cannot write %s: %s", shown(tmp), strerror(e));
    }
    errno = 0;
    int bad = fill(f, arg) || ferror(f);
    if (fclose(f) != 0) bad = 1;
    if (bad || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return a2amm_fail(err, A2AMM_E_IO, "cannot write %s: %s", shown(path), e ? strerror(e) : "a write failed");
    }
    return A2AMM_OK;
}

/*
 * The outputs of a run as one set. The commit point is the marker
 * DIR/output/<name>.commit.<tag>: made only once every rank's staged file is
 * complete, removed once all are renamed. Whoever finds a marker (the
 * guard of a killed run, the next gen or run on the folder) finishes what
 * it began: renames every <r>/<name>.tmp.<tag> left into place.
 */
static int set_path(char *buf, size_t len, const char *dir, int rank, const char *name, const char *ext,
                    const char *tag, a2amm_error *err)
{
    int n = rank < 0 ? snprintf(buf, len, "%s/output/%s.%s.%s", dir, name, ext, tag)
                     : snprintf(buf, len, "%s/output/%d/%s.%s.%s", dir, rank, name, ext, tag);
    if (n < 0 || (size_t)n >= len) return path_too_long(err, dir, n, len);
    return A2AMM_OK;
}

void io_set_discard(const char *dir, const char *name, int n, const char *tag)
{
    for (int r = 0; r < n; r++) {
        char tmp[IO_PATH_MAX];
        if (set_path(tmp, sizeof tmp, dir, r, name, "tmp", tag, NULL) == A2AMM_OK) unlink(tmp);
    }
}

/* Before the commit point: every staged file there, and no folder in a final name's place. */
static int set_ready(const char *dir, const char *name, int n, const char *tag, a2amm_error *err)
{
    for (int r = 0; r < n; r++) {
        char tmp[IO_PATH_MAX], path[IO_PATH_MAX];
        struct stat st;
        int rc = set_path(tmp, sizeof tmp, dir, r, name, "tmp", tag, err);
        if (!rc) rc = io_rank_path(path, sizeof path, dir, "output", r, name, err);
        if (rc) return rc;
        int missing = lstat(tmp, &st) != 0;
        if (missing || !S_ISREG(st.st_mode))
            return a2amm_fail(err, A2AMM_E_IO, "rank %d: its staged %s is %s", r, shown(tmp),
                              missing ? "missing" : "not a file");
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
            return a2amm_fail(err, A2AMM_E_IO, "rank %d: %s is a folder: it cannot be replaced by the output", r,
                              shown(path));
    }
    return A2AMM_OK;
}

int io_set_commit(const char *dir, const char *name, int n, const char *tag, void (*step)(void *arg, int renamed),
                  void *arg, a2amm_error *err)
{
    char marker[IO_PATH_MAX];
    int rc = set_path(marker, sizeof marker, dir, -1, name, "commit", tag, err);
    if (!rc) rc = set_ready(dir, name, n, tag, err);
    int fd = rc ? -1 : open(marker, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (!rc && fd < 0) rc = a2amm_fail(err, A2AMM_E_IO, "%s: cannot create: %s", shown(marker), strerror(errno));
    if (rc) {
        io_set_discard(dir, name, n, tag);
        return rc;
    }
    /* its being there is the commit point; the text is for whoever finds it */
    char text[256];
    int len = snprintf(text, sizeof text, "a2amm: a run (tag %s) is putting output/<r>/%s of its %d ranks in place "
                       "as one set; if it was killed, the next a2amm gen or run on this folder completes it\n",
                       tag, name, n);
    size_t put;
    write_all(fd, text, len > 0 && (size_t)len < sizeof text ? (size_t)len : 0, &put);
    close(fd);
    if (step) step(arg, 0);
    for (int r = 0; r < n; r++) {
        char tmp[IO_PATH_MAX], path[IO_PATH_MAX];
        if (set_path(tmp, sizeof tmp, dir, r, name, "tmp", tag, NULL) ||
            io_rank_path(path, sizeof path, dir, "output", r, name, NULL))
            continue; /* fit before the commit point (set_ready) */
        if (rename(tmp, path) != 0) {
            /* never a mix: this rank's file is neither old nor new, and the run fails */
            int e = errno;
            unlink(tmp);
            unlink(path);
            if (!rc)
                rc = a2amm_fail(err, A2AMM_E_IO, "rank %d: %s: cannot rename from %s: %s (removed: the outputs "
                                "are incomplete)", r, shown(path), shown(tmp), strerror(e));
        }
        if (step) step(arg, r + 1);
    }
    unlink(marker);
    return rc;
}

/*
 * Whether name is "<one of the layout's files>.<ext>.<tag>" (any tag when
 * tag is NULL); *base_len is the length of the layout file's name.
 */
static int is_ours(const char *name, const char *ext, const char *tag, size_t *base_len)
{
    size_t e = strlen(ext);
    for (int i = 0; i <= IO_RANK_FILES + MOE_IO_INPUTS; i++) { /* either op's files, and the meta file */
        const char *ours = i < IO_RANK_FILES                   ? io_rank_files[i].name
                           : i < IO_RANK_FILES + MOE_IO_INPUTS ? moe_io_inputs[i - IO_RANK_FILES].name
                                                               : META_NAME;
        size_t n = strlen(ours);
        if (strncmp(name, ours, n) || name[n] != '.' || strncmp(name + n + 1, ext, e) || name[n + 1 + e] != '.')
            continue;
        if (tag && strcmp(name + n + 2 + e, tag)) continue;
        if (base_len) *base_len = n;
        return 1;
    }
    return 0;
}

/* Removes the temporary files of one folder (of one tag, or all); adds to *removed. */
static void clean_folder(const char *folder, const char *tag, int *removed)
{
    DIR *d = opendir(folder);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        char path[IO_PATH_MAX];
        if (!is_ours(e->d_name, "tmp", tag, NULL)) continue;
        int n = snprintf(path, sizeof path, "%s/%s", folder, e->d_name);
        if (n > 0 && (size_t)n < sizeof path && unlink(path) == 0) ++*removed;
    }
    closedir(d);
}

/* Calls fn(folder, ...) for each rank folder (a name of digits) of DIR/<sub>. */
static void each_rank_folder(const char *sub, void (*fn)(const char *folder, void *arg), void *arg)
{
    DIR *d = opendir(sub);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9' || strspn(e->d_name, "0123456789") != strlen(e->d_name))
            continue;
        char rank_dir[IO_PATH_MAX];
        int n = snprintf(rank_dir, sizeof rank_dir, "%s/%s", sub, e->d_name);
        if (n > 0 && (size_t)n < sizeof rank_dir) fn(rank_dir, arg);
    }
    closedir(d);
}

/* One interrupted commit: its file's name, its tag, and how many were renamed. */
typedef struct roll_forward {
    char name[64];
    const char *tag;
    int renamed;
} roll_forward;

static void roll_forward_folder(const char *folder, void *arg)
{
    roll_forward *f = arg;
    char tmp[IO_PATH_MAX], path[IO_PATH_MAX];
    int a = snprintf(tmp, sizeof tmp, "%s/%s.tmp.%s", folder, f->name, f->tag);
    int b = snprintf(path, sizeof path, "%s/%s", folder, f->name);
    if (a > 0 && (size_t)a < sizeof tmp && b > 0 && (size_t)b < sizeof path && rename(tmp, path) == 0) f->renamed++;
}

/* Completes every interrupted commit of DIR/output (of one tag, or all); how many files it renamed. */
static int complete_commits(const char *dir, const char *tag)
{
    char out[IO_PATH_MAX];
    int n = snprintf(out, sizeof out, "%s/output", dir), renamed = 0;
    if (n < 0 || (size_t)n >= sizeof out) return 0;
    DIR *d = opendir(out);
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t base = 0;
        if (!is_ours(e->d_name, "commit", tag, &base) || base >= sizeof ((roll_forward *)0)->name) continue;
        roll_forward f = {.tag = e->d_name + base + strlen(".commit."), .renamed = 0};
        memcpy(f.name, e->d_name, base);
        f.name[base] = '\0';
        each_rank_folder(out, roll_forward_folder, &f);
        char marker[IO_PATH_MAX];
        n = snprintf(marker, sizeof marker, "%s/%s", out, e->d_name);
        if (n > 0 && (size_t)n < sizeof marker) unlink(marker);
        renamed += f.renamed;
    }
    closedir(d);
    return renamed;
}

/* clean_folder's arguments for each_rank_folder. */
typedef struct clean_job {
    const char *tag;
    int removed;
} clean_job;

static void clean_rank_folder(const char *folder, void *arg)
{
    clean_job *j = arg;
    clean_folder(folder, j->tag, &j->removed);
}

int io_remove_stale(const char *dir, const char *tag, int *completed)
{
    int done = complete_commits(dir, tag);
    if (completed) *completed = done;
    clean_job job = {tag, 0};
    static const char *const SUBS[] = {"input", "output"};
    for (int s = 0; s < 2; s++) {
        char sub[IO_PATH_MAX];
        int n = snprintf(sub, sizeof sub, "%s/%s", dir, SUBS[s]);
        if (n < 0 || (size_t)n >= sizeof sub) continue;
        clean_folder(sub, tag, &job.removed); /* the meta file's */
        each_rank_folder(sub, clean_rank_folder, &job);
    }
    return job.removed;
}

/* The first staged output ("<layout file>.tmp.<tag>") in one rank folder of DIR/output. */
typedef struct staged_search {
    char *path;
    size_t size;
    int found;
} staged_search;

static void find_staged(const char *folder, void *arg)
{
    staged_search *q = arg;
    DIR *d = q->found ? NULL : opendir(folder);
    if (!d) return;
    for (struct dirent *e; !q->found && (e = readdir(d));)
        if (is_ours(e->d_name, "tmp", NULL, NULL)) {
            q->found = 1;
            if (q->size) snprintf(q->path, q->size, "%s/%s", folder, e->d_name);
        }
    closedir(d);
}

int io_staged_left(const char *dir, char *path, size_t size)
{
    char out[IO_PATH_MAX];
    int n = snprintf(out, sizeof out, "%s/output", dir);
    if (n < 0 || (size_t)n >= sizeof out) return 0;
    staged_search q = {path, size, 0};
    each_rank_folder(out, find_staged, &q);
    return q.found;
}

int io_set_pending(const char *dir, char *marker, size_t size)
{
    char out[IO_PATH_MAX];
    int n = snprintf(out, sizeof out, "%s/output", dir), found = 0;
    if (n < 0 || (size_t)n >= sizeof out) return 0;
    DIR *d = opendir(out);
    if (!d) return 0;
    for (struct dirent *e; !found && (e = readdir(d));)
        if (is_ours(e->d_name, "commit", NULL, NULL)) {
            found = 1;
            if (size) snprintf(marker, size, "%s/%s", out, e->d_name);
        }
    closedir(d);
    return found;
}

int io_rank_inputs_alloc(const op_sizes *sz, io_rank_inputs *in, a2amm_error *err)
{
    in->a = malloc(sz->a_bytes ? sz->a_bytes : 1);
    in->sa = malloc(sz->sa_bytes ? sz->sa_bytes : 1);
    in->b = malloc(sz->b_bytes ? sz->b_bytes : 1);
    in->sb = malloc(sz->sb_bytes ? sz->sb_bytes : 1);
    if (!in->a || !in->sa || !in->b || !in->sb) {
        io_rank_inputs_free(in);
        return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate %zu bytes for one rank's inputs",
                          sz->a_bytes + sz->sa_bytes + sz->b_bytes + sz->sb_bytes);
    }
    return A2AMM_OK;
}

void io_rank_inputs_free(io_rank_inputs *in)
{
    free(in->a);
    free(in->sa);
    free(in->b);
    free(in->sb);
    in->a = in->sa = in->b = in->sb = NULL;
}

/* The four input files, their sizes and buffers, in one table. */
typedef struct input_file {
    const char *name;
    size_t bytes;
    uint8_t *buf;
} input_file;

static void input_table(const op_sizes *sz, const io_rank_inputs *in, input_file t[4])
{
    t[0] = (input_file){io_rank_files[0].name, sz->a_bytes, in->a};
    t[1] = (input_file){io_rank_files[1].name, sz->sa_bytes, in->sa};
    t[2] = (input_file){io_rank_files[2].name, sz->b_bytes, in->b};
    t[3] = (input_file){io_rank_files[3].name, sz->sb_bytes, in->sb};
}

int io_load_rank_inputs(const char *dir, int rank, const op_sizes *sz,
                        io_rank_inputs *in, a2amm_error *err)
{
    input_file t[4];
    input_table(sz, in, t);
    for (int i = 0; i < 4; i++) {
        char path[IO_PATH_MAX];
        int rc = io_rank_path(path, sizeof path, dir, "input", rank, t[i].name, err);
        if (!rc) rc = io_read_exact(path, t[i].buf, t[i].bytes, err);
        if (rc) return rc;
    }
    return A2AMM_OK;
}

int io_save_rank_inputs(const char *dir, int rank, const op_sizes *sz,
                        const io_rank_inputs *in, a2amm_error *err)
{
    input_file t[4];
    input_table(sz, in, t);
    for (int i = 0; i < 4; i++) {
        char path[IO_PATH_MAX];
        int rc = io_rank_path(path, sizeof path, dir, "input", rank, t[i].name, err);
        if (!rc) rc = io_write_atomic(path, t[i].buf, t[i].bytes, err);
        if (rc) return rc;
    }
    return A2AMM_OK;
}

int io_meta_path(char *buf, size_t len, const char *dir, a2amm_error *err)
{
    int n = snprintf(buf, len, "%s/input/%s", dir, META_NAME);
    if (n < 0 || (size_t)n >= len) return path_too_long(err, dir, n, len);
    return A2AMM_OK;
}

int io_meta_write(const char *dir, const io_meta *m, a2amm_error *err)
{
    char path[IO_PATH_MAX], text[1024];
    int rc = io_meta_path(path, sizeof path, dir, err);
    if (rc) return rc;
    size_t n = io_meta_format(m, text, sizeof text);
    return io_write_atomic(path, text, n, err);
}

size_t io_meta_format(const io_meta *m, char *text, size_t size)
{
    int n = snprintf(text, size,
                     "a2amm-meta 1\nM %lld\nK %lld\nN %lld\nR %lld\na_type %s\nb_type %s\n"
                     "dist %s\nscale_mode %s\nseed %" PRIu64 "\nop %s\n",
                     (long long)m->shape.M, (long long)m->shape.K, (long long)m->shape.N,
                     (long long)m->shape.R, a2amm_fp8_type_name(m->shape.a_type),
                     a2amm_fp8_type_name(m->shape.b_type), m->dist, m->scale_mode, m->seed,
                     op_kind_name(m->shape.kind));
    return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
}

/* The meta file's keys, in the order gen writes them; every one is required but op, which older
 * versions did not write (a file without it is of the seed's op, alltoall-matmul). */
enum { MK_M, MK_K, MK_N, MK_R, MK_A_TYPE, MK_B_TYPE, MK_DIST, MK_SCALE_MODE, MK_SEED, MK_OP, MK_COUNT };
static const char *const META_KEYS[MK_COUNT] = {"M", "K", "N", "R", "a_type", "b_type", "dist", "scale_mode", "seed",
                                                "op"};
#define META_MAX_BYTES 4096 /* gen writes about 120 */

/* One "key value" line (without its newline) into m; 0, or the rule it breaks. */
static const char *meta_line(const char *line, size_t len, io_meta *m, unsigned *seen)
{
    const char *sp = memchr(line, ' ', len);
    if (!sp) return "expected 'key value' (one space between)";
    size_t klen = (size_t)(sp - line), vlen = len - klen - 1;
    const char *val = sp + 1;
    if (vlen == 0 || memchr(val, ' ', vlen)) return "expected 'key value' (one space between)";
    int k = 0;
    while (k < MK_COUNT && !(strlen(META_KEYS[k]) == klen && !memcmp(line, META_KEYS[k], klen))) k++;
    if (k == MK_COUNT) return "unknown key (expected M, K, N, R, a_type, b_type, dist, scale_mode, seed or op)";
    if (*seen & (1u << k)) return "the key appears twice";
    *seen |= 1u << k;
    char v[32];
    if (vlen >= sizeof v) return "the value is too long";
    memcpy(v, val, vlen);
    v[vlen] = '\0';
    uint64_t u = 0;
    switch (k) {
    case MK_M: case MK_K: case MK_N: case MK_R:
        if (parse_u64(v, &u) != PARSE_OK || u < 1 || u > (UINT64_C(1) << 62))
            return "the value must be a whole number from 1 to 2^62 in decimal digits";
        *(k == MK_M ? &m->shape.M : k == MK_K ? &m->shape.K : k == MK_N ? &m->shape.N : &m->shape.R) = (int64_t)u;
        return NULL;
    case MK_A_TYPE: case MK_B_TYPE:
        if (strcmp(v, "e4m3") && strcmp(v, "e5m2")) return "the type must be e4m3 or e5m2";
        a2amm_fp8_type_parse(v, k == MK_A_TYPE ? &m->shape.a_type : &m->shape.b_type, NULL);
        return NULL;
    case MK_DIST: {
        gen_dist d;
        if (gen_dist_parse(v, &d)) return "dist must be normal, seed, uniform, extreme or special";
        snprintf(m->dist, sizeof m->dist, "%s", gen_dist_name(d));
        return NULL;
    }
    case MK_SCALE_MODE: {
        mx_scale_mode sm;
        if (mx_scale_mode_parse(v, &sm)) return "scale_mode must be floor or rceil";
        snprintf(m->scale_mode, sizeof m->scale_mode, "%s", mx_scale_mode_name(sm));
        return NULL;
    }
    case MK_OP:
        if (!strcmp(v, "moe")) return "the data is for --op moe, not this op (give --op moe, or leave --op out)";
        if (op_kind_parse(v, &m->shape.kind)) return "op must be alltoall-matmul or matmul-alltoall";
        return NULL;
    default:
        if (parse_u64(v, &m->seed) != PARSE_OK) return "seed must be a whole number in decimal digits";
        return NULL;
    }
}

int io_meta_read(const char *dir, io_meta *m, a2amm_error *err)
{
    char path[IO_PATH_MAX];
    int rc = io_meta_path(path, sizeof path, dir, err);
    if (rc) return rc;
    struct stat st;
    int fd = io_open_regular(path, &st, err);
    if (fd < 0) return fd;
    if (st.st_size > META_MAX_BYTES) {
        close(fd);
        return a2amm_fail(err, A2AMM_E_FORMAT, "%s: %lld bytes, more than a meta file has (at most %d)", shown(path),
                          (long long)st.st_size, META_MAX_BYTES);
    }
    char text[META_MAX_BYTES + 1];
    ssize_t n = read(fd, text, META_MAX_BYTES + 1);
    int e = errno;
    close(fd);
    if (n < 0) return a2amm_fail(err, A2AMM_E_IO, "%s: cannot read: %s", shown(path), strerror(e));
    if (n > META_MAX_BYTES)
        return a2amm_fail(err, A2AMM_E_FORMAT, "%s: more than %d bytes, more than a meta file has", shown(path), META_MAX_BYTES);
    return io_meta_parse(text, (size_t)n, path, m, err);
}

const char *io_text_line_problem(const char *line, size_t len)
{
    if (memchr(line, '\0', len)) return "a NUL byte (this is not a text file)";
    if (len && line[len - 1] == '\r')
        return "the line ends in a carriage return (Windows line endings; gen writes Unix ones): convert the file "
               "(dos2unix) or run gen again";
    return NULL;
}

int io_meta_line_fail(a2amm_error *err, const char *path, int lineno, const char *why, const char *line, size_t len)
{
    if (len && line[len - 1] == '\r') len--; /* shown without it */
    int cut = len > 60 ? 60 : (int)len;
    return a2amm_fail(err, A2AMM_E_FORMAT, "%s:%d: %s; the line is '%.*s%s'", path, lineno, why, cut,
                      memchr(line, '\0', len) ? "" : line, len > 60 ? "..." : "");
}

int io_meta_parse(const char *text, size_t len, const char *path, io_meta *m, a2amm_error *err)
{
    memset(m, 0, sizeof *m);
    unsigned seen = 0;
    size_t at = 0;
    for (int lineno = 1; at < len; lineno++) {
        const char *line = text + at;
        const char *nl = memchr(line, '\n', len - at);
        size_t ll = nl ? (size_t)(nl - line) : len - at;
        at += ll + (nl ? 1 : 0);
        const char *why = io_text_line_problem(line, ll);
        if (!why && lineno == 1) why = ll == 12 && !memcmp(line, "a2amm-meta 1", 12) ? NULL : "expected 'a2amm-meta 1'";
        else if (!why) why = meta_line(line, ll, m, &seen);
        if (why) return io_meta_line_fail(err, shown(path), lineno, why, line, ll);
    }
    if (len == 0)
        return a2amm_fail(err, A2AMM_E_FORMAT, "%s: empty (expected 'a2amm-meta 1' and the keys gen writes)", shown(path));
    for (int k = 0; k < MK_COUNT; k++)
        if (k != MK_OP && !(seen & (1u << k)))
            return a2amm_fail(err, A2AMM_E_FORMAT, "%s: incomplete: no '%s' line (gen writes M, K, N, R, a_type, "
                              "b_type, dist, scale_mode and seed)", shown(path), META_KEYS[k]);
    return A2AMM_OK;
}
