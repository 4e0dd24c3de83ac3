"""The Python examples under a2amm.launch and under mpirun: examples/fused_op.py (the twin of
examples/fused_op.c) and examples/sequence_parallel.py (the attention block of the two ops, the twin of
examples/sequence_parallel.c) pass their own checks, and both launchers give the same bits."""
import ast
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, mpirun_cmd, needs_mpi, needs_torch

EXAMPLE = os.path.join(REPO, "examples", "fused_op.py")


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_fused_op_under_launch(tmp_path):
    out = run([sys.executable, EXAMPLE, "--save", str(tmp_path)])
    assert "fused_op: OK" in out and "a2amm.launch" in out
    assert out.count("0 values off the check") == 2


@needs_mpi
def test_fused_op_under_mpirun_gives_the_same_bits(tmp_path):
    run([sys.executable, EXAMPLE, "--save", str(tmp_path / "launch")])
    for transport in ("auto", "mpi"):
        out = run(mpirun_cmd(2) + [sys.executable, EXAMPLE, "--transport", transport, "--save",
                                   str(tmp_path / transport)])
        assert "fused_op: OK" in out and "mpirun, transport %s" % ("shm" if transport == "auto" else "mpi") in out
        for r in range(2):
            np.testing.assert_array_equal(np.load(tmp_path / transport / ("rank%d.npy" % r)),
                                          np.load(tmp_path / "launch" / ("rank%d.npy" % r)))


@needs_mpi
def test_fused_op_across_two_hosts(tmp_path):
    import shlex
    hosts = os.environ.get("A2AMM_TEST_HOSTS_MPIRUN")
    if not hosts:
        pytest.skip("no namespace hosts (tests/test_python.sh makes them as root)")
    run([sys.executable, EXAMPLE, "--save", str(tmp_path / "launch")])
    out = run(shlex.split(hosts) + [sys.executable, EXAMPLE, "--save", str(tmp_path / "hosts")])
    assert "fused_op: OK" in out and "mpirun, transport mpi" in out
    for r in range(2):
        np.testing.assert_array_equal(np.load(tmp_path / "hosts" / ("rank%d.npy" % r)),
                                      np.load(tmp_path / "launch" / ("rank%d.npy" % r)))


# ---- examples/sequence_parallel.py: the attention block of the two ops ----------------------------------------

SEQUENCE_PARALLEL = os.path.join(REPO, "examples", "sequence_parallel.py")


def check_sequence_parallel(out, R, how):
    """Its OK line; a table row per rank with nothing off the check and the QKV op's bits exact; the max row."""
    assert "sequence_parallel: OK" in out and how in out, out
    rows = [line.split() for line in out.splitlines() if line.strip() and line.split()[0].isdigit()]
    assert [int(r[0]) for r in rows] == list(range(R)), out
    for r in rows:
        assert all(float(t) >= 0 for t in r[1:5]), r  # each step's time, ms
        assert r[5:7] == ["0", "of"] and "QKV bit-identical" in " ".join(r), r
    assert any(line.split()[:1] == ["max"] and len(line.split()) == 5 for line in out.splitlines()), out
    assert "worst: the largest difference in bf16 ulps, and (in brackets) absolute" in out, out  # the figures said


@pytest.mark.parametrize("numbers,R", [([], 4), (["2", "32", "4", "64"], 2), (["1", "24", "2", "32"], 1)])
def test_sequence_parallel_under_launch(numbers, R):
    check_sequence_parallel(run([sys.executable, SEQUENCE_PARALLEL] + numbers), R, "a2amm.launch")


@needs_torch
def test_sequence_parallel_attention_is_causal_attention():
    """The example's attention (the one function both its block and its check run) against fp64 numpy, head
    by head: softmax(q k^T / sqrt(d)) v over tokens 0..i for token i, head h at columns h*d."""
    import importlib.util
    import torch
    spec = importlib.util.spec_from_file_location("sequence_parallel", SEQUENCE_PARALLEL)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    S, heads, d = 12, 3, 8
    qkv = np.random.default_rng(4).standard_normal((S, 3 * heads * d)).astype(np.float32)
    got = example.attention(torch.from_numpy(qkv), heads, d).numpy()
    want = np.zeros((S, heads * d))
    x = qkv.astype(np.float64)
    for h in range(heads):
        q, k, v = (x[:, part * heads * d + h * d:part * heads * d + (h + 1) * d] for part in range(3))
        for i in range(S):
            w = np.exp(q[i] @ k[:i + 1].T / np.sqrt(d))
            want[i, h * d:(h + 1) * d] = (w / w.sum()) @ v[:i + 1]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("numbers,why", [
    (["3"], "heads (8) must be divisible by R (3): each rank takes heads/R whole heads"),
    (["4", "8", "4", "16"], "H/R = heads*d/R = 16 must be a multiple of 32"),
    (["2", "0"], "R, M, heads and d must be whole numbers from 1"),
])
def test_sequence_parallel_refuses_shapes_it_cannot_split(numbers, why):
    p = subprocess.run([sys.executable, SEQUENCE_PARALLEL] + numbers, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and why in p.stderr, (p.returncode, p.stderr)


@needs_mpi
def test_sequence_parallel_under_mpirun_gives_the_same_bits(tmp_path):
    run([sys.executable, SEQUENCE_PARALLEL, "2", "--save", str(tmp_path / "launch")])
    for transport in ("auto", "mpi"):
        out = run(mpirun_cmd(2) + [sys.executable, SEQUENCE_PARALLEL, "--transport", transport, "--save",
                                   str(tmp_path / transport)])
        check_sequence_parallel(out, 2, "mpirun, transport %s" % ("shm" if transport == "auto" else "mpi"))
        for r in range(2):
            np.testing.assert_array_equal(np.load(tmp_path / transport / ("rank%d.npy" % r)),
                                          np.load(tmp_path / "launch" / ("rank%d.npy" % r)))
    p = subprocess.run(mpirun_cmd(2) + [sys.executable, SEQUENCE_PARALLEL, "4"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0 and "R = 4, but the job has 2 ranks" in p.stderr, p.stderr


@needs_mpi
def test_sequence_parallel_across_two_hosts(tmp_path):
    import shlex
    hosts = os.environ.get("A2AMM_TEST_HOSTS_MPIRUN")
    if not hosts:
        pytest.skip("no namespace hosts (tests/test_python.sh makes them as root)")
    run([sys.executable, SEQUENCE_PARALLEL, "2", "--save", str(tmp_path / "launch")])
    out = run(shlex.split(hosts) + [sys.executable, SEQUENCE_PARALLEL, "--save", str(tmp_path / "hosts")])
    check_sequence_parallel(out, 2, "mpirun, transport mpi")
    for r in range(2):
        np.testing.assert_array_equal(np.load(tmp_path / "hosts" / ("rank%d.npy" % r)),
                                      np.load(tmp_path / "launch" / ("rank%d.npy" % r)))


# ---- examples/moe_layer.py: an MoE layer with expert parallelism (a2amm.MoE) against plain torch --------------

MOE_LAYER = os.path.join(REPO, "examples", "moe_layer.py")


def check_moe_layer(out, ranks, how):
    assert "moe_layer: OK" in out and how in out, out
    assert out.count("values off the bound") - out.count(" 0 values off the bound") == 0, out
    assert out.count(" 0 values off the bound") == ranks, out
    # each rank's worst |difference| as a fraction of its bound, said to be within it up to 1: and it is
    said = re.findall(r"worst \|difference\| (\S+) of its bound \(within it up to 1;", out)
    assert len(said) == ranks and all(0 <= float(f) <= 1 for f in said), out
    assert "a2amm.MoE" in out and "gather every token + reduce-scatter" in out, out


@needs_torch
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_moe_layer_under_launch(ranks):
    """Skewed routing (most tokens to expert 0) and, with more than one rank, a rank with no tokens."""
    extra = ["--skew"] + (["--empty-rank"] if ranks > 1 else [])
    out = run([sys.executable, MOE_LAYER, "--ranks", str(ranks)] + extra)
    check_moe_layer(out, ranks, "a2amm.launch, %d ranks" % ranks)
    if ranks > 1:
        assert "rank %d: 0 tokens" % (ranks - 1) in out, out


@needs_torch
@needs_mpi
@pytest.mark.parametrize("ranks,transport", [(1, "auto"), (2, "auto"), (2, "mpi"), (4, "mpi")])
def test_moe_layer_under_mpirun(ranks, transport):
    extra = ["--skew"] + (["--empty-rank"] if ranks > 1 else [])
    out = run(mpirun_cmd(ranks) + [sys.executable, MOE_LAYER, "--transport", transport] + extra)
    check_moe_layer(out, ranks, "mpirun, %d ranks, transport %s" % (ranks, "shm" if transport == "auto" else "mpi"))
    if ranks > 1:
        assert "rank %d: 0 tokens" % (ranks - 1) in out, out


@needs_torch
@needs_mpi
def test_moe_layer_across_two_hosts():
    """The example's ranks on two network-namespace hosts (MPI messages between them): skewed routing, the
    second rank with no tokens."""
    import shlex
    hosts = os.environ.get("A2AMM_TEST_HOSTS_MPIRUN")
    if not hosts:
        pytest.skip("no namespace hosts (tests/test_python.sh makes them as root)")
    out = run(shlex.split(hosts) + [sys.executable, MOE_LAYER, "--skew", "--empty-rank"])
    check_moe_layer(out, 2, "mpirun, 2 ranks, transport mpi")
    assert "rank 1: 0 tokens" in out, out


@needs_torch
@pytest.mark.parametrize("args,why", [
    (["--tokens", "0"], "argument --tokens: must be a whole number from 1 to 4096 (each rank's tokens, the op's "
                        "max_tokens; --empty-rank gives the last rank none); got '0'"),
    (["--tokens", "-5"], "argument --tokens: must be a whole number from 1 to 4096"),
    (["--ranks", "3"], "argument --ranks: must divide E = 8 (1, 2, 4 or 8); got 3"),
    (["--ranks", "0"], "argument --ranks: must be a whole number from 1 to 8"),
], ids=["tokens0", "tokens-5", "ranks3", "ranks0"])
def test_moe_layer_refuses_bad_options_saying_why(args, why):
    """A count the example cannot run is refused by its options (exit 2, the reason), not a traceback."""
    p = subprocess.run([sys.executable, MOE_LAYER] + args, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and why in p.stderr and "Traceback" not in p.stderr, (p.returncode, p.stderr)


# ---- every Python example's --help --------------------------------------------------------------------------

@pytest.mark.parametrize("example", [EXAMPLE, SEQUENCE_PARALLEL, MOE_LAYER], ids=os.path.basename)
def test_help_says_the_whole_description(example):
    """--help prints the example's whole description (its docstring, every paragraph ending with a full stop)
    and then its options, not a first line that stops mid-sentence."""
    if example != EXAMPLE:
        pytest.importorskip("torch")
    with open(example) as f:
        doc = ast.get_docstring(ast.parse(f.read()))
    out = run([sys.executable, example, "--help"])
    first = doc.split("\n\n")[0]
    assert first in out, out
    last = doc.split("\n\n")[-1]
    assert last.rstrip().endswith(".") and last in out, out
    assert out.index(last) < out.index("options:"), out
