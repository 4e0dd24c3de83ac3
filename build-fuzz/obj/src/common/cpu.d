build-fuzz/obj/src/common/cpu.o: src/common/cpu.c src/common/cpu.h \
  include/a2amm.h src/common/error.h

src/common/cpu.h:

include/a2amm.h:

src/common/error.h:
