"""x[idx] = v with repeated indices, traced and eager: only the last write to an element gets a gradient
(as NumPy, where the last write wins); checked by central differences."""

import numpy as np
import pytest
import torch

import gradir as gr


def central(f, x, h=1e-6):
    g = np.zeros_like(x)
    for k in range(x.size):
        e = np.zeros_like(x)
        e.flat[k] = h
        g.flat[k] = (f(x + e) - f(x - e)) / (2 * h)
    return g





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
