/*
 * A tiny test harness: CHECK records a failure with its place and a message
 * and goes on; check_summary() prints the counts and gives the exit code.
 */
#ifndef A2AMM_TESTS_CHECK_H
#define A2AMM_TESTS_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static long check_total, check_failed;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        check_total++;                                                          \
        if (!(cond)) {                                                          \
            check_failed++;                                                     \
            if (check_failed <= 50) {                                           \
                fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
                fprintf(stderr, __VA_ARGS__);                                   \
                fputc('\n', stderr);                                            \
            }                                                                   \
        }                                                                       \
    } while (0)

/* Prints "<name>: N checks, F failed" and returns the process exit code. */
static inline int check_summary(const char *name)
{
    printf("%s: %ld checks, %ld failed\n", name, check_total, check_failed);
    return check_failed == 0 && check_total > 0 ? 0 : 1;
}

/* A deterministic PRNG (xorshift64*) for test data; set rng_state to
 * choose a sequence. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static inline uint64_t rng(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

/* The bits of a float, and the float of some bits. */
static inline uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
