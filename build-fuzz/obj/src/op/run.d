build-fuzz/obj/src/op/run.o: src/op/run.c src/common/error.h \
  include/a2amm.h src/common/llc.h src/io/io.h src/op/rank.h \
  src/comm/comm.h src/common/pool.h src/gemm/gemm.h src/op/op.h

src/common/error.h:

include/a2amm.h:

src/common/llc.h:

src/io/io.h:

src/op/rank.h:

src/comm/comm.h:

src/common/pool.h:

src/gemm/gemm.h:

src/op/op.h:
