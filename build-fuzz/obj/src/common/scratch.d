build-fuzz/obj/src/common/scratch.o: src/common/scratch.c \
  src/common/scratch.h src/common/hugemem.h

src/common/scratch.h:

src/common/hugemem.h:
