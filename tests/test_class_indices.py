"""Class indices (one_hot, cross_entropy targets) out of range raise a clear error, also when traced, and the
range check round-trips through the IR text form."""

import numpy as np
import pytest
import torch

import gradir as gr
from gradir.core.errors import ExecutionError, ShapeError


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
