"""
Runs one of the seed's scripts with the real torch: python3 run_seed_script.py
SCRIPT ARGS... The seed's verify_result.py reads bf16 files as numpy uint16
and calls torch.from_numpy on them, which torch learned in 2.3; where the
torch installed is older (Debian 12's is 1.13), from_numpy is given the same
bits as int16 (the same element size, so .view(torch.bfloat16) sees the same
values). Nothing else of torch is touched; it prints which case ran.
"""
import runpy
import sys

import numpy as np
import torch

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
runpy.run_path(sys.argv[0], run_name="__main__")
