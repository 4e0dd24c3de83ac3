/*
 * moe_probe: the MoE op's call time on this machine (shared memory), for
 * docs/performance.md until `a2amm bench moe` exists:
 *
 *   build/tools/moe_probe R T H I E K [ITERS] [THREADS]
 *
 * R ranks of a2amm_launch, T tokens a rank, hidden H, inner I, E experts,
 * top-K uniform routing (distinct experts, weights 1/K), random fp8 data.
 * Prints the median call (the slowest rank's), tokens/s of the layer, and,
 * measured beside each call in the same run, a read of every local
 * expert's fp8 codes (the floor of a decode call, which hits nearly every
 * expert): the ratio call / read says how far the op is from memory speed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "a2amm.h"

typedef struct probe {
    int R, E, K, iters, threads;
    int64_t T, H, I;
    double seconds[64][64]; /* [rank][iteration] */
    double read_s[64][64];  /* the same rank reading its experts' fp8 bytes once, beside each call */
    uint64_t sink[64];
    int64_t hit[64];        /* each rank's experts hit by the first call */
    int rc[64];
    char msg[64][1100];
} probe;

static uint64_t next(uint64_t *s)
{
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fill(uint8_t *p, size_t n, uint8_t lo, uint8_t spread, uint64_t *s)
{
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(lo + next(s) % spread);
}

static int rank_fn(a2amm_comm *comm, void *arg)
{
    probe *p = arg;
    int r = a2amm_comm_rank(comm), local = p->E / p->R;
    const int64_t H = p->H, I = p->I, T = p->T;
    uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(r + 1);
    a2amm_error err = {0, ""};
    a2amm_moe_config cfg = A2AMM_MOE_CONFIG_INIT;
    cfg.experts = p->E, cfg.topk = p->K, cfg.hidden = H, cfg.inter = I, cfg.max_tokens = T ? T : 1;
    cfg.threads = p->threads;
    a2amm_moe *m = NULL;
    size_t n13 = (size_t)(local * 2 * I * H), n2 = (size_t)(local * H * I);
    uint8_t *w13 = malloc(n13), *s13 = malloc(n13 / 32), *w2 = malloc(n2), *s2 = malloc(n2 / 32);
    uint8_t *x = malloc((size_t)(T * H) + 1), *sx = malloc((size_t)(T * H / 32) + 1);
    int32_t *idx = malloc(sizeof *idx * (size_t)(T * p->K) + 4);
    float *w = malloc(sizeof *w * (size_t)(T * p->K) + 4);
    uint16_t *out = malloc(sizeof *out * (size_t)(T * H) + 2);
    fill(w13, n13, 0, 0x40, &s), fill(s13, n13 / 32, 122, 3, &s), fill(w2, n2, 0, 0x40, &s);
    fill(s2, n2 / 32, 121, 3, &s), fill(x, (size_t)(T * H), 0, 0x40, &s), fill(sx, (size_t)(T * H / 32), 126, 3, &s);
    for (int64_t t = 0; t < T; t++)
        for (int j = 0; j < p->K; j++) {
            int32_t e;
            int fresh;
            do {
                e = (int32_t)(next(&s) % (uint64_t)p->E), fresh = 1;
                for (int i = 0; i < j; i++) fresh &= idx[t * p->K + i] != e;
            } while (!fresh);
            idx[t * p->K + j] = e, w[t * p->K + j] = 1.0f / (float)p->K;
        }
    int rc = a2amm_moe_create(comm, &cfg, &m, &err);
    if (!rc) rc = a2amm_moe_set_weights(m, w13, s13, H / 32, w2, s2, I / 32, &err);
    if (!rc) rc = a2amm_moe_run(m, T, x, sx, H / 32, idx, w, out, &err); /* warm-up */
    for (int it = 0; !rc && it < p->iters; it++) {
        rc = a2amm_comm_barrier(comm, 60, &err);
        double t0 = now_s();
        if (!rc) rc = a2amm_moe_run(m, T, x, sx, H / 32, idx, w, out, &err);
        p->seconds[r][it] = now_s() - t0;
        /* the floor a decode call has: every local expert's fp8 codes read once (a sum of 8-byte words) */
        if (!rc) rc = a2amm_comm_barrier(comm, 60, &err);
        t0 = now_s();
        uint64_t sum = 0;
        const uint64_t *q13 = (const uint64_t *)w13, *q2 = (const uint64_t *)w2;
        for (size_t i = 0; i < n13 / 8; i++) sum += q13[i];
        for (size_t i = 0; i < n2 / 8; i++) sum += q2[i];
        p->read_s[r][it] = now_s() - t0;
        p->sink[r] += sum;
    }
    p->rc[r] = rc;
    snprintf(p->msg[r], sizeof p->msg[r], "%s", rc ? err.msg : "");
    a2amm_moe_destroy(m);
    free(w13), free(s13), free(w2), free(s2), free(x), free(sx), free(idx), free(w), free(out);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: moe_probe R T H I E K [ITERS] [THREADS]\n"
                        "  e.g. moe_probe 2 16 2048 1408 64 6 5   (a DeepSeek-V2-Lite layer, decode)\n");
        return 2;
    }
    probe *p = mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(p, 0, sizeof *p);
    p->R = atoi(argv[1]), p->T = atoll(argv[2]), p->H = atoll(argv[3]), p->I = atoll(argv[4]);
    p->E = atoi(argv[5]), p->K = atoi(argv[6]), p->iters = argc > 7 ? atoi(argv[7]) : 5;
    p->threads = argc > 8 ? atoi(argv[8]) : 0;
    if (p->R < 1 || p->R > 64 || p->iters < 1 || p->iters > 64 || p->E % p->R || p->K < 1 || p->K > p->E) {
        fprintf(stderr, "moe_probe: R 1 to 64, ITERS 1 to 64, E divisible by R, 1 <= K <= E\n");
        return 2;
    }
    a2amm_error err = {0, ""};
    a2amm_launch_options lo = {.size = sizeof lo};
    int rc = a2amm_launch(p->R, rank_fn, p, &lo, &err);
    if (rc) {
        fprintf(stderr, "moe_probe: %s\n", err.msg);
        return 1;
    }
    double slowest[64], read[64], ratio[64];
    for (int it = 0; it < p->iters; it++) {
        slowest[it] = read[it] = 0;
        for (int r = 0; r < p->R; r++) {
            if (p->seconds[r][it] > slowest[it]) slowest[it] = p->seconds[r][it];
            if (p->read_s[r][it] > read[it]) read[it] = p->read_s[r][it];
        }
        ratio[it] = slowest[it] / read[it];
    }
    qsort(slowest, (size_t)p->iters, sizeof *slowest, cmp_double);
    qsort(read, (size_t)p->iters, sizeof *read, cmp_double);
    qsort(ratio, (size_t)p->iters, sizeof *ratio, cmp_double);
    double med = slowest[p->iters / 2];
    double expert_bytes = (double)(3 * p->H * p->I) * (1 + 1.0 / 32);
    printf("moe_probe R=%d T=%lld H=%lld I=%lld E=%d K=%d (%s): median call %.3f ms (min %.3f, max %.3f), %.0f "
           "tokens/s of the layer; one expert's fp8 weights %.2f MB\n", p->R, (long long)p->T, (long long)p->H,
           (long long)p->I, p->E, p->K, a2amm_version(), med * 1e3, slowest[0] * 1e3, slowest[p->iters - 1] * 1e3,
           (double)p->T * p->R / med, expert_bytes / 1e6);
    printf("  beside each call, a read of the rank's experts' fp8 codes (%.0f MB a rank): median %.3f ms; call / read "
           "%.1f (%.1f-%.1f over the calls)\n", (double)(p->E / p->R) * 3 * (double)(p->H * p->I) / 1e6,
           read[p->iters / 2] * 1e3, ratio[p->iters / 2], ratio[0], ratio[p->iters - 1]);
    return 0;
}
