"""Arguments gradir must reject with its own errors (jvp tangents, GradTrace.run/measure inputs,
non-scalar losses in trace_grad and the CLI, float32 gradcheck, remat options), and the accepted
cases checked against independent oracles (hand-derived derivatives, torch autograd in float64)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import gradir as gr
from gradir.cli.app import app
from gradir.core.errors import DTypeError, GradirError, NonDifferentiableError, ShapeError

HERE = "test_argument_checks.py"

try:
    runner = CliRunner(mix_stderr=False)
except TypeError:
    runner = CliRunner()


# -- jvp tangents ---------------------------------------------------------------------------------


def test_jvp_rejects_a_tangent_of_another_shape_naming_the_leaf():
    with pytest.raises(ShapeError, match=r"jvp: tangent for x has shape \(2, 1\)") as e:
        gr.jvp(lambda x: x * x, (np.array([1.0, 2.0]),), (np.ones((2, 1)),))
    assert HERE in str(e.value)
    with pytest.raises(ShapeError, match=r"tangent for x has shape \(3, 1\)"):
        gr.jvp(lambda x: gr.sum(x * x), (np.ones(2),), (np.ones((3, 1)),))
    with pytest.raises(ShapeError, match=r"tangent for p\['b'\]"):
        gr.jvp(lambda p: gr.sum(p["a"] * p["b"]), ({"a": np.ones(2), "b": np.ones(2)},),
               ({"a": np.ones(2), "b": np.ones(3)},))


def test_jvp_float_primal_needs_a_float_tangent():
    with pytest.raises(DTypeError, match="tangent for x has dtype i64"):
        gr.jvp(lambda x: x * x, (np.array([1.0, 2.0]),), (np.ones(2, np.int64),))


def test_jvp_accepted_tangents_match_hand_derivatives():
    x = np.array([1.0, 2.0])
    _, t = gr.jvp(lambda x: x * x, (x,), (np.array([0.5, -1.0]),))
    np.testing.assert_allclose(t, 2 * x * np.array([0.5, -1.0]))
    _, t = gr.jvp(lambda x: x * x, (x,), (np.ones(2, np.float32),))  # float tangent, cast to f64
    assert t.dtype == np.float64
    np.testing.assert_allclose(t, 2 * x)
    _, t = gr.jvp(lambda a: gr.sin(a), (0.5,), (1,))  # Python scalars are weakly typed
    assert t == pytest.approx(np.cos(0.5))


# -- GradTrace.run / measure ------------------------------------------------------------------------


def test_grad_trace_run_checks_shapes_dtypes_and_structure():
    j = gr.trace_grad(lambda a: gr.sum(a * a), np.ones(3))
    with pytest.raises(ShapeError, match=r"run: a has shape \(4,\)") as e:
        j.run(np.ones(4))
    assert HERE in str(e.value)
    with pytest.raises(ShapeError, match="measure: a has shape"):
        j.measure(np.ones(4))
    with pytest.raises(DTypeError, match="run: a has dtype f32"):
        j.run(np.ones(3, np.float32))
    with pytest.raises(ShapeError, match="run: arguments differ in structure"):
        j.run()
    p = gr.trace_grad(lambda p: gr.sum(p["w"] * p["b"]), {"w": np.ones(2), "b": np.ones(2)})
    with pytest.raises(ShapeError, match="structure"):
        p.run([np.ones(2), np.ones(2)])


def test_grad_trace_runs_torch_tensors_that_require_grad():
    x = np.array([0.5, -1.0, 2.0])
    t = torch.tensor(x, requires_grad=True)
    j = gr.trace_grad(lambda a: gr.sum(gr.tanh(a) * a), x)
    (loss,), (g,) = j.run(t)
    ref = torch.tensor(x, requires_grad=True)
    out = (torch.tanh(ref) * ref).sum()
    out.backward()
    assert float(loss) == pytest.approx(out.item())
    np.testing.assert_allclose(g, ref.grad.numpy(), rtol=1e-12)
    assert j.measure(t).peak_bytes == j.memory.peak_bytes


# -- trace_grad and the CLI need one scalar float loss ----------------------------------------------


@pytest.mark.parametrize("fn", [lambda x: None, lambda x: x * x, lambda x: (gr.sum(x), gr.sum(x))])
def test_trace_grad_rejects_what_grad_rejects(fn):
    with pytest.raises(ShapeError, match="trace_grad: needs a function returning one scalar"):
        gr.trace_grad(fn, np.ones(2))
    with pytest.raises(ShapeError, match="grad: needs a function returning one scalar"):
        gr.grad(fn)(np.ones(2))


def test_integer_loss_is_not_differentiable():
    with pytest.raises(NonDifferentiableError, match="one scalar of a real float dtype, got i64"):
        gr.trace_grad(lambda x: gr.argmax(x), np.ones(2))
    with pytest.raises(NonDifferentiableError, match="one scalar of a real float dtype, got i64"):
        gr.grad(lambda x: gr.argmax(x))(np.ones(2))


def test_cli_trace_of_a_function_returning_none_fails(tmp_path):
    path = tmp_path / "none_loss.py"
    path.write_text("import gradir as gr\n\ndef loss(x: gr.f64[2]):\n    return None\n")
    result = runner.invoke(app, ["trace", str(path)])
    assert result.exit_code != 0
    assert "one scalar" in result.stderr and "Traceback" not in result.output


# -- gradcheck in float32 -----------------------------------------------------------------------------


def test_gradcheck_refuses_float32_instead_of_blaming_a_correct_gradient():
    f = lambda a: gr.sum(a ** 2)  # noqa: E731  (d/da = 2a, right in any precision)
    with pytest.raises(DTypeError, match="gradcheck needs float64"):
        gr.checks.gradcheck(f, np.ones(3, np.float32))
    assert gr.checks.gradcheck(f, np.ones(3, np.float32).astype(np.float64))
    # only the checked argument matters: a float32 argument outside argnums is fine
    assert gr.checks.gradcheck(lambda a, b: gr.sum(a * a) + gr.sum(b), np.ones(2), np.ones(2, np.float32))


# -- remat options ----------------------------------------------------------------------------------


def _chain(x):
    for k in range(4):
        with gr.scope(f"b{k}"):
            x = gr.tanh(x)
    return gr.sum(x)


@pytest.mark.parametrize("segments", [0, -2, 2.5, True])
def test_uniform_segments_must_be_a_positive_int(segments):
    with pytest.raises(GradirError, match="segments=.* must be a positive integer"):
        gr.trace_grad(_chain, np.ones(3), remat="uniform", segments=segments)


def test_unknown_remat_option_names_the_policy_and_its_options():
    with pytest.raises(GradirError, match=r"unknown option\(s\) segmnts for recompute policy 'uniform' \(accepted: segments\)"):
        gr.trace_grad(_chain, np.ones(3), remat="uniform", segmnts=3)
    with pytest.raises(GradirError, match=r"policy 'none' \(accepted: none\)"):
        gr.trace_grad(_chain, np.ones(3), remat="none", segments=2)
    with pytest.raises(GradirError, match="forbid"):
        gr.trace_grad(_chain, np.ones(3), remat="mincut", keep_ops=("tanh",))


def test_valid_uniform_segments_keep_the_gradient():
    x = np.linspace(-1, 1, 3)
    j = gr.trace_grad(_chain, x, remat="uniform", segments=2)
    assert j.remat.plan.options["segments"] == 2
    ref = torch.tensor(x, requires_grad=True)
    y = ref
    for _ in range(4):
        y = torch.tanh(y)
    y.sum().backward()
    np.testing.assert_allclose(j.run(x)[1][0], ref.grad.numpy(), rtol=1e-12)
