"""benchmarks/bench_backends.py: each system computes the same loss and gradients as gradir NumPy before
anything is timed, and the timing harness (shared with bench_gpu.py) runs its `sync` around every timed call and
block; the CPU benchmark's timing itself is not run here."""

from __future__ import annotations

import pathlib
import re
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


def test_the_harness_syncs_around_every_timed_call_and_block():
    """bench_gpu.py's use of the one harness: a sync (here a recorder) before and after each timed call and
    block, blocks sized from _first_call's steady time (no warm-up), warm_calls untimed calls before each
    block, and the ratios to a baseline system."""
    events = []
    sync = lambda: events.append("sync")
    runners = {k: bb._first_call(bb.Runner(k, lambda k=k: events.append(k), lambda out: out), 1, sync=sync)
               for k in ("a", "b")}
    assert events == ["sync", "a", "sync"] * 2 + ["sync", "b", "sync"] * 2  # the first call, one steady call
    for r, steady_s in zip(runners.values(), (0.1, 0.2)):
        r.steady_s = steady_s  # blocks of 1 s: 10 and 5 calls (each ~1 µs: never cut short at 5 s)
    events.clear()
    lines = []
    calls = bb.time_interleaved(runners, 3, 1.0, None, rewarm_s=0.0, warm_calls=1, sync=sync, log=lines.append)
    assert calls == {"a": 10, "b": 5}
    trace = "".join(e[0] for e in events)  # each block: one untimed call, sync, k timed calls, sync
    assert re.fullmatch("(asa{10}s|bsb{5}s)+", trace) and trace.count("asa") == trace.count("bsb") == 3, trace
    assert [len(r.samples) for r in runners.values()] == [3, 3] and lines[-1].startswith("  round 3/3")
    rows = bb.summarise(runners, calls, baseline="b")
    assert {row["key"]: row["rounds"] for row in rows} == {"a": 3, "b": 3}
    assert next(row["ratio"] for row in rows if row["key"] == "b") == 1.0
    table = bb.render_table(bb.workload("dot"), rows, {}, {}, {}, baseline="b", systems={"a": "A", "b": "B"})
    assert "| system | median µs | spread | vs b | min µs | calls/block | compile ms | max rel error |" in table
    with pytest.raises(ValueError, match="no steady time"):
        bb.time_interleaved({"c": bb.Runner("c", lambda: None, lambda out: out)}, 1, 1.0, None)
