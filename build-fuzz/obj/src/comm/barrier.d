build-fuzz/obj/src/comm/barrier.o: src/comm/barrier.c src/comm/comm_shm.h \
  src/comm/comm.h include/a2amm.h

src/comm/comm_shm.h:

src/comm/comm.h:

include/a2amm.h:
