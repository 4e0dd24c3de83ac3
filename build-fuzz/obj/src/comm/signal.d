build-fuzz/obj/src/comm/signal.o: src/comm/signal.c src/comm/comm_shm.h \
  src/comm/comm.h include/a2amm.h

src/comm/comm_shm.h:

src/comm/comm.h:

include/a2amm.h:
