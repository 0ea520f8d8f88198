"""benchmarks/bench_gemm.py end to end on its quick shapes: every system's product is checked against NumPy in
float64 before it is timed (a wrong one stops the run), and the table has a row per shape with each system's
GFLOP/s (the figures themselves are not asserted: timing is not tested)."""

from __future__ import annotations

import pathlib
import re
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_gemm as bg  # noqa: E402


def test_the_quick_run_checks_each_product_and_writes_a_row_per_shape(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "GRADIR_NUM_THREADS"):
        monkeypatch.setenv(var, "1")  # (main sets them; this puts them back afterwards)
    out = tmp_path / "gemm.md"
    assert bg.main(["--quick", "--block-ms", "2", "--out", str(out)]) == 0
    rows = [ln for ln in out.read_text().splitlines() if re.match(r"\| (square|CNN|GPT)", ln)]
    quick = [s for s in bg.SHAPES if s[0] in bg.QUICK and s[1] <= 256]
    assert len(rows) == len(quick) >= 5
    for row, (what, M, N, K, layout) in zip(rows, quick):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[:3] == [what, f"{M}x{N}x{K}", layout]
        assert all(float(c) > 0 for c in cells[3:7]) and cells[7].endswith("x")
