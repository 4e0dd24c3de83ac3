/*
 * Whether this CPU's VDPBF16PS sums in the order the avx512 level's bits
 * assume: each lane adds its pair's odd product, then the even one, each
 * step rounded to fp32 (Intel's SDM; a Xeon and an AMD Zen 4 measured the
 * same). The avx512 level's matmul and its MoE down projection by K-pairs
 * are written for that order; a CPU that sums otherwise does not run the
 * level (gemm_isa_why_not says why), so a level's bits stay the same on
 * every CPU that runs it.
 */
#ifndef A2AMM_GEMM_BF16_ORDER_H
#define A2AMM_GEMM_BF16_ORDER_H

typedef enum gemm_dot_order {
    GEMM_DOT_ODD_FIRST,    /* (acc + odd) + even: the order the level assumes */
    GEMM_DOT_EVEN_FIRST,   /* (acc + even) + odd */
    GEMM_DOT_PAIR_FIRST,   /* acc + (odd + even) */
    GEMM_DOT_ONE_ROUNDING, /* acc + odd + even rounded once (in double) */
    GEMM_DOT_ORDERS
} gemm_dot_order;

/* Whether VDPBF16PS gives `order`'s value in every lane of a probe of random pairs with a wide exponent
 * spread (1024 lanes; on a Zen 4 each other order differs in about 4% of them). Only on a CPU with
 * AVX-512 F and BF16 (cpu_detected); 0 elsewhere. */
int gemm_bf16_dot_sums_as(gemm_dot_order order);

/* gemm_bf16_dot_sums_as(GEMM_DOT_ODD_FIRST), probed once a process. */
int gemm_bf16_dot_order_holds(void);

#endif
