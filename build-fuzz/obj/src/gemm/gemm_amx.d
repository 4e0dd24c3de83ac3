build-fuzz/obj/src/gemm/gemm_amx.o: src/gemm/gemm_amx.c \
  src/gemm/gemm_amx.h src/common/cpu.h include/a2amm.h

src/gemm/gemm_amx.h:

src/common/cpu.h:

include/a2amm.h:
