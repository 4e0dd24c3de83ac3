build-fuzz/obj/src/gemm/gemm_ref.o: src/gemm/gemm_ref.c \
  src/common/error.h include/a2amm.h src/gemm/gemm_exact.h \
  src/gemm/gemm.h src/common/pool.h src/gemm/gemm_fold.h \
  src/gemm/gemm_internal.h src/mx/mx.h

src/common/error.h:

include/a2amm.h:

src/gemm/gemm_exact.h:

src/gemm/gemm.h:

src/common/pool.h:

src/gemm/gemm_fold.h:

src/gemm/gemm_internal.h:

src/mx/mx.h:
