/*
 * The bits of every kernel level, as digests (not a test: a probe in
 * bench/tools, which make builds and the suite does not run). A refactoring
 * of src/gemm must keep each level's results to the bit; test_gemm checks
 * them against the reference within the contract's tolerance, which a
 * changed bit passes. This runs a fixed set of problems (shapes that cut
 * every row block, chunk and panel edge; every call; scales of every kind:
 * ordinary, extreme, NaN, all-zero blocks, Inf/NaN codes) through each
 * level this CPU can run and prints one 64-bit digest of the results per
 * (level, case), then one per level. Build it against two trees and diff
 * the outputs:
 *
 *   make build/tools/gemm_digest   (make all builds it too)
 *   build/tools/gemm_digest [level ...] > new.txt; old/build/tools/gemm_digest > old.txt; diff old.txt new.txt
 *
 * A case's digest covers C after the plain calls (gemm_accumulate,
 * gemm_multiply) and the bf16 output after the *_store calls (C is
 * unspecified then), over the whole buffers, so that a write outside the
 * region changes it too.
 *
 * --fp8-b prepares every B for calls of one row (gemm_b_prepare_for): where
 * a level has a small-M path, B is then kept in fp8 only and every call of
 * every size goes through it. Its digests must equal the plain run's.
 *
 * --nan-canonical digests every NaN result as the one quiet NaN (fp32
 * 0x7FC00000, bf16 0x7FC0): which NaN an operation on NaNs gives (sign,
 * payload) follows the operand order the compiler chose, so a NaN's bits
 * may differ between compilers and optimization levels (gcc -O2 and the
 * sanitized -O1 build do; the contract says NaN, not which); every
 * other bit may not. tests/test_digest.sh checks these digests.
 *
 * --sample runs a sixth of the list (every chosen shape once, every 8th
 * random case): tests/test_emulated_cpus.sh compares its digest under an
 * emulated CPU with the host's.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm/gemm.h"

static uint64_t state;

static uint64_t next(void)
{
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 0x2545F4914F6CDD1Dull;
}

static int64_t in(int64_t lo, int64_t hi) { return lo + (int64_t)(next() % (uint64_t)(hi - lo + 1)); }

enum { OUT_UNTOUCHED = 0x7FA5 }; /* what out holds before a call: a NaN no call writes */
static int nan_canonical; /* --nan-canonical */
static int sample;        /* --sample */

/* c's NaNs as 0x7FC00000 (--nan-canonical). */
static void canonical_f32(float *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &c[i], sizeof u);
        if ((u & 0x7FFFFFFFu) > 0x7F800000u) u = 0x7FC00000u, memcpy(&c[i], &u, sizeof u);
    }
}

/* out's NaNs as 0x7FC0, but for the bits never written (OUT_UNTOUCHED: a write outside the region shows) */
static void canonical_bf16(uint16_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((out[i] & 0x7FFFu) > 0x7F80u && out[i] != OUT_UNTOUCHED) out[i] = 0x7FC0;
}

/* FNV-1a over bytes. */
static uint64_t digest(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001B3ull;
    return h;
}

/* How a problem's scales and codes are drawn. */
typedef enum mix { ORDINARY, WIDE, EXTREME, ZEROS, SPECIAL, MIX_COUNT } mix;
static const char *const MIX_NAMES[MIX_COUNT] = {"ordinary", "wide", "extreme", "zeros", "special"};

static uint8_t scale_of(mix m)
{
    switch (m) {
    case ORDINARY: return (uint8_t)in(112, 140);
    case WIDE: return (uint8_t)in(0, 254);
    case EXTREME: { /* mostly ordinary, some near the fold rule's edges, a few NaN */
        int64_t r = in(0, 99);
        if (r < 70) return (uint8_t)in(110, 145);
        if (r < 80) return (uint8_t)in(0, 20);
        if (r < 90) return (uint8_t)in(230, 254);
        if (r < 97) return (uint8_t)in(1, 254);
        return 0xFF;
    }
    default: return (uint8_t)in(115, 135);
    }
}

static uint8_t code_of(mix m)
{
    uint8_t c = (uint8_t)next();
    if (m == SPECIAL) return c; /* Inf/NaN codes of either type included */
    return (c & 0x7F) == 0x7F ? (uint8_t)(c ^ 0x08) : ((c & 0x7C) == 0x7C ? (uint8_t)(c ^ 0x08) : c);
}

typedef struct gemm_case {
    a2amm_fp8_type ta, tb;
    int64_t rows, N, K, k0, klen, n0, n1;
    int call; /* 0 accumulate, 1 multiply, 2 accumulate_store, 3 multiply_store */
    mix m;
} gemm_case;

/* 1 with --fp8-b: B prepared for calls of one row; 0: for any */
static int64_t fp8_b;

/* Runs one case at one level; returns its digest (0 if the level cannot prepare B). */
static uint64_t run_case(gemm_isa isa, const gemm_case *g, uint64_t seed)
{
    state = seed;
    int64_t K = g->K, N = g->N, rows = g->rows, nkb = K / 32;
    int64_t lda = K + in(0, 5), ldsa = nkb + in(0, 2), ldsb = nkb + in(0, 2), ldc = N + in(0, 9), ldo = N + in(0, 7);
    uint8_t *b = malloc((size_t)(N * K)), *sb = malloc((size_t)(N * ldsb));
    uint8_t *a = malloc((size_t)(rows * lda)), *sa = malloc((size_t)(rows * ldsa));
    float *c = malloc((size_t)(rows * ldc) * sizeof *c);
    uint16_t *out = malloc((size_t)(rows * ldo) * sizeof *out);
    for (int64_t i = 0; i < N * K; i++) b[i] = code_of(g->m);
    for (int64_t i = 0; i < rows * lda; i++) a[i] = code_of(g->m);
    for (int64_t i = 0; i < N * ldsb; i++) sb[i] = scale_of(g->m);
    for (int64_t i = 0; i < rows * ldsa; i++) sa[i] = scale_of(g->m);
    if (g->m == ZEROS) { /* all-zero blocks (scale 0, as the quantizers give, or any) in A and B */
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < nkb; j++)
                if (in(0, 3) == 0) {
                    memset(a + i * lda + j * 32, in(0, 1) ? 0x00 : 0x80, 32);
                    sa[i * ldsa + j] = in(0, 1) ? 0 : (uint8_t)in(0, 254);
                }
        for (int64_t n = 0; n < N; n++)
            for (int64_t j = 0; j < nkb; j++)
                if (in(0, 3) == 0) {
                    memset(b + n * K + j * 32, 0, 32);
                    sb[n * ldsb + j] = in(0, 1) ? 0 : (uint8_t)in(0, 254);
                }
    }
    for (int64_t i = 0; i < rows * ldc; i++) c[i] = (float)in(-4000, 4000) / 64.0f;
    for (int64_t i = 0; i < rows * ldo; i++) out[i] = OUT_UNTOUCHED;
    gemm_b *gb = NULL;
    a2amm_error err;
    uint64_t h = 0xCBF29CE484222325ull;
    if (gemm_b_prepare_for(NULL, isa, b, sb, N, K, ldsb, g->tb, fp8_b, &gb, &err) == A2AMM_OK) {
        gemm_a_slab slab = {a + g->k0, sa + g->k0 / 32, lda, ldsa, g->ta};
        switch (g->call) {
        case 0: gemm_accumulate(gb, &slab, rows, g->k0, g->klen, g->n0, g->n1, c, ldc); break;
        case 1: gemm_multiply(gb, &slab, rows, g->k0, g->klen, g->n0, g->n1, c, ldc); break;
        case 2: gemm_accumulate_store(gb, &slab, rows, g->k0, g->klen, g->n0, g->n1, c, ldc, out, ldo); break;
        default: gemm_multiply_store(gb, &slab, rows, g->k0, g->klen, g->n0, g->n1, c, ldc, out, ldo); break;
        }
        if (nan_canonical) canonical_f32(c, (size_t)(rows * ldc)), canonical_bf16(out, (size_t)(rows * ldo));
        h = g->call < 2 ? digest(h, c, (size_t)(rows * ldc) * sizeof *c)
                        : digest(h, out, (size_t)(rows * ldo) * sizeof *out);
        gemm_b_free(gb);
    } else {
        h = 0;
    }
    free(a);
    free(sa);
    free(b);
    free(sb);
    free(c);
    free(out);
    return h;
}

enum { RANDOM_CASES = 220 };

/* Case i of the fixed list: a few chosen shapes (4 calls each), then RANDOM_CASES random ones. */
static gemm_case case_of(int i, int *count)
{
    /* rows, N, K: row blocks (192, 384), AMX groups (32) and tiles (6), panels (16, 64), chunks (512, 1024) */
    static const int64_t SHAPES[][3] = {
        {1, 1, 32},      {1, 64, 1024},    {5, 17, 64},      {6, 64, 512},     {7, 65, 544},
        {31, 63, 1056},  {32, 64, 2048},   {33, 130, 2080},  {191, 200, 1024}, {192, 128, 2048},
        {193, 129, 3072}, {385, 96, 1024}, {416, 70, 2048},  {600, 40, 3104},  {64, 1000, 256},
        {3, 3584, 1024}, {16, 700, 4096},  {130, 250, 96},   {40, 48, 4128},   {200, 64, 5120},
    };
    const int fixed = (int)(sizeof SHAPES / sizeof SHAPES[0]) * 4, random = RANDOM_CASES;
    *count = fixed + random;
    gemm_case g;
    state = 0x51ED270B9A3C4F61ull + (uint64_t)i * 0x9E3779B97F4A7C15ull;
    next();
    if (i < fixed) {
        const int64_t *s = SHAPES[i / 4];
        g.rows = s[0], g.N = s[1], g.K = s[2], g.call = i % 4;
        g.k0 = 0, g.klen = g.K, g.n0 = 0, g.n1 = g.N;
        g.m = (mix)(i / 4 % MIX_COUNT);
    } else {
        g.rows = in(0, 3) ? in(1, 80) : in(81, 500);
        g.N = in(0, 2) ? in(1, 200) : in(201, 600);
        g.K = 32 * (in(0, 2) ? in(1, 40) : in(41, 100));
        int64_t kb0 = in(0, 3) ? 0 : in(0, g.K / 32 - 1);
        g.k0 = 32 * kb0;
        g.klen = 32 * in(g.K / 32 == kb0 ? 0 : 1, g.K / 32 - kb0);
        g.n0 = in(0, 1) ? 0 : in(0, g.N - 1);
        g.n1 = in(0, 1) ? g.N : in(g.n0 + 1, g.N);
        g.call = (int)in(0, 3);
        g.m = (mix)in(0, MIX_COUNT - 1);
    }
    g.ta = in(0, 1) ? A2AMM_E4M3 : A2AMM_E5M2;
    g.tb = in(0, 1) ? A2AMM_E4M3 : A2AMM_E5M2;
    return g;
}

/* --sample: every fixed shape once (its call rotating with the shape) and every 8th random case, a sixth of
 * the list, for a run under emulation whose digest is compared with the same sample's on the host. */
static int in_sample(int i)
{
    int count;
    case_of(0, &count);
    const int fixed = count - RANDOM_CASES;
    return i < fixed ? i % 4 == (i / 4) % 4 : (i - fixed) % 8 == 0;
}

int main(int argc, char **argv)
{
    int count;
    case_of(0, &count);
    int levels = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--fp8-b")) fp8_b = 1;
        else if (!strcmp(argv[i], "--nan-canonical")) nan_canonical = 1;
        else if (!strcmp(argv[i], "--sample")) sample = 1;
        else levels++;
    }
    for (int isa = 0; isa < GEMM_ISA_COUNT; isa++) {
        int wanted = levels == 0;
        for (int i = 1; i < argc; i++) wanted |= !strcmp(argv[i], gemm_isa_name((gemm_isa)isa));
        if (!wanted) continue;
        if (!gemm_isa_supported((gemm_isa)isa)) {
            printf("%s: not run here (%s)\n", gemm_isa_name((gemm_isa)isa), gemm_isa_why_not((gemm_isa)isa));
            continue;
        }
        uint64_t all = 0xCBF29CE484222325ull;
        int ran = 0;
        for (int i = 0; i < count; i++) {
            if (sample && !in_sample(i)) continue;
            ran++;
            gemm_case g = case_of(i, &count);
            uint64_t h = run_case((gemm_isa)isa, &g, 0x1234567ull + (uint64_t)i * 0x9E3779B97F4A7C15ull);
            printf("%s case %3d: %016llx  %s x %s rows %lld N %lld K %lld k [%lld, +%lld) n [%lld, %lld) call %d %s\n",
                   gemm_isa_name((gemm_isa)isa), i, (unsigned long long)h, g.ta == A2AMM_E4M3 ? "e4m3" : "e5m2",
                   g.tb == A2AMM_E4M3 ? "e4m3" : "e5m2", (long long)g.rows, (long long)g.N, (long long)g.K,
                   (long long)g.k0, (long long)g.klen, (long long)g.n0, (long long)g.n1, g.call, MIX_NAMES[g.m]);
            all = digest(all, &h, sizeof h);
        }
        printf("%s: %016llx over %d cases%s\n", gemm_isa_name((gemm_isa)isa), (unsigned long long)all, ran,
               sample ? " (--sample)" : "");
    }
    return 0;
}
