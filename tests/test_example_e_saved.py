"""Example E (saved tensors and memory): figures checked against hand derivations."""

from __future__ import annotations

import pathlib
import shutil

import pytest
from examples_util import load, run

KiB = 1024
F64_3 = 3 * 8            # one f64[3] buffer
ACT = 32 * 256 * 4       # one 32x256 float32 activation or cotangent: 32 KiB
WEIGHT = 256 * 256 * 4   # one 256x256 float32 weight gradient: 256 KiB
BIAS = 256 * 4           # one float32 bias gradient: 1 KiB


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    out = tmp_path_factory.mktemp("e_saved_out")
    figures, text = run(load("e_saved_tensors_and_memory"), out)
    return figures, " ".join(text.split()), out  # the text with its line wrapping undone


@pytest.fixture(scope="module")
def figures(example):
    return example[0]


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
    assert kinds == ["activation", "input", "input"] and saved["count"] == 3 and saved["bytes"] == 8  # one f64


def test_schedule_dependency_counts_by_hand(example):
    figures, text, _ = example
    v = figures["tanh_vector"]
    # the backward of sum(tanh(a*b + a)), read off its IR: each node owes one count per operand computed
    # inside the backward (a, b, saved_tanh4 and ct0 are inputs; a const is a node)
    assert "%10 = multiply %5, %9" in v["backward"] and "%13 = add %10, %11" in v["backward"]
    assert v["initial_counts"] == {
        "%4": 0,   # reshape ct0
        "%5": 1,   # broadcast_to %4
        "%6": 0,   # y*y of the saved tanh output
        "%7": 0,   # const 1.0
        "%8": 1,   # broadcast_to %7
        "%9": 2,   # 1 - y^2
        "%10": 2,  # g * (1 - y^2): dL/d(a*b + a)
        "%11": 1,  # %10 * b
        "%12": 1,  # %10 * a = dL/db
        "%13": 2,  # %10 + %11 = dL/da: a is used twice, two contributions
    }
    assert v["gradient_of_a"] == {"node": "%13", "op": "add", "inputs": ["%10", "%11"], "initial_count": 2,
                                  "ready_after_steps": [6, 7]}
    steps = {s["node"]: s for s in v["steps"]}
    assert [s["node"] for s in v["steps"]] == ["%4", "%5", "%6", "%7", "%8", "%9", "%10", "%11", "%12", "%13"]
    assert {d["node"]: d["count"] for d in steps["%10"]["decremented"]} == {"%11": 0, "%12": 0, "%13": 1}
    assert steps["%11"]["decremented"] == [{"node": "%13", "count": 0}]
    # ready at the start: the nodes owing nothing, %4, %6, %7; %4 runs first, making %5 ready
    assert steps["%4"]["queue"] == ["%5", "%6", "%7"]
    assert "It starts with count 2, drops to 1 at step 6 and to 0 at step 7" in text
    assert "a node whose count reaches 0 joins the ready queue" in text


def test_memory_timeline_by_hand(figures):
    m = figures["tanh_vector"]["memory"]
    # buffers: forward a*b, a*b + a, tanh (the saved one); backward y*y, 1 - y^2, %10, %11, %12, %13; 24 B each.
    # reshape/broadcast_to are views, the loss, the seed and the constant are 0-d: none owns a buffer
    assert [b["bytes"] for b in m["buffers"]] == [F64_3] * 9
    saved_tanh = next(b for b in m["buffers"] if b["value"] == "forward %4")
    assert (saved_tanh["start"], saved_tanh["end"]) == (2, 4 + 2)  # forward step 2 -> backward step 2 (y*y)
    # the peak: backward step 9 (the add making dL/da) with both gradients, %10 and %11: 4 x 24 B
    assert (m["peak_bytes"], m["peak_at"]) == (4 * F64_3, "backward step 9")
    assert figures["tanh_vector"]["memory_parts"] == [
        {"what": "gradient", "type": "f64[3]", "count": 2, "bytes_each": F64_3},
        {"what": "backward temporary", "type": "f64[3]", "count": 2, "bytes_each": F64_3}]
    # without the results: forward step 1 holds a*b (read for the last time) and a*b + a
    assert figures["tanh_vector"]["activation_peak_bytes"] == 2 * F64_3
    assert figures["tanh_vector"]["activation_peak_at"] == "forward step 1"
    assert [s["live_bytes"] for s in m["steps"]] == [24, 48, 48, 24, 24, 24, 48, 24, 24, 48, 48, 48, 72, 96]


def test_residual_blocks_saved_tensors(figures):
    # per block, by hand: x (read by the first matmul's rule for dW1), the relu output (relu keeps its
    # output; it is also the second matmul's input for dW2): 2 activations of 32x256 float32 = 32 KiB each.
    # The block input of block 0 is the graph input; the final x*x keeps x (one more activation).
    # So 12*2 activations, minus block 0's input (an input), plus the final x = 24.
    assert figures["blocks_activations"] == 24
    assert figures["blocks_saved_bytes"] == 24 * 32 * 256 * 4
    assert figures["blocks_peaks"]["memory"] <= figures["blocks_peaks"]["engine"]


def test_what_the_6_05_mib_peak_counts(example):
    figures, text, _ = example
    # the memory plan's peak: at the last backward step (block 0's dW1 matmul, 184 backward steps) every
    # activation is freed; held are the 48 gradients (results live to the end) and the cotangent dW1 reads
    peak = 24 * WEIGHT + 24 * BIAS + 1 * ACT
    assert peak == 6_348_800 and f"{peak / 2**20:.2f}" == "6.05"
    assert figures["blocks_peaks"]["engine"] == peak and figures["blocks_peak_at"] == "backward step 183"
    assert figures["blocks_peak_parts"] == [
        {"what": "gradient", "type": "f32[256,256]", "count": 24, "bytes_each": WEIGHT},
        {"what": "gradient", "type": "f32[256]", "count": 24, "bytes_each": BIAS},
        {"what": "backward temporary", "type": "f32[32,256]", "count": 1, "bytes_each": ACT}]
    assert ("6.05 MiB = 24 x 256.00 KiB (gradients f32[256,256]) + 24 x 1.00 KiB (gradients f32[256]) + "
            "1 x 32.00 KiB (backward temporary f32[32,256]) = 6,348,800 B") in text
    assert "engine order 6.05 MiB" in text


def test_what_the_832_kib_activation_peak_counts(example):
    figures, text, _ = example
    # results left out: at block 11's relu rule, x_1..x_11 and r_0..r_10 are still saved (x_12 and r_11
    # have been read for the last time), and 4 backward buffers: dx_12, dr_11, the relu mask, the product
    assert figures["blocks_activation_peak"] == (22 + 4) * ACT == 832 * KiB
    assert figures["blocks_remat_peak"] == 832 * KiB  # what e_checkpointing.py prints as "activation peak"
    assert figures["blocks_activation_peak_at"] == "backward step 15"
    assert figures["blocks_activation_peak_parts"] == [
        {"what": "saved activation", "type": "f32[32,256]", "count": 22, "bytes_each": ACT},
        {"what": "backward temporary", "type": "f32[32,256]", "count": 4, "bytes_each": ACT}]
    assert "e_checkpointing.py's \"activation peak\"" in text
    assert "832.00 KiB = 22 x 32.00 KiB (saved activations f32[32,256]) + 4 x 32.00 KiB" in text


def test_attention_keeps_b_h_t_t_probabilities(example):
    figures, text, _ = example
    assert figures["attention_largest_shape"] == (1, 12, 1024, 1024)
    assert figures["attention_largest_bytes"] == 1 * 12 * 1024 * 1024 * 4 == 48 * 2**20
    # ours and the course's side by side (the text with its line wrapping undone: one space for two)
    assert "48.00 MiB = B*H*T*T*4 bytes = 1*12*1024*1024*4 per layer (the course: 48 MiB per layer)" in text


def test_out_writes_diagrams_plot_and_report(example):
    figures, text, out = example
    for name in ("tanh_expr", "residual_blocks"):
        files = figures["files"][name]
        for key in ("html", "memory.svg", "forward.dot", "backward.dot", "joint.dot"):
            assert pathlib.Path(files[key]) == out / f"{name}.{key}" and (out / f"{name}.{key}").is_file()
        assert files["html"] in text and files["memory.svg"] in text  # the paths are printed
        assert "<html" in (out / f"{name}.html").read_text()[:200].lower()
    assert not list(out.glob("*.tmp")) and not list(out.glob(".*"))  # atomic writes leave nothing behind
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot program is not installed: only the .dot sources are written")
    assert "<svg" in (out / "tanh_expr.backward.svg").read_text()
    assert figures["files"]["residual_blocks"]["backward.svg"] in text
