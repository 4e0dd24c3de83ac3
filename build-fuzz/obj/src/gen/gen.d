build-fuzz/obj/src/gen/gen.o: src/gen/gen.c src/gen/gen.h include/a2amm.h \
  src/io/io.h src/mx/mx.h src/common/error.h

src/gen/gen.h:

include/a2amm.h:

src/io/io.h:

src/mx/mx.h:

src/common/error.h:
