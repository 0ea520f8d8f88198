"""PyTorch model files on the command line (gradir.cli.torch_models): `model()` returns an nn.Module, `example_inputs()`
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
from gradir.cli.app import CLIError, app, load_target

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
    monkeypatch.setattr("gradir.cli.app.CHECK_EVERY_UP_TO", 4)
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


MLP32 = textwrap.dedent("""
    import torch.nn.functional as F

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.ln, self.fc2 = torch.nn.Linear(6, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 3)

        def forward(self, x):
            return self.fc2(F.gelu(self.ln(self.fc1(x))))

    def model():
        torch.manual_seed(0)
        return MLP()  # float32, torch's default

    def example_inputs():
        g = torch.Generator().manual_seed(1)
        return torch.randn(5, 6, generator=g), torch.randn(5, 3, generator=g)

    """)


def test_check_takes_a_float32_torch_model_in_float64_and_still_finds_a_wrong_gradient(tmp_path):
    """In float32 every coordinate "failed" (the differences drowned in rounding): the check casts params and
    inputs to float64, and from_torch computes in the arguments' dtype."""
    path = _model_file(tmp_path, MLP32 + "def loss(out, y):\n    return ((out - y) ** 2).mean()\n")
    done = runner.invoke(app, ["check", path])
    assert done.exit_code == 0, done.output
    assert "195 coordinates of params agree" in done.stdout and "(float64)" in done.stdout
    # detach hides half of the true gradient (what torch autograd would compute too): the check must fail,
    # and name the model file's loss, not gradir's own with_loss.py
    path = _model_file(tmp_path, MLP32 + "def loss(out, y):\n    d = out - y\n    return (d.detach() * d).mean()\n")
    line = pathlib.Path(path).read_text().splitlines().index("def loss(out, y):") + 1
    done = runner.invoke(app, ["check", path])
    assert done.exit_code == 1, done.output
    assert "gradcheck failed" in done.stderr and f"model.py:{line}" in done.stderr, done.stderr
    assert "with_loss.py" not in done.stderr


def test_check_refuses_a_model_that_computes_in_float32_whatever_its_arguments(tmp_path):
    path = _model_file(tmp_path, MLP32 + "def loss(out, y):\n    return ((out - y) ** 2).mean().float()\n")
    done = runner.invoke(app, ["check", path])
    assert done.exit_code == 2 and "returns float32 even given float64 arguments" in done.stderr, done.output


def test_a_bigger_module_output_is_summed_with_a_note_and_several_outputs_need_a_loss(tmp_path):
    """Without loss(), a module output of more than one element is differentiated as its sum, and a note on
    stderr says so; a model output's "loss" is taken as it is; several other outputs are an error saying what
    to add."""
    path = _model_file(tmp_path, """
        def model():
            torch.manual_seed(0)
            return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh()).double()
        def example_inputs():
            return (torch.ones(2, 3, dtype=torch.float64),)
        """)
    done = runner.invoke(app, ["trace", path])
    assert done.exit_code == 0, done.output
    assert "gradir: note: model.py: the module's output gr.f64[2, 4] is not a scalar: differentiating its sum" \
        in done.stderr
    t = load_target(path, None, None)
    net = t.module.model()
    net(*t.module.example_inputs()).sum().backward()
    value, grads = gr.value_and_grad(t.fn)(*t.args)
    assert np.shape(value) == ()
    for name, p in net.named_parameters():
        np.testing.assert_allclose(grads[name], p.grad.numpy(), rtol=1e-12)

    body = """
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(3, 2)
            def forward(self, x):
                y = self.fc(x)
                return {OUT}
        def model():
            torch.manual_seed(0)
            return Net().double()
        def example_inputs():
            return (torch.ones(2, 3, dtype=torch.float64),)
        """
    t = load_target(_model_file(tmp_path, body.replace("{OUT}", '{"loss": (y ** 2).mean(), "logits": y}')), None, None)
    net = t.module.model()
    assert np.isclose(t.fn(*t.args), (net(*t.module.example_inputs())["logits"] ** 2).mean().item())
    t = load_target(_model_file(tmp_path, body.replace("{OUT}", "(y,)")), None, None)  # a one-tuple: its sum
    assert np.isclose(t.fn(*t.args), net(*t.module.example_inputs())["logits"].sum().item())
    with pytest.raises(CLIError, match=r"several outputs \(y, z\): define loss\(output, \*targets\)"):
        load_target(_model_file(tmp_path, body.replace("{OUT}", '{"y": y, "z": y * 2}')), None, None)
