build-fuzz/obj/src/gemm/gemm_avx512.o: src/gemm/gemm_avx512.c \
  src/common/scratch.h src/gemm/gemm_amx.h \
  src/gemm/gemm_avx512_internal.h src/common/error.h include/a2amm.h \
  src/common/pool.h src/gemm/gemm_exact.h src/gemm/gemm.h \
  src/gemm/gemm_fold.h src/gemm/gemm_internal.h \
  src/gemm/gemm_bf16_round.h src/mx/mx.h

src/common/scratch.h:

src/gemm/gemm_amx.h:

src/gemm/gemm_avx512_internal.h:

src/common/error.h:

include/a2amm.h:

src/common/pool.h:

src/gemm/gemm_exact.h:

src/gemm/gemm.h:

src/gemm/gemm_fold.h:

src/gemm/gemm_internal.h:

src/gemm/gemm_bf16_round.h:

src/mx/mx.h:
