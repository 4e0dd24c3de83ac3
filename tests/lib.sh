# Shared helpers for the shell tests: assertions that count, and a scratch
# folder removed on exit. Source it; end the test with `finish`.
set -u
A2AMM=${A2AMM:?set A2AMM to the a2amm binary}
T_PASS=0
T_FAIL=0
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/a2amm-test.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT
# what the commands under test make in $TMPDIR lands in this test's own folder
export TMPDIR="$SCRATCH/tmp"
mkdir -p "$TMPDIR"

pass() { T_PASS=$((T_PASS + 1)); }
fail() { T_FAIL=$((T_FAIL + 1)); echo "FAIL: $*" >&2; }

# expect_ok "what" cmd...: the command must exit 0.
expect_ok() {
    local what=$1; shift
    if "$@" >"$SCRATCH/out" 2>&1; then pass; else fail "$what: exit $? from: $*"; sed 's/^/    /' "$SCRATCH/out" | tail -20 >&2; fi
}
# expect_fail "what" "text" cmd...: non-zero exit and the output has text.
expect_fail() {
    local what=$1 text=$2; shift 2
    if "$@" >"$SCRATCH/out" 2>&1; then fail "$what: expected failure, got exit 0 from: $*"; return; fi
    if grep -qF -- "$text" "$SCRATCH/out"; then pass; else fail "$what: output lacks '$text':"; sed 's/^/    /' "$SCRATCH/out" | tail -20 >&2; fi
}
# expect_output "what" "text": the last command's output has text.
expect_output() {
    if grep -qF -- "$2" "$SCRATCH/out"; then pass; else fail "$1: output lacks '$2'"; sed 's/^/    /' "$SCRATCH/out" | tail -20 >&2; fi
}
check() { local what=$1; shift; if "$@"; then pass; else fail "$what"; return 1; fi; }

# What this CPU runs, as the library sees it (A2AMM_CPU_HIDE applied):
# cpu_runs LEVEL (ref|avx2|avx512|amx) and cpu_uses FEATURE (avx2, fma,
# avx512f, avx512_bf16, amx_tile, ...) succeed where it does.
cpu_runs() { "$A2AMM" cpu --runs "$1" >/dev/null; }
cpu_uses() {
    "$A2AMM" cpu --json | python3 -c "import json,sys; sys.exit(0 if json.load(sys.stdin)['features']['$1']['used'] else 1)"
}
# rank_pids LAUNCHER: the rank processes of a run: the launcher's children but
# its guard (the a2amm-guard process that cleans up after a kill -9)
rank_pids() { ps -o pid=,comm= --ppid "$1" 2>/dev/null | awk '$2 != "a2amm-guard" { print $1 }'; }
# yes_no CMD...: "yes" where the command succeeds, else "no"
yes_no() { if "$@"; then echo yes; else echo no; fi; }

finish() {
    echo "$(basename "$0"): $T_PASS checks, $T_FAIL failed"
    [ "$T_FAIL" -eq 0 ] && [ "$T_PASS" -gt 0 ]
}
