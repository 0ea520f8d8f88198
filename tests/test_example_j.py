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
