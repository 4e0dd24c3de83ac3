#!/usr/bin/env bash
# A fork that fails: the launcher says which rank it could not fork and that
# the ranks after it never started. RLIMIT_NPROC binds users other than
# root only, so the run is made as `nobody`; what it runs (the binary, the
# data) is copied to a folder of its own under /tmp, which nobody can reach
# even when the clone sits under a folder only root can enter (/root, a
# mktemp -d). Skipped, saying why, where that cannot be arranged.
. "$(dirname "$0")/lib.sh"
skip() { echo "SKIP: $*"; exit 77; }

[ "$(id -u)" -eq 0 ] || skip "not root: RLIMIT_NPROC cannot be made to bind (it binds users other than root, and only root can become one)"
command -v setpriv >/dev/null || skip "setpriv (util-linux) is not installed"
command -v prlimit >/dev/null || skip "prlimit (util-linux) is not installed"
id nobody >/dev/null 2>&1 || skip "there is no user 'nobody' to run as"
as_nobody() { setpriv --reuid=nobody --regid="$(id -gn nobody)" --clear-groups "$@"; }

# A folder of nobody's own reach: /tmp itself, not $TMPDIR (which may sit
# under the clone). Removed on exit with the scratch folder.
np=$(mktemp -d /tmp/a2amm-nproc.XXXXXX) || skip "cannot make a folder under /tmp"
trap 'rm -rf "$SCRATCH" "$np"' EXIT
cp "$A2AMM" "$np/a2amm"
chmod 755 "$np" "$np/a2amm"
as_nobody test -x "$np/a2amm" || skip "nobody cannot reach $np/a2amm (is /tmp closed to other users?)"
check "the copy runs as nobody" as_nobody "$np/a2amm" --help >/dev/null 2>&1
"$A2AMM" gen 256 256 64 4 --dir "$np/d" >/dev/null
chmod -R a+rwX "$np/d"

# fork fails for the third rank: nobody may have 3 processes, the launcher is one
as_nobody prlimit --nproc=3 "$np/a2amm" run 256 256 64 4 --dir "$np/d" >"$SCRATCH/out" 2>&1
check "fork failure: non-zero" test $? -ne 0
expect_output "fork failure: said" "could not fork rank"
expect_output "fork failure: ranks never started are said so" "never started"
check "fork failure: no rank that never ran is 'ok'" bash -c "! grep -q '\] ok' '$SCRATCH/out'"
check "fork failure: no output written" test -z "$(find "$np/d/output" -name npu_out.bin 2>/dev/null)"
check "fork failure: no temporary left" test -z "$(find "$np/d" -name '*.tmp.*')"
# the same run without the limit succeeds as nobody: the failure above was the limit
expect_ok "without the limit the run succeeds as nobody" as_nobody "$np/a2amm" run 256 256 64 4 --dir "$np/d"
finish
