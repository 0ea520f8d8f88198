"""benchmarks/bench_eager.py's correctness half: gr.Tensor and PyTorch eager compute the same
gradients and record the same number of ops before anything is timed (the timing is not run here)."""

from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_eager as be  # noqa: E402


@pytest.mark.parametrize("key", ["chain", "makemore"])
def test_gr_tensor_and_torch_agree(key):
    pytest.importorskip("torch")
    _, g, t = be.workload(key, chain_ops=300)
    assert be.check(g, t) < {"chain": 1e-12, "makemore": 1e-4}[key]
    if key == "chain":  # 300 elementwise ops and the sum, one node each in both systems
        assert g.ops == t.ops == 301


def test_a_disagreement_stops_the_benchmark():
    pytest.importorskip("torch")
    _, g, t = be.workload("chain", chain_ops=30)
    wrong = be.System("wrong", g.leaves, lambda: g.forward() * 2.0)
    with pytest.raises(SystemExit, match="disagree"):
        be.check(wrong, t)
