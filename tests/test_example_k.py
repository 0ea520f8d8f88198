"""Teaching example K: a GPT-style PyTorch model through gr.from_torch, checked against PyTorch autograd, with
its saved tensors grouped by module, an optimal recompute plan under a budget and PyTorch's own saves."""

from __future__ import annotations

import contextlib
import io

import pytest
from examples_util import load


@pytest.fixture(scope="module")
def run():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        figures = load("k_pytorch_gpt").main()
    return figures, buf.getvalue()


def test_the_captured_model_has_pytorchs_loss_and_gradients(run):
    f, _ = run
    assert f["capture"] == "export"
    assert abs(f["loss"] - f["torch_loss"]) <= 1e-12 * abs(f["torch_loss"])
    assert f["rel_err_vs_torch"] <= 1e-12


def test_saved_tensors_by_module_add_up_and_the_recompute_plan_fits_its_budget(run):
    f, text = run
    assert sum(nbytes for _, nbytes in f["by_module"].values()) == f["saved_bytes"]
    assert {"blocks.0.attn", "blocks.1.attn", "ln_f"} <= set(f["by_module"])
    assert f["optimal_peak"] <= f["budget"] < f["none_peak"] and f["recomputed_ops"] > 0
    assert f["torch_saves"] > 0 and f["torch_activation_bytes"] > 0
    for line in ("captured with export", "backward schedule:", "optimal plan peaks at", "Why they differ"):
        assert line in text
