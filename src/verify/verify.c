/* bf16 result verification: allclose as the seed does it, and error figures. */
#include "verify/verify.h"

#include <math.h>
#include <stdio.h>

#include "mx/mx.h"

int verify_close(uint16_t golden, uint16_t output, double rtol, double atol)
{
    double g = mx_bf16_to_f32(golden), o = mx_bf16_to_f32(output);
    if (isnan(g) || isnan(o)) return isnan(g) && isnan(o);
    if (isinf(g) || isinf(o)) return g == o;
    return fabs(g - o) <= atol + rtol * fabs(o);
}

/* bf16 bits as an integer that orders like the values (-0 == +0). */
static int32_t bf16_ordered(uint16_t h)
{
    return (h & 0x8000) ? -(int32_t)(h & 0x7FFF) : (int32_t)h;
}

uint32_t verify_bf16_ulp_distance(uint16_t a, uint16_t b)
{
    int32_t d = bf16_ordered(a) - bf16_ordered(b);
    return (uint32_t)(d < 0 ? -d : d);
}

void verify_compare(const uint16_t *golden, const uint16_t *output, int64_t count, double rtol,
                    double atol, verify_stats *st)
{
    *st = (verify_stats){.count = count, .first_bad = -1, .ulp_max_index = -1};
    double sum_abs = 0.0, sum_sq = 0.0;
    int64_t finite = 0;
    for (int64_t i = 0; i < count; i++) {
        if (!verify_close(golden[i], output[i], rtol, atol)) {
            if (st->first_bad < 0) st->first_bad = i;
            st->not_close++;
        }
        double g = mx_bf16_to_f32(golden[i]), o = mx_bf16_to_f32(output[i]);
        if (!isfinite(g) || !isfinite(o)) {
            st->nonfinite++;
            continue;
        }
        double e = fabs(o - g);
        double rel = e / fmax(fabs(g), 1e-8);
        finite++;
        sum_abs += e;
        sum_sq += e * e;
        if (e > st->abs_max) st->abs_max = e;
        if (rel > st->rel_max) st->rel_max = rel;
        if (e > atol) st->over_tol++;
        uint32_t ulps = verify_bf16_ulp_distance(golden[i], output[i]);
        if (ulps > st->ulp_max || st->ulp_max_index < 0) {
            st->ulp_max = ulps;
            st->ulp_max_index = i;
        }
    }
    if (finite) {
        st->abs_mean = sum_abs / (double)finite;
        st->rmse = sqrt(sum_sq / (double)finite);
    }
    st->pass = st->not_close == 0;
}

int verify_print_summary(const signed char *status, int R, const char *failed, const char *unread)
{
    int npass = 0, nunread = 0;
    printf("\n============================================================\nVerification Summary:\n");
    for (int r = 0; r < R; r++) {
        npass += status[r] > 0, nunread += status[r] < 0;
        printf("  Rank %d: %s\n", r, status[r] > 0 ? "PASS" : status[r] ? "FAIL (its files: see above)" : "FAIL");
    }
    if (npass == R) {
        printf("\n[ALL PASS] All %d ranks passed verification!\n", R);
        return 1;
    }
    const int nfailed = R - npass - nunread;
    printf("\n[ERROR] ");
    if (nfailed) printf("%d of %d ranks %s%s", nfailed, R, failed, nunread ? "; " : "");
    if (nunread) printf("%d of %d ranks could not be compared (%s: see above)", nunread, R, unread);
    printf(".\n");
    return 0;
}
