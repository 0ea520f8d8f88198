"""In-place writes on traced values (gradir/ops/update.py): functionalized results and gradients
equal PyTorch running the same in-place program in float64; a write over a value a VJP rule saved
raises InPlaceError naming both source lines (where torch raises its own error at backward)."""

from __future__ import annotations

import inspect
import os
import types

import numpy as np
import pytest
import torch

import gradir as gr
from gradir.core.errors import DTypeError, InPlaceError, ShapeError, TraceError, UnsupportedOpError
from gradir.core.ir import Graph
from gradir.ops.update import setitem

GR = types.SimpleNamespace(fresh=lambda x: x * 1.0, input=lambda x: x, tanh=gr.tanh, exp=gr.exp)
TORCH = types.SimpleNamespace(fresh=lambda x: x * 1.0, input=lambda x: x.clone(), tanh=torch.tanh, exp=torch.exp)
RNG = np.random.default_rng(3)


def _line(fn, marker: str) -> str:
    lines, start = inspect.getsourcelines(fn)
    k = next(i for i, text in enumerate(lines) if marker in text)
    return f"{os.path.basename(__file__)}:{start + k}"


def _against_torch(prog, *arrays, torch_prog=None):
    """prog(M, *args) run by gradir (value and gradient for every argument) and by torch autograd."""
    torch_prog = torch_prog or prog
    value, grads = gr.value_and_grad(lambda *a: prog(GR, *a), argnums=tuple(range(len(arrays))))(*arrays)
    leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    loss = torch_prog(TORCH, *leaves)
    loss.backward()
    np.testing.assert_allclose(value, loss.item(), rtol=1e-12, atol=1e-12)
    for g, t in zip(grads, leaves):
        expected = t.grad.numpy() if t.grad is not None else np.zeros(t.shape)
        np.testing.assert_allclose(g, expected, rtol=1e-12, atol=1e-12)
    # the traced graph stays SSA, ordered and well-typed, and its text form round-trips
    graph = gr.trace(lambda *a: prog(GR, *a), *arrays)
    graph.verify()
    Graph.parse(graph.to_text(full=True)).verify()
    return graph


# -- allowed writes: results and gradients equal torch ------------------------------------------------


def p_add_input(M, x, y):  # TEACHING E: mutating the input of a pure add is allowed
    a = M.fresh(x)
    s = a + y
    a += 1.0
    return (s * a).sum()


def p_methods(M, x, y):
    a = M.fresh(x)
    a.mul_(y)          # multiply's rule reads the old a, which the SSA graph keeps
    a.add_(y, alpha=2.0)
    a.sub_(x)
    a *= 3.0
    a -= y
    a /= 2.0
    a.div_(y)          # last: gradir's divide rule keeps its output (torch's keeps the operands)
    return (a * a).sum()


def p_slices(M, x, y):
    a = M.fresh(x)
    a[1:3] = y[:2] * 2.0
    a[0] = y[2]
    a[1:3] += y[1:]          # Python: t = a[1:3]; t += ...; a[1:3] = t
    return (a * x).sum() + (a * a).sum()


def p_2d(M, x, y):
    A = M.fresh(x)
    A[:, 1] = y[:3]
    A[1, ::2] = y[3:5] * y[:2]
    A[...] *= 2.0
    return (A * x).sum()


def p_int_arrays(M, x, y):
    A = M.fresh(x)
    A[[0, 2]] = y[:2].reshape(2, 1) * 3.0
    A[:, [3, 0]] = y[2:4]
    return (A * A).sum() + (A * x).sum()


def p_mask(M, x, y):
    a = M.fresh(x)
    a[a > 0.3] = 0.5
    return (a * y).sum()


def p_mutate_input(M, x, y):  # gradir may write into its own input; torch needs a clone first
    x = M.input(x)
    x += y
    x[0] = 2.0
    return (x * x).sum()


def p_self_reads(M, x, y):
    a = M.fresh(x)
    a += a                   # reads the value it replaces
    a[1:] = a[:-1] + y[1:]   # overlapping source and target, as NumPy buffers it
    a[0] += a[2]
    return (a * a).sum()


def p_fill_zeros(M, x, y):  # the loop-filling pattern: out = zeros(n); out[i] = ...
    out = (M.fresh(x) * 0.0)
    for i in range(3):
        out[i] = M.tanh(x[i]) * y[i]
    return (out * x).sum()


@pytest.mark.parametrize("prog, shapes", [
    (p_add_input, [(3,), (3,)]), (p_methods, [(4,), (4,)]), (p_slices, [(4,), (3,)]), (p_2d, [(3, 4), (5,)]),
    (p_int_arrays, [(3, 4), (4,)]), (p_mask, [(6,), (6,)]), (p_mutate_input, [(3,), (3,)]),
    (p_self_reads, [(4,), (4,)]), (p_fill_zeros, [(4,), (3,)]),
], ids=lambda p: getattr(p, "__name__", ""))
def test_functionalized_matches_torch(prog, shapes):
    arrays = [RNG.uniform(0.5, 1.5, s) if k else RNG.standard_normal(s) for k, s in enumerate(shapes)]
    _against_torch(prog, *arrays)


def test_negative_step_write():
    # torch has no negative-step slices: its program writes the same positions with an index list
    def prog(M, x, y):
        a = M.fresh(x)
        if M is GR:
            a[::-2] = y
        else:
            a[[4, 2, 0]] = y
        return (a * x).sum()
    _against_torch(prog, RNG.standard_normal(5), RNG.standard_normal(3))


def test_aliases_see_the_write_and_earlier_readers_do_not():
    def prog(M, x, y):
        a = M.fresh(x)
        alias = a
        held = [a]
        before = a + 0.0       # computed before the write: keeps the old contents
        a += y
        held[0].mul_(2.0)      # a write through another reference to the same object
        return (alias * y).sum() + (before * before).sum() + (a * x).sum()
    _against_torch(prog, RNG.standard_normal(3), RNG.standard_normal(3))

    seen = {}

    def f(x):
        a = x * 1.0
        alias = a
        a += 1.0
        seen["same"] = alias is a
        return alias
    out = gr.compile(f)(np.array([1.0, 2.0]))
    assert seen["same"] and np.array_equal(out, [2.0, 3.0])


def test_forward_mode_and_second_order_through_writes():
    x, y = RNG.standard_normal(4), RNG.standard_normal(3)
    dx, dy = RNG.standard_normal(4), RNG.standard_normal(3)
    out, tangent = gr.jvp(lambda x, y: p_slices(GR, x, y), (x, y), (dx, dy))
    fn = lambda x, y: p_slices(TORCH, x, y)
    t_out, t_tangent = torch.func.jvp(fn, (torch.tensor(x), torch.tensor(y)), (torch.tensor(dx), torch.tensor(dy)))
    np.testing.assert_allclose(out, t_out.item(), rtol=1e-12)
    np.testing.assert_allclose(tangent, t_tangent.item(), rtol=1e-12)

    def h(M, x):
        a = x * x
        a[0] = x[1] * x[2]
        a[[3]] = x[:1] * x[3]
        return (a * x).sum()
    hess_row_sums = gr.grad(lambda x: gr.grad(lambda x: h(GR, x))(x).sum())(x)
    expected = torch.autograd.functional.hessian(lambda x: h(TORCH, x), torch.tensor(x)).sum(0)
    np.testing.assert_allclose(hess_row_sums, expected.numpy(), rtol=1e-12)


def test_compiled_code_runs_the_writes():
    x, y = RNG.standard_normal((3, 4)), RNG.standard_normal(4)
    f = gr.compile(lambda x, y: p_int_arrays(GR, x, y), backend="numpy")
    g = gr.compile(gr.grad(lambda x, y: p_int_arrays(GR, x, y), argnums=(0, 1)), backend="numpy")
    tx, ty = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
    loss = p_int_arrays(TORCH, tx, ty)
    loss.backward()
    np.testing.assert_allclose(f(x, y), loss.item(), rtol=1e-12)
    for got, want in zip(g(x, y), (tx.grad, ty.grad)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-12)
    assert "update_slice" not in g.source(x, y) and "__setitem__" in g.source(x, y)


@pytest.mark.parametrize("index", [
    (slice(1, 3),), (0,), (-1, slice(None, None, -1)), (Ellipsis, 2), (None, 1), (slice(None, None, -2), 0),
    ([2, 0],), (slice(None), [3, 1, 1]), (slice(None), np.array([[0], [2]])),
])
def test_functional_setitem_equals_numpy(index):
    x = RNG.standard_normal((3, 4))
    shape = x[index].shape
    v = RNG.standard_normal(shape)
    want = x.copy()
    want[index] = v
    np.testing.assert_array_equal(setitem(x, index, v), want)
    traced = gr.compile(lambda x, v: setitem(x, index, v))(x, v)
    np.testing.assert_array_equal(traced, want)


# -- writes over saved values: InPlaceError naming both lines ------------------------------------------


def _torch_raises(prog, *arrays):
    leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        prog(TORCH, *leaves).backward()


def p_saved_by_multiply(M, x, w):
    a = M.fresh(x)
    b = a * w            # <saved>
    a += 1.0             # <write>
    return (b + a).sum()


def p_saved_output_exp(M, x, w):
    e = M.exp(x * w)     # <saved>
    e.add_(1.0)          # <write>
    return e.sum()


def p_saved_output_tanh(M, x, w):
    t = M.tanh(x * w)    # <saved>
    t[0] = 0.0           # <write>
    return t.sum()


@pytest.mark.parametrize("prog, op", [(p_saved_by_multiply, "multiply"), (p_saved_output_exp, "exp"),
                                      (p_saved_output_tanh, "tanh")], ids=["multiply", "exp", "tanh"])
def test_write_over_saved_value_names_both_lines(prog, op):
    x, w = RNG.standard_normal(2), RNG.standard_normal(2)
    _torch_raises(prog, x, w)
    with pytest.raises(InPlaceError) as info:
        gr.grad(lambda x, w: prog(GR, x, w))(x, w)
    msg = str(info.value)
    saved, write = _line(prog, "<saved>"), _line(prog, "<write>")
    assert f"saved for backward by {op} at {saved}" in msg
    assert f"modified in place at {write}" in msg and info.value.source == write
    assert "f64[2]" in msg and "out-of-place" in msg


def test_write_over_saved_input_names_it():
    def f(x, w):
        b = x * w            # <saved>
        x += 1.0             # <write>
        return (b * x).sum()
    with pytest.raises(InPlaceError) as info:
        gr.trace(f, np.ones(2), np.ones(2))
    assert str(info.value).startswith(f"+=: x (f64[2]) was saved for backward by multiply at {_line(f, '<saved>')}")
    assert _line(f, "<write>") in str(info.value)


def test_teaching_e_version_check_and_allowed_add():
    # TEACHING.md E: x = [2, 3], y = sum(x*x), then x += 1 -> refused; through an add -> allowed
    def saved(x):
        y = (x * x).sum()    # <saved>
        x += 1.0             # <write>
        return y

    def allowed(x):
        y = (x + 1.0).sum()
        x += 1.0
        return y + (x * 0.0).sum()
    with pytest.raises(InPlaceError, match=f"by multiply at {_line(saved, '<saved>')} .* at {_line(saved, '<write>')}"):
        gr.grad(saved)(np.array([2.0, 3.0]))
    np.testing.assert_array_equal(gr.grad(allowed)(np.array([2.0, 3.0])), [1.0, 1.0])


def test_saved_only_for_a_constant_operand_is_allowed():
    # a * 2.0: multiply reads a only to differentiate the constant, which needs no gradient (torch agrees)
    def prog(M, x, y):
        a = M.fresh(x)
        b = a * 2.0
        a += y
        return (b * a).sum()
    _against_torch(prog, RNG.standard_normal(3), RNG.standard_normal(3))


# -- refused writes ---------------------------------------------------------------------------------------


def test_refused_writes_raise_gradir_errors():
    x = np.ones((2, 3))
    with pytest.raises(DTypeError, match="same_kind"):
        gr.trace(lambda i: i.__iadd__(1.5), np.array([1, 2]))
    with pytest.raises(ShapeError, match="cannot broadcast its target"):
        gr.trace(lambda a, b: a.__iadd__(b), np.ones(3), np.ones((2, 3)))
    with pytest.raises(ShapeError, match="could not broadcast"):
        gr.trace(lambda a: a.__setitem__(0, np.ones(2)), x)
    with pytest.raises(UnsupportedOpError, match="one integer array"):
        gr.trace(lambda a: a.__setitem__(([0, 1], [1, 2]), 0.0), x)
    with pytest.raises(UnsupportedOpError, match="scalar value"):
        gr.trace(lambda a: a.__setitem__(a > 0, np.ones(6)), x)

    def outer(a):
        def inner(b):
            a.add_(b)  # a belongs to the enclosing trace
            return (a * b).sum()
        return gr.grad(inner)(a)
    with pytest.raises(TraceError, match="enclosing trace"):
        gr.trace(outer, np.ones(2))


def test_float32_write_keeps_dtype():
    def f(a, b):
        a += b  # f32 += f64 -> f32, as NumPy and torch
        return a
    g = gr.trace(f, np.ones(2, np.float32), np.ones(2))
    assert g.outputs[0].dtype == np.float32
    np.testing.assert_array_equal(gr.compile(f)(np.ones(2, np.float32), np.full(2, 0.5)), np.full(2, 1.5, np.float32))


def test_many_writes_in_a_loop_equal_numpy():
    def loop(x):
        out = x * 0.0
        for i in range(500):
            out[i % 8] = out[(i + 1) % 8] + x[i % 5]
        return out
    x = RNG.standard_normal(8)
    want = np.zeros(8)
    for i in range(500):
        want[i % 8] = want[(i + 1) % 8] + x[i % 5]
    graph = gr.trace(loop, x)
    assert len(graph.nodes) < 8 * 500  # each write is a few nodes, not a copy of the graph
    np.testing.assert_allclose(gr.compile(loop)(x), want, rtol=1e-12)
