"""benchmarks/bench_backends.py's correctness half: each system computes the same loss and gradients
as gradir NumPy before anything is timed (the timing itself is not run here)."""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_backends as bb  # noqa: E402


@pytest.mark.parametrize("workload", ["dot", "mlp32"])
@pytest.mark.parametrize("system", ["torch", "jax"])
def test_systems_agree_with_gradir_numpy(workload, system):
    pytest.importorskip(system)
    w = bb.workload(workload)
    runners, skipped = bb.build(w, ["numpy", system], log=lambda s: None)
    assert not skipped, skipped
    errors = bb.check(w, runners, log=lambda s: None)
    assert errors["numpy"] == 0.0
    assert errors[system] <= w.rtol, errors
    assert set(runners) == {"numpy", system}  # nothing reported wrong


def test_a_disagreeing_system_is_reported_wrong_and_dropped():
    w = bb.workload("dot")
    runners, _ = bb.build(w, ["numpy"], log=lambda s: None)
    good = runners["numpy"]
    runners["torch"] = bb.Runner("torch", good.call, lambda out: (float(out[0]), {"w": 2 * out[1][0], "x": out[1][1]}))
    lines = []
    errors = bb.check(w, runners, log=lines.append)
    assert errors["torch"] > w.rtol and "torch" not in runners
    assert any("WRONG" in line for line in lines)


def test_error_is_judged_on_the_gradients_scale():
    ref = (1.0, {"w": np.array([1.0, -2.0]), "b": np.array([1e-12])})  # b: zero up to rounding
    assert bb.max_rel_error(ref, (1.0, {"w": np.array([1.0, -2.0]), "b": np.array([-1e-12])})) < 1e-9
    assert bb.max_rel_error(ref, (1.0, {"w": np.array([1.0, -2.001]), "b": np.array([1e-12])})) == pytest.approx(5e-4)


def test_an_unbuilt_backend_is_skipped_with_the_reason(monkeypatch):
    import gradir.backends

    monkeypatch.setattr(gradir.backends, "BACKENDS", ("numpy",))  # as on an install without the LLVM backend
    _, skipped = bb.build(bb.workload("dot"), ["llvm"], log=lambda s: None)
    assert skipped == {"llvm": "not available (backend not built)"}
