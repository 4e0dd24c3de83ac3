build-fuzz/obj/src/gemm/gemm_avx2.o: src/gemm/gemm_avx2.c \
  src/common/error.h include/a2amm.h src/common/scratch.h \
  src/gemm/gemm_exact.h src/gemm/gemm.h src/common/pool.h \
  src/gemm/gemm_fold.h src/gemm/gemm_internal.h src/mx/mx.h

src/common/error.h:

include/a2amm.h:

src/common/scratch.h:

src/gemm/gemm_exact.h:

src/gemm/gemm.h:

src/common/pool.h:

src/gemm/gemm_fold.h:

src/gemm/gemm_internal.h:

src/mx/mx.h:
