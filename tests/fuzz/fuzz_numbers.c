/*
 * libFuzzer target: the one number rule (common/parse.h) on any string.
 * Accepted exactly when the string is decimal digits (with '-' for the
 * signed parser, a fraction and an exponent for the real one) and the value
 * fits; an accepted whole number prints back as the same digits (less
 * leading zeros).
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/parse.h"

static int all_digits(const char *s) { return *s && strspn(s, "0123456789") == strlen(s); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 64) return 0;
    char s[65];
    memcpy(s, data, size);
    s[size] = '\0';
    if (strlen(s) != size) return 0; /* a C string ends at its first NUL */
    uint64_t u;
    int rc = parse_u64(s, &u);
    if ((rc == PARSE_OK || rc == PARSE_RANGE) != all_digits(s)) abort();
    if (rc == PARSE_OK) {
        char back[32];
        snprintf(back, sizeof back, "%" PRIu64, u);
        const char *t = s;
        while (t[0] == '0' && t[1]) t++;
        if (strcmp(back, t)) abort();
    }
    int64_t i;
    rc = parse_i64(s, &i);
    int signed_digits = all_digits(s[0] == '-' ? s + 1 : s);
    if ((rc == PARSE_OK || rc == PARSE_RANGE) != signed_digits) abort();
    if (rc == PARSE_OK && s[0] != '-' && (uint64_t)i != u) abort();
    double d;
    rc = parse_double(s, &d);
    if (rc == PARSE_OK && (strchr(s, ' ') || strchr(s, '+') || strchr(s, 'x') || strchr(s, 'X') || s[0] == '-' ||
                           strchr(s, 'n') || strchr(s, 'N') || strchr(s, 'i') || strchr(s, 'I')))
        abort();
    if (all_digits(s) && size < 300 && rc != PARSE_OK) abort();
    return 0;
}
