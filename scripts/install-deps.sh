#!/usr/bin/env bash
# Installs what a2amm needs on a Debian machine when it is missing: a C
# compiler, make, OpenBLAS (the reference operator, a benchmark peer) and
# oneDNN (a benchmark peer).
# Safe to run again: it does nothing when everything is present.
set -euo pipefail
need=()
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v make >/dev/null 2>&1 || need+=(make)
[ -e /usr/include/x86_64-linux-gnu/cblas.h ] || [ -e /usr/include/cblas.h ] || need+=(libopenblas-dev)
ls /usr/lib/x86_64-linux-gnu/libopenblas.so >/dev/null 2>&1 || need+=(libopenblas-dev)
# oneDNN: the strongest peer `a2amm bench gemm` measures against
[ -e /usr/include/dnnl.h ] || need+=(libdnnl-dev)
# python3: a few shell tests read binary outputs with it
command -v python3 >/dev/null 2>&1 || need+=(python3)
install_numpy() {
    # numpy: to run the seed's own verify_result.py on our files in the tests
    # (with a numpy stand-in for torch); that test skips where it cannot be had.
    python3 -c 'import numpy' >/dev/null 2>&1 || python3 -m pip install -q numpy >/dev/null 2>&1 ||
        echo "install-deps: numpy could not be installed; the seed-script test will be skipped"
}
if [ ${#need[@]} -eq 0 ]; then
    install_numpy
    exit 0
fi
echo "install-deps: installing ${need[*]}"
if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
else
    SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
install_numpy
