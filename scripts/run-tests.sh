#!/usr/bin/env bash
# Runs every test of one build folder (C test binaries, then shell tests) and
# ends with the line "N passed, N failed". Exit 0 only when all passed.
set -u
build=${1:?usage: run-tests.sh BUILD_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
export A2AMM="$root/$build/a2amm"
passed=0; failed=0; failures=()
run_one() {
    local name=$1; shift
    local start=$SECONDS
    if "$@"; then
        passed=$((passed + 1)); echo "PASS $name ($((SECONDS - start)) s)"
    else
        failed=$((failed + 1)); failures+=("$name"); echo "FAIL $name ($((SECONDS - start)) s)"
    fi
}
for t in "$root/$build"/tests/test_*; do
    [ -x "$t" ] || continue
    run_one "$build/$(basename "$t")" "$t"
done
for t in "$root"/tests/test_*.sh; do
    [ -f "$t" ] || continue
    run_one "$build/$(basename "$t")" bash "$t"
done
[ ${#failures[@]} -eq 0 ] || echo "failed: ${failures[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
