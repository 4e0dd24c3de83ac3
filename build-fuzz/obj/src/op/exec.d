build-fuzz/obj/src/op/exec.o: src/op/exec.c src/common/error.h \
  include/a2amm.h src/common/hugemem.h src/op/rank.h src/comm/comm.h \
  src/common/pool.h src/gemm/gemm.h src/op/op.h

src/common/error.h:

include/a2amm.h:

src/common/hugemem.h:

src/op/rank.h:

src/comm/comm.h:

src/common/pool.h:

src/gemm/gemm.h:

src/op/op.h:
