build-fuzz/obj/src/gemm/gemm_exact.o: src/gemm/gemm_exact.c \
  src/gemm/gemm_exact.h src/gemm/gemm.h include/a2amm.h \
  src/common/pool.h src/gemm/gemm_fold.h src/common/hugemem.h \
  src/mx/mx.h

src/gemm/gemm_exact.h:

src/gemm/gemm.h:

include/a2amm.h:

src/common/pool.h:

src/gemm/gemm_fold.h:

src/common/hugemem.h:

src/mx/mx.h:
