/* Filling an a2amm_error: the one way library code reports a failure. */
#ifndef A2AMM_COMMON_ERROR_H
#define A2AMM_COMMON_ERROR_H

#include "a2amm.h"

/* Sets err (if not NULL) to code and a printf-style message; returns code. */
int a2amm_fail(a2amm_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The last failure a2amm_fail reported on the calling thread (code 0: none yet), whether or not it
 * was given an err to fill. */
const a2amm_error *error_last_here(void);
/* Forgets it (a forked child's copy of its parent's, say). */
void error_forget_here(void);

/* Clears err (if not NULL) to success. */
void a2amm_error_clear(a2amm_error *err);

#endif
