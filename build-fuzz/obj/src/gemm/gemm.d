build-fuzz/obj/src/gemm/gemm.o: src/gemm/gemm.c src/gemm/gemm_internal.h \
  src/gemm/gemm.h include/a2amm.h src/common/pool.h src/common/cpu.h \
  src/common/error.h src/gemm/gemm_amx.h src/mx/mx.h

src/gemm/gemm_internal.h:

src/gemm/gemm.h:

include/a2amm.h:

src/common/pool.h:

src/common/cpu.h:

src/common/error.h:

src/gemm/gemm_amx.h:

src/mx/mx.h:
