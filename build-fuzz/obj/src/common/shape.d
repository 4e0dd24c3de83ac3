build-fuzz/obj/src/common/shape.o: src/common/shape.c src/common/error.h \
  include/a2amm.h

src/common/error.h:

include/a2amm.h:
