/* Status codes and their messages; filling an a2amm_error. */
#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>

const char *a2amm_strerror(int status)
{
    switch (status) {
    case A2AMM_OK: return "success";
    case A2AMM_E_INVAL: return "invalid argument";
    case A2AMM_E_IO: return "input/output error";
    case A2AMM_E_SIZE: return "file size mismatch";
    case A2AMM_E_NOMEM: return "out of memory";
    case A2AMM_E_OVERFLOW: return "size overflow";
    case A2AMM_E_FORMAT: return "bad file content";
    case A2AMM_E_TIMEOUT: return "timed out";
    case A2AMM_E_PEER: return "another rank failed";
    case A2AMM_E_SYS: return "system call failed";
    case A2AMM_E_MISMATCH: return "results outside tolerance";
    case A2AMM_E_INTERRUPTED: return "interrupted";
    default: return "unknown status";
    }
}

/* The last failure reported on this thread (for the launcher's report of a rank that returned it). */
static _Thread_local a2amm_error last_here;

int a2amm_fail(a2amm_error *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_here.msg, sizeof last_here.msg, fmt, ap); /* fmt's arguments may be err's own message */
    va_end(ap);
    last_here.code = code;
    if (err) *err = last_here;
    return code;
}

const a2amm_error *error_last_here(void) { return &last_here; }

void error_forget_here(void) { a2amm_error_clear(&last_here); }

void a2amm_error_clear(a2amm_error *err)
{
    if (err) {
        err->code = A2AMM_OK;
        err->msg[0] = '\0';
    }
}

const char *a2amm_version(void) { return A2AMM_VERSION_STRING; }

int a2amm_version_number(void) { return A2AMM_VERSION; }
