build-fuzz/obj/src/common/parse.o: src/common/parse.c src/common/parse.h

src/common/parse.h:
