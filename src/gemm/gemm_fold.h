/*
 * When the fast kernels may fold a block's E8M0 scale into its fp8 values.
 *
 * The fast kernels multiply folded values v * 2^(s - 127), stored in bf16
 * (AVX-512) or fp32 (AVX2), and accumulate the products in fp32. Folding
 * is exact, and the accumulation within the contract's tolerance, only while
 *   1. every folded value of a block is representable (bf16: a normal,
 *      since vdpbf16ps reads subnormal inputs as zero; fp32: finite), which
 *      is a range of the block's scale byte, and the block holds no NaN or
 *      Inf code (nor a NaN scale, 0xFF, which is outside every range);
 *   2. every product of a folded A value with a folded B value stays where
 *      the accumulation is harmless, which is a range of sa + sb:
 *      - above: products below 2^108, so a chunk of up to 2^10 of them (the
 *        kernels' KC is at most 1024) sums below 2^118, far from fp32's
 *        overflow, and Inf appears only where the exact arithmetic makes it;
 *      - below (bf16 only: vdpbf16ps flushes subnormal results): products of
 *        at least 2^-110, so each flush loses less than 2^-16 of one
 *        nonzero product and the total loss stays under 2^-16 of sum|a*b|.
 *        fp32 FMA keeps gradual underflow and needs no lower bound.
 * The bounds come from the formats' extreme magnitudes: every nonzero
 * finite fp8 value lies in [2^emin, 2^ecap) with emin = -9 / -16 (smallest
 * subnormal of E4M3 / E5M2) and ecap = 9 / 16 (448 < 2^9, 57344 < 2^16).
 * A block refused by these rules takes the exact path (gemm_exact.h).
 */
#ifndef A2AMM_GEMM_FOLD_H
#define A2AMM_GEMM_FOLD_H

#include "a2amm.h"

/* Where folded values live: bf16 (vdpbf16ps) or fp32 (FMA). */
typedef enum gemm_fold_format { GEMM_FOLD_BF16, GEMM_FOLD_F32 } gemm_fold_format;

/* log2 of the smallest nonzero magnitude of the format. */
static inline int gemm_fold_emin(a2amm_fp8_type t) { return t == A2AMM_E4M3 ? -9 : -16; }
/* The least e with every finite magnitude < 2^e. */
static inline int gemm_fold_ecap(a2amm_fp8_type t) { return t == A2AMM_E4M3 ? 9 : 16; }

/*
 * Scale bytes s in [lo, hi] fold every finite value of type t exactly:
 * largest magnitude < 2^(ecap + s - 127) <= 2^128 gives hi = 255 - ecap
 * (E4M3 246, E5M2 239). bf16 also needs the smallest one normal,
 * 2^(emin + s - 127) >= 2^-126, so lo = 1 - emin (E4M3 10, E5M2 17); every
 * fp8 value has at most 4 significant bits, so an fp32 subnormal still
 * holds it exactly and fp32 needs no lower bound.
 */
static inline int gemm_fold_scale_lo(gemm_fold_format f, a2amm_fp8_type t)
{
    return f == GEMM_FOLD_BF16 ? 1 - gemm_fold_emin(t) : 0;
}
static inline int gemm_fold_scale_hi(a2amm_fp8_type t) { return 255 - gemm_fold_ecap(t); }

/*
 * The range of sa + sb whose products all lie in [2^-110, 2^108):
 * sa + sb - 254 + emin_a + emin_b >= -110 and
 * sa + sb - 254 + ecap_a + ecap_b <= 108.
 */
static inline int gemm_fold_pair_lo(gemm_fold_format f, a2amm_fp8_type ta, a2amm_fp8_type tb)
{
    return f == GEMM_FOLD_BF16 ? 144 - gemm_fold_emin(ta) - gemm_fold_emin(tb) : 0;
}
static inline int gemm_fold_pair_hi(a2amm_fp8_type ta, a2amm_fp8_type tb)
{
    return 362 - gemm_fold_ecap(ta) - gemm_fold_ecap(tb);
}

/* Whether a magnitude (code & 0x7F) is NaN or Inf: E4M3 0x7F; E5M2 exponent 31. */
static inline int gemm_fold_code_special(unsigned magnitude, a2amm_fp8_type t)
{
    return t == A2AMM_E4M3 ? magnitude == 0x7F : (magnitude & 0x7C) == 0x7C;
}
/* The bits that, all set in a magnitude, make it special (see above). */
static inline unsigned gemm_fold_special_bits(a2amm_fp8_type t) { return t == A2AMM_E4M3 ? 0x7F : 0x7C; }

#endif
