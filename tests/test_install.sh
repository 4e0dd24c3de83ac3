#!/usr/bin/env bash
# make install PREFIX=...: the header, the static and shared libraries, the
# command and a2amm.pc land there; the libraries need nothing but libc, libm
# and pthreads, define a2amm_* names only (a program with its own
# pool_create links the static one), and agree with the header on the
# version; examples/fused_op.c and examples/sequence_parallel.c build
# against the installed copy through pkg-config (shared, then static; then
# over MPI) and pass, and the attention block refuses a shape it cannot split.
# A program linked through pkg-config (PKG_CONFIG_PATH naming the prefix)
# runs without LD_LIBRARY_PATH: the .pc files carry the prefix's run path.
# make uninstall PREFIX=... then leaves nothing of a2amm's in the prefix.
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/.." && pwd)
prefix="$SCRATCH/prefix"
expect_ok "make install PREFIX=..." make -C "$root" --no-print-directory install PREFIX="$prefix"
for f in include/a2amm.h include/a2amm_mpi.h lib/liba2amm.a lib/liba2amm_mpi.a lib/liba2amm.so.0 lib/liba2amm.so lib/liba2amm_mpi.so.0 lib/liba2amm_mpi.so lib/pkgconfig/a2amm.pc lib/pkgconfig/a2amm-mpi.pc bin/a2amm bin/a2amm-bench; do
    check "installed: $f" test -e "$prefix/$f"
done
exported=$(nm -D --defined-only "$prefix/lib/liba2amm.so.0" | awk '{print $3}')
check "the shared library exports a2amm_* calls" test "$(grep -c '^a2amm_' <<<"$exported")" -ge 20
check "and nothing else" test -z "$(grep -v '^a2amm_' <<<"$exported")"
for call in a2amm_launch a2amm_op_create a2amm_op_set_weights a2amm_op_input a2amm_op_run a2amm_op_destroy \
            a2amm_mx_quantize_f32 a2amm_mx_quantize_bf16 a2amm_mx_dequantize_f32 a2amm_weights_create a2amm_matmul; do
    check "exports $call" grep -qx "$call" <<<"$exported"
done
# the library is the operator only: libc, libm and pthreads; no BLAS, no Fortran runtime
deps=$(ldd "$prefix/lib/liba2amm.so.0")
check "liba2amm.so needs no BLAS" bash -c "! grep -qi 'blas' <<<'$deps'"
check "liba2amm.so needs no Fortran runtime" bash -c "! grep -Eqi 'gfortran|quadmath' <<<'$deps'"
check "liba2amm.so needs libc and libm, nothing else of the system's" \
    test -z "$(awk '/=>/{print $1}' <<<"$deps" | grep -Ev '^(libc|libm|libpthread|libgcc_s)\.so')"
# the static libraries' global names are a2amm_* only
for lib in liba2amm.a liba2amm_mpi.a; do
    names=$(nm -g --defined-only "$prefix/lib/$lib" | awk 'NF == 3 {print $3}')
    check "$lib defines a2amm_* names" test "$(grep -c '^a2amm_' <<<"$names")" -ge 20
    check "$lib defines no global name but a2amm_*: $(grep -v '^a2amm_' <<<"$names" | head -5 | tr '\n' ' ')" \
        test -z "$(grep -v '^a2amm_' <<<"$names")"
done
mnames=$(nm -g --defined-only "$prefix/lib/liba2amm.so.0" | awk 'NF == 3 {print $3}')
check "liba2amm.so defines no global name but a2amm_*" test -z "$(grep -v '^a2amm_' <<<"$mnames")"
# a program with names of its own that the library uses inside links against the static library
cat >"$SCRATCH/own_names.c" <<'C'
#include <a2amm.h>
#include <stdio.h>
#include <string.h>
/* names a2amm uses inside, defined here with other meanings */
int pool_create(int n) { return n + 1; }
int parse_i64(const char *s) { return (int)strlen(s); }
int cpu_has(int f) { return f * 2; }
void *comm_alloc(void) { return NULL; }
int gemm_b_prepare(void) { return 7; }
int main(void)
{
    float x[32];
    uint8_t codes[32], scale[1];
    a2amm_error err;
    for (int i = 0; i < 32; i++) x[i] = (float)i;
    int rc = a2amm_mx_quantize_f32(x, 1, 32, 32, A2AMM_E4M3, A2AMM_SCALE_FLOOR, codes, 32, scale, 1, &err);
    printf("own_names: %d %d %d %s rc %d scale %d version %s\n", pool_create(1), parse_i64("abc"), cpu_has(2),
           comm_alloc() ? "?" : "null", rc, scale[0], a2amm_version());
    return rc != 0 || pool_create(1) != 2 || parse_i64("abc") != 3 || gemm_b_prepare() != 7;
}
C
expect_ok "a program with its own pool_create, parse_i64, cpu_has ... links the static library" \
    cc -std=c11 -Wall -Wextra -Werror "$SCRATCH/own_names.c" -I"$prefix/include" "$prefix/lib/liba2amm.a" -lm -pthread \
    -o "$SCRATCH/own_names"
expect_ok "and runs with its own meanings and the library's" "$SCRATCH/own_names"
expect_output "the program's names are its own, the library's calls its" "own_names: 2 3 4 null rc 0 scale 123 version"
# the version: the header's, the library's and the pkg-config file's agree
# the header is the operator's: nothing of the seed's files (the command's harness keeps the layout)
check "the public headers name none of the seed's files" \
    bash -c "! grep -Ein 'input_a|input_b|scaleA|scaleB|npu_out|cpu_output|\.bin' '$prefix/include/a2amm.h' '$prefix/include/a2amm_mpi.h'"
hdr=$(sed -n 's/^#define A2AMM_VERSION_STRING "\(.*\)"/\1/p' "$prefix/include/a2amm.h")
check "the installed header has a version" test -n "$hdr"

# sp_ok "what" R CMD...: the attention block example runs and passes: its
# table has a row for each of the R ranks, every value on the check, the max
# of each step's time, and the OK line with the library's version
sp_ok() {
    local what=$1 R=$2; shift 2
    expect_ok "$what" "$@"
    expect_output "$what: the check passes" "sequence_parallel: OK (a2amm $hdr, built with the header of $hdr)"
    check "$what: a row for each of the $R ranks, none off the check" \
        test "$(grep -Ec '^ +[0-9]+ .* 0 of [0-9]+ values off, worst' "$SCRATCH/out")" -eq "$R"
    check "$what: each step's time, the max over ranks" grep -Eq '^ +max( +[0-9]+\.[0-9]+){4}$' "$SCRATCH/out"
}

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# bare CMD...: runs CMD without LD_LIBRARY_PATH, as a user's program runs
bare() { env -u LD_LIBRARY_PATH "$@"; }
check "pkg-config --libs a2amm gives the prefix's run path" \
    grep -qF -- "-Wl,-rpath,$prefix/lib" <<<"$(pkg-config --libs a2amm)"
check "pkg-config --libs a2amm-mpi gives the prefix's run path" \
    grep -qF -- "-Wl,-rpath,$prefix/lib" <<<"$(pkg-config --libs a2amm-mpi)"
check "pkg-config's a2amm version is the header's ($hdr)" test "$(pkg-config --modversion a2amm)" = "$hdr"
check "pkg-config's a2amm-mpi version is the header's" test "$(pkg-config --modversion a2amm-mpi)" = "$hdr"
check "pkg-config knows a2amm" pkg-config --exists a2amm
expect_ok "the example builds against the installed shared library" \
    cc -std=c11 -Wall -Wextra -Werror "$root/examples/fused_op.c" $(pkg-config --cflags --libs a2amm) -lm -o "$SCRATCH/ex"
check "the example finds the installed liba2amm.so.0 without LD_LIBRARY_PATH" \
    bash -c "env -u LD_LIBRARY_PATH ldd '$SCRATCH/ex' | grep -q '$prefix/lib/liba2amm.so.0'"
expect_ok "the example runs without LD_LIBRARY_PATH" bare "$SCRATCH/ex"
expect_output "the example checks its result" "fused_op: OK"
expect_output "the example prints a2amm_version(), the header's" "fused_op: OK (a2amm $hdr, built with the header of $hdr)"
# the attention block from the two ops (examples/sequence_parallel.c) at R = 1, 2 and 4, and its defaults;
# shapes with M not a tile's multiple, heads of 16 (two per MX block) and H/R = 32 (one block per row)
expect_ok "the sequence-parallel example builds against the installed shared library" \
    cc -std=c11 -Wall -Wextra -Werror "$root/examples/sequence_parallel.c" $(pkg-config --cflags --libs a2amm) -lm \
    -o "$SCRATCH/sp"
for shape in "1 16 2 32" "2 37 4 32" "4 24 8 16"; do
    sp_ok "sequence_parallel $shape" "${shape%% *}" bare "$SCRATCH/sp" $shape
done
sp_ok "sequence_parallel with its defaults (R = 4)" 4 bare "$SCRATCH/sp"
expect_output "it says what it ran" "R = 4 ranks x M = 64 tokens (S = 256), 8 heads x d = 64 (H = 512), causal"
# shapes it cannot split: refused with the rule, exit 2, before any rank starts
expect_fail "heads not divisible by R refused" "sequence_parallel: heads (6) must be divisible by R (4)" \
    bare "$SCRATCH/sp" 4 16 6 32
check "with exit 2" test "$(bare "$SCRATCH/sp" 4 16 6 32 2>/dev/null; echo $?)" = 2
expect_fail "H/R not whole MX blocks refused" "H/R = heads*d/R = 16 must be a multiple of 32" \
    bare "$SCRATCH/sp" 2 16 2 16
expect_fail "a count that is not one refused" "M must be a whole number from 1 to" \
    bare "$SCRATCH/sp" 2 0
expect_ok "the example builds statically" \
    cc -std=c11 "$root/examples/fused_op.c" $(pkg-config --cflags a2amm) "$prefix/lib/liba2amm.a" \
    $(pkg-config --libs-only-other --static a2amm) $(pkg-config --static --libs-only-L --libs-only-l a2amm | sed 's/-la2amm//') -lm -o "$SCRATCH/ex-static"
expect_ok "the static example runs" "$SCRATCH/ex-static"
expect_output "the static example checks its result" "fused_op: OK"
expect_ok "the sequence-parallel example builds statically" \
    cc -std=c11 "$root/examples/sequence_parallel.c" $(pkg-config --cflags a2amm) "$prefix/lib/liba2amm.a" \
    $(pkg-config --libs-only-other --static a2amm) $(pkg-config --static --libs-only-L --libs-only-l a2amm | sed 's/-la2amm//') \
    -lm -o "$SCRATCH/sp-static"
sp_ok "the static sequence_parallel 2 40 2 64" 2 "$SCRATCH/sp-static" 2 40 2 64
# the same example as an MPI job, through the installed liba2amm_mpi
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
    expect_ok "the MPI example builds against the installed copy" \
        mpicc -std=c11 -Wall -Wextra -Werror -DWITH_MPI "$root/examples/fused_op.c" -I"$prefix/include" \
        "$prefix/lib/liba2amm_mpi.a" -lm -pthread -o "$SCRATCH/ex-mpi"
    expect_ok "the MPI example runs under mpirun" env ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
        timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 --mca btl tcp,self "$SCRATCH/ex-mpi"
    expect_output "the MPI example checks its result" "fused_op: OK"
    # the attention block as an MPI job: R is the job's size
    mpirun_sp() { env ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" timeout 120 mpirun --allow-run-as-root \
        --oversubscribe --bind-to none --mca btl tcp,self "$@"; }
    expect_ok "the MPI sequence-parallel example builds against the installed copy" \
        mpicc -std=c11 -Wall -Wextra -Werror -DWITH_MPI "$root/examples/sequence_parallel.c" -I"$prefix/include" \
        "$prefix/lib/liba2amm_mpi.a" -lm -pthread -o "$SCRATCH/sp-mpi"
    sp_ok "sequence_parallel under mpirun -np 2" 2 mpirun_sp -np 2 "$SCRATCH/sp-mpi" 2 37 4 32
    sp_ok "sequence_parallel under mpirun -np 4" 4 mpirun_sp -np 4 "$SCRATCH/sp-mpi" 4 24 8 16
    sp_ok "sequence_parallel under mpirun -np 2, R left to the job" 2 mpirun_sp -np 2 "$SCRATCH/sp-mpi"
    expect_fail "an R that is not the job's size refused" \
        "sequence_parallel: R = 4, but the job has 2 ranks: run it with mpirun -np 4" mpirun_sp -np 2 "$SCRATCH/sp-mpi" 4
    expect_fail "a shape the job cannot split refused" "sequence_parallel: heads (3) must be divisible by R (2)" \
        mpirun_sp -np 2 "$SCRATCH/sp-mpi" 2 16 3 64
    # shared: liba2amm_mpi.so is the whole library and the transport, found through a2amm-mpi.pc
    mexported=$(nm -D --defined-only "$prefix/lib/liba2amm_mpi.so.0" | awk '{print $3}')
    check "liba2amm_mpi.so exports a2amm_mpi_comm_create" grep -qx a2amm_mpi_comm_create <<<"$mexported"
    check "liba2amm_mpi.so exports the core's calls too" grep -qx a2amm_op_run <<<"$mexported"
    check "and nothing but a2amm_*" test -z "$(grep -v '^a2amm_' <<<"$mexported")"
    check "pkg-config knows a2amm-mpi" pkg-config --exists a2amm-mpi
    expect_ok "the MPI example builds against the installed shared library" \
        mpicc -std=c11 -Wall -Wextra -Werror -DWITH_MPI "$root/examples/fused_op.c" $(pkg-config --cflags --libs a2amm-mpi) \
        -lm -o "$SCRATCH/ex-mpi-so"
    check "the MPI example is linked to the installed liba2amm_mpi.so.0" \
        bash -c "env -u LD_LIBRARY_PATH ldd '$SCRATCH/ex-mpi-so' | grep -q '$prefix/lib/liba2amm_mpi.so.0'"
    expect_ok "the shared MPI example runs under mpirun" env ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
        timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 --mca btl tcp,self \
        env -u LD_LIBRARY_PATH "$SCRATCH/ex-mpi-so"
    expect_output "the shared MPI example checks its result" "fused_op: OK"
    expect_ok "the MPI sequence-parallel example builds against the installed shared library" \
        mpicc -std=c11 -Wall -Wextra -Werror -DWITH_MPI "$root/examples/sequence_parallel.c" \
        $(pkg-config --cflags --libs a2amm-mpi) -lm -o "$SCRATCH/sp-mpi-so"
    sp_ok "the shared sequence_parallel under mpirun -np 2" 2 \
        mpirun_sp -np 2 env -u LD_LIBRARY_PATH "$SCRATCH/sp-mpi-so" 2 24 2 32
else
    echo "SKIP: the MPI example: mpicc or mpirun is not installed" >&2
fi
expect_ok "the installed a2amm bench finds the installed a2amm-bench" "$prefix/bin/a2amm" bench gemm 8 16 32 --iters 1 --threads 1
# make uninstall removes every file install put there, and nothing else
touch "$prefix/lib/not-ours.so" "$prefix/include/not-ours.h"
expect_ok "make uninstall PREFIX=..." make -C "$root" --no-print-directory uninstall PREFIX="$prefix"
check "nothing of a2amm's is left in the prefix: $(find "$prefix" ! -type d | grep -v not-ours | tr '\n' ' ')" \
    test -z "$(find "$prefix" ! -type d | grep -v not-ours)"
check "what was not a2amm's is left" test -e "$prefix/lib/not-ours.so" -a -e "$prefix/include/not-ours.h"
finish
