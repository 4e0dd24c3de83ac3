/* The JSON reader (see json_read.h): recursive descent over the text. */
#include "cli/json_read.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 64

typedef struct reader {
    const char *p, *start, *end;
    char *why;
    size_t why_size;
    int failed;
} reader;

static int fail(reader *r, const char *what)
{
    if (!r->failed) {
        int line = 1, col = 1;
        for (const char *q = r->start; q < r->p && q < r->end; q++) {
            if (*q == '\n') line++, col = 1;
            else col++;
        }
        snprintf(r->why, r->why_size, "line %d, column %d: %s", line, col, what);
        r->failed = 1;
    }
    return -1;
}

static void skip_space(reader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r')) r->p++;
}

static int literal(reader *r, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n)) return fail(r, "expected a value");
    r->p += n;
    return 0;
}

static int hex4(reader *r, unsigned *out)
{
    if (r->end - r->p < 4) return fail(r, "a \\u escape needs four hex digits");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = r->p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return fail(r, "a \\u escape needs four hex digits");
    }
    r->p += 4;
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xc0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A string at r->p (after its opening quote), decoded into a new buffer. */
static int parse_string(reader *r, char **out)
{
    const char *q = r->p;
    while (q < r->end && *q != '"') q += *q == '\\' ? 2 : 1;
    if (q >= r->end) return fail(r, "a string is not closed");
    char *s = malloc((size_t)(q - r->p) + 1), *o = s; /* decoding never lengthens */
    if (!s) return fail(r, "out of memory");
    while (*r->p != '"') {
        unsigned char c = (unsigned char)*r->p++;
        if (c < 0x20) { free(s); return fail(r, "a control character inside a string"); }
        if (c != '\\') { *o++ = (char)c; continue; }
        char e = *r->p++;
        switch (e) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp;
            if (hex4(r, &cp)) { free(s); return -1; }
            if (cp >= 0xd800 && cp < 0xdc00 && r->end - r->p >= 6 && r->p[0] == '\\' && r->p[1] == 'u') {
                unsigned lo;
                r->p += 2;
                if (hex4(r, &lo)) { free(s); return -1; }
                cp = lo >= 0xdc00 && lo < 0xe000 ? 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00) : 0xfffd;
            }
            if (cp >= 0xd800 && cp < 0xe000) cp = 0xfffd; /* a lone surrogate (Python writes one for a raw byte) */
            o += put_utf8(o, cp); /* at most 6 escape characters become at most 4 bytes */
            break;
        }
        default: free(s); return fail(r, "an unknown escape in a string");
        }
    }
    r->p++; /* the closing quote */
    *o = '\0';
    *out = s;
    return 0;
}

static int parse_value(reader *r, json_value *v, int depth);

/* Appends to a growing array of values (and keys for an object). */
static int push(reader *r, json_value *v, size_t *cap, char *key)
{
    if (v->n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 8;
        json_value *items = realloc(v->items, ncap * sizeof *items);
        if (!items) return fail(r, "out of memory");
        v->items = items;
        if (v->type == JSON_OBJECT) {
            char **keys = realloc(v->keys, ncap * sizeof *keys);
            if (!keys) return fail(r, "out of memory");
            v->keys = keys;
        }
        *cap = ncap;
    }
    memset(&v->items[v->n], 0, sizeof v->items[v->n]);
    if (v->type == JSON_OBJECT) v->keys[v->n] = key;
    v->n++;
    return 0;
}

static int parse_container(reader *r, json_value *v, int depth)
{
    int object = *r->p == '{';
    char close = object ? '}' : ']';
    v->type = object ? JSON_OBJECT : JSON_ARRAY;
    r->p++;
    size_t cap = 0;
    skip_space(r);
    if (r->p < r->end && *r->p == close) { r->p++; return 0; }
    for (;;) {
        char *key = NULL;
        skip_space(r);
        if (object) {
            if (r->p >= r->end || *r->p != '"') return fail(r, "expected a member's name in quotes");
            r->p++;
            if (parse_string(r, &key)) return -1;
            skip_space(r);
            if (r->p >= r->end || *r->p != ':') { free(key); return fail(r, "expected ':' after a member's name"); }
            r->p++;
        }
        if (push(r, v, &cap, key)) { free(key); return -1; }
        if (parse_value(r, &v->items[v->n - 1], depth + 1)) return -1;
        skip_space(r);
        if (r->p < r->end && *r->p == ',') { r->p++; continue; }
        if (r->p < r->end && *r->p == close) { r->p++; return 0; }
        return fail(r, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int parse_number(reader *r, json_value *v)
{
    const char *q = r->p;
    if (q < r->end && *q == '-') q++;
    if (q >= r->end || *q < '0' || *q > '9') return fail(r, "expected a value");
    while (q < r->end && ((*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' || *q == 'E' || *q == '+' || *q == '-'))
        q++;
    char buf[64];
    if ((size_t)(q - r->p) >= sizeof buf) return fail(r, "a number too long");
    memcpy(buf, r->p, (size_t)(q - r->p));
    buf[q - r->p] = '\0';
    char *end;
    v->number = strtod(buf, &end);
    if (*end) return fail(r, "a malformed number");
    v->type = JSON_NUMBER;
    r->p = q;
    return 0;
}

static int parse_value(reader *r, json_value *v, int depth)
{
    if (depth > JSON_MAX_DEPTH) return fail(r, "nested too deeply");
    skip_space(r);
    if (r->p >= r->end) return fail(r, "the text ends where a value was expected");
    switch (*r->p) {
    case '{':
    case '[': return parse_container(r, v, depth);
    case '"':
        r->p++;
        v->type = JSON_STRING;
        return parse_string(r, &v->string);
    case 't': v->type = JSON_BOOL, v->number = 1; return literal(r, "true");
    case 'f': v->type = JSON_BOOL, v->number = 0; return literal(r, "false");
    case 'n': v->type = JSON_NULL; return literal(r, "null");
    default: return parse_number(r, v);
    }
}

int json_parse(const char *text, size_t len, json_value *out, char *why, size_t why_size)
{
    memset(out, 0, sizeof *out);
    reader r = {text, text, text + len, why, why_size, 0};
    int rc = parse_value(&r, out, 0);
    if (!rc) {
        skip_space(&r);
        if (r.p != r.end) rc = fail(&r, "text after the value");
    }
    if (rc) json_free(out);
    return rc;
}

void json_free(json_value *v)
{
    if (!v) return;
    for (size_t i = 0; i < v->n; i++) {
        json_free(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->string);
    memset(v, 0, sizeof *v);
}

const json_value *json_get(const json_value *obj, const char *key)
{
    if (!obj || obj->type != JSON_OBJECT) return NULL;
    for (size_t i = 0; i < obj->n; i++)
        if (obj->keys[i] && !strcmp(obj->keys[i], key)) return &obj->items[i];
    return NULL;
}

double json_number(const json_value *v, double dflt) { return v && v->type == JSON_NUMBER ? v->number : dflt; }

const char *json_string(const json_value *v) { return v && v->type == JSON_STRING ? v->string : NULL; }
