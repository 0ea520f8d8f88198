"""PyTorch model files on the command line (gradir.cli_torch): `model()` returns an nn.Module, `example_inputs()`
its arguments then the loss's targets, `loss(output, *targets)` the scalar. The function the CLI builds is checked
against PyTorch autograd in float64; the reports name parameters by module path."""

from __future__ import annotations

import json
import pathlib
import textwrap

import numpy as np
import pytest
from typer.testing import CliRunner

import gradir as gr
from gradir.cli import CLIError, app, load_target

REPO = pathlib.Path(__file__).resolve().parents[1]
GPT = REPO / "examples" / "models" / "torch_gpt.py"

try:
    runner = CliRunner(mix_stderr=False)
except TypeError:
    runner = CliRunner()


def test_the_cli_function_of_a_torch_model_file_has_torchs_loss_and_gradients():
    t = load_target(str(GPT), None, None)
    params, *inputs = t.args
    assert t.argnums == (0,) and t.origin == "model() and example_inputs()"
    net, (idx, targets) = t.module.model(), t.module.example_inputs()
    want = t.module.loss(net(idx), targets)
    want.backward()
    torch_grads = {name: p.grad.numpy() for name, p in net.named_parameters()}
    assert set(params) == set(torch_grads)  # named by module path; the tied head weight once, as wte.weight
    loss, grads = gr.value_and_grad(t.fn)(params, *inputs)
    np.testing.assert_allclose(loss, want.item(), rtol=1e-12)
    for name, g in torch_grads.items():
        np.testing.assert_allclose(grads[name], g, rtol=1e-10, atol=1e-12, err_msg=name)


def test_trace_and_memory_name_parameters_and_arguments_as_the_model_does():
    done = runner.invoke(app, ["trace", str(GPT)])
    assert done.exit_code == 0, done.output
    out = done.stdout
    for name in ("params['blocks.0.attn.qkv.weight']", "params['wte.weight']", "name='idx'", "name='targets'"):
        assert name in out
    assert "params['head.weight']" not in out  # tied to wte.weight
    assert "torch_gpt.py:" in out  # nodes carry the model's source lines
    done = runner.invoke(app, ["memory", str(GPT), "--format", "json"])
    assert done.exit_code == 0, done.output
    plan = json.loads(done.stdout)
    assert plan["peak_bytes"] >= plan["lower_bound_bytes"] > 0


def _model_file(tmp_path, body: str) -> str:
    path = tmp_path / "model.py"
    path.write_text("import torch\n" + textwrap.dedent(body))
    return str(path)


@pytest.mark.parametrize("body, message", [
    ("def model():\n    return torch.nn.Linear(3, 1)\n", "define example_inputs()"),
    ("def model():\n    return torch.nn.Linear(3, 1)\ndef example_inputs():\n    return (torch.ones(2, 3),)\n"
     "def loss(out, *targets):\n    return out.sum()\n", "must name its targets"),
    ("def model():\n    return torch.nn.Linear(3, 1)\ndef example_inputs():\n    return (torch.ones(2, 3),)\n"
     "def loss(out, y, z):\n    return out.sum()\n", r"takes 2 target\(s\) but example_inputs\(\) returns 1"),
])
def test_a_torch_model_file_that_breaks_the_convention_is_one_clear_error(tmp_path, body, message):
    with pytest.raises(CLIError, match=message):
        load_target(_model_file(tmp_path, body), None, None)


def test_a_module_output_is_differentiated_without_a_loss(tmp_path):
    path = _model_file(tmp_path, """
        def model():
            torch.manual_seed(0)
            return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)).double()
        def example_inputs():
            return (torch.ones(1, 3, dtype=torch.float64),)
        """)
    t = load_target(path, None, None)
    net = t.module.model()
    net(*t.module.example_inputs()).sum().backward()
    grads = gr.grad(lambda p, x: gr.sum(t.fn(p, x)))(*t.args)
    for name, p in net.named_parameters():
        np.testing.assert_allclose(grads[name], p.grad.numpy(), rtol=1e-12)


def test_check_takes_a_big_model_along_random_directions_and_finds_a_wrong_gradient(tmp_path, monkeypatch):
    done = runner.invoke(app, ["check", str(GPT)])
    assert done.exit_code == 0, done.output
    assert "26,592 coordinates of params" in done.stdout and "16 random directions" in done.stdout
    bad = tmp_path / "bad.py"  # stop_gradient hides the true gradient 2w: directions must catch it
    bad.write_text("import gradir as gr\nimport numpy as np\n"
                   "def loss(w):\n    return gr.sum(gr.stop_gradient(w) * w)\n"
                   "def example_inputs():\n    return (np.linspace(0.5, 1.5, 12),)\n")
    monkeypatch.setattr("gradir.cli.CHECK_EVERY_UP_TO", 4)
    done = runner.invoke(app, ["check", str(bad)])
    assert done.exit_code == 1 and "direction" in done.stderr, done.output
    done = runner.invoke(app, ["check", str(bad), "--all"])
    assert done.exit_code == 1 and "coordinate" in done.stderr, done.output


def test_the_diagrams_of_a_torch_model_cluster_by_module(tmp_path):
    done = runner.invoke(app, ["trace", str(GPT), "--viz", "--out", str(tmp_path)])
    assert done.exit_code == 0, done.output
    for region in ("blocks.0", "blocks.1", "ln_f"):
        assert (tmp_path / f"loss.backward.{region}.dot").exists(), region
    block = (tmp_path / "loss.backward.blocks.0.dot").read_text()
    assert all(f"cluster_sblocks.0.{m}" in block for m in ("attn", "ln1", "ln2", "mlp"))
