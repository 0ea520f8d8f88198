"""Regression tests for reviewed bugs: repeated-index writes, class-index checks, Value methods, torch bf16."""

import ml_dtypes
import numpy as np
import pytest
import torch

import gradir as gr
from gradir.errors import ExecutionError, GradirError, ShapeError, UnsupportedOpError


def central(f, x, h=1e-6):
    g = np.zeros_like(x)
    for k in range(x.size):
        e = np.zeros_like(x)
        e.flat[k] = h
        g.flat[k] = (f(x + e) - f(x - e)) / (2 * h)
    return g


# -- 1. x[idx] = v with repeated idx: only the last write gets a gradient ----------------------------


def _dup_write_np(x, idx):
    y = x * 1.0
    y[idx] = x[1:] ** 2  # NumPy: last write wins
    return float(np.sum(y * y))


@pytest.mark.parametrize("idx", [[0, 0], [0, -3], [2, 2], [1, 2]])
def test_index_update_repeated_const_and_traced(idx):
    x = np.array([1.0, 2.0, 3.0])
    idx = np.array(idx)
    want = central(lambda z: _dup_write_np(z, idx), x)

    def f(x, i):
        y = x * 1.0
        y[i] = x[1:] ** 2
        return gr.sum(y * y)

    np.testing.assert_allclose(gr.grad(lambda x: f(x, idx))(x), want, rtol=1e-6)  # constant idx
    np.testing.assert_allclose(gr.grad(f)(x, idx), want, rtol=1e-6)  # traced idx
    np.testing.assert_allclose(gr.compile(gr.grad(f))(x, idx), want, rtol=1e-6)
    # torch's index_put_ (accumulate=False) has the same forward; its backward is checked by differences
    xt = torch.tensor(x, requires_grad=True)
    yt = xt * 1.0
    yt = yt.index_put((torch.tensor(idx),), xt[1:] ** 2)
    assert np.isclose((yt * yt).sum().item(), _dup_write_np(x, idx))


def test_index_update_repeated_2d_axis1_and_eager_tensor():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4))
    idx = np.array([[3, 1], [3, 3]])

    def f(x):
        y = x * 1.0
        y[:, idx] = gr.reshape(gr.tanh(x), (2, 2, 2)) * 2.0
        return gr.sum(y ** 3)

    def fnp2(x):
        y = x * 1.0
        y[:, idx] = np.tanh(x).reshape(2, 2, 2) * 2.0
        return float(np.sum(y ** 3))

    want = central(fnp2, x)
    np.testing.assert_allclose(gr.grad(f)(x), want, rtol=1e-5, atol=1e-8)
    t = gr.Tensor(x, requires_grad=True)
    u = t * 1.0
    u[:, idx] = (t.tanh() * 2.0).reshape(2, 2, 2)
    (u ** 3).sum().backward()
    np.testing.assert_allclose(np.asarray(t.grad.data), want, rtol=1e-5, atol=1e-8)


# -- 2. out-of-range class indices raise, also when traced -----------------------------------------


def test_one_hot_out_of_range_raises():
    f = gr.compile(lambda y: gr.one_hot(y, 3))
    np.testing.assert_array_equal(f(np.array([0, 2])), torch.nn.functional.one_hot(torch.tensor([0, 2]), 3).numpy())
    for bad in ([0, -1], [0, 7]):
        with pytest.raises(ExecutionError, match="one_hot"):
            f(np.array(bad))
        with pytest.raises(RuntimeError):  # torch refuses them too
            torch.nn.functional.one_hot(torch.tensor(bad), 3)
        with pytest.raises(ShapeError, match="one_hot"):
            gr.one_hot(np.array(bad), 3)


@pytest.mark.parametrize("vjp", ["fused", "composed"])
def test_cross_entropy_traced_targets_checked(vjp):
    z = np.random.default_rng(1).standard_normal((3, 4))
    loss = lambda z, y, **kw: gr.nn.cross_entropy(z, y, vjp=vjp, **kw)  # noqa: E731
    for bad in ([0, 9, 1], [0, -1, 1]):
        with pytest.raises(ExecutionError, match="cross_entropy"):
            gr.grad(loss)(z, np.array(bad))
        with pytest.raises(ExecutionError, match="cross_entropy"):
            gr.compile(loss)(z, np.array(bad))
    # ignore_index still works with traced targets, and matches torch
    y = np.array([1, -100, 3])
    zt = torch.tensor(z, requires_grad=True)
    torch.nn.functional.cross_entropy(zt, torch.tensor(y), ignore_index=-100).backward()
    got = gr.grad(lambda z, y: loss(z, y, ignore_index=-100))(z, y)
    np.testing.assert_allclose(got, zt.grad.numpy(), rtol=1e-10)


def test_check_classes_roundtrips_text_form():
    g = gr.trace(lambda y: gr.one_hot(y, 3), np.array([0, 1]))
    assert str(gr.Graph.parse(str(g))) == str(g)


# -- 3. traced Values have the Tensor's methods ------------------------------------------------------

METHODS = {
    "sqrt": (lambda a: a.sqrt(), lambda a: a.sqrt()),
    "relu": (lambda a: a.relu(), lambda a: a.relu()),
    "sigmoid": (lambda a: a.sigmoid(), lambda a: a.sigmoid()),
    "sin": (lambda a: a.sin(), lambda a: a.sin()),
    "cos": (lambda a: a.cos(), lambda a: a.cos()),
    "square": (lambda a: a.square(), lambda a: a.square()),
    "pow": (lambda a: a.pow(3.0), lambda a: a.pow(3.0)),
    "matmul": (lambda a: a.matmul(a.T), lambda a: a.matmul(a.T)),
    "dot": (lambda a: a[0].dot(a[1]), lambda a: a[0].dot(a[1])),
    "std": (lambda a: a.std(axis=0, ddof=1), lambda a: a.std(dim=0, correction=1)),
    "squeeze": (lambda a: a[:1].squeeze(0), lambda a: a[:1].squeeze(0)),
    "swapaxes": (lambda a: a.swapaxes(0, 1) * np.arange(6.0).reshape(3, 2), lambda a: a.swapaxes(0, 1) *
                 torch.arange(6.0, dtype=torch.float64).reshape(3, 2)),
    "and_or_not": (lambda a: gr.where((a > 0.5) & ~(a > 1.2) | (a < 0.2), a * a, a), lambda a: torch.where(
        (a > 0.5) & ~(a > 1.2) | (a < 0.2), a * a, a)),
}


@pytest.mark.parametrize("name", sorted(METHODS))
def test_value_methods_grad_match_torch(name):
    mine, ref = METHODS[name]
    x = np.array([[0.3, 1.1, 1.7], [0.1, 0.9, 2.2]])
    xt = torch.tensor(x, requires_grad=True)
    (ref(xt) ** 2).sum().backward()
    got = gr.grad(lambda a: gr.sum(mine(a) ** 2))(x)
    np.testing.assert_allclose(got, xt.grad.numpy(), rtol=1e-10, atol=1e-12)
    t = gr.Tensor(x, requires_grad=True)  # the eager Tensor shares the same method table
    (mine(t) ** 2).sum().backward()
    np.testing.assert_allclose(np.asarray(t.grad.data), xt.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_floordiv_clear_error():
    with pytest.raises(UnsupportedOpError, match="floor"):
        gr.grad(lambda a: gr.sum(a // 2.0))(np.ones(2))
    assert issubclass(UnsupportedOpError, GradirError)


# -- 4. torch bfloat16 in and out ---------------------------------------------------------------------


def test_torch_bfloat16_grad_and_tensor():
    xt = torch.tensor([0.5, 1.25, -2.0], dtype=torch.bfloat16)
    g = gr.grad(lambda a: gr.sum(a * a * a))(xt)
    assert isinstance(g, torch.Tensor) and g.dtype == torch.bfloat16
    want = 3 * xt.float() ** 2
    torch.testing.assert_close(g.float(), want, rtol=1e-2, atol=1e-2)
    t = gr.Tensor(xt)
    assert t.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(np.asarray(t.data).astype(np.float32), xt.float().numpy())
    y = gr.compile(lambda a: a * 2.0)(torch.tensor(1.5, dtype=torch.bfloat16))  # 0-d round trip
    assert y.dtype == torch.bfloat16 and y.item() == 3.0
