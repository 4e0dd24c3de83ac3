"""README.md's Python code runs as printed: each ```python block, saved as a file and run by this
interpreter (the one with the package installed), exits 0; the MoE layer's block prints what README
says it prints."""
import os
import re
import subprocess
import sys

from conftest import REPO


def readme_blocks():
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        return re.findall(r"^```python\n(.*?)^```$", f.read(), re.S | re.M)


def run_block(tmp_path, i, code):
    path = tmp_path / ("readme_%d.py" % i)
    path.write_text(code)
    p = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, "README's python block %d:\n%s\n%s%s" % (i, code, p.stdout, p.stderr)
    return p.stdout


def test_readme_has_python_blocks():
    blocks = readme_blocks()
    assert len(blocks) >= 2, blocks
    assert any("a2amm.MoE(" in b for b in blocks), "README has no MoE snippet"


def test_every_readme_python_block_runs(tmp_path):
    for i, code in enumerate(readme_blocks()):
        out = run_block(tmp_path, i, code)
        # a block's last comment after print(...) is what it prints
        said = re.findall(r"^print\(.*\)\s+# (.*)$", code, re.M)
        for want in said:
            assert want.strip() in out, "README's python block %d prints %r, not %r" % (i, out, want)
