"""benchmarks/bench_gpu.py's CPU-interpreter path (TRITON_INTERPRET=1, set in conftest) and benchmarks/gpu_check.sh:
the whole pipeline (compile, float64 check, interleaved timing, table written atomically) on tiny sizes."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest
from conftest import triton_missing

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_backends as bb  # noqa: E402

SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def sections(report: str) -> dict[str, list[str]]:
    """{workload title: the table's data rows}."""
    out, title = {}, None
    for line in report.splitlines():
        if line.startswith("### "):
            title = line[4:]
            out[title] = []
        elif title and line.startswith("| ") and not line.startswith("| system"):
            out[title].append(line)
    return out


@pytest.mark.skipif(triton_missing() is not None, reason=str(triton_missing()))
def test_interpreter_run_times_every_system_on_every_workload(tmp_path, capsys):
    pytest.importorskip("torch")
    import bench_gpu

    out = tmp_path / "gpu.md"
    # aot_eager: torch.compile's own path (Dynamo, AOTAutograd) without Inductor's C++ build, which takes
    # ~20 s a workload on a cold cache; the GPU run uses Inductor
    report = bench_gpu.main(["--device", "cpu", "--quick", "--rounds", "1", "--compile-backend", "aot_eager",
                             "--out", str(out)])
    assert out.read_text() == report
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu.md"]  # written atomically: no temporary file left
    assert "Triton's interpreter" in report and "meaningless for speed" in report
    tables = sections(report)
    titles = [bb.workload(k, **bench_gpu.QUICK_SIZES[k]).title for k in bench_gpu.WORKLOADS]
    assert list(tables) == titles
    for title, rows in tables.items():
        names = sorted(row.split("|")[1].strip() for row in rows)
        assert names == ["PyTorch eager", "gradir triton", "torch.compile (aot_eager)"], (title, rows)
        for row in rows:
            cells = [c.strip() for c in row.split("|")[1:-1]]
            assert re.fullmatch(r"[\d,]+\.\d{3}", cells[1]), row  # a time, not "wrong" or "skipped"
            assert float(cells[-1]) <= 1e-4, row  # max rel error against PyTorch float64
    assert "| wrong |" not in report and "skipped:" not in report
    assert report.count("gradir triton / torch.compile (aot_eager):") == len(titles)
    printed = capsys.readouterr().out
    assert printed.count("round 1/1") == len(titles) and f"wrote {out}" in printed


def test_a_disagreeing_system_is_reported_wrong_and_not_timed(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    import bench_gpu

    bench = bench_gpu.Bench(torch, torch.device("cpu"), quick=True)
    good = bench.reference
    monkeypatch.setattr(bench, "reference", lambda w: (good(w)[0] * 1.01, good(w)[1]))  # the loss off by 1%
    args = type("Args", (), {"quick": True, "rounds": 1, "block_ms": 1.0, "compile_backend": "inductor"})()
    lines = []
    table = bench_gpu.run_workload(bench, "mlp1024", ["torch"], args, log=lines.append)
    assert "| PyTorch eager | wrong | | | | | | 1e-02 |" in table
    assert not any("round" in line for line in lines) and any("WRONG" in line for line in lines)


def test_sized_workloads():
    w = bb.workload("gpt", B=1, T=4, C=8, heads=2)
    assert w.title == "GPT-2 block B=1 T=4 C=8 heads=2 f32" and w.args[1].shape == (1, 4, 8)
    assert bb.workload("mlp1024", B=8, H=16).args[0]["W1"].shape == (30, 16)
    assert bb.workload("gpt").title == "GPT-2 block B=8 T=64 C=128 heads=4 f32"  # the CPU benchmark's, unchanged
    assert bb.GPT_LARGE == {"B": 32, "T": 1024, "C": 768, "heads": 12}
    with pytest.raises(ValueError, match="takes the sizes B, H"):
        bb.workload("mlp1024", T=3)
    with pytest.raises(ValueError, match="not a multiple"):
        bb.workload("gpt", C=10, heads=4)


def test_cuda_run_refuses_the_interpreter():
    pytest.importorskip("torch")
    import bench_gpu

    assert os.environ.get("TRITON_INTERPRET") == "1"  # conftest
    with pytest.raises(SystemExit, match="unset TRITON_INTERPRET"):
        bench_gpu.main(["--device", "cuda", "--quick"])


def test_gpu_check_script_is_executable_bash():
    assert SCRIPT.exists() and os.access(SCRIPT, os.X_OK)
    text = SCRIPT.read_text()
    assert text.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in text
    assert "TRITON_INTERPRET=0" in text and "bench_gpu.py --device cuda" in text and "--device cpu --quick" in text
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
