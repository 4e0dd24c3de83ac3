#!/usr/bin/env bash
# Runs every fuzz target of a build folder for a bounded time (seconds, the
# second argument, default 15) from its corpus in tests/fuzz/corpus/<name>
# (read only: new inputs go to a scratch folder), and ends with the line
# "N passed, N failed, N skipped", as many targets at once as there are
# cores. A crash, a leak or an abort fails it; the
# input that did is kept under build-fuzz/crashes/ to reproduce with
# `build-fuzz/<target> <file>`.
set -u
build=${1:?usage: run-fuzz.sh BUILD_DIR [SECONDS]}
seconds=${2:-15}
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc 2>/dev/null || echo 1)
mkdir -p "$root/$build/crashes"
results=$(mktemp -d "${TMPDIR:-/tmp}/a2amm-fuzz-results.XXXXXX")
trap 'rm -rf "$results"' EXIT

# fuzz_one TARGET: its run, its verdict line (and the log's tail where it failed) in $results/NAME
fuzz_one() {
    local t=$1 name scratch start runs
    name=$(basename "$t")
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/a2amm-fuzz.XXXXXX")
    start=$SECONDS
    if "$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$root/$build/crashes/$name-" "$scratch" "$root/tests/fuzz/corpus/$name" \
        >"$scratch.log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$scratch.log")
        echo "PASS $name (${runs:-?} inputs in $((SECONDS - start)) s)" >"$results/$name"
    else
        { echo "FAIL $name"; tail -40 "$scratch.log"; } >"$results/$name"
    fi
    rm -rf "$scratch" "$scratch.log"
}

# the targets side by side, one a core (each is one process on one thread)
running=0
for t in "$root/$build"/fuzz_*; do
    [ -x "$t" ] || continue
    if [ "$running" -ge "$jobs" ]; then
        wait -n
        running=$((running - 1))
    fi
    fuzz_one "$t" &
    running=$((running + 1))
done
wait
passed=0; failed=0
for r in "$results"/*; do
    [ -f "$r" ] || continue
    cat "$r"
    if head -1 "$r" | grep -q '^PASS '; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
