/* Memory on transparent huge pages where the kernel allows it. */
#ifndef A2AMM_COMMON_HUGEMEM_H
#define A2AMM_COMMON_HUGEMEM_H

#include <stddef.h>

/*
 * bytes rounded up to 2 MB, 2 MB-aligned, advised MADV_HUGEPAGE; free() it.
 * Under 256 KB, plain 64-byte-aligned memory (not worth a 2 MB page).
 * For the fp32 accumulators C: the microkernel reads and writes 6 rows of C
 * that lie N*4 bytes apart at the end of every tile, and on 2 MB pages their
 * TLB misses vanish (measured: a few percent of the matmul). Plain memory
 * where THP is off. NULL when out of memory.
 */
void *hugemem_alloc(size_t bytes);

#endif
