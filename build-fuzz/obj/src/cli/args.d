build-fuzz/obj/src/cli/args.o: src/cli/args.c src/cli/args.h \
  include/a2amm.h src/common/parse.h src/mx/mx.h

src/cli/args.h:

include/a2amm.h:

src/common/parse.h:

src/mx/mx.h:
