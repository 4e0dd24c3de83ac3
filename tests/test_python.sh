#!/usr/bin/env bash
# The Python package (python/, `import a2amm`): pip installs it, offline, into a fresh venv of Debian's
# python3 (--system-site-packages: Debian's numpy, torch, mpi4py; never the python3 first on PATH), from
# a copy of python/ beside the repository's include/ and the build folder A2AMM is in, found as in a
# checkout; `import a2amm` reports the library's version and the library of that build. Then its pytest
# suite (python/tests): MX bits against a numpy model of the OCP rules, the matmul and both ops
# (alltoall-matmul and the reverse, matmul-alltoall) under a2amm.launch (R = 1, 2, 4) and `mpirun -np 2`
# against fp64 on numpy and torch inputs, zero-copy, every bad argument, failures (PeerError within
# seconds), Ctrl-C, tracing, examples/fused_op.py and examples/sequence_parallel.py under both launchers,
# and (as root, where namespaces can be made) the op and the examples across 2 network-namespace hosts
# (scripts/netns-hosts.sh) over Open MPI messages; nothing left in /dev/shm.
#
# The sanitizer pass (A2AMM in build-san, whose library has AddressSanitizer): the extension is built with
# ASan and UBSan too, and python runs with libasan preloaded (an interpreter without ASan loads an
# instrumented library only so); LeakSanitizer is off there, as the interpreter keeps its own
# allocations until exit (the C tests check the library's leaks).
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
root=$(cd "$here/.." && pwd)
build=$(cd "$(dirname "$A2AMM")" && pwd)
PY=/usr/bin/python3

skip() { echo "SKIP: $*"; exit 77; }
[ -x "$PY" ] || skip "Debian's /usr/bin/python3 is missing (make deps)"
for mod in numpy pytest setuptools ensurepip; do
    "$PY" -c "import $mod" 2>/dev/null || skip "$PY lacks $mod (make deps installs python3-numpy, python3-pytest, python3-setuptools, python3-venv)"
done
[ -e "$build/liba2amm_mpi.so" ] || [ -e "$build/liba2amm.so" ] || { fail "no liba2amm in $build: run make first"; finish; exit 1; }

san=0
nm -D "$build/liba2amm.so.0" 2>/dev/null | grep -q __asan_init && san=1
libasan=$(cc -print-file-name=libasan.so)
# run_py ARGS...: the venv's python, with the ASan runtime first in the sanitizer pass
run_py() {
    if [ "$san" = 1 ]; then
        LD_PRELOAD="$libasan" ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" "$venv/bin/python" "$@"
    else
        "$venv/bin/python" "$@"
    fi
}
[ "$san" = 1 ] && echo "test_python.sh: $build's library has AddressSanitizer: the extension too, python with $libasan preloaded"

# pip builds in its source folder (python/build): a copy keeps the checkout clean
venv="$SCRATCH/venv"
mkdir -p "$SCRATCH/repo"
cp -r "$root/python" "$SCRATCH/repo/python"
rm -rf "$SCRATCH/repo/python/build" "$SCRATCH/repo/python/"*.egg-info
ln -s "$root/include" "$SCRATCH/repo/include"
ln -s "$build" "$SCRATCH/repo/build"
expect_ok "a fresh venv of $PY with its system packages" "$PY" -m venv --system-site-packages "$venv"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INDEX=1 PYTHONDONTWRITEBYTECODE=1
expect_ok "pip install ./python (offline: --no-build-isolation, Debian's setuptools)" \
    bash -c "cd '$SCRATCH/repo' && A2AMM_PY_SANITIZE=$san '$venv/bin/pip' install -v --no-build-isolation --no-index ./python"
expect_output "setup found the library in the checkout's build folder" "the repository's build folder"
version=$(sed -n 's/^#define A2AMM_VERSION_STRING "\(.*\)"/\1/p' "$root/include/a2amm.h")
cd "$SCRATCH" || exit 1
expect_ok "import a2amm" run_py -c "import a2amm; print(a2amm.__version__); print(a2amm.library_path)"
check "a2amm.__version__ is the library's, $version" test "$(head -1 "$SCRATCH/out")" = "$version"
check "the extension runs $build's library ($(tail -1 "$SCRATCH/out"))" \
    test "$(dirname "$(realpath "$(tail -1 "$SCRATCH/out")")")" = "$build"
# from the source folder (python/, where `import a2amm` finds the sources, no extension): said so, not
# Python's "partially initialized module ... circular import"
expect_fail "import a2amm in the source folder: the extension is said to be missing" \
    "C extension (a2amm._a2amm) is not built in" bash -c "cd '$SCRATCH/repo/python' && '$PY' -c 'import a2amm'"

# two namespace hosts for the tests that cross machines (root; else those tests are skipped, saying so)
hosts="$root/scripts/netns-hosts.sh"
P=a2py$$
NET=10.79.$(( $$ % 200 + 20 ))
cleanup() { [ -e "/tmp/$P-agent" ] && bash "$hosts" down "$P" >/dev/null 2>&1; rm -rf "$SCRATCH"; }
trap cleanup EXIT
unset A2AMM_TEST_HOSTS_MPIRUN
if [ "$(id -u)" -eq 0 ] && command -v mpirun >/dev/null && command -v ip >/dev/null &&
    bash "$hosts" up "$P" 2 "$NET" >"$SCRATCH/up" 2>&1; then
    export A2AMM_TEST_HOSTS_MPIRUN="bash $hosts exec $P-h1 mpirun --allow-run-as-root --oversubscribe --bind-to none \
--host $P-h1,$P-h2 --mca plm_rsh_agent /tmp/$P-agent --mca btl tcp,self --mca btl_tcp_if_include $NET.0/24 \
--mca oob_tcp_if_include $NET.0/24 -x LD_PRELOAD -x ASAN_OPTIONS -x PYTHONDONTWRITEBYTECODE"
else
    echo "test_python.sh: no namespace hosts here (root, mpirun and ip needed): the 2-host tests are skipped"
fi

before=$(ls /dev/shm 2>/dev/null | sort)
if timeout 1200 env ${A2AMM_TEST_HOSTS_MPIRUN:+A2AMM_TEST_HOSTS_MPIRUN="$A2AMM_TEST_HOSTS_MPIRUN"} \
    bash -c "$(declare -f run_py); venv='$venv' san=$san libasan='$libasan' run_py -m pytest -p no:cacheprovider -rs \
    '$root/python/tests'"; then
    pass
else
    fail "the Python package's pytest suite (python/tests) failed"
fi
left=$(comm -13 <(echo "$before") <(ls /dev/shm 2>/dev/null | sort))
check "nothing left in /dev/shm ($left)" test -z "$left"
if [ -n "${A2AMM_TEST_HOSTS_MPIRUN:-}" ]; then
    bash "$hosts" down "$P"
    check "the namespaces are gone" test -z "$(ip netns list | grep "^$P-")"
fi
finish test_python.sh
