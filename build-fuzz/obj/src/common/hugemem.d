build-fuzz/obj/src/common/hugemem.o: src/common/hugemem.c \
  src/common/hugemem.h

src/common/hugemem.h:
