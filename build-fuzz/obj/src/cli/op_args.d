build-fuzz/obj/src/cli/op_args.o: src/cli/op_args.c src/cli/op_args.h \
  src/op/op.h include/a2amm.h src/gemm/gemm.h src/common/pool.h \
  src/cli/args.h

src/cli/op_args.h:

src/op/op.h:

include/a2amm.h:

src/gemm/gemm.h:

src/common/pool.h:

src/cli/args.h:
