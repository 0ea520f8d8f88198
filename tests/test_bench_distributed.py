"""benchmarks/bench_distributed.py in its quick form: both systems run on 2 local ranks, end with the same bits,
and the table (medians, ratio, per-bucket timeline) is written atomically."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

pytest.importorskip("torch")
BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_distributed.py"


def test_quick_run_writes_the_table(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_distributed", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "distributed.md"
    rec = bench.main(["--quick", "--out", str(out)])
    text = out.read_text()
    assert rec["same_bits"] and "bit for bit, on every rank: yes" in text
    for name in bench.SYSTEMS.values():
        assert f"| {name} |" in text
    buckets = rec["plan"]["buckets"]
    assert len(buckets) == 3  # three 32x32 float32 weights (4 KiB) in buckets of 0.005 MiB: one each
    assert len(rec["timelines"]["overlap"]["launch"]) == len(buckets) == len(rec["timelines"]["after"]["launch"])
    t = rec["timelines"]
    # overlapped buckets start before the program ends; after the backward, none does
    assert t["overlap"]["launch"][0] < t["overlap"]["computed"] <= t["overlap"]["reduced"]
    assert min(t["after"]["launch"]) >= t["after"]["computed"] - 1e-6
    assert not list(tmp_path.glob("*.tmp")) and [p.name for p in tmp_path.iterdir()] == ["distributed.md"]
