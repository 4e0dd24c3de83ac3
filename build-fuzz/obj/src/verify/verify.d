build-fuzz/obj/src/verify/verify.o: src/verify/verify.c \
  src/verify/verify.h src/mx/mx.h include/a2amm.h

src/verify/verify.h:

src/mx/mx.h:

include/a2amm.h:
