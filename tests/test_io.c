/*
 * Shape rules, exact-size reads, atomic writes, the meta file, and the
 * determinism of gen: each bad input gives an error naming what is wrong.
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "gen/gen.h"
#include "io/io.h"

static char tmpdir[256];

static void test_shape_rules(void)
{
    a2amm_error err = {0, ""};
    op_sizes z;
    op_shape s = {700, 256, 96, 2, A2AMM_E4M3, A2AMM_E4M3, OP_ALLTOALL_MATMUL};
    CHECK(op_shape_check(&s, &z, &err) == 0, "700 256 96 2 is fine: %s", err.msg);
    CHECK(z.ka == 128 && z.ska == 4 && z.sk == 8, "derived sizes ka=%lld ska=%lld sk=%lld",
          (long long)z.ka, (long long)z.ska, (long long)z.sk);
    CHECK(z.a_bytes == 2 * 700 * 128 && z.sa_bytes == 2 * 700 * 4 && z.b_bytes == 96 * 256 &&
          z.sb_bytes == 96 * 8 && z.out_bytes == 700 * 96 * 2, "byte sizes");

    s = (op_shape){100, 200, 64, 4, A2AMM_E4M3, A2AMM_E4M3, OP_ALLTOALL_MATMUL}; /* the seed's usage example */
    CHECK(op_shape_check(&s, NULL, &err) == A2AMM_E_INVAL && strstr(err.msg, "multiple of 32"),
          "ka = 50 refused naming the rule: %s", err.msg);
    s = (op_shape){100, 200, 64, 3, A2AMM_E4M3, A2AMM_E4M3, OP_ALLTOALL_MATMUL};
    CHECK(op_shape_check(&s, NULL, &err) == A2AMM_E_INVAL && strstr(err.msg, "divisible by R"),
          "K %% R != 0 refused: %s", err.msg);
    int64_t bad[][4] = {{0, 64, 8, 1}, {8, 0, 8, 1}, {8, 64, 0, 1}, {8, 64, 8, 0}, {-1, 64, 8, 1}, {8, 64, -5, 2}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s = (op_shape){bad[i][0], bad[i][1], bad[i][2], bad[i][3], A2AMM_E4M3, A2AMM_E4M3, OP_ALLTOALL_MATMUL};
        CHECK(op_shape_check(&s, NULL, &err) == A2AMM_E_INVAL && strstr(err.msg, "at least 1"),
              "non-positive dimension %zu refused: %s", i, err.msg);
    }
    s = (op_shape){INT64_C(1) << 40, INT64_C(1) << 20, INT64_C(1) << 30, 1, A2AMM_E4M3, A2AMM_E4M3, OP_ALLTOALL_MATMUL};
    CHECK(op_shape_check(&s, NULL, &err) == A2AMM_E_OVERFLOW && strstr(err.msg, "overflow"),
          "overflowing sizes refused: %s", err.msg);
    s = (op_shape){INT64_C(1) << 61, 32, 1, 1, A2AMM_E4M3, A2AMM_E4M3, OP_ALLTOALL_MATMUL};
    CHECK(op_shape_check(&s, NULL, &err) == A2AMM_E_OVERFLOW, "M=2^61 refused: %s", err.msg);
}

static void write_bytes(const char *path, size_t n)
{
    FILE *f = fopen(path, "wb");
    for (size_t i = 0; i < n; i++) fputc((int)(i & 0xFF), f);
    fclose(f);
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    if (d) closedir(d);
    return n;
}

static void test_read_exact(void)
{
    char path[512];
    uint8_t buf[64];
    a2amm_error err = {0, ""};
    snprintf(path, sizeof path, "%s/f.bin", tmpdir);
    write_bytes(path, 64);
    CHECK(io_read_exact(path, buf, 64, &err) == 0 && buf[63] == 63, "exact read: %s", err.msg);
    CHECK(io_read_exact(path, buf, 32, &err) == A2AMM_E_SIZE && strstr(err.msg, path) &&
              strstr(err.msg, "expected 32 bytes, found 64") && strstr(err.msg, "long"),
          "long file named with both sizes: %s", err.msg);
    write_bytes(path, 10);
    CHECK(io_read_exact(path, buf, 64, &err) == A2AMM_E_SIZE && strstr(err.msg, "expected 64 bytes, found 10") &&
              strstr(err.msg, "short"),
          "short file: %s", err.msg);
    snprintf(path, sizeof path, "%s/missing.bin", tmpdir);
    CHECK(io_read_exact(path, buf, 64, &err) == A2AMM_E_IO && strstr(err.msg, "missing.bin") &&
              strstr(err.msg, "64 bytes"),
          "missing file: %s", err.msg);
}

static void test_write_atomic(void)
{
    char path[1100], sub[512];
    a2amm_error err = {0, ""};
    snprintf(sub, sizeof sub, "%s/w", tmpdir);
    snprintf(path, sizeof path, "%s/a/b/out.bin", sub);
    uint8_t data[100];
    for (int i = 0; i < 100; i++) data[i] = (uint8_t)(i * 7);
    CHECK(io_write_atomic(path, data, 100, &err) == 0, "write into new folders: %s", err.msg);
    uint8_t back[100];
    CHECK(io_read_exact(path, back, 100, &err) == 0 && memcmp(back, data, 100) == 0, "round trip");
    char parent[600];
    snprintf(parent, sizeof parent, "%s/a/b", sub);
    CHECK(count_entries(parent) == 1, "no temporary file left beside the result (%d entries)", count_entries(parent));
    /* A write whose folder cannot be made (a file stands in the way) fails,
     * names the path and leaves nothing. */
    snprintf(path, sizeof path, "%s/a/b/out.bin/x.bin", sub);
    CHECK(io_write_atomic(path, data, 100, &err) == A2AMM_E_IO && strstr(err.msg, "out.bin"),
          "blocked write fails: %s", err.msg);
    CHECK(count_entries(parent) == 1, "failed write left something behind");
}

/* io_write_stream's fill: counts its calls, writes a line. */
static int fill_calls;
static int fill_line(FILE *f, void *arg)
{
    (void)arg;
    fill_calls++;
    return fputs("written\n", f) < 0;
}

/*
 * io_write_stream replaces only a regular file (or makes a new one): a
 * FIFO, a folder, a character device (made here as root, never the real
 * /dev/null) or a symlink to one is refused before anything is written,
 * and stays what it was.
 */
static void test_write_stream_destination(void)
{
    char sub[512], path[700], tmp[800];
    a2amm_error err = {0, ""};
    snprintf(sub, sizeof sub, "%s/dest", tmpdir);
    mkdir(sub, 0755);
    snprintf(path, sizeof path, "%s/plain.json", sub);
    fill_calls = 0;
    CHECK(io_write_stream(path, fill_line, NULL, &err) == 0 && fill_calls == 1, "a new file: %s", err.msg);
    CHECK(io_write_stream(path, fill_line, NULL, &err) == 0 && fill_calls == 2, "a regular file replaced: %s", err.msg);
    struct stat st;
    snprintf(path, sizeof path, "%s/fifo", sub);
    CHECK(mkfifo(path, 0644) == 0, "mkfifo %s", path);
    fill_calls = 0;
    CHECK(io_write_stream(path, fill_line, NULL, &err) == A2AMM_E_INVAL && strstr(err.msg, "is a FIFO, not a regular file")
          && fill_calls == 0, "a FIFO refused before the work: %s", err.msg);
    CHECK(lstat(path, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO is still a FIFO");
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    CHECK(access(tmp, F_OK) != 0, "no temporary file beside the refused FIFO");
    CHECK(io_write_stream(sub, fill_line, NULL, &err) == A2AMM_E_INVAL && strstr(err.msg, "is a folder") &&
          fill_calls == 0, "a folder refused: %s", err.msg);
    snprintf(path, sizeof path, "%s/none/x.json", sub);
    CHECK(io_write_stream(path, fill_line, NULL, &err) == A2AMM_E_IO && strstr(err.msg, "does not exist") &&
          fill_calls == 0, "a missing folder refused before the work: %s", err.msg);
    snprintf(path, sizeof path, "%s/null", sub);
    if (geteuid() == 0 && mknod(path, S_IFCHR | 0666, makedev(1, 3)) == 0) {
        char link[700];
        snprintf(link, sizeof link, "%s/to-null", sub);
        CHECK(symlink(path, link) == 0, "symlink %s", link);
        CHECK(io_write_stream(path, fill_line, NULL, &err) == A2AMM_E_INVAL &&
              strstr(err.msg, "is a character device, not a regular file") && fill_calls == 0,
              "a character device refused: %s", err.msg);
        CHECK(io_write_stream(link, fill_line, NULL, &err) == A2AMM_E_INVAL && strstr(err.msg, "character device") &&
              fill_calls == 0, "a symlink to a character device refused: %s", err.msg);
        CHECK(lstat(path, &st) == 0 && S_ISCHR(st.st_mode), "the device is still a device");
        CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode), "the symlink is still a symlink");
    } else {
        printf("test_io: the character-device case needs root and mknod (skipped; the FIFO case stands for it)\n");
    }
}

static void test_meta(void)
{
    io_meta m = {.shape = {700, 256, 96, 2, A2AMM_E5M2, A2AMM_E4M3}, .seed = UINT64_MAX};
    snprintf(m.dist, sizeof m.dist, "extreme");
    snprintf(m.scale_mode, sizeof m.scale_mode, "rceil");
    a2amm_error err = {0, ""};
    CHECK(io_meta_write(tmpdir, &m, &err) == 0, "meta write: %s", err.msg);
    io_meta back;
    CHECK(io_meta_read(tmpdir, &back, &err) == 0, "meta read: %s", err.msg);
    CHECK(back.shape.M == 700 && back.shape.K == 256 && back.shape.N == 96 && back.shape.R == 2 &&
              back.shape.a_type == A2AMM_E5M2 && back.shape.b_type == A2AMM_E4M3 && back.seed == UINT64_MAX &&
              !strcmp(back.dist, "extreme") && !strcmp(back.scale_mode, "rceil"),
          "meta round trip");
    char path[512];
    snprintf(path, sizeof path, "%s/input/a2amm-meta.txt", tmpdir);
    FILE *f = fopen(path, "w");
    fputs("a2amm-meta 1\nM 5\nK 64\nN 3\nR 1\na_type e9m9\nb_type e4m3\n", f);
    fclose(f);
    CHECK(io_meta_read(tmpdir, &back, &err) == A2AMM_E_FORMAT && strstr(err.msg, "e9m9"), "bad type: %s", err.msg);
    f = fopen(path, "w");
    fputs("a2amm-meta 1\nM 5\n", f);
    fclose(f);
    CHECK(io_meta_read(tmpdir, &back, &err) == A2AMM_E_FORMAT && strstr(err.msg, "incomplete"), "incomplete: %s", err.msg);
    /* the op: written by gen, read back; a file without it (as versions before the reverse op wrote) is the
     * seed's op; a bad or doubled op line is refused, naming it */
    static const char older[] = "a2amm-meta 1\nM 5\nK 64\nN 4\nR 2\na_type e4m3\nb_type e5m2\ndist normal\n"
                                "scale_mode floor\nseed 3\n";
    m.shape.kind = OP_MATMUL_ALLTOALL;
    CHECK(io_meta_write(tmpdir, &m, &err) == 0, "meta write: %s", err.msg);
    CHECK(io_meta_read(tmpdir, &back, &err) == 0 && back.shape.kind == OP_MATMUL_ALLTOALL, "the op round trip: %s",
          err.msg);
    char text[1024];
    io_meta_format(&m, text, sizeof text);
    CHECK(strstr(text, "\nop matmul-alltoall\n") != NULL, "the meta file names the op: %s", text);
    CHECK(io_meta_parse(older, sizeof older - 1, "older", &back, &err) == 0 && back.shape.kind == OP_ALLTOALL_MATMUL &&
              back.shape.N == 4, "a meta file without an op line is alltoall-matmul: %s", err.msg);
    char with[512];
    snprintf(with, sizeof with, "%sop matmul-alltoall\n", older);
    CHECK(io_meta_parse(with, strlen(with), "with", &back, &err) == 0 && back.shape.kind == OP_MATMUL_ALLTOALL,
          "op matmul-alltoall: %s", err.msg);
    snprintf(with, sizeof with, "%sop alltoall-matmul\n", older);
    CHECK(io_meta_parse(with, strlen(with), "with", &back, &err) == 0 && back.shape.kind == OP_ALLTOALL_MATMUL,
          "op alltoall-matmul: %s", err.msg);
    snprintf(with, sizeof with, "%sop matmul-then-alltoall\n", older);
    CHECK(io_meta_parse(with, strlen(with), "bad", &back, &err) == A2AMM_E_FORMAT &&
              strstr(err.msg, "bad:11: op must be alltoall-matmul or matmul-alltoall"), "a bad op: %s", err.msg);
    snprintf(with, sizeof with, "%sop matmul-alltoall\nop matmul-alltoall\n", older);
    CHECK(io_meta_parse(with, strlen(with), "twice", &back, &err) == A2AMM_E_FORMAT && strstr(err.msg, "twice:12"),
          "op twice: %s", err.msg);
    unlink(path);
    CHECK(io_meta_read(tmpdir, &back, &err) == A2AMM_E_IO && strstr(err.msg, "a2amm-meta.txt"), "missing: %s", err.msg);
}

/* Same seed, same bytes; another seed, other bytes; every dist fills all. */
static void test_gen_determinism(void)
{
    op_shape s = {5, 128, 3, 2, A2AMM_E4M3, A2AMM_E5M2, OP_ALLTOALL_MATMUL};
    op_sizes z;
    op_shape_check(&s, &z, NULL);
    for (int d = 0; d < GEN_DIST_COUNT; d++) {
        io_rank_inputs x, y, w;
        io_rank_inputs_alloc(&z, &x, NULL), io_rank_inputs_alloc(&z, &y, NULL), io_rank_inputs_alloc(&z, &w, NULL);
        gen_options o = {(gen_dist)d, 42, MX_SCALE_FLOOR}, o2 = o;
        o2.seed = 43;
        gen_rank_inputs(&s, &z, &o, 1, &x, NULL);
        gen_rank_inputs(&s, &z, &o, 1, &y, NULL);
        gen_rank_inputs(&s, &z, &o2, 1, &w, NULL);
        CHECK(!memcmp(x.a, y.a, z.a_bytes) && !memcmp(x.b, y.b, z.b_bytes) && !memcmp(x.sa, y.sa, z.sa_bytes) &&
                  !memcmp(x.sb, y.sb, z.sb_bytes),
              "dist %s: same seed, same bytes", gen_dist_name((gen_dist)d));
        CHECK(memcmp(x.a, w.a, z.a_bytes) && memcmp(x.b, w.b, z.b_bytes), "dist %s: seeds differ",
              gen_dist_name((gen_dist)d));
        io_rank_inputs_free(&x), io_rank_inputs_free(&y), io_rank_inputs_free(&w);
    }
    /* A fixed fingerprint: the first bytes of the default distribution must
     * not change between machines or releases without notice. */
    io_rank_inputs x;
    io_rank_inputs_alloc(&z, &x, NULL);
    gen_options o = {GEN_DIST_NORMAL, 1, MX_SCALE_FLOOR};
    gen_rank_inputs(&s, &z, &o, 0, &x, NULL);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < z.a_bytes; i++) h = (h ^ x.a[i]) * 1099511628211ull;
    for (size_t i = 0; i < z.sb_bytes; i++) h = (h ^ x.sb[i]) * 1099511628211ull;
    CHECK(h == 0x22a6445726642dfaull, "gen fingerprint (normal, seed 1) changed: %016llx", (unsigned long long)h);
    CHECK(x.sa[z.ska - 1] == 0 || z.ka / 32 == z.ska, "pad bytes are written as 0");
    io_rank_inputs_free(&x);
}

/* Staged writes: complete content under PATH.tmp.<tag> only, PATH only at
 * commit; discard removes it; io_remove_stale removes every such leftover. */
static void test_staged(void)
{
    char path[512], tmp[600];
    a2amm_error err;
    snprintf(path, sizeof path, "%s/st/output/0/npu_out.bin", tmpdir);
    snprintf(tmp, sizeof tmp, "%s.tmp.run7", path);
    uint8_t data[100];
    for (int i = 0; i < 100; i++) data[i] = (uint8_t)i;
    CHECK(io_write_staged(path, "run7", data, sizeof data, &err) == 0, "staged: %s", err.msg);
    CHECK(access(tmp, F_OK) == 0 && access(path, F_OK) != 0, "staged: only the temporary name exists");
    CHECK(io_commit_staged(path, "run7", &err) == 0, "commit: %s", err.msg);
    uint8_t back[100];
    CHECK(io_read_exact(path, back, sizeof back, &err) == 0 && !memcmp(back, data, sizeof data), "committed content");
    CHECK(access(tmp, F_OK) != 0, "no temporary after commit");
    CHECK(io_write_staged(path, "run8", data, 10, &err) == 0, "staged again: %s", err.msg);
    io_discard_staged(path, "run8");
    CHECK(io_read_exact(path, back, sizeof back, &err) == 0 && !memcmp(back, data, sizeof data),
          "a discarded write changed nothing");
    char stale[600], other[600], meta_stale[600];
    snprintf(stale, sizeof stale, "%s/st/output/0/npu_out.bin.tmp.123", tmpdir);
    snprintf(other, sizeof other, "%s/st/output/0/notes.txt.tmp.1", tmpdir);
    snprintf(meta_stale, sizeof meta_stale, "%s/st/input/a2amm-meta.txt.tmp.9", tmpdir);
    CHECK(io_write_atomic(stale, data, 1, &err) == 0 && io_write_atomic(other, data, 1, &err) == 0 &&
          io_write_atomic(meta_stale, data, 1, &err) == 0, "making leftovers: %s", err.msg);
    char st[512];
    snprintf(st, sizeof st, "%s/st", tmpdir);
    CHECK(io_remove_stale(st, NULL, NULL) == 2, "io_remove_stale removes the layout's leftovers only");
    CHECK(access(stale, F_OK) != 0 && access(meta_stale, F_OK) != 0 && access(other, F_OK) == 0,
          "what remains is what is not ours");
    CHECK(access(path, F_OK) == 0, "the real file stays");
}


/* Each rank's file of a set in folder d: its content (a byte per rank and version), or -1 when absent. */
static int set_file(const char *d, int r, const char *suffix)
{
    char path[600];
    uint8_t b[8];
    snprintf(path, sizeof path, "%s/output/%d/npu_out.bin%s", d, r, suffix);
    a2amm_error err;
    return io_read_exact(path, b, sizeof b, &err) ? -1 : b[0];
}

/* Stages version v of a 3-rank set under tag. */
static void stage_set(const char *d, const char *tag, int v)
{
    for (int r = 0; r < 3; r++) {
        char path[600];
        uint8_t b[8];
        memset(b, 16 * v + r, sizeof b);
        snprintf(path, sizeof path, "%s/output/%d/npu_out.bin", d, r);
        a2amm_error err;
        CHECK(io_write_staged(path, tag, b, sizeof b, &err) == 0, "staging %s: %s", path, err.msg);
    }
}

static int steps[8], nsteps;
static void record_step(void *arg, int renamed)
{
    (void)arg;
    if (nsteps < 8) steps[nsteps++] = renamed;
}
static void die_after_one(void *arg, int renamed)
{
    (void)arg;
    if (renamed == 1) _exit(0); /* a process killed between two renames */
}

/* The outputs as a set: all or nothing, and a commit cut short is completed by io_remove_stale. */
static void test_set(void)
{
    char d[512], marker[700], found[700];
    a2amm_error err;
    snprintf(d, sizeof d, "%s/set", tmpdir);
    snprintf(marker, sizeof marker, "%s/output/npu_out.bin.commit.t1", d);
    stage_set(d, "t1", 1);
    CHECK(io_set_commit(d, "npu_out.bin", 3, "t1", record_step, NULL, &err) == 0, "commit: %s", err.msg);
    CHECK(set_file(d, 0, "") == 16 && set_file(d, 1, "") == 17 && set_file(d, 2, "") == 18, "the set is in place");
    CHECK(nsteps == 4 && steps[0] == 0 && steps[3] == 3, "step at the commit point and after each rename (%d)", nsteps);
    CHECK(access(marker, F_OK) != 0 && !io_set_pending(d, NULL, 0), "no marker after the commit");

    stage_set(d, "t2", 2);
    char gone[600];
    snprintf(gone, sizeof gone, "%s/output/1/npu_out.bin.tmp.t2", d);
    unlink(gone);
    CHECK(io_set_commit(d, "npu_out.bin", 3, "t2", NULL, NULL, &err) == A2AMM_E_IO && strstr(err.msg, "rank 1") &&
          strstr(err.msg, "missing"), "a missing staged file refuses the commit, naming it: %s", err.msg);
    CHECK(set_file(d, 0, "") == 16 && set_file(d, 2, "") == 18 && set_file(d, 0, ".tmp.t2") < 0 &&
          set_file(d, 2, ".tmp.t2") < 0, "nothing changed, the staged files removed");

    char folder[600];
    snprintf(folder, sizeof folder, "%s/output/2/npu_out.bin", d);
    unlink(folder);
    mkdir(folder, 0755);
    stage_set(d, "t3", 3);
    CHECK(io_set_commit(d, "npu_out.bin", 3, "t3", NULL, NULL, &err) == A2AMM_E_IO && strstr(err.msg, "is a folder"),
          "a folder in an output's place refuses the commit: %s", err.msg);
    CHECK(set_file(d, 0, "") == 16 && set_file(d, 1, "") == 17, "nothing changed");
    rmdir(folder);

    /* killed between two renames: the marker says the commit began; the next one completes it */
    stage_set(d, "t4", 4);
    pid_t pid = fork();
    if (pid == 0) {
        io_set_commit(d, "npu_out.bin", 3, "t4", die_after_one, NULL, NULL);
        _exit(1);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the committer died after one rename");
    CHECK(set_file(d, 0, "") == 64 && set_file(d, 1, "") == 17 && set_file(d, 1, ".tmp.t4") == 65,
          "a mix, as the kill left it");
    CHECK(io_set_pending(d, found, sizeof found) && strstr(found, "npu_out.bin.commit.t4"),
          "the interrupted commit is seen: %s", found);
    int completed = -1;
    CHECK(io_remove_stale(d, "other", &completed) == 0 && completed == 0 && set_file(d, 1, "") == 17,
          "another tag's cleaning leaves it");
    CHECK(io_remove_stale(d, NULL, &completed) == 0 && completed == 2, "io_remove_stale completes it (%d)", completed);
    CHECK(set_file(d, 0, "") == 64 && set_file(d, 1, "") == 65 && set_file(d, 2, "") == 66, "the new set, whole");
    CHECK(!io_set_pending(d, NULL, 0), "no marker left");

    stage_set(d, "t5", 5);
    stage_set(d, "t6", 6);
    CHECK(io_remove_stale(d, "t5", &completed) == 3 && completed == 0, "one tag's staged files removed");
    CHECK(set_file(d, 0, ".tmp.t5") < 0 && set_file(d, 0, ".tmp.t6") == 96, "the other tag's kept");
    io_set_discard(d, "npu_out.bin", 3, "t6");
    CHECK(set_file(d, 2, ".tmp.t6") < 0 && set_file(d, 2, "") == 66, "discarded, the set unchanged");
}

int main(void)
{
    const char *tmp = getenv("TMPDIR"); /* this run's own folder under it (a long one: under /tmp) */
    if (!tmp || !*tmp || strlen(tmp) > sizeof tmpdir - 64) tmp = "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/a2amm-test-io.XXXXXX", tmp);
    if (!mkdtemp(tmpdir)) return 1;
    test_shape_rules();
    test_read_exact();
    test_write_atomic();
    test_write_stream_destination();
    test_meta();
    test_gen_determinism();
    test_staged();
    test_set();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_summary("test_io");
}
