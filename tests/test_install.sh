#!/usr/bin/env bash
# make install PREFIX=...: the header, the static and shared libraries, the
# command and a2amm.pc land there; the shared library exports the public
# a2amm_* calls and nothing else; examples/fused_op.c builds against the
# installed copy through pkg-config (shared, then static) and passes.
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
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
check "pkg-config knows a2amm" pkg-config --exists a2amm
expect_ok "the example builds against the installed shared library" \
    cc -std=c11 -Wall -Wextra -Werror "$root/examples/fused_op.c" $(pkg-config --cflags --libs a2amm) -lm -o "$SCRATCH/ex"
check "the example is linked to the installed liba2amm.so.0" bash -c "LD_LIBRARY_PATH='$prefix/lib' ldd '$SCRATCH/ex' | grep -q '$prefix/lib/liba2amm.so.0'"
LD_LIBRARY_PATH="$prefix/lib" expect_ok "the example runs" env LD_LIBRARY_PATH="$prefix/lib" "$SCRATCH/ex"
expect_output "the example checks its result" "fused_op: OK"
expect_ok "the example builds statically" \
    cc -std=c11 "$root/examples/fused_op.c" $(pkg-config --cflags a2amm) "$prefix/lib/liba2amm.a" \
    $(pkg-config --libs-only-other --static a2amm) $(pkg-config --static --libs-only-L --libs-only-l a2amm | sed 's/-la2amm//') -lm -o "$SCRATCH/ex-static"
expect_ok "the static example runs" "$SCRATCH/ex-static"
expect_output "the static example checks its result" "fused_op: OK"
# the same example as an MPI job, through the installed liba2amm_mpi
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
    expect_ok "the MPI example builds against the installed copy" \
        mpicc -std=c11 -Wall -Wextra -Werror -DWITH_MPI "$root/examples/fused_op.c" -I"$prefix/include" \
        "$prefix/lib/liba2amm_mpi.a" "$prefix/lib/liba2amm.a" $(pkg-config --libs-only-other --static a2amm) \
        $(pkg-config --static --libs-only-L --libs-only-l a2amm | sed 's/-la2amm//') -lm -o "$SCRATCH/ex-mpi"
    expect_ok "the MPI example runs under mpirun" env ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
        timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 --mca btl tcp,self "$SCRATCH/ex-mpi"
    expect_output "the MPI example checks its result" "fused_op: OK"
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
        bash -c "LD_LIBRARY_PATH='$prefix/lib' ldd '$SCRATCH/ex-mpi-so' | grep -q '$prefix/lib/liba2amm_mpi.so.0'"
    expect_ok "the shared MPI example runs under mpirun" env ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
        timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 --mca btl tcp,self \
        -x LD_LIBRARY_PATH="$prefix/lib" "$SCRATCH/ex-mpi-so"
    expect_output "the shared MPI example checks its result" "fused_op: OK"
else
    echo "SKIP: the MPI example: mpicc or mpirun is not installed" >&2
fi
expect_ok "the installed a2amm bench finds the installed a2amm-bench" "$prefix/bin/a2amm" bench gemm 8 16 32 --iters 1 --threads 1
finish
