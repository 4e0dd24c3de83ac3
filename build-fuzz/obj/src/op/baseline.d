build-fuzz/obj/src/op/baseline.o: src/op/baseline.c \
  /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h \
  /usr/include/x86_64-linux-gnu/openblas-pthread/openblas_config.h \
  src/common/error.h include/a2amm.h src/mx/mx.h src/op/rank.h \
  src/comm/comm.h src/common/pool.h src/gemm/gemm.h src/op/op.h

/usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h:

/usr/include/x86_64-linux-gnu/openblas-pthread/openblas_config.h:

src/common/error.h:

include/a2amm.h:

src/mx/mx.h:

src/op/rank.h:

src/comm/comm.h:

src/common/pool.h:

src/gemm/gemm.h:

src/op/op.h:
