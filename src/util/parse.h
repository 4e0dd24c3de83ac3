/*
 * Numbers from text, one rule everywhere (command line, the meta file):
 * decimal digits only. No leading or trailing space, no '+', no 0x, no
 * octal reading of a leading 0; a '-' only where a signed value is asked
 * for; overflow is an error, never a wrap.
 */
#ifndef A2AMM_COMMON_PARSE_H
#define A2AMM_COMMON_PARSE_H

#include <stddef.h>
#include <stdint.h>

enum { PARSE_OK = 0, PARSE_SYNTAX = -1, PARSE_RANGE = -2 };

/* [0-9]+ (len bytes of s, not NUL-terminated) into *out. */
int parse_u64_n(const char *s, size_t len, uint64_t *out);
/* The same for a NUL-terminated s. */
int parse_u64(const char *s, uint64_t *out);
/* -?[0-9]+ into *out. */
int parse_i64(const char *s, int64_t *out);
/* [0-9]+(.[0-9]+)?([eE]-?[0-9]+)? into *out (finite). */
int parse_double(const char *s, double *out);

#endif
