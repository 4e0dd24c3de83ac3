#!/usr/bin/env bash
# make check's passes, each timed: the optimized build and its tests, the
# AddressSanitizer + UBSan build and its tests, the fuzz targets. Every pass
# runs even when one before it failed (each says what failed); the output ends
# with each pass's time and the passes' counts added up, as the line
# "N passed, N failed, N skipped". Exit 0 only when every pass passed.
set -u
cd "$(dirname "$0")/.."
make=${MAKE:-make}
log=$(mktemp "${TMPDIR:-/tmp}/a2amm-check.XXXXXX")
trap 'rm -f "$log"' EXIT
start=$SECONDS
times=(); passed=0; failed=0; skipped=0; bad=()
for pass in check-opt check-san check-fuzz; do
    t0=$SECONDS
    echo "== make $pass"
    "$make" --no-print-directory "$pass" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    times+=("$pass $((SECONDS - t0)) s")
    counts=$(grep -E '^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' "$log" | tail -1)
    if [ -n "$counts" ]; then
        read -r p _ f _ s _ <<<"${counts//,/}"
        passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + ${s:-0}))
    fi
    if [ "$rc" -ne 0 ]; then
        bad+=("$pass")
        [ -n "$counts" ] || failed=$((failed + 1)) # a build that failed: no test ran
    fi
done
echo "make check: ${times[0]}, ${times[1]}, ${times[2]}; $((SECONDS - start)) s in all"
[ ${#bad[@]} -eq 0 ] || echo "make check: failed in ${bad[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ ${#bad[@]} -eq 0 ]
