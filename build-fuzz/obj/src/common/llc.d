build-fuzz/obj/src/common/llc.o: src/common/llc.c src/common/llc.h

src/common/llc.h:
