"""gr.torch_saved: what PyTorch's autograd saves next to gradir's saved-tensor report, checked against
figures derived by hand for a two-layer MLP, and on the frontend's three model styles against PyTorch's
autograd graph read without hooks."""

import numpy as np
import pytest
import torch

import gradir as gr

B, D, H, C = 5, 4, 8, 3


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(D, H), torch.nn.Tanh(), torch.nn.Linear(H, C)).double()


def test_a_two_layer_mlp_saves_what_the_chain_rule_needs_on_both_sides():
    """loss = sum(tanh(x W1^T + b1) W2^T + b2), x without grad. PyTorch saves x for the first addmm, the
    tanh output h for tanh and again for the second addmm, and W2^T: four saves. gradir's backward reads h,
    x and W2: new memory is h alone, B*H float64s, as PyTorch's one activation storage."""
    x = torch.randn(B, D, dtype=torch.float64)
    report = gr.torch_saved(mlp(), x)
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
    report = gr.torch_saved(mlp(), x, loss=lambda out: torch.nn.functional.cross_entropy(out, y))
    assert "LogSoftmaxBackward0._saved_result" in [s.node for s in report.saves]
    assert report.gradir.count > 0
    line = report.differences()[-1]
    assert line.startswith("Activations:")
    assert ("both keep" in line) == (report.gradir.bytes == report.activation_bytes)
    assert np.isfinite(report.activation_bytes)


def _saved_by_walking(out, params, inputs) -> tuple[int, int]:
    """(saves, activation storage bytes) read off the autograd graph's `_saved_*` attributes, without hooks:
    a second way to count what PyTorch keeps, for checking the hook-based report."""
    param_ptrs = {p.untyped_storage().data_ptr() for p in params}
    input_ptrs = {t.untyped_storage().data_ptr() for t in inputs}
    count, storages, seen, stack = 0, {}, set(), [out.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for attr in dir(node):
            if attr.startswith("_saved_"):
                value = getattr(node, attr)
                for v in value if isinstance(value, (tuple, list)) else (value,):
                    if isinstance(v, torch.Tensor):
                        count += 1
                        storages[v.untyped_storage().data_ptr()] = v.untyped_storage().nbytes()
        stack.extend(n for n, _ in node.next_functions)
    return count, sum(n for p, n in storages.items() if p not in param_ptrs | input_ptrs)


@pytest.mark.parametrize("which", ["mlp", "cnn", "gpt"])
def test_the_frontend_models_pytorch_saves_match_its_autograd_graph_and_gradir_its_own_trace(which):
    """The three model styles of test_frontend_torch: PyTorch's saves as the report counts them equal what its
    autograd graph holds (read without hooks), and gradir's side equals gradir's own saved report of the model
    captured directly with the loss written in gradir."""
    from test_frontend_torch import CNN, GPT, MLP, tokens

    torch.manual_seed(0)
    if which == "mlp":
        model, inputs = MLP().double(), (torch.randn(5, 6, dtype=torch.float64),)
        y = torch.randn(5, 3, dtype=torch.float64)
        loss_t, loss_g = (lambda out: ((out - y) ** 2).mean()), (lambda out: gr.mean((out - y.numpy()) ** 2))
    elif which == "cnn":
        model, inputs = CNN().double().train(), (torch.randn(3, 3, 8, 8, dtype=torch.float64),)
        labels = torch.tensor([0, 4, 2])
        loss_t = lambda out: torch.nn.functional.cross_entropy(out, labels)  # noqa: E731
        loss_g = lambda out: gr.nn.cross_entropy(out, labels.numpy())  # noqa: E731
    else:
        model, inputs = GPT("sdpa").double(), tokens()
        loss_t, loss_g = (lambda out: out.loss), (lambda out: out["loss"])
    report = gr.torch_saved(model, *inputs, loss=loss_t)
    count, activation_bytes = _saved_by_walking(loss_t(model(*inputs)), list(model.parameters()), inputs)
    assert report.torch_count == count
    assert report.activation_bytes == activation_bytes
    f, params = gr.from_torch(model, *inputs)
    arrays = [t.numpy() for t in inputs]
    own = gr.trace_grad(lambda p, *xs: loss_g(f(p, *xs)), params, *arrays).saved
    assert report.gradir.bytes == own.bytes and report.gradir.count == own.count
    assert any(line.startswith("PyTorch saves") and "parameters" in line for line in report.differences())
