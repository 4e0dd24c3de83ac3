build-fuzz/obj/src/comm/launch.o: src/comm/launch.c src/comm/comm_shm.h \
  src/comm/comm.h include/a2amm.h src/common/error.h

src/comm/comm_shm.h:

src/comm/comm.h:

include/a2amm.h:

src/common/error.h:
