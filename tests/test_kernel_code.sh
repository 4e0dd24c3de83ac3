#!/usr/bin/env bash
# What no bit shows, read in the compiled kernels (the objects the build
# made): the kernels that stream weights keep their software prefetches, and
# none zeroes its sums with a memset.
# - Prefetches: GCC 12 deleted every call of the MoE down projection's
#   prefetch helper while it was a function of its own (a prefetch writes no
#   memory, so its pure-const pass found the helper "const" and the calls
#   dead): the kernels then waited on memory for weeks (1.26x on avx2 and
#   1.43x on avx512 at 4 rows, from memory, once restored:
#   the commit that restored them, 2026-12-06) and no test noticed.
# - Memsets: GCC turned a kernel's "zero the sums" loop over its whole array
#   into a `rep stos` on the stack at every call (the sums then in registers
#   anyway): 6% of the avx2 down projection at 64 rows. An unroll pragma on
#   the loop keeps it out.
# - Shifts by a register: the widening of fp8 codes shifts by an amount set
#   by the type, and where the type was a variable GCC shifted by a register
#   (`vpsraw %xmm, %zmm, %zmm`): two uops on Intel, one by an immediate. The
#   amx level's small-M kernels did so 45 times, until each type got a copy.
# Each kernel named below must hold a prefetch instruction and no `rep stos`
# or call of memset (the latter in an optimized build only: the sanitized
# build's -O1 keeps arrays on the stack and ASan's redzones are memsets); the
# widening kernels no vector shift by a register (again in an optimized
# build only).
. "$(dirname "$0")/lib.sh"
OBJ="$(dirname "$A2AMM")/obj/src"
command -v objdump >/dev/null || { echo "test_kernel_code.sh: objdump (binutils) missing" >&2; exit 1; }
sanitized=0
if nm "$OBJ/op/moe_down.o" 2>/dev/null | grep -q __asan; then
    sanitized=1
    echo "test_kernel_code.sh: a sanitized build: memsets not checked, prefetches checked"
fi

# kernel_code OBJECT REGEX: the functions of OBJECT whose names match REGEX,
# each with its count of prefetch instructions, of memsets and of vector
# shifts by a register (none listed where a kernel was renamed: the check
# below fails then, to be renamed here too)
kernel_code() {
    objdump -d --no-show-raw-insn "$1" | awk -v re="$2" '
        /^[0-9a-f]+ <[^>]+>:$/ { name = substr($2, 2, length($2) - 3); if (name ~ re) { fn = name; p[fn] += 0; m[fn] += 0 } else fn = ""; next }
        fn != "" && /\tprefetch/ { p[fn]++ }
        fn != "" && (/rep stos/ || /call.*<memset/) { m[fn]++ }
        fn != "" && /\tvps(ra|rl|ll)[wdq] +%xmm[0-9]+,/ { s[fn]++ }
        END { for (f in p) print f, p[f], m[f], s[f] + 0 }'
}

# kernels_of SPEC (OBJECT:REGEX): kernel_code of them into $SCRATCH/code, $obj, $re and $kernels set; fails
# (a check failed) where the object is missing
kernels_of() {
    obj="$OBJ/${1%%:*}" re="${1#*:}"
    check "$obj exists" test -f "$obj" || return 1
    kernel_code "$obj" "$re" >"$SCRATCH/code"
    kernels=$(wc -l <"$SCRATCH/code")
    check "$obj: kernels named /$re/ found (got $kernels)" test "$kernels" -gt 0
}

for spec in "op/moe_down.o:^(panels(256|512)|many(256|512))_" "op/moe_down_pairs.o:^pairs_[0-9]" \
            "gemm/gemm_avx2.o:^avx2_kernel8?_" "gemm/gemm_avx512.o:^avx512_kernel8?_"; do
    kernels_of "$spec" || continue
    while read -r fn prefetches memsets _; do
        case $fn in many*) ;; # the many-rows kernels read a block widened into L1: no prefetch of their own
        *) check "$obj: $fn holds $prefetches prefetch instructions, expected at least 1" test "$prefetches" -gt 0 ;;
        esac
        [ $sanitized = 1 ] || check "$obj: $fn holds $memsets memsets (rep stos or memset calls), expected none" test "$memsets" -eq 0
    done <"$SCRATCH/code"
    echo "test_kernel_code.sh: ${spec%%:*}: $kernels kernels named /$re/ checked"
done

# The kernels that widen fp8 codes in their loops: a shift's amount an
# immediate, in the optimized build (the sanitized build's -O1 does not
# carry the type's constant into the shifts). Not the quantizers: a copy of
# theirs for each type ran 5-7% slower on Zen 4 (mx_quantize_probe 4096
# 4096 20, avx2 level), and 1-2% at avx512.
[ $sanitized = 1 ] && { echo "test_kernel_code.sh: a sanitized build: shifts by a register not checked"; finish; exit; }
for spec in "gemm/gemm_amx.o:^amx_(block8|block8_half|kernel8)$" "gemm/gemm_avx512.o:^avx512_kernel8?_" \
            "gemm/gemm_avx2.o:^avx2_kernel8?_" "op/moe_down.o:^(panels(256|512)|many(256|512))_" \
            "op/moe_down_pairs.o:^pairs_[0-9]" "op/moe_down_amx.o:^(tiles_over_panels|moe_down_amx)$"; do
    kernels_of "$spec" || continue
    while read -r fn _ _ shifts; do
        check "$obj: $fn holds $shifts vector shifts by a register, expected none" test "$shifts" -eq 0
    done <"$SCRATCH/code"
    echo "test_kernel_code.sh: ${spec%%:*}: $kernels kernels named /$re/ checked for shifts by a register"
done
finish
