"""gr.compile (signature cache, generated source, checked mode), gr.trace_grad, and the NumPy
backend's generated code against its interpreter and against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings

import gradir as gr
from gradir.backends import compile_graph, run
from gradir.core.errors import GradirError
from tests.random_programs import make_inputs, programs
from tests.random_programs import run as run_program


def test_compile_traces_once_per_signature():
    calls = []

    @gr.compile
    def f(x, y):
        calls.append(1)
        return gr.tanh(x @ y).sum()

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    np.testing.assert_allclose(f(x, y), np.tanh(x @ y).sum(), rtol=1e-14)
    f(x + 1, y)
    assert len(calls) == 1 and f.cache_size == 1
    f(x.astype(np.float32), y.astype(np.float32))  # new dtype -> new trace
    f(rng.standard_normal((5, 4)), y)  # new shape -> new trace
    assert len(calls) == 3 and f.cache_size == 3


def test_compiled_training_step_matches_torch():
    rng = np.random.default_rng(1)
    params = {"W": rng.standard_normal((4, 3)), "b": rng.standard_normal(3)}
    x, y = rng.standard_normal((8, 4)), rng.standard_normal((8, 3))

    def loss(p, x, y):
        return gr.mean((gr.tanh(x @ p["W"] + p["b"]) - y) ** 2)

    @gr.compile(backend="numpy")
    def step(p, x, y):
        value, g = gr.value_and_grad(loss)(p, x, y)
        return value, {k: p[k] - 0.1 * g[k] for k in p}

    value, new = step(params, x, y)
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    tl = ((torch.tanh(torch.tensor(x) @ tp["W"] + tp["b"]) - torch.tensor(y)) ** 2).mean()
    tg = torch.autograd.grad(tl, [tp["W"], tp["b"]])
    np.testing.assert_allclose(value, tl.item(), rtol=1e-14)
    for (k, v), g in zip(params.items(), tg):
        np.testing.assert_allclose(new[k], v - 0.1 * g.numpy(), rtol=1e-13)
    src = step.source(params, x, y)
    assert "np.tanh(" in src and "def step(" in src  # readable NumPy code, one line per node
    # one line per node; only broadcasts that NumPy does implicitly are left out
    graph = step.graph(params, x, y)
    emitted = sum(1 for ln in src.splitlines() if " = " in ln)
    assert len([n for n in graph.nodes if n.op != "broadcast_to"]) <= emitted <= len(graph.nodes)


def test_generated_code_agrees_with_interpreter_in_float32():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 6)).astype(np.float32)
    g = gr.trace(lambda x: gr.sum(gr.sigmoid(x) * 2.0, axis=0) / gr.max(x, axis=1).sum(), x)
    out_gen = compile_graph(g, check=True)(x)[0]
    out_int = run(g, [x])[0]
    assert out_gen.dtype == np.float32
    np.testing.assert_array_equal(out_gen, out_int)


def test_trace_grad_partitions_forward_and_backward():
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((4, 5)), rng.standard_normal((5, 3))
    j = gr.trace_grad(lambda x, w: gr.sum(gr.relu(x @ w)), x, w, argnums=1)
    fwd_out = run(j.forward, [x, w])
    loss, residuals = fwd_out[0], fwd_out[1:]
    (dw,) = run(j.backward, residuals + [np.ones(())])
    tw = torch.tensor(w, requires_grad=True)
    tl = torch.relu(torch.tensor(x) @ tw).sum()
    (tdw,) = torch.autograd.grad(tl, tw)
    np.testing.assert_allclose(loss, tl.item(), rtol=1e-14)
    np.testing.assert_allclose(dw, tdw.numpy(), rtol=1e-14)
    assert len(j.forward.outputs) == 1 + len(j.residuals)


@settings(max_examples=30, deadline=None)
@given(programs())
def test_generated_code_equals_interpreter_on_random_joint_graphs(program):
    from gradir.passes import joint_graph, run_pipeline

    shapes, steps = program
    xs = make_inputs(shapes, seed=3)
    joint = run_pipeline(joint_graph(gr.trace(lambda *a: run_program(steps, a, "gr"), *xs)))
    args = xs + [np.ones(())]
    for a, b in zip(compile_graph(joint, check=True)(*args), run(joint, args)):
        np.testing.assert_array_equal(a, b)


def test_backends_run_graphs_with_composite_ops_directly():
    rng = np.random.default_rng(4)
    z, y = rng.standard_normal((3, 4)), np.array([0, 3, 1])
    g = gr.trace(lambda z: gr.nn.cross_entropy(z, y), z)
    assert any(n.op == "cross_entropy" for n in g.nodes)  # the fused op is in the traced graph
    expected = torch.nn.functional.cross_entropy(torch.tensor(z), torch.tensor(y)).item()
    np.testing.assert_allclose(run(g, [z])[0], expected, rtol=1e-14)
    np.testing.assert_allclose(compile_graph(g)(z)[0], expected, rtol=1e-14)


def test_keyword_arguments_pass_through_grad_and_are_static_in_compile():
    def loss(w, x, scale=1.0, act="tanh"):
        h = gr.tanh(x @ w) if act == "tanh" else gr.relu(x @ w)
        return gr.sum(h) * scale

    rng = np.random.default_rng(5)
    w, x = rng.standard_normal((3, 2)), rng.standard_normal((4, 3))
    g = gr.grad(loss)(w, x, scale=2.0, act="relu")
    tw = torch.tensor(w, requires_grad=True)
    (tg,) = torch.autograd.grad((torch.relu(torch.tensor(x) @ tw)).sum() * 2.0, tw)
    np.testing.assert_allclose(g, tg.numpy(), rtol=1e-14)
    step = gr.compile(gr.grad(loss))
    np.testing.assert_allclose(step(w, x, scale=2.0, act="relu"), g, rtol=1e-14)
    step(w, x, scale=3.0, act="relu")
    assert step.cache_size == 2  # a new static keyword value, a new trace
    with pytest.raises(GradirError, match="must be hashable"):
        step(w, x, scale=np.ones(1))


# -- one rule for an implied gradient seed: gr.grad and Tensor.backward, as torch's backward() -------------


def _torch_backward_grad(x: np.ndarray, shape: tuple):
    """torch's gradient of sum(sin(x) * x) reshaped to `shape`, by backward() without a gradient
    argument; None where torch refuses to imply one."""
    t = torch.tensor(x, requires_grad=True)
    try:
        (torch.sin(t) * t).sum().reshape(shape).backward()
    except RuntimeError:
        return None
    return t.grad.numpy()


@pytest.mark.parametrize("shape", [(), (1,), (1, 1), (1, 1, 1)])
def test_a_one_element_output_of_any_shape_is_differentiated_like_torch(shape):
    x = np.array([0.3, -1.2, 2.0])
    want = _torch_backward_grad(x, shape)
    assert want is not None  # torch accepts every one-element shape

    def f(v):
        return gr.sum(gr.sin(v) * v).reshape(shape)
    value, g = gr.value_and_grad(f)(x)
    np.testing.assert_allclose(g, want, rtol=1e-13)
    assert np.shape(value) == shape and np.asarray(value).item() == pytest.approx(np.sum(np.sin(x) * x), rel=1e-13)
    np.testing.assert_allclose(gr.compile(gr.grad(f), backend="numpy")(x), want, rtol=1e-13)
    t = gr.Tensor(x, requires_grad=True)
    f(t).backward()
    np.testing.assert_allclose(t.grad.numpy(), want, rtol=1e-13)


@pytest.mark.parametrize("shape", [(3,), (1, 3)])
def test_a_many_element_output_is_refused_by_both_as_by_torch(shape):
    from gradir.core.errors import ShapeError

    x = np.array([0.3, -1.2, 2.0])

    def f(v):
        return (gr.sin(v) * v).reshape(shape)
    t = torch.tensor(x, requires_grad=True)
    with pytest.raises(RuntimeError, match="only for scalar outputs"):
        (torch.sin(t) * t).reshape(shape).backward()
    with pytest.raises(ShapeError, match=r"one element, any shape.*gr.vjp") as grad_error:
        gr.grad(f)(x)
    tensor = gr.Tensor(x, requires_grad=True)
    with pytest.raises(ShapeError, match=r"one element, any shape.*backward\(gradient=") as backward_error:
        f(tensor).backward()
    assert grad_error.value.op == "grad" and backward_error.value.op == "backward"


# -- eager transformations cache their graphs per input signature (gradir.api.cache) -------------------

def test_grad_vjp_jvp_trace_once_per_signature_and_clear_caches_retraces():
    traces = []

    def f(x, scale=2.0):
        traces.append(x.shape)
        return gr.sum(gr.tanh(x) * scale)

    x3, x4 = np.linspace(-1, 1, 3), np.linspace(-1, 1, 4)
    g = gr.grad(f)
    first = g(x3)
    assert len(traces) == 1
    np.testing.assert_allclose(g(x3 * 0.5), 2 * (1 - np.tanh(x3 * 0.5) ** 2))  # new values, same graph
    np.testing.assert_allclose(first, 2 * (1 - np.tanh(x3) ** 2))
    g(x4)
    g(x3, scale=3.0)  # another shape, another static keyword: traced again
    assert len(traces) == 3
    gr.grad(f)(x3)  # a new transformed function (like a new gr.compile object) traces afresh
    assert len(traces) == 4
    out, back = gr.vjp(f, x3)
    gr.vjp(f, x3)  # vjp and jvp return no function: their entries are the differentiated function's
    _, t = gr.jvp(f, (x3,), (np.ones(3),))
    gr.jvp(f, (x3,), (np.ones(3),))
    assert len(traces) == 6
    np.testing.assert_allclose(back(1.0)[0], first)
    np.testing.assert_allclose(t, first.sum())
    from gradir.api.cache import cache_size

    assert cache_size(f) == 2
    gr.clear_caches()
    assert cache_size(f) == 0
    g(x3)
    gr.vjp(f, x3)
    assert len(traces) == 8


def test_static_keywords_equal_in_python_but_of_another_type_are_another_signature():
    """2 == 2.0 == True in Python, but `x ** p` and `x * p` trace differently: the cache keys the type too."""
    def f(x, p=1):
        return gr.sum(x ** p) if isinstance(p, float) else gr.sum(x * p)

    x = np.array([3.0, 4.0])
    g = gr.grad(f)
    np.testing.assert_allclose(g(x, p=2.0), 2 * x)
    np.testing.assert_allclose(g(x, p=2), [2.0, 2.0])
    np.testing.assert_allclose(g(x, p=(2.0,)[0]), 2 * x)
    step = gr.compile(f, backend="numpy")
    np.testing.assert_allclose(step(x, p=2.0), 25.0)
    np.testing.assert_allclose(step(x, p=2), 14.0)


def test_cached_grad_inside_a_trace_is_not_reused_with_captured_values():
    def f(x, w):
        return gr.sum(gr.tanh(x * w))

    x, w = np.linspace(-1, 1, 5), 0.7
    eager = gr.grad(f)(x, w)

    @gr.compile(backend="numpy")
    def outer(x, w):
        return gr.grad(lambda x: f(x, w))(x)  # closes over a traced w: built afresh inside the trace

    np.testing.assert_allclose(outer(x, np.float64(w)), eager)
    np.testing.assert_allclose(outer(x, np.float64(-w)), gr.grad(f)(x, -w))


def test_big_cached_graphs_are_compiled_once_and_agree_with_the_interpreter():
    from gradir.api.transforms import INTERPRET_NODES
    from gradir.backends import run

    def chain(x):
        for _ in range(INTERPRET_NODES):
            x = gr.sin(x) + x
        return gr.sum(x)

    x = np.linspace(-1, 1, 6)
    g = gr.value_and_grad(chain)
    value, grad = g(x)
    from gradir.api.args import prepare
    from gradir.api.options import NO_OPTIONS
    from gradir.api.transforms import _grad_graph

    graph = _grad_graph(chain, prepare(chain, (x,)), 0, "grad", NO_OPTIONS)[0]
    assert len(graph.nodes) > INTERPRET_NODES
    ref_value, ref_grad = run(graph, [x])  # the NumPy interpreter, node by node
    np.testing.assert_array_equal(value, ref_value)
    np.testing.assert_array_equal(grad, ref_grad)
