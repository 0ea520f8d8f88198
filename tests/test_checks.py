"""gr.checks: finite differences, complex step, directional checks, gradcheck and cmp tables,
tested against hand-derived derivatives, torch autograd, and negative controls that must fail."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gradir as gr
from gradir.api import checks
from gradir.core.errors import GradirError, ShapeError
from gradir.core.primitive import REGISTRY, Primitive, register
from gradir.core.trace import bind
from gradir.ops.elementwise import INEXACT, _check_dtype
from gradir.ops.lifting import lift

# -- numeric gradients against analytic derivatives -----------------------------------------------


def test_central_difference_of_sin_is_cos(rng):
    x = rng.uniform(-2, 2, size=(3, 4))
    g = checks.central_difference(lambda x: gr.sum(gr.sin(x)), x)
    assert g.shape == x.shape
    np.testing.assert_allclose(g, np.cos(x), rtol=0, atol=1e-9)


def test_forward_difference_error_is_first_order():
    # f = exp: forward error ~ h/2 * exp(x); central error ~ h^2/6 * exp(x)
    x, h = 0.3, 1e-4
    fwd = checks.forward_difference(lambda x: gr.exp(x), x, h=h)
    cen = checks.central_difference(lambda x: gr.exp(x), x, h=h)
    assert abs((fwd - np.exp(x)) - h / 2 * np.exp(x)) < 1e-2 * h
    assert abs(cen - np.exp(x)) < 1e-8
    assert isinstance(fwd, float)  # a Python-scalar argument gives a scalar gradient


def test_complex_step_is_exact_to_rounding_on_a_polynomial(rng):
    x = rng.uniform(-3, 3, size=6)
    f = lambda x: gr.sum(x * x * x - 2.0 * x)
    g = checks.complex_step(f, x, h=1e-30)
    np.testing.assert_allclose(g, 3 * x**2 - 2, rtol=1e-15, atol=1e-15)


def test_complex_step_fails_silently_through_abs():
    # |x| is not complex-analytic: Im(|2 + ih|) = 0, so the complex step reports 0 where d|x|/dx = 1.
    assert checks.complex_step(lambda x: gr.abs(x), 2.0) == 0.0
    assert checks.central_difference(lambda x: gr.abs(x), 2.0) == pytest.approx(1.0, abs=1e-9)


def test_argnum_selects_the_argument_and_pytrees_keep_their_structure():
    f = lambda p, s: gr.sum(gr.exp(p["w"]) * s) + p["b"] * p["b"] * s
    p = {"w": np.array([0.1, -0.4]), "b": 1.5}
    g = checks.central_difference(f, p, 2.0)
    assert set(g) == {"w", "b"}
    np.testing.assert_allclose(g["w"], 2.0 * np.exp(p["w"]), atol=1e-8)
    assert g["b"] == pytest.approx(2 * 1.5 * 2.0, abs=1e-8)
    ds = checks.complex_step(f, p, 2.0, argnum=1)
    assert ds == pytest.approx(np.exp(p["w"]).sum() + 1.5**2, abs=1e-14)


def test_central_difference_agrees_with_torch_autograd(rng):
    x, w = rng.standard_normal(5), rng.standard_normal((4, 5))
    f = lambda x, w: gr.sum(gr.tanh(w @ x) ** 2)
    tw = torch.tensor(w, requires_grad=True)
    (torch.tanh(tw @ torch.tensor(x)) ** 2).sum().backward()
    np.testing.assert_allclose(checks.central_difference(f, x, w, argnum=1), tw.grad.numpy(), atol=1e-9)


def test_non_scalar_function_is_a_gradir_error():
    with pytest.raises(ShapeError, match="scalar"):
        checks.central_difference(lambda x: gr.sin(x), np.ones(3))
    with pytest.raises(GradirError, match="float"):
        checks.central_difference(lambda i: gr.sum(i), np.arange(3))


def test_order_of_accuracy_recovers_one_and_two():
    hs = [1e-1, 1e-2, 1e-3]
    f, x, exact = (lambda x: gr.sin(x)), 0.7, np.cos(0.7)
    fwd = [abs(checks.forward_difference(f, x, h=h) - exact) for h in hs]
    cen = [abs(checks.central_difference(f, x, h=h) - exact) for h in hs]
    assert checks.order_of_accuracy(hs, fwd) == pytest.approx(1.0, abs=0.02)
    assert checks.order_of_accuracy(hs, cen) == pytest.approx(2.0, abs=0.02)
    with pytest.raises(GradirError):
        checks.order_of_accuracy([1e-1], [1e-3])


# -- gradcheck ------------------------------------------------------------------------------------


def test_gradcheck_passes_on_correct_rules_in_both_modes(rng):
    a, b = rng.uniform(0.5, 1.5, size=(2, 3)), rng.uniform(-1, 1, size=3)
    f = lambda a, b: gr.sum(gr.exp(a) * gr.sin(b) + a * a * b)
    assert checks.gradcheck(f, a, b, argnums=(0, 1), modes=("rev", "fwd")) is True


def test_gradcheck_rejects_a_wrong_supplied_gradient_and_names_the_coordinate(rng):
    x = rng.uniform(-1, 1, size=(2, 3))
    f = lambda x: gr.sum(gr.sin(x))
    good = np.cos(x)
    assert checks.gradcheck(f, x, grad=good)
    bad = good.copy()
    bad[1, 2] += 1e-4
    with pytest.raises(checks.GradcheckError, match=r"x\[1, 2\]") as err:
        checks.gradcheck(f, x, grad=bad)
    assert isinstance(err.value, GradirError)
    assert err.value.op == "gradcheck"
    assert "1 of 6 coordinates fail" in str(err.value)


def test_gradcheck_tolerance_is_atol_plus_rtol_times_analytic():
    f = lambda x: gr.exp(x)  # d/dx at 0 is 1
    assert checks.gradcheck(f, 0.0, grad=1.0 + 0.9e-6, atol=0.0, rtol=1e-6)
    with pytest.raises(checks.GradcheckError):
        checks.gradcheck(f, 0.0, grad=1.0 + 1.2e-6, atol=0.0, rtol=1e-6)


@pytest.fixture
def broken_sin():
    """A primitive whose VJP is 1% off and whose JVP has the wrong sign: engine rules gradcheck must catch."""
    def infer(x):
        _check_dtype("broken_sin", x.dtype, INEXACT)
        return x.shape, x.dtype

    register(Primitive("broken_sin", ("x",), infer, "np.sin(x)",
                       vjp=lambda g, o, x: [g * gr.cos(x) * 1.01],
                       jvp=lambda ts, o, x: None if ts[0] is None else -(ts[0] * gr.cos(x)),
                       kind="elementwise"))
    try:
        yield lambda x: bind("broken_sin", lift(x))
    finally:
        del REGISTRY["broken_sin"]


def test_gradcheck_catches_wrong_vjp_and_jvp_rules(broken_sin):
    x = np.array([0.3, -0.8, 1.1])
    f = lambda x: gr.sum(broken_sin(x))
    np.testing.assert_allclose(checks.central_difference(f, x), np.cos(x), atol=1e-9)  # the forward is right
    with pytest.raises(checks.GradcheckError, match="reverse mode"):
        checks.gradcheck(f, x)
    with pytest.raises(checks.GradcheckError, match="forward mode"):
        checks.gradcheck(f, x, modes=("fwd",))


def test_gradcheck_on_a_pytree_argument_names_the_leaf(rng):
    params = {"w": rng.standard_normal((2, 3)), "b": rng.standard_normal(2)}
    x = rng.standard_normal(3)
    f = lambda p, x: gr.sum(gr.tanh(p["w"] @ x + p["b"]) ** 2)
    assert checks.gradcheck(f, params, x, argnums=(0, 1), modes=("rev", "fwd"))
    t = np.tanh(params["w"] @ x + params["b"])
    good = {"w": np.outer(2 * t * (1 - t * t), x), "b": 2 * t * (1 - t * t)}  # hand-derived
    assert checks.gradcheck(f, params, x, grad=good)
    bad = {"w": good["w"], "b": good["b"] + np.array([0.0, 1e-3])}
    with pytest.raises(checks.GradcheckError, match=r"p\['b'\]\[1\]"):
        checks.gradcheck(f, params, x, grad=bad)


def test_gradcheck_with_python_scalars_and_bad_mode():
    f = lambda a, b: gr.tanh(a * b + a)
    assert checks.gradcheck(f, 1.5, -2.0, argnums=(0, 1))
    with pytest.raises(GradirError, match="mode"):
        checks.gradcheck(f, 1.5, -2.0, modes=("sideways",))


# -- directional checks ---------------------------------------------------------------------------


def _quadratic_tanh(rng):
    A = rng.standard_normal((6, 8))
    x = rng.standard_normal(8)
    f = lambda x: gr.sum(gr.tanh(A @ x) ** 2)
    t = np.tanh(A @ x)
    return f, x, A.T @ (2 * t * (1 - t * t))  # hand-derived gradient


def test_directional_check_against_hand_derived_gradient(rng):
    f, x, g = _quadratic_tanh(rng)
    report = checks.directional(f, x, n=5, seed=3)
    assert len(report) == 5 and report.seed == 3
    for row in report:
        assert np.linalg.norm(row.direction) == pytest.approx(1.0)
        assert row.analytic == pytest.approx(g @ row.direction, abs=1e-13)
        assert row.error < 1e-9
    assert report.max_error == max(r.error for r in report)
    again = checks.directional(f, x, n=5, seed=3, grad=g)
    assert [r.numeric for r in again] == [r.numeric for r in report]  # same seed, same directions
    assert set(report.to_dict()) >= {"h", "seed", "max_error", "rows"}
    assert "directional check" in str(report)


def test_directional_check_sees_a_corrupted_coordinate_that_a_coordinate_check_misses(rng):
    f, x, g = _quadratic_tanh(rng)
    bad = g.copy()
    bad[3] += 0.1
    e0 = np.eye(8)[0]
    assert checks.directional(f, x, grad=bad, directions=[e0])[0].error < 1e-9
    report = checks.directional(f, x, grad=bad, n=5, seed=1)
    for row in report:  # the error is exactly the corruption seen along v: 0.1 * |v_3|
        assert row.error == pytest.approx(0.1 * abs(row.direction[3]), rel=1e-6)
    assert report.max_error > 1e-3


def test_directional_rejects_a_direction_of_the_wrong_size(rng):
    f, x, _ = _quadratic_tanh(rng)
    with pytest.raises(ShapeError):
        checks.directional(f, x, directions=[np.ones(3)])


# -- cmp ------------------------------------------------------------------------------------------


def test_cmp_rows(capsys):
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    row = checks.cmp("same", a, a.copy())
    assert (row.exact, row.approximate, row.maxdiff) == (True, True, 0.0)
    assert capsys.readouterr().out.strip() == "same            | exact: True  | approximate: True  | maxdiff: 0.0"
    row = checks.cmp("close", a, a + 1e-10, verbose=False)
    assert (row.exact, row.approximate) == (False, True)
    assert row.maxdiff == pytest.approx(1e-10, rel=1e-3)
    row = checks.cmp("far", a, a * 1.01, verbose=False)
    assert (row.exact, row.approximate) == (False, False)
    assert row.maxdiff == pytest.approx(0.04)
    assert capsys.readouterr().out == ""
    with pytest.raises(ShapeError):
        checks.cmp("shapes", a, a[0])


def test_cmp_accepts_torch_and_table_renders():
    t = checks.CmpTable(title="grads")
    t.cmp("w", torch.ones(3, dtype=torch.float64), np.ones(3))
    t.cmp("b", np.zeros(2), np.full(2, 1e-3))
    assert [r.exact for r in t.rows] == [True, False]
    assert not t.all_approximate
    assert t.max_diff == pytest.approx(1e-3)
    text = str(t)
    assert "grads" in text and "maxdiff" in text and "1.000e-03" in text
    assert t.to_dict()["rows"][0] == {"name": "w", "exact": True, "approximate": True, "maxdiff": 0.0}


def test_checks_is_reachable_as_gr_checks():
    assert gr.checks.gradcheck is checks.gradcheck
    assert issubclass(gr.checks.GradcheckError, gr.GradirError)
