"""benchmarks/bench_backends.py: each system computes the same loss and gradients as gradir NumPy before
anything is timed, and the timing harness (shared with bench_gpu.py) runs its `sync` around every timed call and
block; the model workloads' checks run at tiny sizes, and the thread-mode tables, the roofline listing and the
compile-time section render from fake results; the CPU benchmark's timing itself is not run here."""

from __future__ import annotations

import json
import math
import os
import pathlib
import re
import sys
import types

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_backends as bb  # noqa: E402
import compile_time as ct  # noqa: E402
import roofline as rl  # noqa: E402


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


# -- the model workloads (workloads_models.py), tiny: each system's loss and gradients against gradir NumPy's --------

TINY = {"cnn": dict(B=4, width=4, hw=8), "gpt2s": dict(layers=2, B=1, T=8, C=32, heads=4),
        **{k: dict(hidden=32, layers=1, T=8, B=2, vocab=50) for k in ("llama", "mistral", "neox")}}


@pytest.mark.parametrize("key", list(TINY))
def test_model_workloads_agree_with_gradir_numpy_on_llvm_and_torch(key):
    pytest.importorskip("torch")
    if key in ("llama", "mistral", "neox"):
        pytest.importorskip("transformers")
    import gradir.backends

    w = bb.workload(key, **TINY[key])
    systems = ["numpy", "torch", *(["llvm"] if "llvm" in gradir.backends.BACKENDS else [])]
    runners, skipped = bb.build(w, systems, log=lambda s: None)
    assert not skipped, skipped
    errors = bb.check(w, runners, log=lambda s: None)
    assert set(runners) == set(systems), errors  # nothing reported wrong
    assert errors["numpy"] == 0.0 and all(e <= w.rtol for e in errors.values()), errors
    loss, grads = runners["numpy"].unpack(runners["numpy"].call())
    assert np.isfinite(loss) and set(grads) == set(w.names) and any(np.abs(g).max() > 0 for g in grads.values())
    if "llvm" in runners:  # the roofline listing's input: one row per kernel, products counted as 2MNK
        rows = runners["llvm"].profile()
        assert rows and all(r["s"] >= 0 and r["s_in_order"] >= 0 and r["bytes"] > 0 for r in rows)
        assert sum(r["flops"] for r in rows) > 0


def test_a_workload_without_a_jax_spelling_is_skipped_with_the_reason():
    _, skipped = bb.build(bb.workload("cnn", **TINY["cnn"]), ["jax"], log=lambda s: None)
    assert "no JAX spelling" in skipped["jax"]


# -- rendering on fake results ------------------------------------------------------------------------

PEAKS = {"gflops_numpy": 100.0, "gflops_torch": 120.0, "gbs_numpy": 20.0, "gbs_torch": 25.0, "gflops": 120.0,
         "gbs": 25.0}


def test_the_profile_listing_gives_each_kernels_rates_against_the_roofline():
    rows = [{"kernel": "k0 matmul  gemm", "s": 1e-3, "s_in_order": 1.5e-3, "flops": 60e6, "bytes": 1e6},  # 60 of 120
            {"kernel": "k1 loop    for [1000]", "s": 2e-3, "s_in_order": 3e-3, "flops": 1e6, "bytes": 25e6},  # 12.5 of 25
            {"kernel": "k2 numpy   NumPy fallback (unfold)", "s": 1e-6, "s_in_order": 2e-6, "flops": 0, "bytes": 10}]
    text = rl.render_profile("fake", rows, PEAKS, top=2)
    assert "3 kernels, 3,001 µs run one at a time, 4,502 µs in program order" in text and "top 2 by time:" in text
    assert "the matrix products' arithmetic alone, at the measured peak, takes 500 µs" in text  # 60 MFLOP at 120
    lines = [ln for ln in text.splitlines() if ln.startswith("| `")]
    assert len(lines) == 2 and lines[0].startswith("| `k1 loop")  # the slowest first, k2 cut
    assert "| 2,000.0 | 3,000.0 | 67% | 0.5 | 12.5 | 0.04 | 50% (memory) |" in lines[0]
    assert "| 1,000.0 | 1,500.0 | 33% | 60.0 | 1.0 | 60.00 | 50% (compute) |" in lines[1]
    assert "roofline from 120 GFLOP/s and 25.0 GB/s" in rl.peaks_line(PEAKS)


def test_the_scaling_table_sums_each_kernel_class_per_thread_count():
    one = [{"kernel": "k0 matmul  gemm", "s": 4e-3}, {"kernel": "k1 loop    for [8]", "s": 1e-3},
           {"kernel": "k2 matmul  gemm", "s": 2e-3}]
    two = [{"kernel": "k0 matmul  gemm", "s": 2e-3}, {"kernel": "k1 loop    for [8]", "s": 1e-3},
           {"kernel": "k2 matmul  gemm", "s": 1e-3}]
    text = rl.render_scaling([(1, {"step": one}), (2, {"step": two})])
    rows = [ln for ln in text.splitlines() if ln.startswith("| step")]
    assert rows == ["| step | matmul | 6,000 | 3,000 | 2.00x |", "| step | loop | 1,000 | 1,000 | 1.00x |"]


def test_flops_are_counted_from_the_ir():
    import gradir as gr

    g = gr.trace(lambda a, b: gr.sum(gr.tanh(a @ b)), np.ones((3, 4), np.float32), np.ones((4, 5), np.float32))
    ops = {n.op: rl.node_flops(n) for n in g.nodes}
    assert ops["matmul"] == 2 * 3 * 4 * 5 and ops["tanh"] == 15 and ops["sum"] == 15


def test_the_blas_names_come_from_torchs_build_config():
    config = ("  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605 for Intel(R) 64\n"
              "  - CPU capability usage: AVX512\n  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release")
    assert rl.blas_from_config(config) == "MKL 2024.2-Product (AVX512 kernels)"
    assert rl.blas_from_config("Build settings: BLAS_INFO=open, X=1") == "open"


def test_each_thread_mode_has_its_own_tables_and_profile_section():
    assert bb.thread_counts("1,all,1") == [1, os.cpu_count()]
    results = [bb.Result("dot", "dot f64", "### dot f64\n\n| table |\n",
                         [{"kernel": "k0 loop", "s": 1e-6, "flops": 1000, "bytes": 8000}], 50.0),
               bb.Result("cnn", "CNN", "### CNN\n\n| table |\n")]
    tables, prof = bb.render_mode(2, "n/a: the LLVM backend ignores it", "Environment: x", PEAKS, results)
    assert tables.startswith("## 2 threads\n") and "torch.set_num_threads(2)" in tables
    assert "GRADIR_NUM_THREADS=2 (n/a: the LLVM backend ignores it)" in tables
    assert tables.index("Measured peaks") < tables.index("### dot f64") < tables.index("### CNN")
    assert "#### dot f64" in prof and "| `k0 loop` |" in prof and "#### CNN\n\nno gradir LLVM profile" in prof
    assert bb.mode_heading(1, "x").startswith("## 1 thread\n")


def test_the_compile_time_section_states_each_figure_against_its_target():
    fig = lambda c: {"build_s": c, "first_s": 1.0, "steady_s": 1.0, "compile_s": c}
    res = {"layers": 12, "cold_off": fig(16.0), "cold_fresh_dir": fig(9.0), "warm_cached": {"error": "boom"},
           "profiled": {**fig(20.0), "phases": [("codegen", 3.0), ("LLVM", 1.0)], "top": [("emitter.py:1 f", 2.0)]}}
    text = ct.render(res, {"dot": 50.0, "cnn": 2500.0})
    assert "cold, GRADIR_CACHE_DIR=off: 16.00 s (misses the 15 s target" in text
    assert "fresh empty cache dir: 9.00 s (meets the 15 s target" in text
    assert "warm from the disk cache: failed: boom" in text
    assert "| codegen | 3.00 | 75% |" in text and "| `emitter.py:1 f` | 2.00 |" in text
    assert "| dot | 0.05 | met |" in text and "| cnn | 2.50 | missed |" in text
    assert ct.phase_of("/x/site-packages/llvmlite/binding/ffi.py").startswith("LLVM")
    assert ct.phase_of("/work/main/passes/fusion.py") == "fusion"


def test_a_thread_mode_child_that_crashes_costs_only_its_current_workload(monkeypatch, tmp_path):
    """run_modes with a fake child: the first one finishes `dot`, then dies in `gpt` (a segfault); a second
    child runs the rest with the peaks the first measured, and the mode's tables say which workload died."""
    calls = []

    def fake_run(cmd, env):
        calls.append((cmd, env))
        keys = cmd[cmd.index("--workloads") + 1].split(",")
        out = pathlib.Path(cmd[cmd.index("--out") + 1])
        done = keys[:1]  # the first child finishes one workload, then crashes
        results = [vars(bb.Result(k, k.upper(), f"### {k.upper()}\n", None, 10.0)) for k in done]
        out.write_text(json.dumps({"env": "Environment: fake", "peaks": PEAKS, "results": results}))
        return types.SimpleNamespace(returncode=-11 if len(calls) == 1 else 0)

    monkeypatch.setattr(bb.subprocess, "run", fake_run)
    monkeypatch.setattr(bb, "thread_counts", lambda spec: [3])
    args = type("A", (), {"threads": "3", "workload_keys": ["dot", "gpt", "mlp32"]})()
    tables, prof, compile_ms = bb.run_modes(["--quick", "--threads", "1,all", "--out", "x.md"], args, log=lambda s: None)
    assert len(calls) == 2 and calls[0][1]["GRADIR_NUM_THREADS"] == calls[0][1]["OPENBLAS_NUM_THREADS"] == "3"
    assert "--peaks" not in calls[0][0] and "--peaks" in calls[1][0]  # measured once per mode
    assert calls[1][0][calls[1][0].index("--workloads") + 1] == "mlp32" and "x.md" not in calls[0][0]
    assert tables.startswith("## 3 threads") and "### gpt\n\nThe run of this workload died (signal 11)" in tables
    assert tables.index("### DOT") < tables.index("### gpt") < tables.index("### MLP32")
    assert compile_ms["dot"] == compile_ms["mlp32"] == 10.0 and math.isnan(compile_ms["gpt"])
