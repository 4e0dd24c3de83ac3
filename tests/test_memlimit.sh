#!/usr/bin/env bash
# Under a memory limit (prlimit --as), run gives a clear failure or a
# success, never a spin: it once hung inside fork, OpenBLAS's fork handler
# waiting for its own threads while they retried a failed allocation.
# AddressSanitizer reserves terabytes of address space for its shadow, so
# an address-space limit cannot apply to a sanitized build: skipped there.
. "$(dirname "$0")/lib.sh"
if ldd "$A2AMM" 2>/dev/null | grep -q libasan; then
    echo "SKIP: prlimit --as cannot apply to an AddressSanitizer build (its shadow memory needs terabytes of address space)"
    exit 77
fi
d="$SCRATCH/d"
"$A2AMM" gen 256 256 64 4 --dir "$d" >/dev/null
for as in 200000000 120000000; do
    start=$SECONDS
    timeout 60 prlimit --as=$as "$A2AMM" run 256 256 64 4 --dir "$d" >"$SCRATCH/out" 2>&1
    rc=$?
    check "prlimit --as=$as: ends by itself (rc $rc)" test $rc -ne 124
    check "prlimit --as=$as: within 30 s" test $((SECONDS - start)) -le 30
    if [ $rc -ne 0 ]; then expect_output "prlimit --as=$as: says out of memory" "memory"; else expect_ok "prlimit --as=$as: verifies" "$A2AMM" verify 256 64 4 --dir "$d"; fi
done
# a shape that cannot fit in the limit: out of memory, named, non-zero
dbig="$SCRATCH/big"; "$A2AMM" gen 2048 4096 4096 2 --dir "$dbig" --no-golden >/dev/null
timeout 60 prlimit --as=150000000 "$A2AMM" run 2048 4096 4096 2 --dir "$dbig" >"$SCRATCH/out" 2>&1
rc=$?
check "too big for the limit: ends non-zero (rc $rc)" test $rc -ne 0 -a $rc -ne 124
expect_output "too big for the limit: says out of memory" "out of memory"
finish
