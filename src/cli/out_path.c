/* Where the command may write a path the user names (see out_path.h). */
#include "cli/out_path.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/runner.h"
#include "common/error.h"
#include "io/io.h"
#include "io/moe_io.h"

/* The folder part of path ("." when none) into buf; its last part. */
static const char *split(const char *path, char *buf, size_t size)
{
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(buf, size, ".");
    else snprintf(buf, size, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    return slash ? slash + 1 : path;
}

int cli_same_file(const char *out, const char *file)
{
    struct stat a, b;
    if (stat(out, &a) == 0 && stat(file, &b) == 0) return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
    char fa[IO_PATH_MAX], fb[IO_PATH_MAX];
    const char *na = split(out, fa, sizeof fa), *nb = split(file, fb, sizeof fb);
    return !strcmp(na, nb) && stat(fa, &a) == 0 && stat(fb, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* The refusal of a path that is one of the data's files. */
static int data_file(const char *option, const char *path, const char *file, const char *what, a2amm_error *err)
{
    return a2amm_fail(err, A2AMM_E_INVAL, "%s: %s would replace %s (%s, one of the data's files): refused; name a "
                      "file outside the data's input and output folders", option, path, file, what);
}

int cli_check_output(const char *option, const char *path, const char *dir, int64_t R, a2amm_error *err)
{
    a2amm_error why = {0, ""};
    int rc = io_check_destination(path, &why);
    if (rc) return a2amm_fail(err, rc, "%s: %s", option, why.msg);
    if (!dir) return A2AMM_OK;
    char file[IO_PATH_MAX], what[64];
    if (io_meta_path(file, sizeof file, dir, NULL) == A2AMM_OK && cli_same_file(path, file))
        return data_file(option, path, file, "the data's meta file", err);
    /* a run has at most RUN_MAX_R ranks (it refuses more before it reads anything) */
    for (int64_t r = 0; r < R && r < RUN_MAX_R; r++)
        for (int i = 0; i < IO_RANK_FILES + MOE_IO_INPUTS; i++) { /* either op's files */
            const io_rank_file *f = i < IO_RANK_FILES ? &io_rank_files[i] : &moe_io_inputs[i - IO_RANK_FILES];
            if (io_rank_path(file, sizeof file, dir, f->sub, (int)r, f->name, NULL) || !cli_same_file(path, file))
                continue;
            snprintf(what, sizeof what, "rank %lld's %s", (long long)r, f->what);
            return data_file(option, path, file, what, err);
        }
    return A2AMM_OK;
}
