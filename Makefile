# a2amm build. `make` builds build/a2amm, build/a2amm-bench (the benchmarks),
# build/liba2amm.a and build/liba2amm.so; `make check`
# sets up, builds and runs every test (optimized, then ASan+UBSan);
# `make run` sets up, builds and runs the main job on a default shape.

CC       ?= cc
BUILD    ?= build
OPT      ?= -O2 -g
# OpenBLAS's flags from pkg-config where it knows them (its headers sit in a
# distribution's own folder), else the plain -lopenblas.
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS   := $(or $(shell pkg-config --libs openblas 2>/dev/null),-lopenblas)
CPPFLAGS += -Iinclude -Isrc -I. -D_GNU_SOURCE $(BLAS_CFLAGS)
CFLAGS   += -std=c11 -Wall -Wextra -Werror -pthread $(OPT)
LDLIBS   += $(BLAS_LIBS) -lm -pthread
# The benchmarks' peers (oneDNN) are linked by a2amm-bench only: never by
# the library or the a2amm command.
BENCH_LDLIBS := -ldnnl
# Open MPI, for liba2amm_mpi and the commands' --transport mpi (never the core library).
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)
SAN      := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all

LIB_SRC  := $(sort $(filter-out src/cli/% src/mpi/%,$(wildcard src/*/*.c)))
MPI_SRC  := $(sort $(wildcard src/mpi/*.c))
MPI_OBJ  := $(MPI_SRC:%.c=$(BUILD)/obj/%.o)
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
# a2amm-bench: its own files and the command's helpers (all but main and the commands)
BENCH_SRC := $(sort $(wildcard bench/*.c)) $(filter-out src/cli/main.c src/cli/cmd_%.c,$(CLI_SRC))
TEST_SRC := $(sort $(wildcard tests/test_*.c))
# Programs the MPI tests (tests/test_mpi.sh) run under mpirun: linked with liba2amm_mpi and MPI.
MPI_TEST_SRC := $(sort $(wildcard tests/mpi_*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
BENCH_OBJ := $(BENCH_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
MPI_TEST_BIN := $(MPI_TEST_SRC:tests/%.c=$(BUILD)/tests/%)

.PHONY: all deps check check-opt check-san check-fuzz fuzz run clean bench install
all: $(BUILD)/a2amm $(BUILD)/a2amm-bench $(BUILD)/liba2amm.so $(BUILD)/liba2amm_mpi.a $(BUILD)/liba2amm_mpi.so $(TEST_BIN) \
     $(MPI_TEST_BIN)

deps:
	@scripts/install-deps.sh

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

# What includes mpi.h: the MPI transport, and the command's and benchmarks' runner.
$(BUILD)/obj/src/mpi/%.o $(BUILD)/pic/src/mpi/%.o $(BUILD)/obj/src/cli/%.o $(BUILD)/obj/bench/%.o: CPPFLAGS += $(MPI_CFLAGS)

$(BUILD)/liba2amm_mpi.a: $(MPI_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/liba2amm.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# The shared library: the same sources built position-independent with
# hidden visibility, so that it exports the public a2amm_* calls only.
VERSION  := 0.1.0
PIC_OBJ  := $(LIB_SRC:%.c=$(BUILD)/pic/%.o)

$(BUILD)/pic/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -fPIC -fvisibility=hidden -MMD -MP -c $< -o $@

$(BUILD)/liba2amm.so.0: $(PIC_OBJ)
	$(CC) $(CFLAGS) -shared -Wl,-soname,liba2amm.so.0 $^ -o $@ $(LDLIBS)

$(BUILD)/liba2amm.so: $(BUILD)/liba2amm.so.0
	ln -sf liba2amm.so.0 $@

# The shared MPI variant: the whole library and the MPI transport in one
# (the transport reaches into the comm layer, which liba2amm.so hides); a
# program links it instead of liba2amm.so, never both.
MPI_PIC_OBJ := $(MPI_SRC:%.c=$(BUILD)/pic/%.o)

$(BUILD)/liba2amm_mpi.so.0: $(PIC_OBJ) $(MPI_PIC_OBJ)
	$(CC) $(CFLAGS) -shared -Wl,-soname,liba2amm_mpi.so.0 $^ -o $@ $(LDLIBS) $(MPI_LIBS)

$(BUILD)/liba2amm_mpi.so: $(BUILD)/liba2amm_mpi.so.0
	ln -sf liba2amm_mpi.so.0 $@

# make install PREFIX=...: the headers, the libraries (liba2amm_mpi.a: the MPI
# transport, linked with liba2amm.a and MPI; liba2amm_mpi.so: both in one),
# a2amm.pc, a2amm-mpi.pc and the commands.
PREFIX ?= /usr/local
install: $(BUILD)/a2amm $(BUILD)/a2amm-bench $(BUILD)/liba2amm.a $(BUILD)/liba2amm.so $(BUILD)/liba2amm_mpi.a \
         $(BUILD)/liba2amm_mpi.so
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/a2amm.h include/a2amm_mpi.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/liba2amm.a $(BUILD)/liba2amm_mpi.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/liba2amm.so.0 $(DESTDIR)$(PREFIX)/lib/
	ln -sf liba2amm.so.0 $(DESTDIR)$(PREFIX)/lib/liba2amm.so
	install -m 755 $(BUILD)/liba2amm_mpi.so.0 $(DESTDIR)$(PREFIX)/lib/
	ln -sf liba2amm_mpi.so.0 $(DESTDIR)$(PREFIX)/lib/liba2amm_mpi.so
	install -m 755 $(BUILD)/a2amm $(BUILD)/a2amm-bench $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS_PRIVATE@|$(BLAS_LIBS) -lm -pthread|' \
		a2amm.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/a2amm.pc
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS_PRIVATE@|$(BLAS_LIBS) -lm -pthread|' \
		a2amm-mpi.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/a2amm-mpi.pc

$(BUILD)/a2amm: $(CLI_OBJ) $(BUILD)/liba2amm_mpi.a $(BUILD)/liba2amm.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(MPI_LIBS)

$(BUILD)/a2amm-bench: $(BENCH_OBJ) $(BUILD)/liba2amm_mpi.a $(BUILD)/liba2amm.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(BENCH_LDLIBS) $(MPI_LIBS)

$(BUILD)/tests/%: tests/%.c $(BUILD)/liba2amm.a tests/check.h
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -Itests $< $(BUILD)/liba2amm.a -o $@ $(LDLIBS)

$(BUILD)/tests/mpi_%: tests/mpi_%.c $(BUILD)/liba2amm_mpi.a $(BUILD)/liba2amm.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(MPI_CFLAGS) $(CFLAGS) $< $(BUILD)/liba2amm_mpi.a $(BUILD)/liba2amm.a -o $@ $(LDLIBS) $(MPI_LIBS)

# The suite twice: an optimized build, then AddressSanitizer + UBSan; then
# a short bounded run of every fuzz target (libFuzzer, clang).
check: deps
	$(MAKE) check-opt
	$(MAKE) check-san
	$(MAKE) check-fuzz

check-opt:
	$(MAKE) BUILD=build all
	scripts/run-tests.sh build

check-san:
	$(MAKE) BUILD=build-san OPT="$(SAN)" all
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
		scripts/run-tests.sh build-san

# Fuzz targets (tests/fuzz/fuzz_*.c): the library and the CLI's parsers
# built by clang with libFuzzer, ASan and UBSan into build-fuzz/.
FUZZ_CC    ?= clang
FUZZ_BUILD := build-fuzz
FUZZ_SAN   := -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_SRC   := $(LIB_SRC) src/cli/args.c src/cli/op_args.c src/cli/json_read.c
FUZZ_OBJ   := $(FUZZ_SRC:%.c=$(FUZZ_BUILD)/obj/%.o)
FUZZ_BIN   := $(patsubst tests/fuzz/%.c,$(FUZZ_BUILD)/%,$(wildcard tests/fuzz/fuzz_*.c))

$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) -std=c11 -Wall -Wextra -Werror -pthread $(FUZZ_SAN) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/%: tests/fuzz/%.c $(FUZZ_OBJ)
	$(FUZZ_CC) $(CPPFLAGS) -std=c11 -Wall -Wextra -Werror -pthread $(FUZZ_SAN) -fsanitize=fuzzer $^ -o $@ $(LDLIBS)

.SECONDARY: $(FUZZ_OBJ)
fuzz: $(FUZZ_BIN)

# Each target for FUZZ_SECONDS (default 15) from its corpus in tests/fuzz/corpus.
check-fuzz: fuzz
	scripts/run-fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

run: deps
	$(MAKE) BUILD=build $(BUILD)/a2amm
	scripts/run-main.sh build

clean:
	rm -rf build build-san build-fuzz

-include $(shell find $(BUILD)/obj $(BUILD)/pic $(FUZZ_BUILD)/obj -name '*.d' 2>/dev/null)
