/* The size of the last-level cache, for the cache flushes of perf runs. */
#ifndef A2AMM_COMMON_LLC_H
#define A2AMM_COMMON_LLC_H

#include <stddef.h>

/* As this machine's sysfs reports it (sysconf can report the host's under a
 * hypervisor), else sysconf, else 32 MB. */
size_t llc_bytes(void);

#endif
