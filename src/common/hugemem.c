/* Memory on transparent huge pages where the kernel allows it. */
#include "common/hugemem.h"

#include <stdlib.h>
#include <sys/mman.h>

void *hugemem_alloc(size_t bytes)
{
    const size_t huge = 2u << 20;
    if (bytes < huge / 8) return aligned_alloc(64, bytes ? (bytes + 63) / 64 * 64 : 64);
    size_t rounded = (bytes + huge - 1) / huge * huge;
    if (rounded == 0) rounded = huge;
    void *p = aligned_alloc(huge, rounded);
    if (p) madvise(p, rounded, MADV_HUGEPAGE);
    return p;
}
