build-fuzz/obj/src/io/io.o: src/io/io.c src/io/io.h include/a2amm.h \
  src/common/error.h src/common/parse.h src/gen/gen.h src/mx/mx.h

src/io/io.h:

include/a2amm.h:

src/common/error.h:

src/common/parse.h:

src/gen/gen.h:

src/mx/mx.h:
