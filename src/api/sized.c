/*
 * Structs a caller fills, read as the caller's header laid them out: their
 * first field is their size as the program was built. A smaller struct
 * (an older program) leaves the fields added since at 0, their defaults; a
 * larger one (a newer program) is fine as long as the fields this library
 * does not know are 0.
 */
#include <string.h>

#include "api/api_internal.h"
#include "common/error.h"

int api_read_sized(const void *given, void *ours, size_t ours_size, size_t oldest_size, const char *call,
                   const char *name, a2amm_error *err)
{
    size_t size;
    memcpy(&size, given, sizeof size);
    if (size == 0)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: %s's size is 0: make it with its initializer (A2AMM_..._INIT "
                          "or a2amm_..._init, from a2amm.h) before setting its fields", call, name);
    if (size < oldest_size)
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: %s's size is %zu bytes, smaller than any layout of it this "
                          "library knows (the oldest is %zu): was it made with its initializer?", call, name, size,
                          oldest_size);
    const unsigned char *extra = (const unsigned char *)given + ours_size;
    for (size_t i = 0; size > ours_size && i < size - ours_size; i++)
        if (extra[i])
            return a2amm_fail(err, A2AMM_E_INVAL, "%s: %s sets fields this library (a2amm %s, %zu bytes of it) does "
                              "not know (the program's is %zu bytes): use a library as new as the program's header",
                              call, name, A2AMM_VERSION_STRING, ours_size, size);
    memset(ours, 0, ours_size);
    memcpy(ours, given, size < ours_size ? size : ours_size);
    memcpy(ours, &ours_size, sizeof ours_size);
    return A2AMM_OK;
}
