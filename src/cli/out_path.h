/*
 * Paths the user names for the command to write (run's and bench op's
 * --trace FILE, timeline's -o): checked before any work, so that a refused
 * one costs nothing and nothing is created or changed there. The writers
 * hold them to io_check_destination again when they write.
 */
#ifndef A2AMM_CLI_OUT_PATH_H
#define A2AMM_CLI_OUT_PATH_H

#include <stdint.h>

#include "a2amm.h"

/*
 * Whether writing at `out` would replace `file`: the same file (the same
 * device and inode, so through a symlink or a hard link too) or, where one
 * of them does not exist yet, the same name in the same folder.
 */
int cli_same_file(const char *out, const char *file);

/*
 * OPTION's path, before the work: io_check_destination (absent or a
 * regular file, in a folder that exists) and, with dir, none of the data
 * folder's files for R ranks (each rank's inputs, golden and output, and
 * the meta file), which the run reads and writes. A2AMM_OK, or the reason
 * in err ("--trace: PATH ...").
 */
int cli_check_output(const char *option, const char *path, const char *dir, int64_t R, a2amm_error *err);

#endif
