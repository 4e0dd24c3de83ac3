/*
 * libFuzzer target: the JSON reader `a2amm timeline` reads traces with, on
 * any bytes. It must never crash or leak; a parse that succeeds gives a
 * tree whose every object member has a key and whose containers hold what
 * they count, and one that fails says where.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/json_read.h"

static void walk(const json_value *v, int depth)
{
    if (depth > 70) abort(); /* the reader bounds nesting at 64 */
    if ((v->type == JSON_ARRAY || v->type == JSON_OBJECT) && v->n && !v->items) abort();
    if (v->type == JSON_STRING && !v->string) abort();
    for (size_t i = 0; i < v->n; i++) {
        if (v->type == JSON_OBJECT && (!v->keys || !v->keys[i])) abort();
        if (v->type == JSON_OBJECT && json_get(v, v->keys[i]) == NULL) abort();
        walk(&v->items[i], depth + 1);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_value v;
    char why[160] = "";
    if (json_parse((const char *)data, size, &v, why, sizeof why) == 0) {
        walk(&v, 0);
        json_free(&v);
    } else if (strncmp(why, "line ", 5) != 0) {
        abort();
    }
    return 0;
}
