build-fuzz/obj/src/gemm/gemm_store.o: src/gemm/gemm_store.c \
  src/common/cpu.h include/a2amm.h src/gemm/gemm.h src/common/pool.h \
  src/gemm/gemm_bf16_round.h src/mx/mx.h

src/common/cpu.h:

include/a2amm.h:

src/gemm/gemm.h:

src/common/pool.h:

src/gemm/gemm_bf16_round.h:

src/mx/mx.h:
