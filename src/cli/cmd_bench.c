/*
 * `a2amm bench ...`: the benchmarks are a binary of their own, a2amm-bench
 * (bench/), so that a2amm and the library never link the peers they measure
 * against (oneDNN). This runs the a2amm-bench beside this a2amm.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"

int cmd_bench(int argc, char **argv)
{
    (void)argc;
    char self[PATH_MAX], bench[PATH_MAX + 16];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "a2amm bench: cannot find this program's folder (/proc/self/exe: %s); run a2amm-bench\n",
                strerror(errno));
        return 2;
    }
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) *slash = '\0';
    snprintf(bench, sizeof bench, "%s/a2amm-bench", slash ? self : ".");
    argv[0] = bench;
    execv(bench, argv);
    fprintf(stderr, "a2amm bench: cannot run %s: %s (make builds it beside a2amm; make install installs both)\n", bench,
            strerror(errno));
    return 2;
}
