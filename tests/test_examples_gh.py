"""Teaching examples G and H: every figure TEACHING.md gives, asserted to its printed precision, plus
independent oracles (closed-form chain rule, NumPy/ml_dtypes rounding, float64 torch autograd)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from examples_util import load, run


def sig(x, expected, digits):
    """x rounds to `expected` at `digits` significant figures (for figures printed like 8.204e-7)."""
    scale = 10.0 ** (math.floor(math.log10(abs(expected))) - digits + 1)
    return abs(x - expected) <= 0.5 * scale


# -- G ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def g():
    return run(load("g_depth_and_number_formats"))


def closed_form_tanh_chain(w, depth, x=0.5):
    """dv_D/dv_0 = prod_k w (1 - v_{k+1}^2), in plain float64."""
    v, d = x, 1.0
    for _ in range(depth):
        v = math.tanh(w * v)
        d *= w * (1.0 - v * v)
    return d


def test_g_tanh_chains(g):
    f, text = g
    expected = {(1.0, 1): 7.864e-1, (1.0, 10): 2.228e-1, (1.0, 50): 3.396e-2, (1.0, 100): 1.306e-2,
                (3.0, 5): 8.204e-7, (3.0, 10): 2.170e-14, (3.0, 20): 1.518e-29, (3.0, 30): 1.062e-44}
    for key, value in expected.items():
        assert sig(f["tanh"][key], value, 4), key
        assert f["tanh"][key] == pytest.approx(closed_form_tanh_chain(*key), rel=1e-12)
        assert f"{value:.3e}" in text
        # ours, then the course's figure as the course writes it (7.864e-1): side by side on one line
        course = f"{value:.3e}".replace("e-0", "e-")
        assert f"depth {key[1]:3d}: dL/dx = {f['tanh'][key]:.3e}  (the course: {course})" in text
    # the vanishing claim is formatted from the computed depth-30 gradient
    assert f"{f['tanh'][(3.0, 30)]:.0e}" == "1e-44" and "vanishes geometrically (1e-44 after 30 layers)" in text


def test_g_relu_chains(g):
    f, text = g
    for (w, d), value in f["relu"].items():
        assert value == pytest.approx(w ** d, rel=1e-12)
        if w == 1.0:
            assert value == 1.0
            assert f"relu w=1 depth {d:3d}: dL/dx = 1  (w^depth = 1)  (the course: stays 1)" in text
        else:
            assert f"dL/dx = {value:.6g}  (w^depth = {w ** d:.6g})  (the course: 1.2^depth = {1.2 ** d:.6g})" in text


def test_g_fp16_rounding(g):
    f, text = g
    expected = {1e-4: 1.000e-4, 1e-6: 1.013e-6, 1e-7: 1.192e-7}
    for x, value in expected.items():
        assert sig(f["fp16"][x], value, 4)
        assert f["fp16"][x] == float(np.float16(x))
    assert f["fp16"][1e-8] == 0.0
    for figure in ("1.000e-04", "1.013e-06", "1.192e-07"):
        assert figure in text
    for x, course in ((1e-4, "1.000e-4"), (1e-6, "1.013e-6"), (1e-7, "1.192e-7"), (1e-8, "0")):
        assert f"{x:g} -> {f['fp16'][x]:.3e}  (the course: {course})" in text


def test_g_loss_scaling(g):
    f, text = g
    assert sig(f["recovered_1e-8"], 9.997e-9, 4)
    assert f["scaled_1e-8"] == float(np.float16(1e-8 * 65536))
    assert math.isinf(f["scaled_1.0"])
    assert f["dynamic_scale"] == 16384.0
    assert f["dynamic_history"][:3] == [65536.0, 32768.0, 16384.0]
    # oracle: the first power of two from 65536 down at which 2.0 * scale fits in float16
    s = 65536.0
    with np.errstate(over="ignore"):
        while np.isinf(np.float16(2.0 * s)):
            s /= 2
    assert s == f["dynamic_scale"] and f["dynamic_recovered_1e-8"] > 0
    assert "9.997e-09" in text and "settles at 16384" in text
    assert "recovered 9.997e-09  (the course: 9.997e-9)" in text
    assert "1.0 -> inf (float16 max 65504)  (the course: inf)" in text
    assert f"settles at {s:g}  (the course: 16384)" in text
    # the compiled step (gr.amp) settles where the oracle does, skipping exactly the overflowing steps
    assert f["compiled_scales"] == [65536.0, 32768.0] + [s] * 4
    assert f["compiled_skipped"] == [1, 2, 2, 2, 2, 2]
    # what the printed claim about the overflowing steps rests on: steps 0 and 1 leave the weights and sgd's
    # step count as they were; from step 2 sgd(0.1) moves w0 by 0.1 * 2.0 per step (w1's 0.1 * 1e-8 rounds away
    # against 1.0 in float32) and counts the step
    trail = f["compiled_trail"]
    for k in (0, 1):
        assert trail[k]["weights_before"] == trail[k]["weights_after"] == [1.0, 1.0]
        assert trail[k]["optimizer_steps"] == 0
    w0 = np.float32(1.0)
    for k in range(2, 6):
        w0 = np.float32(w0 - np.float32(0.1) * np.float32(2.0))  # one float32 sgd step on w0
        assert trail[k]["weights_after"] == pytest.approx([float(w0), 1.0], abs=1e-7)
        assert trail[k]["weights_before"] == trail[k - 1]["weights_after"]
        assert trail[k]["optimizer_steps"] == k - 1
    assert f["overflow_changes_nothing_but_the_scale"]
    assert "65536 (above float16's max itself) and 32768 (times the gradient 2.0: 65536) overflow" in text
    assert "16384 holds" in text
    assert "     0       65536          [1, 1]         [1, 1]                0               1" in text
    assert "     2       16384          [1, 1]       [0.8, 1]                1               2" in text
    assert "steps 0 and 1 overflowed: the weights after equal the weights before, the optimizer's step count stays 0" in text
    assert "only the scale halves (65536 -> 32768 -> 16384)" in text


def test_g_accumulation_and_bf16(g):
    f, text = g
    assert f["pure_fp16_weight"] == 1.0
    assert abs(f["fp32_master_weight"] - 1.6001) < 5e-5
    assert "float32 master 1.6001" in text
    assert "pure float16 weight 1.0000, float32 master 1.6001  (the course: 1.0 and ~1.6001)" in text
    assert f"{f['fp32_master_weight']:.4f}" == "1.6001" and "to its rounding: 1.6001, not 1.6)" in text
    for x in (1e-8, 1e-10):
        assert f["bf16"][x] == float(ml_dtypes.bfloat16(x)) and f["bf16"][x] == pytest.approx(x, rel=1e-2)
    assert f["bf16_gap"] == 7.8125e-3 == 2.0 ** -7
    assert "0.0078125" in text
    assert "(the course: keeps 1e-8 and 1e-10)" in text and "gap above 1 = 0.0078125  (the course: 7.8125e-3)" in text


def test_g_adam_memory(g):
    f, text = g
    assert f["adam_bytes_per_param"] == 16
    assert round(f["adam_gib"], 3) == 1.854 == round(124_439_808 * 4 * 4 / 2**30, 3)
    assert "1.854 GiB" in text
    assert "16 bytes/parameter; 124,439,808 parameters (GPT-2 small) -> 1.854 GiB  (the course: 16 bytes, 1.854 GiB)" in text
    assert f["mixed_bytes_per_param"] == 4 + 4 + 8 + 2  # plus the float16 copy of each weight
    assert "18 bytes/parameter" in text


# -- H ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def h():
    return run(load("h_convolutions"))


def test_h_output_sizes(h):
    f, text = h
    assert f["size_32_3_1_1_2"] == 16
    for n, k, p, d, s, formula, oh, ow in f["sizes"]:
        ref = F.conv2d(torch.zeros(1, 1, n, n), torch.zeros(1, 1, k, k), padding=p, dilation=d, stride=s).shape[2]
        assert formula == oh == ow == ref
    assert "formula 16, conv2d output 16x16" in text
    assert "n=32 k=3 p=1 d=1 s=2: formula 16, conv2d output 16x16  (the course: 16)" in text


def test_h_parameter_count(h):
    f, text = h
    assert f["param_counts"] == {"conv1": 224, "conv2": 1168, "linear": 170}
    assert f["total_params"] == 1562
    assert "224 + 1,168 + 170 = 1,562" in text
    assert "parameters: 224 + 1,168 + 170 = 1,562  (the course: 224 + 1,168 + 170 = 1,562)" in text
    # the layers it prints: each output shape as gradir computes it, and the parameters per layer
    assert [(shape, n) for _, shape, n in f["layers"]] == [
        ((2, 8, 32, 32), 224), ((2, 8, 32, 32), 0), ((2, 8, 16, 16), 0), ((2, 16, 16, 16), 1168),
        ((2, 16, 16, 16), 0), ((2, 16), 0), ((2, 10), 170)]
    assert "max pool 2x2               (2, 8, 16, 16)" in text


def test_h_cnn_gradients_vs_torch(h):
    f, text = h
    # the check the example prints, recomputed here independently
    names = ("x", "conv1_w", "conv1_b", "conv2_w", "conv2_b", "fc_w", "fc_b")
    ts = {"x": torch.tensor(f["x"], requires_grad=True)}
    ts.update({k: torch.tensor(v, requires_grad=True) for k, v in f["params"].items()})
    hid = F.max_pool2d(F.relu(F.conv2d(ts["x"], ts["conv1_w"], ts["conv1_b"], padding=1)), 2)
    hid = F.relu(F.conv2d(hid, ts["conv2_w"], ts["conv2_b"], padding=1)).mean(dim=(2, 3))
    loss = F.cross_entropy(F.linear(hid, ts["fc_w"], ts["fc_b"]), torch.tensor(f["labels"]))
    loss.backward()
    assert f["loss"] == pytest.approx(loss.item(), rel=1e-12)
    for name in names:
        np.testing.assert_allclose(f["grads"][name], ts[name].grad.numpy(), rtol=1e-9, atol=1e-13, err_msg=name)
    assert f["torch_max_diff"] < 1e-12 and f"over the 7 gradients {f['torch_max_diff']:.1e}" in text


def test_h_central_differences(h):
    f, _ = h
    assert len(f["central"]) == 6
    for (name, c), numeric in f["central"].items():
        assert abs(f["grads"][name][c] - numeric) < 1e-8, (name, c)


def test_h_pool_backward(h):
    f, text = h
    mx, avg = f["max_pool_grad"], f["avg_pool_grad"]
    assert mx.sum() == 4.0 and mx.max() == 4.0 and np.count_nonzero(mx) == 1 and mx[0, 1] == 4.0
    np.testing.assert_array_equal(avg, np.ones((2, 2)))
    window = torch.tensor([[[[1.0, 3.0], [2.0, 0.5]]]], dtype=torch.float64, requires_grad=True)
    for pool, ours in ((F.max_pool2d, mx), (F.avg_pool2d, avg)):
        (grad,) = torch.autograd.grad(pool(window, 2), window, torch.full((1, 1, 1, 1), 4.0, dtype=torch.float64))
        np.testing.assert_array_equal(ours, grad[0, 0].numpy())
    assert "[[0.0, 4.0], [0.0, 0.0]]" in text and "[[1.0, 1.0], [1.0, 1.0]]" in text
    assert "[[0.0, 4.0], [0.0, 0.0]] (all 4 to the maximum)  (the course: 4 -> 4)" in text
    assert "[[1.0, 1.0], [1.0, 1.0]] (1 each)  (the course: 4 -> 1 each)" in text
