"""Traced Values have the eager Tensor's NumPy-like methods (attached by gradir/ops/methods.py); their gradients
match torch float64; floor division is a clear error."""

import numpy as np
import pytest
import torch

import gradir as gr

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


def test_floordiv_is_numpys_with_a_zero_gradient():
    x = np.array([-3.5, -1.0, 0.25, 2.0, 7.5])
    np.testing.assert_array_equal(gr.compile(lambda a: a // 2.0)(x), x // 2.0)
    np.testing.assert_array_equal(gr.compile(lambda a: 5.0 // a)(x), 5.0 // x)
    np.testing.assert_array_equal(gr.grad(lambda a: gr.sum(a // 2.0))(x), np.zeros(5))  # piecewise constant
