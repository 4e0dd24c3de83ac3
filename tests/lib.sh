# Shared helpers for the shell tests: assertions that count, and a scratch
# folder removed on exit. Source it; end the test with `finish`.
set -u
A2AMM=${A2AMM:?set A2AMM to the a2amm binary}
T_PASS=0
T_FAIL=0
SCRATCH=$(mktemp -d /tmp/a2amm-test.XXXXXX)
trap 'rm -rf "$SCRATCH"' EXIT

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
check() { local what=$1; shift; if "$@"; then pass; else fail "$what"; fi; }

finish() {
    echo "$(basename "$0"): $T_PASS checks, $T_FAIL failed"
    [ "$T_FAIL" -eq 0 ] && [ "$T_PASS" -gt 0 ]
}
