"""
Runs one of the seed's scripts with the real torch: python3 run_seed_script.py
SCRIPT ARGS... (the seed: Huawei's Ascend AlltoAllQuantMatmul example, whose
file layout a2amm keeps). SCRIPT is a file, or, where no such file exists, a
script's name in the seed's diff (verify_result.py), taken from the diff as
it is: the diff at $A2AMM_SEED (a file, or a folder of *.txt diffs), else in
../shared/seed beside the repository (where CI keeps it).

The seed's verify_result.py reads bf16 files as numpy uint16 and calls
torch.from_numpy on them, which torch learned in 2.3; where the torch
installed is older (Debian 12's is 1.13), from_numpy is given the same bits
as int16 (the same element size, so .view(torch.bfloat16) sees the same
values). Nothing else of torch is touched; it prints which case ran.
"""
import glob
import os
import runpy
import sys

import numpy as np
import torch


def seed_diffs():
    """The seed's diff files: $A2AMM_SEED (a file or a folder), else ../shared/seed beside the repository."""
    given = os.environ.get("A2AMM_SEED")
    if given:
        where = given
    else:
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        where = os.path.join(os.path.dirname(repo), "shared", "seed")
    if os.path.isfile(where):
        return where, [where]
    return where, sorted(glob.glob(os.path.join(where, "*.txt")))


def script_from_seed(name):
    """The added lines of the seed diff's scripts/NAME, between its header line and the next file's."""
    where, diffs = seed_diffs()
    for path in diffs:
        lines, on = [], False
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                if not on:
                    on = line.endswith("scripts/" + name)
                    continue
                if line.startswith("package/"):
                    break
                if line.startswith("+"):
                    lines.append(line[1:])
        if lines:
            return path, "\n".join(lines) + "\n"
    sys.exit("run_seed_script: %s is not a file, and no seed diff in %s has scripts/%s (set A2AMM_SEED to the "
             "seed's diff or its folder)" % (name, where if diffs else where + " (no *.txt there)", name))


if len(sys.argv) < 2:
    sys.exit("usage: python3 run_seed_script.py SCRIPT ARGS... (SCRIPT: a file, or a script of the seed's diff "
             "by name, e.g. verify_result.py)")

try:
    torch.from_numpy(np.zeros(1, dtype=np.uint16))
    print("run_seed_script: torch %s reads uint16 arrays itself" % torch.__version__, file=sys.stderr)
except TypeError:
    _from_numpy = torch.from_numpy

    def _from_numpy_uint16(a):
        return _from_numpy(a.view(np.int16) if a.dtype == np.uint16 else a)

    torch.from_numpy = _from_numpy_uint16
    print("run_seed_script: torch %s lacks uint16 arrays: from_numpy given their bits as int16"
          % torch.__version__, file=sys.stderr)

sys.argv = sys.argv[1:]
if os.path.exists(sys.argv[0]) or os.sep in sys.argv[0]:
    runpy.run_path(sys.argv[0], run_name="__main__")
else:
    diff, source = script_from_seed(sys.argv[0])
    print("run_seed_script: %s as the seed's diff %s has it" % (sys.argv[0], diff), file=sys.stderr)
    exec(compile(source, "%s:scripts/%s" % (diff, sys.argv[0]), "exec"), {"__name__": "__main__"})
