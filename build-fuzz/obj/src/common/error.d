build-fuzz/obj/src/common/error.o: src/common/error.c src/common/error.h \
  include/a2amm.h

src/common/error.h:

include/a2amm.h:
