"""gr.torch_saved: what PyTorch's autograd saves next to gradir's saved-tensor report, checked
against figures derived by hand for a two-layer MLP."""

import numpy as np
import torch

from gradir.frontends.torch_saved import torch_saved

B, D, H, C = 5, 4, 8, 3


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(D, H), torch.nn.Tanh(), torch.nn.Linear(H, C)).double()


def test_a_two_layer_mlp_saves_what_the_chain_rule_needs_on_both_sides():
    """loss = sum(tanh(x W1^T + b1) W2^T + b2), x without grad. PyTorch saves x for the first addmm, the
    tanh output h for tanh and again for the second addmm, and W2^T: four saves. gradir's backward reads h,
    x and W2: new memory is h alone, B*H float64s, as PyTorch's one activation storage."""
    x = torch.randn(B, D, dtype=torch.float64)
    report = torch_saved(mlp(), x)
    saves = report.saves
    assert [s.kind for s in saves].count("input") == 1 and [s.kind for s in saves].count("parameter") == 1
    assert report.torch_count == 4
    assert report.torch_bytes == 8 * (B * D + B * H + B * H + H * C)
    assert report.storage_bytes("parameter") == 8 * H * C and report.storage_bytes("input") == 8 * B * D
    assert report.activation_bytes == 8 * B * H == report.gradir.bytes
    again = [s for s in saves if not s.first]
    assert len(again) == 1 and again[0].shape == (B, H)  # h, saved by tanh and by the second addmm
    assert {s.node.split(".")[0] for s in saves} == {"AddmmBackward0", "TanhBackward0"}
    assert [s.parameter for s in saves if s.kind == "parameter"] == ["2.weight"]
    text = report.text()
    assert "both keep" in text and "counted once per storage" in text
    d = report.to_dict()
    assert d["torch"]["count"] == 4 and d["gradir"]["bytes"] == report.gradir.bytes


def test_a_loss_function_and_the_activations_that_differ_are_explained():
    """With cross-entropy as the loss, PyTorch keeps log_softmax's output; the report states both totals
    and, where they differ, why."""
    x = torch.randn(B, D, dtype=torch.float64)
    y = torch.tensor([0, 1, 2, 0, 1])
    report = torch_saved(mlp(), x, loss=lambda out: torch.nn.functional.cross_entropy(out, y))
    assert "LogSoftmaxBackward0._saved_result" in [s.node for s in report.saves]
    assert report.gradir.count > 0
    line = report.differences()[-1]
    assert line.startswith("Activations:")
    assert ("both keep" in line) == (report.gradir.bytes == report.activation_bytes)
    assert np.isfinite(report.activation_bytes)
