#!/usr/bin/env bash
# The kernels that stream weights keep their software prefetches. GCC 12
# deleted every call of the MoE down projection's prefetch helper while it
# was a function of its own (a prefetch writes no memory, so its pure-const
# pass found the helper "const" and the calls dead): the kernels then waited
# on memory for weeks (1.26x on avx2 and 1.43x on avx512 at 4 rows, from
# memory, once restored: docs/performance.md) and no test noticed, as the
# bits do not change. This reads the compiled objects: each kernel named
# below must hold a prefetch instruction.
. "$(dirname "$0")/lib.sh"
OBJ="$(dirname "$A2AMM")/obj/src"
command -v objdump >/dev/null || { echo "test_prefetch.sh: objdump (binutils) missing" >&2; exit 1; }

# prefetch_counts OBJECT REGEX: the functions of OBJECT whose names match
# REGEX, each with its count of prefetch instructions (none listed where a
# kernel was renamed: the check below fails then, to be renamed here too)
prefetch_counts() {
    objdump -d --no-show-raw-insn "$1" | awk -v re="$2" '
        /^[0-9a-f]+ <[^>]+>:$/ { name = substr($2, 2, length($2) - 3); if (name ~ re) { fn = name; n[fn] += 0 } else fn = "" ; next }
        fn != "" && /\tprefetch/ { n[fn]++ }
        END { for (f in n) print f, n[f] }'
}

for spec in "op/moe_down.o:^panels(256|512)_" "op/moe_down_pairs.o:^pairs_[0-9]" \
            "gemm/gemm_avx2.o:^avx2_kernel8?_" "gemm/gemm_avx512.o:^avx512_kernel8?_"; do
    obj="$OBJ/${spec%%:*}" re="${spec#*:}"
    check "$obj exists" test -f "$obj" || continue
    prefetch_counts "$obj" "$re" >"$SCRATCH/counts"
    kernels=$(wc -l <"$SCRATCH/counts")
    check "$obj: kernels named /$re/ found (got $kernels)" test "$kernels" -gt 0
    while read -r fn count; do
        check "$obj: $fn holds $count prefetch instructions, expected at least 1" test "$count" -gt 0
    done <"$SCRATCH/counts"
    echo "test_prefetch.sh: ${spec%%:*}: $kernels kernels named /$re/ checked"
done
finish
