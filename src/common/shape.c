/* The fp8 type names (common/shape.h; the ops' shape rules are the op-kind table's: op/op_kind.c). */
#include "common/error.h"
#include "common/shape.h"

#include <string.h>
#include <strings.h>

const char *a2amm_fp8_type_name(a2amm_fp8_type t)
{
    return t == A2AMM_E4M3 ? "e4m3" : t == A2AMM_E5M2 ? "e5m2" : "(not an fp8 type)";
}

int a2amm_fp8_type_parse(const char *s, a2amm_fp8_type *out, a2amm_error *err)
{
    if (!s || !out) return a2amm_fail(err, A2AMM_E_INVAL, "a2amm_fp8_type_parse: s and out must not be NULL");
    if (strcasecmp(s, "e4m3") == 0) { *out = A2AMM_E4M3; return A2AMM_OK; }
    if (strcasecmp(s, "e5m2") == 0) { *out = A2AMM_E5M2; return A2AMM_OK; }
    return a2amm_fail(err, A2AMM_E_INVAL, "'%s' is not an fp8 type: expected e4m3 or e5m2", s);
}
