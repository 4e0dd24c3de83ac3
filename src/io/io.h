/*
 * The seed's on-disk layout and safe file I/O.
 *
 *   DIR/input/<r>/input_a.bin       A_r  [a_rows, ka] fp8
 *   DIR/input/<r>/input_scaleA.bin  SA_r [a_rows, ska] E8M0
 *   DIR/input/<r>/input_b.bin       B_r  [N, K] fp8 (B transposed)
 *   DIR/input/<r>/input_scaleB.bin  SB_r [N, sk] E8M0
 *   DIR/output/<r>/cpu_output.bin   golden, bf16 [out_rows, out_cols]
 *   DIR/output/<r>/npu_out.bin      result, bf16 [out_rows, out_cols]
 *   DIR/input/a2amm-meta.txt        what gen recorded (shape, element types, op)
 *
 * (common/shape.h's sizes: alltoall-matmul A_r [R*M, K/R], out [M, N];
 * matmul-alltoall X_r [M, K], out [R*M, N/R].)
 *
 * Reads check the exact size; writes go to a temporary name and are renamed,
 * so a failure never leaves a half-written file under the real name.
 */
#ifndef A2AMM_IO_H
#define A2AMM_IO_H

#include <stddef.h>
#include <stdint.h>

#include <stdio.h>

#include "a2amm.h"
#include "common/shape.h"

#define IO_PATH_MAX 4096

/* One rank's four input arrays. */
typedef struct io_rank_inputs {
    uint8_t *a, *sa, *b, *sb;
} io_rank_inputs;

/* What gen records beside the inputs. */
typedef struct io_meta {
    op_shape shape;
    char dist[24];
    char scale_mode[24];
    uint64_t seed;
} io_meta;

/* Each rank's files in the layout: its four inputs (DIR/input/<r>/), its
 * golden and its output (DIR/output/<r>/); `what` names one in messages
 * ("rank 0's A"). */
typedef struct io_rank_file {
    const char *sub, *name, *what;
} io_rank_file;
#define IO_RANK_FILES 6
extern const io_rank_file io_rank_files[IO_RANK_FILES];

/* DIR/<sub>/<rank>/<name> into buf; A2AMM_E_INVAL if it does not fit. */
int io_rank_path(char *buf, size_t len, const char *dir, const char *sub, int rank,
                 const char *name, a2amm_error *err);

/*
 * Opens a file for reading without blocking (a FIFO in its place cannot
 * hang the caller) and only if it is a regular file; returns the
 * descriptor (blocking again) and fills *st, or a negative status with a
 * message: "PATH is missing", "PATH is a directory, not a file", "PATH:
 * cannot open: <reason>".
 */
struct stat;
int io_open_regular(const char *path, struct stat *st, a2amm_error *err);

/* Reads exactly `bytes` bytes; a missing file or one of another size is an
 * error naming the file, the expected and the actual size. */
int io_read_exact(const char *path, void *buf, size_t bytes, a2amm_error *err);

/*
 * Whether a writer may put a new file at PATH by renaming one over it (as
 * io_write_stream does): PATH must be absent or a regular file (a symlink
 * is followed, so one to a device is refused too), in a folder that exists
 * and that this process may write in. A folder, a device, a FIFO or a
 * socket is refused, since the rename would replace it ("PATH is a
 * character device, not a regular file: ..."). A2AMM_OK or the reason.
 */
int io_check_destination(const char *path, a2amm_error *err);

/*
 * Writes a whole file atomically, creating the parent folders: the content
 * goes to an unnamed file (O_TMPFILE) that is named PATH.tmp.<pid> only
 * once complete, then renamed to PATH. A crash leaves nothing half-written,
 * at worst a complete PATH.tmp.<pid> (io_remove_stale removes those).
 */
int io_write_atomic(const char *path, const void *buf, size_t bytes, a2amm_error *err);

/*
 * Writes a file of unknown size as a stream, atomically: fill(f, arg)
 * writes it to PATH.tmp.<pid>, which is renamed to PATH when fill returned 0
 * and every write succeeded, and removed otherwise ("cannot write PATH: ...").
 * PATH is first held to io_check_destination: nothing is written where it
 * refuses.
 */
int io_write_stream(const char *path, int (*fill)(FILE *f, void *arg), void *arg, a2amm_error *err);

/*
 * The same in two steps: io_write_staged leaves the complete content at
 * PATH.tmp.<tag>; io_commit_staged renames it to PATH, io_discard_staged
 * removes it.
 */
int io_write_staged(const char *path, const char *tag, const void *buf, size_t bytes, a2amm_error *err);
int io_commit_staged(const char *path, const char *tag, a2amm_error *err);
void io_discard_staged(const char *path, const char *tag);

/*
 * A run's outputs as one set: DIR/output/<r>/NAME for every r < n, each
 * staged by io_write_staged as NAME.tmp.<tag>.
 *
 * io_set_commit checks that every staged file is there (and no folder is in
 * a final name's place), else removes them all and fails: nothing changed.
 * Then it makes the marker DIR/output/NAME.commit.<tag> (the commit point),
 * renames the files in rank order, and removes the marker. A process that
 * dies between the two leaves the marker: io_remove_stale then completes the
 * commit, so the folder holds the old set or the new one, never a mix. A
 * rename that fails after the commit point removes that rank's file (old
 * and new) and fails. step(arg, k), when not NULL, is called once the
 * marker is made (k = 0) and after each rename (k = 1..n): the failure
 * tests pause there.
 * io_set_discard removes every staged file of the set.
 */
int io_set_commit(const char *dir, const char *name, int n, const char *tag, void (*step)(void *arg, int renamed),
                  void *arg, a2amm_error *err);
void io_set_discard(const char *dir, const char *name, int n, const char *tag);

/*
 * Puts right what interrupted writers left in DIR (of one tag, or of any
 * when tag is NULL): first completes every interrupted commit of a set
 * (renames its staged files into place; *completed, when not NULL, says how
 * many), then removes every "<layout file>.tmp.<tag>" in DIR/input,
 * DIR/output and their rank folders. With tag NULL, call it holding the
 * folder's lock (no writer of ours is then running). Returns how many files
 * it removed.
 */
int io_remove_stale(const char *dir, const char *tag, int *completed);

/* Whether DIR/output holds the marker of an interrupted commit (its path into marker). */
int io_set_pending(const char *dir, char *marker, size_t size);
/* Whether a rank folder of DIR/output holds a staged output ("npu_out.bin.tmp.<tag>": a run writing
 * now, or one killed with its guard); the first one's path into path. */
int io_staged_left(const char *dir, char *path, size_t size);

/* mkdir -p. */
int io_mkdirs(const char *path, a2amm_error *err);

/* Allocates (io_rank_inputs_alloc) and frees the four arrays of one rank. */
int io_rank_inputs_alloc(const op_sizes *sz, io_rank_inputs *in, a2amm_error *err);
void io_rank_inputs_free(io_rank_inputs *in);

/* Reads / writes rank r's four input files, each checked for its size. */
int io_load_rank_inputs(const char *dir, int rank, const op_sizes *sz,
                        io_rank_inputs *in, a2amm_error *err);
int io_save_rank_inputs(const char *dir, int rank, const op_sizes *sz,
                        const io_rank_inputs *in, a2amm_error *err);

/* What makes a line of a meta file unreadable as text (a NUL byte, a carriage return at its end), or NULL. */
const char *io_text_line_problem(const char *line, size_t len);
/* A2AMM_E_FORMAT for line `lineno` of the meta file at path (why, and the line: its first 60 characters,
 * without a carriage return at its end, none of a line holding a NUL). */
int io_meta_line_fail(a2amm_error *err, const char *path, int lineno, const char *why, const char *line, size_t len);

/*
 * DIR/input/a2amm-meta.txt. io_meta_read parses it strictly: the first line
 * 'a2amm-meta 1', then one 'key value' line for each of M, K, N, R,
 * a_type, b_type, dist, scale_mode and seed (decimal digits, known names),
 * and at most one 'op alltoall-matmul|matmul-alltoall' (gen writes it; a
 * file without it, as versions before the reverse op wrote, is
 * alltoall-matmul), nothing else. It returns A2AMM_E_IO when the file cannot be opened (the
 * message says "is missing" when it does not exist), A2AMM_E_FORMAT naming
 * the line and the rule when it is malformed.
 */
int io_meta_path(char *buf, size_t len, const char *dir, a2amm_error *err);
int io_meta_write(const char *dir, const io_meta *meta, a2amm_error *err);
int io_meta_read(const char *dir, io_meta *meta, a2amm_error *err);
/* The same rules on text in memory (len bytes; `path` names it in messages). */
int io_meta_parse(const char *text, size_t len, const char *path, io_meta *meta, a2amm_error *err);
/* The meta file's text for meta into text (size bytes); its length. */
size_t io_meta_format(const io_meta *meta, char *text, size_t size);

#endif
