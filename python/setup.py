"""Builds a2amm._a2amm, the C extension over liba2amm (see README.md: "How the library is found").

The library is looked for, in this order:
  1. A2AMM_BUILD=DIR: a build folder of the repository (DIR/liba2amm_mpi.so; the headers in DIR/../include);
  2. A2AMM_PREFIX=DIR: where `make install PREFIX=DIR` put it (DIR/lib, DIR/include);
  3. the repository this folder belongs to, built by `make` (../build);
  4. pkg-config a2amm-mpi, then a2amm (an installed copy: /usr/local after `make install`).
liba2amm_mpi (the whole library and the Open MPI transport) is preferred, for Comm.from_mpi; where it or
MPI's headers are missing, liba2amm (shared memory only) is linked and Comm.from_mpi says why it cannot
run. The extension records the library's folder as its run path (rpath): the package uses that very
file, so rebuilding the library (make) needs no reinstall, and removing it (make clean) needs one.
"""
import os
import re
import shlex
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def fail(message):
    sys.stderr.write("a2amm setup: " + message + "\n")
    sys.exit(1)


def run(cmd):
    try:
        return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def pick_library(libdir):
    """liba2amm_mpi where it is (with MPI's compiler flags), else liba2amm."""
    mpi_cflags = run(["mpicc", "--showme:compile"])
    mpi_libs = run(["mpicc", "--showme:link"])
    if os.path.exists(os.path.join(libdir, "liba2amm_mpi.so")) and mpi_cflags is not None and mpi_libs is not None:
        return "a2amm_mpi", shlex.split(mpi_cflags), shlex.split(mpi_libs), True
    if os.path.exists(os.path.join(libdir, "liba2amm.so")):
        return "a2amm", [], [], False
    return None


def find():
    """(include dir, lib dir, how it was found)"""
    build = os.environ.get("A2AMM_BUILD")
    if build:
        build = os.path.abspath(build)
        inc = os.environ.get("A2AMM_INCLUDE", os.path.join(os.path.dirname(build), "include"))
        return inc, build, "A2AMM_BUILD=" + build
    prefix = os.environ.get("A2AMM_PREFIX")
    if prefix:
        prefix = os.path.abspath(prefix)
        return os.path.join(prefix, "include"), os.path.join(prefix, "lib"), "A2AMM_PREFIX=" + prefix
    repo = os.path.dirname(HERE)
    if os.path.exists(os.path.join(repo, "include", "a2amm.h")) and (
        os.path.exists(os.path.join(repo, "build", "liba2amm_mpi.so"))
        or os.path.exists(os.path.join(repo, "build", "liba2amm.so"))
    ):
        return os.path.join(repo, "include"), os.path.join(repo, "build"), "the repository's build folder"
    for pc in ("a2amm-mpi", "a2amm"):
        inc = run(["pkg-config", "--variable=includedir", pc])
        lib = run(["pkg-config", "--variable=libdir", pc])
        if inc and lib:
            return inc, lib, "pkg-config " + pc
    fail("cannot find liba2amm: run `make` in the repository (this folder's parent), or `make install`, or set "
         "A2AMM_BUILD=<the repository's build folder> or A2AMM_PREFIX=<make install's PREFIX>")


def header_version(inc):
    path = os.path.join(inc, "a2amm.h")
    try:
        text = open(path).read()
    except OSError:
        fail("no a2amm.h in %s" % inc)
    m = re.search(r'#define A2AMM_VERSION_STRING "([^"]+)"', text)
    if not m:
        fail("%s has no A2AMM_VERSION_STRING" % path)
    return m.group(1)


# A2AMM_PY_SANITIZE=1: the extension built with AddressSanitizer and UBSan too (the suite's sanitizer pass,
# against build-san's library; python then runs with LD_PRELOAD=libasan.so: see tests/test_python.sh)
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g", "-O1"] \
    if os.environ.get("A2AMM_PY_SANITIZE") == "1" else []

inc, libdir, how = find()
picked = pick_library(libdir)
if not picked:
    fail("no liba2amm_mpi.so or liba2amm.so in %s (found through %s): run `make` first" % (libdir, how))
lib, mpi_cflags, mpi_libs, with_mpi = picked
version = header_version(inc)
sys.stderr.write("a2amm setup: lib%s.so in %s (%s), headers in %s, version %s\n" % (lib, libdir, how, inc, version))

sources = ["a2amm_lib.c", "arrays.c", "comm.c", "comm_alltoallv.c", "comm_mpi.c", "interrupt.c", "launch.c", "module.c", "moe.c",
           "mx.c", "op.c",
           "weights.c", "moe_weights.c", "bf16a.c"]
ext = Extension(
    "a2amm._a2amm",
    sources=[os.path.join("src", s) for s in sources],
    include_dirs=[inc],
    library_dirs=[libdir],
    libraries=[lib],
    runtime_library_dirs=[libdir],
    define_macros=[("A2AMM_PY_MPI", "1")] if with_mpi else [],
    extra_compile_args=["-std=c11", "-Wall", "-Wextra", "-Werror", "-Wno-missing-field-initializers",
                        "-Wno-cast-function-type"] + mpi_cflags + SANITIZE,
    extra_link_args=mpi_libs + SANITIZE,
)


class always_build_ext(build_ext):
    """Always compiles and links: the in-tree build folder (python/build) keeps an extension linked against
    whichever library was found last, and setuptools would reuse it, sources unchanged, for another."""

    def finalize_options(self):
        super().finalize_options()
        self.force = True


setup(version=version, ext_modules=[ext], cmdclass={"build_ext": always_build_ext})
