#!/usr/bin/env bash
# Installs what a2amm needs on a Debian machine when it is missing: a C
# compiler (and binutils' objdump), make, pkg-config, OpenBLAS (the reference operator, a benchmark
# peer), oneDNN (a benchmark peer), python3 with numpy (shell tests read
# binary outputs with it) and torch (the seed's own verify_result.py runs
# with it in the tests), clang with libFuzzer (the fuzz targets), Open MPI
# (liba2amm_mpi, --transport mpi) with iproute2 (the tests' namespace hosts),
# librsvg2-bin (the tests render timelines), bsdutils (`script`) and, optional, qemu-user (the tests' emulated
# CPUs); for the Python package (python/):
# python3-dev (Python.h), python3-venv, python3-setuptools, python3-pytest and python3-mpi4py.
# Safe to run again: it does nothing when everything is present.
set -euo pipefail
# have PACKAGE: the Debian package is installed
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
need=()
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v objdump >/dev/null 2>&1 || need+=(binutils) # test_kernel_code.sh reads the compiled kernels
command -v make >/dev/null 2>&1 || need+=(make)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
have libopenblas-dev || need+=(libopenblas-dev)
have libdnnl-dev || need+=(libdnnl-dev) # oneDNN: the strongest peer `a2amm bench gemm` measures against
have libopenmpi-dev || need+=(libopenmpi-dev)
have openmpi-bin || need+=(openmpi-bin)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v rsvg-convert >/dev/null 2>&1 || need+=(librsvg2-bin) # renders `a2amm timeline`'s SVG in the tests
command -v script >/dev/null 2>&1 || need+=(bsdutils)          # a pseudo-terminal for the progress tests
command -v python3 >/dev/null 2>&1 || need+=(python3)
have python3-numpy || need+=(python3-numpy)
# the Python package: its extension is built with Debian's setuptools in a venv, tested with pytest
for pkg in python3-dev python3-venv python3-setuptools python3-pytest python3-mpi4py; do
    have "$pkg" || need+=("$pkg")
done
command -v clang >/dev/null 2>&1 || need+=(clang) # the fuzz targets (libFuzzer)
# libFuzzer's runtime, for the clang that is (or will be) installed
clang_major=$(clang --version 2>/dev/null | sed -n 's/.*clang version \([0-9][0-9]*\).*/\1/p' | head -1)
clang_major=${clang_major:-14}
have "libclang-rt-$clang_major-dev" || need+=("libclang-rt-$clang_major-dev")
# optional: torch, for the seed's script (the test falls back to a numpy stand-in, and says so);
# qemu-user, for test_emulated_cpus.sh's CPUs this machine is not (x86-64 hosts; it skips without)
optional=()
have python3-torch || optional+=(python3-torch)
[ "$(uname -m)" != x86_64 ] || command -v qemu-x86_64 >/dev/null 2>&1 || optional+=(qemu-user)
[ ${#need[@]} -eq 0 ] && [ ${#optional[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
else
    SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
if [ ${#need[@]} -gt 0 ]; then
    echo "install-deps: installing ${need[*]}"
    $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
for pkg in "${optional[@]+"${optional[@]}"}"; do # one at a time: one that cannot be installed leaves the others
    echo "install-deps: installing $pkg (optional: a test uses it where it is present)"
    $SUDO apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null ||
        echo "install-deps: $pkg could not be installed; the test that uses it says so (the seed-script test's numpy stand-in for torch, test_emulated_cpus.sh's skip)"
done
