build-fuzz/obj/src/mx/mx.o: src/mx/mx.c src/mx/mx.h include/a2amm.h

src/mx/mx.h:

include/a2amm.h:
