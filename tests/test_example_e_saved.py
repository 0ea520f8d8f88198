"""Example E (saved tensors and memory): figures checked against hand derivations."""

from __future__ import annotations

import pytest
from examples_util import load


@pytest.fixture(scope="module")
def figures():
    return load("e_saved_tensors_and_memory").main()


def test_rules_keep_what_the_calculus_needs(figures):
    rules = figures["rules"]
    assert rules["add"] == "add keeps nothing"
    assert rules["tanh"] == "tanh keeps its output"      # 1 - y^2
    assert rules["exp"] == "exp keeps its output"        # y
    assert "keeps its input" in rules["sin"]               # cos(x)
    assert "other operand" in rules["multiply"]
    assert rules["sum"] == "sum keeps nothing"           # only the shape


def test_tanh_expression_saves_two_inputs_and_the_tanh_output(figures):
    saved = figures["tanh_saved"]
    kinds = sorted(e["kind"] for e in saved["entries"])
    assert kinds == ["activation", "input", "input"] and saved["count"] == 3 and saved["bytes"] == 8


def test_residual_blocks_saved_tensors(figures):
    # per block, by hand: x (read by the first matmul's rule for dW1), the relu output (relu keeps its
    # output; it is also the second matmul's input for dW2): 2 activations of 32x256 float32 = 32 KiB each.
    # The block input of block 0 is the graph input; the final x*x keeps x (one more activation).
    # So 12*2 activations, minus block 0's input (an input), plus the final x = 24.
    assert figures["blocks_activations"] == 24
    assert figures["blocks_saved_bytes"] == 24 * 32 * 256 * 4
    assert figures["blocks_peaks"]["memory"] <= figures["blocks_peaks"]["engine"]


def test_attention_keeps_b_h_t_t_probabilities(figures):
    assert figures["attention_largest_shape"] == (1, 12, 1024, 1024)
    assert figures["attention_largest_bytes"] == 1 * 12 * 1024 * 1024 * 4 == 48 * 2**20
