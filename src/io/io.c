/* The seed's file layout: exact-size reads, atomic writes, the meta file. */
#include "io/io.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"

#define META_NAME "a2amm-meta.txt"

int io_rank_path(char *buf, size_t len, const char *dir, const char *sub, int rank,
                 const char *name, a2amm_error *err)
{
    int n = snprintf(buf, len, "%s/%s/%d/%s", dir, sub, rank, name);
    if (n < 0 || (size_t)n >= len)
        return a2amm_fail(err, A2AMM_E_INVAL, "path %s/%s/%d/%s is too long", dir, sub, rank, name);
    return A2AMM_OK;
}

int io_read_exact(const char *path, void *buf, size_t bytes, a2amm_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return a2amm_fail(err, A2AMM_E_IO, "%s: cannot open: %s (expected a file of %zu bytes)",
                          path, strerror(errno), bytes);
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return a2amm_fail(err, A2AMM_E_IO, "%s: not a regular file (expected %zu bytes)", path, bytes);
    }
    if ((uint64_t)st.st_size != (uint64_t)bytes) {
        fclose(f);
        return a2amm_fail(err, A2AMM_E_SIZE, "%s: expected %zu bytes, found %lld bytes (%s)", path,
                          bytes, (long long)st.st_size,
                          (uint64_t)st.st_size < (uint64_t)bytes ? "file is short" : "file is long");
    }
    size_t got = bytes ? fread(buf, 1, bytes, f) : 0;
    int rd_err = ferror(f);
    fclose(f);
    if (got != bytes || rd_err)
        return a2amm_fail(err, A2AMM_E_IO, "%s: read %zu of %zu bytes", path, got, bytes);
    return A2AMM_OK;
}

int io_mkdirs(const char *path, a2amm_error *err)
{
    char tmp[IO_PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof tmp)
        return a2amm_fail(err, A2AMM_E_INVAL, "bad folder path '%s'", path);
    memcpy(tmp, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (tmp[i] != '/' && tmp[i] != '\0') continue;
        char saved = tmp[i];
        tmp[i] = '\0';
        if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
            return a2amm_fail(err, A2AMM_E_IO, "%s: cannot create folder: %s", tmp, strerror(errno));
        tmp[i] = saved;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return a2amm_fail(err, A2AMM_E_IO, "%s: not a folder", path);
    return A2AMM_OK;
}

/* Creates the folder that holds `path`. */
static int mkdirs_parent(const char *path, a2amm_error *err)
{
    char parent[IO_PATH_MAX];
    size_t n = strlen(path);
    if (n >= sizeof parent)
        return a2amm_fail(err, A2AMM_E_INVAL, "path '%s' is too long", path);
    memcpy(parent, path, n + 1);
    char *slash = strrchr(parent, '/');
    if (!slash || slash == parent) return A2AMM_OK;
    *slash = '\0';
    return io_mkdirs(parent, err);
}

int io_write_atomic(const char *path, const void *buf, size_t bytes, a2amm_error *err)
{
    int rc = mkdirs_parent(path, err);
    if (rc) return rc;
    char tmp[IO_PATH_MAX];
    int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof tmp)
        return a2amm_fail(err, A2AMM_E_INVAL, "path '%s' is too long", path);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return a2amm_fail(err, A2AMM_E_IO, "%s: cannot create: %s", tmp, strerror(errno));
    size_t put = bytes ? fwrite(buf, 1, bytes, f) : 0;
    int bad = put != bytes || ferror(f);
    int saved_errno = errno;
    if (fclose(f) != 0) { bad = 1; saved_errno = errno; }
    if (bad) {
        unlink(tmp);
        return a2amm_fail(err, A2AMM_E_IO, "%s: write failed after %zu of %zu bytes: %s", path, put,
                          bytes, strerror(saved_errno));
    }
    if (rename(tmp, path) != 0) {
        saved_errno = errno;
        unlink(tmp);
        return a2amm_fail(err, A2AMM_E_IO, "%s: cannot rename from %s: %s", path, tmp,
                          strerror(saved_errno));
    }
    return A2AMM_OK;
}

int io_rank_inputs_alloc(const a2amm_sizes *sz, io_rank_inputs *in, a2amm_error *err)
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

static void input_table(const a2amm_sizes *sz, const io_rank_inputs *in, input_file t[4])
{
    t[0] = (input_file){"input_a.bin", sz->a_bytes, in->a};
    t[1] = (input_file){"input_scaleA.bin", sz->sa_bytes, in->sa};
    t[2] = (input_file){"input_b.bin", sz->b_bytes, in->b};
    t[3] = (input_file){"input_scaleB.bin", sz->sb_bytes, in->sb};
}

int io_load_rank_inputs(const char *dir, int rank, const a2amm_sizes *sz,
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

int io_save_rank_inputs(const char *dir, int rank, const a2amm_sizes *sz,
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

static int meta_path(char *buf, size_t len, const char *dir, a2amm_error *err)
{
    int n = snprintf(buf, len, "%s/input/%s", dir, META_NAME);
    if (n < 0 || (size_t)n >= len)
        return a2amm_fail(err, A2AMM_E_INVAL, "path %s/input/%s is too long", dir, META_NAME);
    return A2AMM_OK;
}

int io_meta_write(const char *dir, const io_meta *m, a2amm_error *err)
{
    char path[IO_PATH_MAX], text[1024];
    int rc = meta_path(path, sizeof path, dir, err);
    if (rc) return rc;
    int n = snprintf(text, sizeof text,
                     "a2amm-meta 1\nM %lld\nK %lld\nN %lld\nR %lld\na_type %s\nb_type %s\n"
                     "dist %s\nscale_mode %s\nseed %" PRIu64 "\n",
                     (long long)m->shape.M, (long long)m->shape.K, (long long)m->shape.N,
                     (long long)m->shape.R, a2amm_fp8_type_name(m->shape.a_type),
                     a2amm_fp8_type_name(m->shape.b_type), m->dist, m->scale_mode, m->seed);
    return io_write_atomic(path, text, (size_t)n, err);
}

int io_meta_read(const char *dir, io_meta *m, a2amm_error *err)
{
    char path[IO_PATH_MAX];
    int rc = meta_path(path, sizeof path, dir, err);
    if (rc) return rc;
    FILE *f = fopen(path, "r");
    if (!f)
        return a2amm_fail(err, A2AMM_E_IO, "%s: cannot open: %s", path, strerror(errno));
    memset(m, 0, sizeof *m);
    char line[256], key[64], val[24];
    int lineno = 0, seen = 0;
    rc = A2AMM_OK;
    while (rc == A2AMM_OK && fgets(line, sizeof line, f)) {
        lineno++;
        if (lineno == 1) {
            if (strncmp(line, "a2amm-meta 1", 12) != 0)
                rc = a2amm_fail(err, A2AMM_E_FORMAT, "%s: first line is not 'a2amm-meta 1'", path);
            continue;
        }
        if (sscanf(line, "%63s %23s", key, val) != 2) continue;
        long long v = atoll(val);
        if (!strcmp(key, "M")) m->shape.M = v, seen |= 1;
        else if (!strcmp(key, "K")) m->shape.K = v, seen |= 2;
        else if (!strcmp(key, "N")) m->shape.N = v, seen |= 4;
        else if (!strcmp(key, "R")) m->shape.R = v, seen |= 8;
        else if (!strcmp(key, "a_type") || !strcmp(key, "b_type")) {
            a2amm_fp8_type *t = key[0] == 'a' ? &m->shape.a_type : &m->shape.b_type;
            if (a2amm_fp8_type_parse(val, t) != A2AMM_OK)
                rc = a2amm_fail(err, A2AMM_E_FORMAT, "%s:%d: %s is '%s', expected e4m3 or e5m2",
                                path, lineno, key, val);
            seen |= key[0] == 'a' ? 16 : 32;
        } else if (!strcmp(key, "dist")) snprintf(m->dist, sizeof m->dist, "%s", val);
        else if (!strcmp(key, "scale_mode")) snprintf(m->scale_mode, sizeof m->scale_mode, "%s", val);
        else if (!strcmp(key, "seed")) m->seed = strtoull(val, NULL, 10);
    }
    fclose(f);
    if (rc == A2AMM_OK && seen != 63)
        rc = a2amm_fail(err, A2AMM_E_FORMAT, "%s: incomplete (needs M, K, N, R, a_type and b_type)", path);
    return rc;
}
