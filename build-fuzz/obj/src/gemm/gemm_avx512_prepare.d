build-fuzz/obj/src/gemm/gemm_avx512_prepare.o: \
  src/gemm/gemm_avx512_prepare.c src/common/hugemem.h \
  src/gemm/gemm_avx512_internal.h src/common/error.h include/a2amm.h \
  src/common/pool.h src/gemm/gemm_exact.h src/gemm/gemm.h \
  src/gemm/gemm_fold.h src/gemm/gemm_internal.h src/mx/mx.h

src/common/hugemem.h:

src/gemm/gemm_avx512_internal.h:

src/common/error.h:

include/a2amm.h:

src/common/pool.h:

src/gemm/gemm_exact.h:

src/gemm/gemm.h:

src/gemm/gemm_fold.h:

src/gemm/gemm_internal.h:

src/mx/mx.h:
