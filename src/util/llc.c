/* The size of the last-level cache, for the cache flushes of perf runs. */
#include "util/llc.h"

#include <stdio.h>
#include <unistd.h>

size_t llc_bytes(void)
{
    long kb = 0;
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    if (f) {
        if (fscanf(f, "%ldK", &kb) != 1) kb = 0;
        fclose(f);
    }
    if (kb > 0) return (size_t)kb * 1024;
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return llc > 0 && llc <= (1L << 30) ? (size_t)llc : (size_t)32 << 20;
}
