build-fuzz/obj/src/comm/heap.o: src/comm/heap.c src/comm/comm_shm.h \
  src/comm/comm.h include/a2amm.h

src/comm/comm_shm.h:

src/comm/comm.h:

include/a2amm.h:
