#!/usr/bin/env bash
# Runs every test of one build folder (C test binaries, then shell tests),
# some of them again with CPU features hidden (A2AMM_CPU_HIDE), and ends with
# the line "N passed, N failed, N skipped". A test that exits 77 was skipped:
# its last "SKIP: <reason>" line says why, and it never counts as passed.
# Exit 0 only when none failed and some passed.
set -u
build=${1:?usage: run-tests.sh BUILD_DIR [TEST]}
# TEST: one test only (test_op, test_run.sh; its runs with features hidden too)
only=${2:-}
only=${only#tests/}
root=$(cd "$(dirname "$0")/.." && pwd)
export A2AMM="$root/$build/a2amm"
passed=0; failed=0; skipped=0; failures=(); skips=()
log=$(mktemp "${TMPDIR:-/tmp}/a2amm-run-tests.XXXXXX")
trap 'rm -f "$log"' EXIT

# run_one NAME CMD...: runs one test, its output shown as it comes.
run_one() {
    local name=$1; shift
    local start=$SECONDS rc
    "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1)); echo "PASS $name ($((SECONDS - start)) s)"
    elif [ "$rc" -eq 77 ]; then
        local why
        why=$(grep '^SKIP: ' "$log" | tail -1 | sed 's/^SKIP: //')
        skipped=$((skipped + 1)); skips+=("$name: ${why:-no reason given}")
        echo "SKIP $name ($((SECONDS - start)) s): ${why:-no reason given}"
    else
        failed=$((failed + 1)); failures+=("$name"); echo "FAIL $name (exit $rc, $((SECONDS - start)) s)"
    fi
}

# The features hidden in the second runs: the fallbacks a CPU without AMX and
# AVX-512 gets (the avx2 level), exercised on whatever CPU this is. Where
# this CPU has more, the CPUs between are made too: AMX hidden is a Zen 4 or
# 5 (AVX-512 with BF16), AVX512_BF16 hidden one with AVX-512 but no BF16.
hide=amx,avx512
hides=("$hide")
"$A2AMM" cpu --runs amx >/dev/null 2>&1 && hides+=(amx)
"$A2AMM" cpu --json 2>/dev/null | python3 -c "import json,sys; sys.exit(0 if json.load(sys.stdin)['features']['avx512f']['used'] else 1)" \
    && hides+=(avx512bf16)
echo "run-tests.sh: test_run.sh and test_bench.sh run again with A2AMM_CPU_HIDE=${hides[*]} (one each)"
# The sanitized build runs test_bench.sh again with the first only (the avx2 level's code, what ASan
# is for); the optimized build's runs check every level's figures.
bench_hides=("${hides[@]}")
if ldd "$A2AMM" 2>/dev/null | grep -q libasan; then
    bench_hides=("$hide")
    echo "run-tests.sh: a sanitized build: test_bench.sh again with A2AMM_CPU_HIDE=$hide only"
fi

for t in "$root/$build"/tests/test_*; do
    [ -x "$t" ] || continue
    [ -z "$only" ] || [ "$(basename "$t")" = "${only%.c}" ] || continue
    name=$build/$(basename "$t")
    if [ "$(basename "$t")" = test_gemm ]; then
        # one test per kernel level: a level this CPU lacks is a skip, not a pass
        for part in common avx2 avx512 amx; do run_one "$name $part" "$t" "$part"; done
        run_one "$name common [A2AMM_CPU_HIDE=$hide]" env A2AMM_CPU_HIDE=$hide "$t" common
    elif [ "$(basename "$t")" = test_moe_down ]; then
        # one test per vector level, as test_gemm's (the down projection has an amx level too)
        for part in avx2 avx512 amx; do run_one "$name $part" "$t" "$part"; done
    elif [ "$(basename "$t")" = test_mx_quantize ] || [ "$(basename "$t")" = test_swiglu ]; then
        for part in avx2 avx512; do run_one "$name $part" "$t" "$part"; done
    else
        run_one "$name" "$t"
    fi
done
for t in "$root"/tests/test_*.sh; do
    [ -f "$t" ] || continue
    [ -z "$only" ] || [ "$(basename "$t")" = "$only" ] || continue
    name=$build/$(basename "$t")
    run_one "$name" bash "$t"
    case $(basename "$t") in
    test_run.sh)
        for h in "${hides[@]}"; do run_one "$name [A2AMM_CPU_HIDE=$h]" env A2AMM_CPU_HIDE="$h" bash "$t"; done ;;
    test_bench.sh)
        for h in "${bench_hides[@]}"; do run_one "$name [A2AMM_CPU_HIDE=$h]" env A2AMM_CPU_HIDE="$h" bash "$t"; done ;;
    esac
done
if [ -n "$only" ] && [ $((passed + failed + skipped)) -eq 0 ]; then
    echo "run-tests.sh: no test named '$only' (tests/test_*.c or tests/test_*.sh)" >&2
    exit 2
fi
[ ${#failures[@]} -eq 0 ] || echo "failed: ${failures[*]}"
for s in "${skips[@]+"${skips[@]}"}"; do echo "skipped: $s"; done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
