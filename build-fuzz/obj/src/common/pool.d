build-fuzz/obj/src/common/pool.o: src/common/pool.c src/common/pool.h \
  include/a2amm.h src/common/error.h

src/common/pool.h:

include/a2amm.h:

src/common/error.h:
