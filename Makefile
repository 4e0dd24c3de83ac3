# a2amm build. `make` builds the command build/a2amm, the benchmarks
# build/a2amm-bench, the libraries build/liba2amm.{a,so} and
# build/liba2amm_mpi.{a,so}, the test programs and the probes in bench/tools;
# `make check` sets up, builds and runs every test (optimized, then
# ASan+UBSan, then the fuzzers); `make test T=NAME` builds and runs one test;
# `make run` sets up, builds the command and the libraries and runs the main
# job on a default shape; `make python` makes build/python-venv (Debian's
# python3) with the package; `make install PREFIX=...`, `make uninstall PREFIX=...`.

CC       ?= cc
BUILD    ?= build
OPT      ?= -O2 -g
# OpenBLAS's flags from pkg-config where it knows them (its headers sit in a
# distribution's own folder), else the plain -lopenblas. Only the harness
# (the fp64 reference) uses it: never the library.
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS   := $(or $(shell pkg-config --libs openblas 2>/dev/null),-lopenblas)
CPPFLAGS += -Iinclude -Isrc -I. -D_GNU_SOURCE
CFLAGS   += -std=c11 -ffp-contract=off -Wall -Wextra -Werror -pthread $(OPT)
# What the library needs, and all it needs.
LIB_LDLIBS := -lm -pthread
# The benchmarks' peers (oneDNN) are linked by a2amm-bench only: never by
# the library or the a2amm command.
BENCH_LDLIBS := -ldnnl
# Open MPI, for liba2amm_mpi and the commands' --transport mpi (never the core library).
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)
# The harness's programs (the command, the benchmarks, the tests) link all of it.
LDLIBS   += $(BLAS_LIBS) $(MPI_LIBS) $(LIB_LDLIBS)
SAN      := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
VERSION  := $(shell sed -n 's/^\#define A2AMM_VERSION_STRING "\(.*\)"/\1/p' include/a2amm.h)

# ---- Which files form which library (docs/design.md draws the layers) ------
# liba2amm: the operator and nothing else: the public API, the op, the
# transports, the kernels, MX, and what they share.
LIB_DIRS     := common mx gemm comm op api
# liba2amm_mpi adds the Open MPI transport.
MPI_DIRS     := mpi
# The harness: the command's own private library (the seed's layout, the
# generator, the fp64 reference, verify, the runner, measurement, tracing),
# linked by a2amm, a2amm-bench and the tests, never installed.
HARNESS_DIRS := util io gen ref verify cli
# The programs: the command's main and its commands; the benchmarks; the
# probes built beside them (bench/tools, each a program of its own).
CMD_SRC      := src/cli/main.c $(wildcard src/cli/cmd_*.c)
BENCH_SRC    := $(sort $(wildcard bench/*.c))
TOOL_SRC     := $(sort $(wildcard bench/tools/*.c))

dir_src      = $(sort $(foreach d,$(1),$(wildcard src/$(d)/*.c)))
LIB_SRC      := $(call dir_src,$(LIB_DIRS))
MPI_SRC      := $(call dir_src,$(MPI_DIRS))
HARNESS_SRC  := $(filter-out $(CMD_SRC),$(call dir_src,$(HARNESS_DIRS)))
TEST_SRC     := $(sort $(wildcard tests/test_*.c))
# Programs the MPI tests (tests/test_mpi.sh) run under mpirun: programs of
# the public API, linked with liba2amm_mpi.a as a user's would be.
MPI_TEST_SRC := $(sort $(wildcard tests/mpi_*.c))
LIB_OBJ      := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
MPI_OBJ      := $(MPI_SRC:%.c=$(BUILD)/obj/%.o)
HARNESS_OBJ  := $(HARNESS_SRC:%.c=$(BUILD)/obj/%.o)
CMD_OBJ      := $(CMD_SRC:%.c=$(BUILD)/obj/%.o)
BENCH_OBJ    := $(BENCH_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN     := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
MPI_TEST_BIN := $(MPI_TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TOOL_BIN     := $(TOOL_SRC:bench/tools/%.c=$(BUILD)/tools/%)

# The private archives the programs link: every global name kept, for the
# harness and the tests to reach inside.
CORE_A    := $(BUILD)/private/liba2amm-core.a
MPICORE_A := $(BUILD)/private/liba2amm-mpi-core.a
HARNESS_A := $(BUILD)/private/libharness.a
PRIVATE_A := $(HARNESS_A) $(MPICORE_A) $(CORE_A)

.PHONY: all deps check check-opt check-san check-fuzz fuzz run clean bench install uninstall test python
all: $(BUILD)/a2amm $(BUILD)/a2amm-bench $(BUILD)/liba2amm.a $(BUILD)/liba2amm.so $(BUILD)/liba2amm_mpi.a \
     $(BUILD)/liba2amm_mpi.so $(TEST_BIN) $(MPI_TEST_BIN) $(TOOL_BIN)

deps:
	@scripts/install-deps.sh

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

# What includes mpi.h: the MPI transport, and the command's and benchmarks' runner.
$(BUILD)/obj/src/mpi/%.o $(BUILD)/pic/src/mpi/%.o $(BUILD)/obj/src/cli/%.o $(BUILD)/obj/bench/%.o: CPPFLAGS += $(MPI_CFLAGS)
# What includes cblas.h: the fp64 reference, the sgemm baseline, the peers.
$(BUILD)/obj/src/ref/%.o $(BUILD)/obj/src/cli/%.o $(BUILD)/obj/bench/%.o: CPPFLAGS += $(BLAS_CFLAGS)

$(CORE_A): $(LIB_OBJ)
$(MPICORE_A): $(MPI_OBJ)
$(HARNESS_A): $(HARNESS_OBJ)
$(CORE_A) $(MPICORE_A) $(HARNESS_A):
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# The installed static libraries: their objects linked into one (ld -r)
# whose global names are a2amm_* only (objcopy makes the rest local), so a
# program with its own pool_create or parse_i64 links against them.
# liba2amm_mpi.a holds the whole library and the transport: link it alone.
define localized_archive
	@mkdir -p $(BUILD)/private
	ld -r $(2) -o $(BUILD)/private/$(notdir $(1)).o
	objcopy -w --keep-global-symbol='a2amm_*' $(BUILD)/private/$(notdir $(1)).o
	rm -f $(1) && ar rcs $(1) $(BUILD)/private/$(notdir $(1)).o
endef
$(BUILD)/liba2amm.a: $(LIB_OBJ)
	$(call localized_archive,$@,$^)
$(BUILD)/liba2amm_mpi.a: $(LIB_OBJ) $(MPI_OBJ)
	$(call localized_archive,$@,$^)

# The shared library: the same sources built position-independent with
# hidden visibility, so that it exports the public a2amm_* calls only.
PIC_OBJ  := $(LIB_SRC:%.c=$(BUILD)/pic/%.o)

$(BUILD)/pic/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -fPIC -fvisibility=hidden -MMD -MP -c $< -o $@

$(BUILD)/liba2amm.so.0: $(PIC_OBJ)
	$(CC) $(CFLAGS) -shared -Wl,-soname,liba2amm.so.0 -Wl,--no-undefined $^ -o $@ $(LIB_LDLIBS)

$(BUILD)/liba2amm.so: $(BUILD)/liba2amm.so.0
	ln -sf liba2amm.so.0 $@

# The shared MPI variant: the whole library and the MPI transport in one
# (the transport reaches into the comm layer, which liba2amm.so hides); a
# program links it instead of liba2amm.so, never both.
MPI_PIC_OBJ := $(MPI_SRC:%.c=$(BUILD)/pic/%.o)

$(BUILD)/liba2amm_mpi.so.0: $(PIC_OBJ) $(MPI_PIC_OBJ)
	$(CC) $(CFLAGS) -shared -Wl,-soname,liba2amm_mpi.so.0 $^ -o $@ $(LIB_LDLIBS) $(MPI_LIBS)

$(BUILD)/liba2amm_mpi.so: $(BUILD)/liba2amm_mpi.so.0
	ln -sf liba2amm_mpi.so.0 $@

# make install PREFIX=...: the headers, the libraries (liba2amm_mpi.a and
# liba2amm_mpi.so: the whole library and the MPI transport in one),
# a2amm.pc, a2amm-mpi.pc and the commands; make uninstall PREFIX=... removes
# exactly these files (INSTALLED), no folder. Outside /usr the .pc files'
# Libs carry -Wl,-rpath,${libdir}, so a program linked through pkg-config
# finds liba2amm.so.0 at run time without LD_LIBRARY_PATH or ldconfig.
PREFIX ?= /usr/local
INSTALLED := include/a2amm.h include/a2amm_mpi.h lib/liba2amm.a lib/liba2amm_mpi.a lib/liba2amm.so.0 \
             lib/liba2amm.so lib/liba2amm_mpi.so.0 lib/liba2amm_mpi.so lib/pkgconfig/a2amm.pc \
             lib/pkgconfig/a2amm-mpi.pc bin/a2amm bin/a2amm-bench
comma := ,
PC_RPATH = $(if $(filter /usr,$(patsubst %/,%,$(PREFIX))),,-Wl$(comma)-rpath$(comma)$${libdir})
PC_SED = sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS_PRIVATE@|$(LIB_LDLIBS)|' \
             -e 's|@RPATH@|$(PC_RPATH)|'
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
	$(PC_SED) a2amm.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/a2amm.pc
	$(PC_SED) a2amm-mpi.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/a2amm-mpi.pc

uninstall:
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/,$(INSTALLED))

$(BUILD)/a2amm: $(CMD_OBJ) $(PRIVATE_A)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/a2amm-bench: $(BENCH_OBJ) $(PRIVATE_A)
	$(CC) $(CFLAGS) $^ -o $@ $(BENCH_LDLIBS) $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(PRIVATE_A) tests/check.h
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -Itests $< $(PRIVATE_A) -o $@ $(LDLIBS)

$(BUILD)/tests/mpi_%: tests/mpi_%.c $(BUILD)/liba2amm_mpi.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(MPI_CFLAGS) $(CFLAGS) $< $(BUILD)/liba2amm_mpi.a -o $@ $(MPI_LIBS) $(LIB_LDLIBS)

$(BUILD)/tools/%: bench/tools/%.c $(CORE_A)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP $< $(CORE_A) -o $@ $(LIB_LDLIBS)

# The Python package (python/, `import a2amm`): pip installs it, offline, into the venv
# $(BUILD)/python-venv of Debian's python3 (its numpy, torch and mpi4py seen), against this build's
# library; `make check` tests it (tests/test_python.sh). README.md, "Python", says more.
PYTHON ?= /usr/bin/python3
python: $(BUILD)/liba2amm.so $(BUILD)/liba2amm_mpi.so
	$(PYTHON) -m venv --system-site-packages $(BUILD)/python-venv
	A2AMM_BUILD=$(abspath $(BUILD)) $(BUILD)/python-venv/bin/pip install --no-build-isolation --no-index ./python
	$(BUILD)/python-venv/bin/python -c "import a2amm; print('a2amm', a2amm.__version__, 'from', a2amm.library_path)"

# One test, built with what it runs: make test T=test_op (or T=test_run.sh);
# BUILD=build-san OPT="$(SAN)" for the sanitized build.
test: all
	@test -n "$(T)" || { echo "usage: make test T=NAME (a tests/test_*.c or tests/test_*.sh)" >&2; exit 2; }
	scripts/run-tests.sh $(BUILD) $(T)

$(BUILD)/tests/mpi_%: tests/mpi_%.c $(BUILD)/liba2amm_mpi.a $(BUILD)/liba2amm.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(MPI_CFLAGS) $(CFLAGS) $< $(BUILD)/liba2amm_mpi.a $(BUILD)/liba2amm.a -o $@ $(LDLIBS) $(MPI_LIBS)

# The suite twice: an optimized build, then AddressSanitizer + UBSan; then
# a short bounded run of every fuzz target (libFuzzer, clang). scripts/check.sh
# times each pass and ends with their counts added up. The builds use every
# core (JOBS=N to change).
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
check: deps
	@MAKE="$(MAKE)" scripts/check.sh

check-opt:
	$(MAKE) -j$(JOBS) BUILD=build all
	scripts/run-tests.sh build

check-san:
	$(MAKE) -j$(JOBS) BUILD=build-san OPT="$(SAN)" all
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
		scripts/run-tests.sh build-san

# Fuzz targets (tests/fuzz/fuzz_*.c): the library and the CLI's parsers
# built by clang with libFuzzer, ASan and UBSan into build-fuzz/.
FUZZ_CC    ?= clang
FUZZ_BUILD := build-fuzz
FUZZ_SAN   := -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_COV   := -fsanitize=fuzzer-no-link
FUZZ_SRC   := $(LIB_SRC) $(call dir_src,util io gen) src/cli/args.c src/cli/op_args.c src/cli/json_read.c
FUZZ_OBJ   := $(FUZZ_SRC:%.c=$(FUZZ_BUILD)/obj/%.o)
FUZZ_BIN   := $(patsubst tests/fuzz/%.c,$(FUZZ_BUILD)/%,$(wildcard tests/fuzz/fuzz_*.c))
# The vector kernels: linked (the op-kind table points at the ops that call them) but never run by a
# fuzz target, and the slowest sources to build instrumented (minutes each under clang's ASan, UBSan
# and coverage): built plain, at -O0. The sanitized test build checks them.
FUZZ_PLAIN_OBJ := $(patsubst %.c,$(FUZZ_BUILD)/obj/%.o,$(shell grep -l immintrin.h $(LIB_SRC)))

$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) -std=c11 -ffp-contract=off -Wall -Wextra -Werror -pthread $(FUZZ_SAN) $(FUZZ_COV) -MMD -MP -c $< -o $@
$(FUZZ_PLAIN_OBJ): FUZZ_SAN := -g -O0
$(FUZZ_PLAIN_OBJ): FUZZ_COV :=

$(FUZZ_BUILD)/%: tests/fuzz/%.c $(FUZZ_OBJ)
	$(FUZZ_CC) $(CPPFLAGS) -std=c11 -ffp-contract=off -Wall -Wextra -Werror -pthread $(FUZZ_SAN) -fsanitize=fuzzer $^ -o $@ $(LDLIBS)

.SECONDARY: $(FUZZ_OBJ)
fuzz: $(FUZZ_BIN)

# Each target for FUZZ_SECONDS (default 15) from its corpus in tests/fuzz/corpus.
check-fuzz:
	$(MAKE) -j$(JOBS) fuzz
	scripts/run-fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# The main job, after building the command and the libraries (what `make python`, examples/*.c
# and `make install` take next).
run: deps
	$(MAKE) BUILD=$(BUILD) $(BUILD)/a2amm $(BUILD)/liba2amm.a $(BUILD)/liba2amm.so $(BUILD)/liba2amm_mpi.a \
		$(BUILD)/liba2amm_mpi.so
	scripts/run-main.sh $(BUILD)

clean:
	rm -rf build build-san build-fuzz

-include $(shell find $(BUILD)/obj $(BUILD)/pic $(BUILD)/tools $(FUZZ_BUILD)/obj -name '*.d' 2>/dev/null)
