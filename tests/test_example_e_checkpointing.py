"""Example E (activation checkpointing): every figure against a hand derivation, PyTorch's figures
measured with saved_tensors_hooks, and the optimal plan against uniform-6 at the same peak."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
from examples_util import load

import gradir as gr

ACT = 32 * 256 * 4             # one 32x256 float32 activation: 32 KiB
MATMUL = 2 * 32 * 256 * 256    # flops of one 32x256 @ 256x256
EW = 32 * 256                  # flops of one 32x256 elementwise add or relu (broadcasts are free)
KiB, MiB = 1024, 2**20


@pytest.fixture(scope="module")
def example():
    return load("e_checkpointing")


@pytest.fixture(scope="module")
def figures(example):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        figures = example.main()
    return {**figures, "printed": out.getvalue()}


def test_no_recomputation(figures):
    # block k keeps r_k (relu keeps its output; dW2 reads it) and x_(k+1) (the next matmul's dW1, or x*x):
    # 24 activations; the peak is in block 11's backward: all 24, the cotangent of the residual stream,
    # and relu's product g * (r > 0)
    f = figures["plans"]["none"]
    assert (f["saved"], f["saved_bytes"], f["block_calls"], f["recomputed_ops"], f["recompute_flops"]) == (24, 24 * ACT, 12,
                                                                                                           0, 0)
    assert f["peak_bytes"] == (24 + 2) * ACT


def test_six_uniform_segments(figures):
    # keep the inputs of segments 1..5 (x_2, x_4, ..., x_10) and the last segment's r_10, x_11, r_11, x_12;
    # recompute blocks 0..9 once more: 22 calls. Per recomputed segment: block 2s whole (2 matmuls, 4
    # elementwise, 2 broadcasts) and block 2s+1 up to relu (1 matmul, 2 elementwise, 1 broadcast)
    f = figures["plans"]["uniform, 6 segments"]
    assert (f["saved"], f["saved_bytes"], f["block_calls"]) == (5 + 4, 9 * ACT, 12 + 10)
    assert (f["recomputed_ops"], f["recompute_flops"]) == (5 * 12, 5 * (3 * MATMUL + 6 * EW))
    assert f["peak_bytes"] == (9 + 2) * ACT  # as above: in block 11's backward, all 9 still held
    # the block calls asserted here and in test_no_recomputation, beside the course's reference figures
    assert ("Block calls: 12 without recomputation, 22 with uniform-6  (the course: 12 / 22, in its PyTorch "
            "reference run)") in figures["printed"]


def test_selective_keeps_the_matmul_outputs(figures):
    # keep x@W1 and r@W2 of every block (24 values, as many bytes as none), recompute from them the
    # bias add, relu, residual add and bias add of each block (plus 2 broadcasts): every block again
    f = figures["plans"]["selective (keep matmul)"]
    assert (f["saved"], f["saved_bytes"], f["block_calls"]) == (24, 24 * ACT, 24)
    assert (f["recomputed_ops"], f["recompute_flops"]) == (12 * 6, 12 * 4 * EW)
    assert f["peak_bytes"] == (24 + 2) * ACT


def test_checkpoint_regions(figures):
    # gr.checkpoint on pairs 0-4 is what checkpoint_sequential(6) does: the uniform-6 plan exactly
    assert figures["plans"]["gr.checkpoint pairs 0-4"] == figures["plans"]["uniform, 6 segments"]
    # pairs 0, 2, 4 recomputed: blocks 2, 3, 6, 7, 10, 11 keep r_k and x_(k+1) (12), and the outputs of the
    # regions feeding blocks 2, 6, 10 are kept (x_2, x_6, x_10): 15; 6 blocks run again
    f = figures["plans"]["gr.checkpoint pairs 0, 2, 4"]
    assert (f["saved"], f["saved_bytes"], f["block_calls"]) == (15, 15 * ACT, 18)
    assert (f["recomputed_ops"], f["recompute_flops"]) == (3 * 12, 3 * (3 * MATMUL + 6 * EW))
    assert f["peak_bytes"] == (15 + 2) * ACT


def test_what_one_block_keeps(figures):
    # block 5's rules read its input x_5 (made by block 4), its relu output, W1 and W2 (inputs: no new memory)
    lines = figures["block5_saves"]
    assert len(lines) == 4
    assert sum("activation, 32.00 KiB new" in ln for ln in lines) == 2
    assert sum("params[5]" in ln and "input, 0 B new" in ln for ln in lines) == 2
    assert any("relu keeps its output" in ln for ln in lines)


def test_every_plan_gives_the_same_gradients(example):
    """Bitwise, float64, on a smaller instance of the same model (4 blocks, width 8): every plan and
    region placement of the example is only a choice of what to keep."""
    params, x = example.make_params(blocks=4, width=8, hidden=8, batch=3)
    params = [{k: v.astype(np.float64) for k, v in p.items()} for p in params]
    x = x.astype(np.float64)
    _, want = gr.trace_grad(example.make_loss(), params, x).run(params, x)
    runs = [gr.trace_grad(example.make_loss(), params, x, remat="uniform", segments=2),
            gr.trace_grad(example.make_loss(), params, x, remat="selective"),
            gr.trace_grad(example.make_loss((0,)), params, x)]
    for j in runs:
        _, got = j.run(params, x)
        assert all(np.array_equal(a, b) for a, b in zip(got, want))
    torch = pytest.importorskip("torch")
    tp = [{k: torch.tensor(v, requires_grad=True) for k, v in p.items()} for p in params]
    h = torch.tensor(x)
    for p in tp:
        h = h + torch.relu(h @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"]
    (h * h).mean().backward()
    flat = [p[k].grad.numpy() for p in tp for k in p]  # gradir's pytrees flatten dicts in insertion order
    assert len(want) == len(flat) == 4 * 4
    for g, t in zip(want, flat):
        np.testing.assert_allclose(g, t, rtol=1e-12, atol=1e-14)


def test_optimal_against_uniform_and_the_hand_lower_bound(figures):
    """Lower bound by hand: backward needs the 24 values r_0..r_11, x_1..x_12; each one not kept costs a
    matmul of its own (r_k <- x_k @ W1, x_(k+1) <- r_k @ W2; keeping that matmul's result instead costs
    the same bytes) and two elementwise ops, so kept + recomputed matmuls >= 24; and the peak, in block
    11's relu rule, is >= kept + 2 activations. So a peak of P activations forces >= 24 - (P - 2)
    recomputed values. At uniform-6's peak (11) that is 15, uniform-6's own count: the issue's "strictly
    less than uniform-6 at its peak" cannot hold on this model; optimal must tie it, and must beat
    PyTorch's checkpoint_sequential, which reruns whole segments (4 matmuls, 8 elementwise each)."""
    plans = figures["plans"]
    uniform = plans["uniform, 6 segments"]

    def bound(peak_bytes):
        return (24 - (peak_bytes // ACT - 2)) * (MATMUL + 2 * EW)

    optimal = plans["optimal at uniform's peak"]
    assert optimal["peak_bytes"] <= uniform["peak_bytes"]
    assert optimal["recompute_flops"] == bound(uniform["peak_bytes"]) == uniform["recompute_flops"]
    assert optimal["recompute_flops"] < 5 * (4 * MATMUL + 8 * EW)  # checkpoint_sequential(6) in PyTorch
    # one activation more: 10 kept, 14 matmuls (the bound; the solve is time-limited, the bound proves it)
    more = plans["optimal at uniform's peak + 32 KiB"]
    assert more["peak_bytes"] <= uniform["peak_bytes"] + ACT
    assert more["recompute_flops"] == bound(uniform["peak_bytes"] + ACT) < uniform["recompute_flops"]


def test_mincut_keeps_the_fewest_bytes(figures):
    # the literal minimum is 0 bytes: the backward recomputes the whole forward (2 matmuls, add, relu and
    # two adds per block; broadcasts of the biases are views of inputs, kept for free), and block 11's
    # backward then holds all 24 recomputed values: no lower peak than keeping them
    f = figures["plans"]["mincut"]
    assert (f["saved"], f["saved_bytes"], f["block_calls"]) == (0, 0, 24)
    assert (f["recomputed_ops"], f["recompute_flops"]) == (12 * 6, 12 * (2 * MATMUL + 4 * EW))
    assert f["peak_bytes"] == (24 + 2) * ACT
    # matmuls not recomputed (AOTAutograd's rule): r_k can only come back from x@W1 (one 32x256 value
    # either way) and x_(k+1) from x_k and r@W2 (two): keeping r_k and x_(k+1) is already the minimum
    f = figures["plans"]["mincut, matmul not recomputed"]
    assert (f["saved"], f["saved_bytes"], f["recompute_flops"]) == (24, 24 * ACT, 0)


# -- PyTorch's figures, as PyTorch counts them --------------------------------------------------------


def test_pytorch_counts_what_its_nodes_pack(figures):
    pytest.importorskip("torch")
    pt, none = figures["pytorch"], figures["plans"]["none"]
    # per block: Linear 1 packs x_k and W1^T, ReLU r_k, Linear 2 r_k and W2^T; block 0 skips W1^T (x needs
    # no gradient); y*y packs y twice
    same = pt["same_model"]
    assert same["tensors"] == 12 * 5 - 1 + 2 == 61
    assert same["bytes"] == 12 * (3 * ACT + 2 * 256 * KiB) - 256 * KiB + 2 * ACT
    assert same["block_calls"] == 12
    # deduplicated by storage: 23 weights + x + 24 activations, gradir's saved values; without
    # parameters and input: gradir's saved activations and bytes
    assert same["distinct"] == 23 + 1 + 24
    assert (same["activations"], same["activation_bytes"]) == (none["saved"], none["saved_bytes"])
    # checkpoint_sequential(6): 5 segment inputs + 2 blocks * 5 + 2; activations as gradir's uniform-6
    seg, uniform = pt["same_model_checkpointed"], figures["plans"]["uniform, 6 segments"]
    assert (seg["tensors"], seg["block_calls"]) == (5 + 2 * 5 + 2, 22)
    assert (seg["activations"], seg["activation_bytes"]) == (uniform["saved"], uniform["saved_bytes"])


def test_pytorch_reference_figures_are_a_512_wide_hidden_layer(figures):
    pytest.importorskip("torch")
    ref, ref_seg = figures["pytorch"]["reference_model"], figures["pytorch"]["reference_model_checkpointed"]
    # 256 -> 512 -> 256, x requiring grad, y.pow(2): 12 * (x_k, W1^T, r_k twice, W2^T) + y
    per_block = 32 * KiB + 512 * KiB + 2 * 64 * KiB + 512 * KiB
    assert ref["tensors"] == 61 and ref["bytes"] == 12 * per_block + 32 * KiB
    assert round(ref["bytes"] / MiB, 2) == 13.91
    assert ref_seg["tensors"] == 5 + 2 * 5 + 1 and ref_seg["bytes"] == 5 * 32 * KiB + 2 * per_block + 32 * KiB == 2.5 * MiB
    assert ref_seg["block_calls"] == 22
    # the reference's 21: the same 16 plus one empty tensor per checkpointed segment (5 of 6), no more bytes;
    # the printout says so with these numbers
    assert ref_seg["tensors"] + 5 == 21 and round(ref_seg["bytes"] / MiB, 2) == 2.50
    assert f"the reference's 21 is {ref_seg['tensors']} + 5 empty tensors" in figures["printed"]
    # the measured figures beside the course's, and the empty tensors' history marked as read, not measured
    assert ref["block_calls"] == 12
    printed = figures["printed"]
    assert "no checkpointing: 61 tensors, 13.91 MiB, 12 block calls  (the course: 61 / 13.91 MiB / 12)" in printed
    assert ("checkpoint_sequential(6): 16 tensors, 2.50 MiB, 22 block calls  (the course: 21 / 2.50 MiB / 22;\n"
            "   the reference's 21 is 16 + 5 empty tensors, one per checkpointed segment") in printed
    assert "read from torch/utils/checkpoint.py of earlier 2.x releases (not measured\n   here)" in printed


def test_what_the_activation_peak_counts(figures):
    # results (loss, 48 gradients), inputs and parameters left out; at block 11's relu rule (backward step 15)
    # x_1..x_11 and r_0..r_10 are still saved (22) with 4 backward buffers: dx_12, dr_11, relu's mask, the product
    p = figures["peaks"]
    assert p["activation_peak"] == (22 + 4) * ACT == 832 * KiB == figures["plans"]["none"]["peak_bytes"]
    assert p["activation_peak_at"] == "backward step 15"
    assert p["activation_peak_parts"] == [
        {"what": "saved activation", "type": "f32[32,256]", "count": 22, "bytes_each": ACT},
        {"what": "backward temporary", "type": "f32[32,256]", "count": 4, "bytes_each": ACT}]
    # e_saved_tensors_and_memory.py's "engine order 6.05 MiB": the memory plan with the results counted, at the
    # last of the 184 backward steps: 24 weight gradients of 256x256, 24 bias gradients of 256, one cotangent
    assert p["memory_plan_peak"] == 24 * 256 * 256 * 4 + 24 * 256 * 4 + ACT == 6_348_800
    assert p["memory_plan_peak_at"] == "backward step 183"
    assert [(r["what"], r["count"], r["bytes_each"]) for r in p["memory_plan_peak_parts"]] == [
        ("gradient", 24, 256 * KiB), ("gradient", 24, KiB), ("backward temporary", 1, ACT)]


def test_out_writes_the_timelines_and_diagrams(example, tmp_path, capsys):
    import shutil

    params, x = example.make_params()
    files = example.write_files(tmp_path, params, x)
    printed = capsys.readouterr().out
    timeline = tmp_path / "checkpointing.activation_timeline.svg"
    assert files["activation_timeline"] == str(timeline) and "<svg" in timeline.read_text()
    for key in ("html", "memory.svg", "backward.dot", "joint.dot"):
        assert (tmp_path / f"uniform6.{key}").is_file()
    assert str(timeline) in printed and files["uniform"]["html"] in printed
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*"))  # atomic writes
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot program is not installed: only the .dot sources are written")
    assert "<svg" in (tmp_path / "uniform6.backward.svg").read_text()
