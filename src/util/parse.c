/* Decimal numbers from text: digits only, overflow refused. */
#include "util/parse.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int parse_u64_n(const char *s, size_t len, uint64_t *out)
{
    if (len == 0) return PARSE_SYNTAX;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return PARSE_SYNTAX;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) {
            /* keep checking the syntax: "99999999999999999999x" is a syntax error */
            for (size_t j = i + 1; j < len; j++)
                if (s[j] < '0' || s[j] > '9') return PARSE_SYNTAX;
            return PARSE_RANGE;
        }
        v = v * 10 + d;
    }
    *out = v;
    return PARSE_OK;
}

int parse_u64(const char *s, uint64_t *out) { return parse_u64_n(s, strlen(s), out); }

int parse_i64(const char *s, int64_t *out)
{
    int neg = s[0] == '-';
    uint64_t v;
    int rc = parse_u64(s + neg, &v);
    if (rc) return rc;
    if (v > (uint64_t)INT64_MAX + (uint64_t)neg) return PARSE_RANGE;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return PARSE_OK;
}

/* The length of the run of digits at s. */
static size_t digits(const char *s)
{
    size_t n = 0;
    while (s[n] >= '0' && s[n] <= '9') n++;
    return n;
}

int parse_double(const char *s, double *out)
{
    size_t i = digits(s);
    if (i == 0) return PARSE_SYNTAX;
    if (s[i] == '.') {
        size_t f = digits(s + i + 1);
        if (f == 0) return PARSE_SYNTAX;
        i += 1 + f;
    }
    if (s[i] == 'e' || s[i] == 'E') {
        i++;
        if (s[i] == '-') i++;
        size_t e = digits(s + i);
        if (e == 0) return PARSE_SYNTAX;
        i += e;
    }
    if (s[i] != '\0') return PARSE_SYNTAX;
    errno = 0;
    double v = strtod(s, NULL); /* the syntax above is a subset of strtod's */
    if (errno == ERANGE && isinf(v)) return PARSE_RANGE;
    if (!isfinite(v)) return PARSE_RANGE;
    *out = v;
    return PARSE_OK;
}
