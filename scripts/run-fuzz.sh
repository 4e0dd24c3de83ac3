#!/usr/bin/env bash
# Runs every fuzz target of a build folder for a bounded time (seconds, the
# second argument, default 15) from its corpus in tests/fuzz/corpus/<name>
# (read only: new inputs go to a scratch folder), and ends with the line
# "N passed, N failed, N skipped". A crash, a leak or an abort fails it; the
# input that did is kept under build-fuzz/crashes/ to reproduce with
# `build-fuzz/<target> <file>`.
set -u
build=${1:?usage: run-fuzz.sh BUILD_DIR [SECONDS]}
seconds=${2:-15}
root=$(cd "$(dirname "$0")/.." && pwd)
passed=0; failed=0
mkdir -p "$root/$build/crashes"
for t in "$root/$build"/fuzz_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/a2amm-fuzz.XXXXXX")
    start=$SECONDS
    if "$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$root/$build/crashes/$name-" "$scratch" "$root/tests/fuzz/corpus/$name" \
        >"$scratch.log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$scratch.log")
        passed=$((passed + 1)); echo "PASS $name (${runs:-?} inputs in $((SECONDS - start)) s)"
    else
        failed=$((failed + 1)); echo "FAIL $name"; tail -40 "$scratch.log"
    fi
    rm -rf "$scratch" "$scratch.log"
done
echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
