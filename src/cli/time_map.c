/* The runners' shared timings (time_map.h). */
#include "cli/time_map.h"

#include <string.h>
#include <sys/mman.h>

#include "common/error.h"

int time_map_create(time_map *m, int variants, int iters, int R, int rows, size_t chars, a2amm_error *err)
{
    memset(m, 0, sizeof *m);
    const size_t doubles = ((size_t)variants * (size_t)iters + (size_t)rows) * (size_t)R;
    const size_t bytes = doubles * sizeof(double) + chars;
    void *mem = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return a2amm_fail(err, A2AMM_E_NOMEM, "cannot allocate the run's bookkeeping (%zu bytes of timings)", bytes);
    *m = (time_map){.d = mem, .variants = variants, .iters = iters, .R = R, .rows = rows,
                    .text = chars ? (char *)mem + doubles * sizeof(double) : NULL, .chars = chars,
                    .bytes = bytes ? bytes : 1};
    return A2AMM_OK;
}

void time_map_free(time_map *m)
{
    if (m->d) munmap(m->d, m->bytes);
    memset(m, 0, sizeof *m);
}
