"""Example J (fused kernels): its figures against independent checks: the compiled loss against the
NumPy reference computed here, and the arena against the listing's kernels."""

from __future__ import annotations

import numpy as np

import gradir as gr
from tests.examples_util import load, run


def test_j_fused_kernels_figures():
    module = load("j_fused_kernels")
    figures, text = run(module)
    want = gr.compile(module.loss, backend="numpy")(*module.inputs())
    np.testing.assert_allclose(figures["value"], want, rtol=1e-6)
    assert figures["max_diff"] < 1e-5  # every gradient too, float32 rounding apart
    # every stored intermediate has one place; the arena is no bigger than what is alive at once
    assert figures["arena_bytes"] == figures["peak_bytes"] > 0
    assert figures["row_kernels"] >= 1 and figures["kernels"] < 30
    assert figures["vector_widths"] and max(figures["vector_widths"]) >= 4
    assert "1. The kernels of the whole step" in text and "passes over" in text
    # the row kernels named one by one: an outer loop with its passes, or the whole input as one row
    assert figures["row_kernels"] + figures["whole_row_kernels"] >= 1 and "rows, each walked in" in text
    assert "walk rows in passes" not in text
    # vectorized code shown per kernel: the tanh kernel's IR uses vector types, and each printed count is its own
    lines = figures["kernel_vector_lines"]
    for op in ("tanh", "exp"):
        holding = [k for k, ops in figures["kernel_ops"].items() if op in ops]
        assert holding and all(lines[k][0] > 0 for k in holding), (op, holding)
    assert "(tanh)" in text and "(exp, log)" in text
    for name, (n, total, _) in lines.items():
        if name.startswith("k") and n:
            assert f"{n:4d} of {total:4d} lines on <" in text
    assert "the loop vectorizer turned" not in text
    # no arena allocation per call: the arena's address is kept and a call's peak allocation is below its size
    calls = figures["call_memory"]
    assert calls["arena_kept"] and calls["output_bytes"] <= calls["peak_bytes"] < figures["arena_bytes"]
    assert "allocates its outputs and nothing else" not in text
