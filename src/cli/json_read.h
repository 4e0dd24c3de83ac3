/*
 * A small JSON reader for the files a2amm reads back (its own traces):
 * the whole text into a tree of values. Strings keep their escapes decoded
 * (\uXXXX as UTF-8); numbers are doubles. Depth is bounded (a hostile file
 * cannot exhaust the stack).
 */
#ifndef A2AMM_CLI_JSON_READ_H
#define A2AMM_CLI_JSON_READ_H

#include <stddef.h>

typedef enum json_type { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_type;

typedef struct json_value {
    json_type type;
    double number;             /* JSON_NUMBER; JSON_BOOL: 0 or 1 */
    char *string;              /* JSON_STRING */
    struct json_value *items;  /* JSON_ARRAY, JSON_OBJECT: n values */
    char **keys;               /* JSON_OBJECT: n keys */
    size_t n;
} json_value;

/* Parses text[0..len); on failure returns -1 with why = "line L, column C: what". */
int json_parse(const char *text, size_t len, json_value *out, char *why, size_t why_size);
void json_free(json_value *v);
/* An object's member (the first of that key), or NULL; NULL for a non-object. */
const json_value *json_get(const json_value *obj, const char *key);
/* The number, or dflt when v is NULL or not a number. */
double json_number(const json_value *v, double dflt);
/* The string, or NULL when v is NULL or not a string. */
const char *json_string(const json_value *v);

#endif
