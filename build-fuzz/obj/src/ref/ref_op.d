build-fuzz/obj/src/ref/ref_op.o: src/ref/ref_op.c src/ref/ref_op.h \
  include/a2amm.h /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h \
  /usr/include/x86_64-linux-gnu/openblas-pthread/openblas_config.h \
  src/common/error.h src/mx/mx.h

src/ref/ref_op.h:

include/a2amm.h:

/usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h:

/usr/include/x86_64-linux-gnu/openblas-pthread/openblas_config.h:

src/common/error.h:

src/mx/mx.h:
