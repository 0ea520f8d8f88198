"""Reverse and forward mode against torch float64 autograd, fan-out accumulation, higher order,
pytrees, torch tensors in/out, closures over enclosing traces, and backward-graph size."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings

import gradir as gr
from gradir.passes import joint_graph
from tests.random_programs import make_inputs, programs, run


def torch_grads(steps, xs):
    ts = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in xs]
    out = run(steps, ts, "torch")
    return out.item(), [g.numpy() for g in torch.autograd.grad(out, ts, allow_unused=True)]


@pytest.mark.usefixtures("eager_backend")  # on the NumPy interpreter and on the LLVM backend
@settings(max_examples=60, deadline=None)
@given(programs())
def test_random_programs_reverse_mode_matches_torch(program):
    shapes, steps = program
    xs = make_inputs(shapes, seed=len(steps))
    f = lambda *a: run(steps, a, "gr")
    value, grads = gr.value_and_grad(f, argnums=tuple(range(len(xs))))(*xs)
    t_value, t_grads = torch_grads(steps, xs)
    np.testing.assert_allclose(value, t_value, rtol=1e-12, atol=1e-12)
    for g, tg in zip(grads, t_grads):
        np.testing.assert_allclose(g, tg, rtol=1e-10, atol=1e-10)


@pytest.mark.usefixtures("eager_backend")
@settings(max_examples=40, deadline=None)
@given(programs())
def test_random_programs_forward_mode_matches_torch_jvp(program):
    shapes, steps = program
    xs = make_inputs(shapes, seed=1)
    vs = make_inputs(shapes, seed=2)
    f = lambda *a: run(steps, a, "gr")
    _, tangent = gr.jvp(f, tuple(xs), tuple(vs))
    tf = lambda *a: run(steps, a, "torch")
    _, t_tangent = torch.func.jvp(tf, tuple(torch.tensor(x) for x in xs), tuple(torch.tensor(v) for v in vs))
    np.testing.assert_allclose(tangent, t_tangent.numpy(), rtol=1e-10, atol=1e-10)


def test_fan_out_accumulates_one_contribution_per_use():
    f = lambda x: x * x * x + gr.sin(x) * x  # x read five times
    x = 0.7
    g = gr.grad(f)(x)
    assert abs(g - (3 * x**2 + np.cos(x) * x + np.sin(x))) < 1e-15
    joint = joint_graph(gr.trace(f, x))
    # contributions into x are summed: 5 uses -> 4 additions in the backward part feeding the gradient
    grad_node = joint.outputs[-1]
    adds, stack, seen = 0, [grad_node], set()
    while stack:
        v = stack.pop()
        if v in seen or v.op != "add":
            continue
        seen.add(v)
        adds += 1
        stack.extend(v.inputs)
    assert adds == 4


def test_higher_order_x_cubed():
    f = lambda x: x ** 3
    assert gr.grad(f)(2.0) == pytest.approx(12.0, abs=1e-12)
    assert gr.grad(gr.grad(f))(2.0) == pytest.approx(12.0, abs=1e-12)
    assert gr.grad(gr.grad(gr.grad(f)))(2.0) == pytest.approx(6.0, abs=1e-12)


def test_hessian_vector_product_matches_torch():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((4, 4))
    x, v = rng.standard_normal(4), rng.standard_normal(4)
    f = lambda x: gr.sum(gr.tanh(A @ x) ** 2)
    hvp = gr.grad(lambda x: gr.sum(gr.grad(f)(x) * v))(x)
    tx = torch.tensor(x, requires_grad=True)
    (g,) = torch.autograd.grad((torch.tanh(torch.tensor(A) @ tx) ** 2).sum(), tx, create_graph=True)
    (t_hvp,) = torch.autograd.grad((g * torch.tensor(v)).sum(), tx)
    np.testing.assert_allclose(hvp, t_hvp.numpy(), rtol=1e-12, atol=1e-12)


def test_forward_over_reverse_matches_reverse_over_reverse():
    rng = np.random.default_rng(4)
    x, v = rng.standard_normal(3), rng.standard_normal(3)
    f = lambda x: gr.sum(gr.exp(gr.sin(x)) * x)
    _, fwd_over_rev = gr.jvp(gr.grad(f), (x,), (v,))
    rev_over_rev = gr.grad(lambda x: gr.sum(gr.grad(f)(x) * v))(x)
    np.testing.assert_allclose(fwd_over_rev, rev_over_rev, rtol=1e-12, atol=1e-14)


def test_pytrees_come_back_in_the_same_structure():
    rng = np.random.default_rng(5)
    params = {"W": rng.standard_normal((3, 2)), "b": [rng.standard_normal(2), rng.standard_normal(())]}
    x = rng.standard_normal((4, 3))
    f = lambda p, x: gr.sum(gr.tanh(x @ p["W"] + p["b"][0]) * p["b"][1])
    g = gr.grad(f)(params, x)
    assert set(g) == {"W", "b"} and isinstance(g["b"], list) and len(g["b"]) == 2
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in [("W", params["W"]), ("b0", params["b"][0]), ("b1", params["b"][1])]}
    out = (torch.tanh(torch.tensor(x) @ tp["W"] + tp["b0"]) * tp["b1"]).sum()
    tW, tb0, tb1 = torch.autograd.grad(out, [tp["W"], tp["b0"], tp["b1"]])
    np.testing.assert_allclose(g["W"], tW.numpy(), rtol=1e-12)
    np.testing.assert_allclose(g["b"][0], tb0.numpy(), rtol=1e-12)
    np.testing.assert_allclose(g["b"][1], tb1.numpy(), rtol=1e-12)


def test_torch_tensors_in_torch_tensors_out():
    x = torch.tensor([0.5, -1.0], dtype=torch.float64)
    g = gr.grad(lambda x: gr.sum(gr.sin(x) * x))(x)
    assert isinstance(g, torch.Tensor)
    np.testing.assert_allclose(g.numpy(), (torch.cos(x) * x + torch.sin(x)).numpy(), rtol=1e-15)


def test_closure_over_an_enclosing_trace_value():
    # the inner grad closes over y, a traced value of the outer grad: y becomes a captured input
    f = lambda y: gr.grad(lambda x: x * x * y)(3.0) * y  # = 6 y^2 -> derivative 12 y
    assert gr.grad(f)(2.0) == pytest.approx(24.0, abs=1e-12)


def test_vjp_returns_cotangents_for_every_input():
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((3,))
    idx = np.array([1, 0])
    out, vjp_fn = gr.vjp(lambda a, b, idx: gr.tanh(a * b)[idx], a, b, idx)
    ct = rng.standard_normal(out.shape)
    da, db, didx = vjp_fn(ct)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    tout = torch.tanh(ta * tb)[torch.tensor(idx)]
    ga, gb = torch.autograd.grad(tout, [ta, tb], torch.tensor(ct))
    np.testing.assert_allclose(da, ga.numpy(), rtol=1e-12)
    np.testing.assert_allclose(db, gb.numpy(), rtol=1e-12)
    assert didx is None


def test_backward_graph_is_as_small_as_a_hand_written_one():
    j = gr.trace_grad(lambda a, b: gr.tanh(a * b + a), 1.5, -2.0, argnums=(0, 1))
    # hand-written: t = g*(1 - y*y); da = t*b + t; db = t*a  -> mul, sub, mul, mul, mul, add (+ the constant 1)
    ops = sorted(n.op for n in j.backward.nodes if n.op != "const")
    assert ops == sorted(["multiply", "subtract", "multiply", "multiply", "multiply", "add"])
    # saved: the inputs a, b and the tanh output; nothing else
    assert sorted(r.op for r in j.residuals) == ["input", "input", "tanh"]


def test_gradient_of_unused_input_is_zero():
    g = gr.grad(lambda x, y: gr.sum(x * 2.0), argnums=(0, 1))(np.ones(3), np.ones((2, 2)))
    np.testing.assert_array_equal(g[0], 2.0 * np.ones(3))
    np.testing.assert_array_equal(g[1], np.zeros((2, 2)))
