/*
 * The seed's acceptance test on bf16 results, with more to say: torch's
 * allclose(golden, output, rtol, atol, equal_nan=True), i.e. per element
 * |golden - output| <= atol + rtol * |output| (NaN equal to NaN, an infinity
 * close only to itself), plus the seed's summary figures, the worst error in
 * bf16 ulps and the first element that is not close.
 */
#ifndef A2AMM_VERIFY_H
#define A2AMM_VERIFY_H

#include <stdint.h>

#define VERIFY_TOL 1e-2 /* the seed's rtol = atol */

typedef struct verify_stats {
    int64_t count;        /* elements compared */
    int64_t not_close;    /* elements failing allclose */
    int64_t over_tol;     /* |abs err| > atol, as the seed counts */
    int64_t nonfinite;    /* pairs skipped in the error figures (NaN/Inf in either) */
    double abs_max, abs_mean, rmse, rel_max;   /* over finite pairs */
    uint32_t ulp_max;     /* worst distance in bf16 ulps over finite pairs */
    int64_t ulp_max_index;
    int64_t first_bad;    /* index of the first element not close, or -1 */
    int pass;             /* not_close == 0 */
} verify_stats;

void verify_compare(const uint16_t *golden, const uint16_t *output, int64_t count, double rtol,
                    double atol, verify_stats *st);

/* Whether one pair is close under the rule above. */
int verify_close(uint16_t golden, uint16_t output, double rtol, double atol);

/* Distance between two finite bf16 values in units in the last place. */
uint32_t verify_bf16_ulp_distance(uint16_t a, uint16_t b);

/*
 * The end of a verify run, as the seed's script prints it: each rank's
 * PASS or FAIL (status[r]: 1 passed, 0 failed its check, -1 its files could
 * not be compared), then ALL PASS, or how
 * many ranks failed (`failed`: "differ from the golden", say) and how many
 * could not be compared (`unread`: "a file missing or of another size").
 * Returns whether every rank passed.
 */
int verify_print_summary(const signed char *status, int R, const char *failed, const char *unread);

#endif
