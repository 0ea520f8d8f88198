"""Issue 19's reproductions, pinned: shapes the compiled backends once crashed or erred on (size-1 axes after
pads, concatenates, stacks and slice gradients; reductions over length-1 axes; 0-d gather indices; placements
along outer axes). Each program runs on every backend and meets PyTorch float64 autograd as the oracle."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from conftest import triton_missing

import gradir as gr
from gradir.backends.loops import LoopPlan
from gradir.core.errors import LoweringError
from gradir.passes.fusion import Kernel

torch = pytest.importorskip("torch")
BACKENDS = ["numpy", "llvm", pytest.param("triton", marks=pytest.mark.skipif(triton_missing() is not None,
                                                                               reason=str(triton_missing())))]
RNG = np.random.default_rng(19)


def _t(a):
    return torch.tensor(np.asarray(a, np.float64), requires_grad=True)


def _written(y, index, value):
    """y after the in-place write y[index] = value, as a user writes it."""
    y[index] = value
    return y


# (name, gradir function of x, torch function of x, shape of x): each returns a scalar
CASES = [
    ("slice_grad_size1", lambda x: gr.sum(x[1:] * 2.0), lambda x: (x[1:] * 2.0).sum(), (4, 1)),
    ("concatenate_size1", lambda x: gr.sum(gr.concatenate([x, x * 2.0]) * W41), lambda x: (torch.cat([x, x * 2.0]) * TW41).sum(),
     (2, 1)),
    ("concatenate_reduce_axis0", lambda x: gr.sum(gr.sum(gr.concatenate([x, 2.0 * x]) * W41, axis=0)),
     lambda x: (torch.cat([x, 2.0 * x]) * TW41).sum(0).sum(), (2, 1)),
    ("stack_size1", lambda x: gr.sum(gr.tanh(gr.stack([x, x * 3.0])) * W213),
     lambda x: (torch.tanh(torch.stack([x, x * 3.0])) * TW213).sum(), (1, 3)),
    ("pad_last_axis_after_size1", lambda x: gr.sum(gr.pad(x, [(0, 0)] * 3 + [(1, 1)]) * 2.0 * gr.pad(x, [(0, 0)] * 3 + [(1, 1)])),
     lambda x: (torch.nn.functional.pad(x, (1, 1)) ** 2 * 2.0).sum(), (2, 1, 4, 3)),
    ("max_over_length1", lambda x: gr.sum(gr.max(x, axis=1) * gr.arange(3.0)),
     lambda x: (x.amax(dim=1) * torch.arange(3.0, dtype=torch.float64)).sum(), (3, 1)),
    ("softmax_over_length1", lambda x: gr.sum(gr.nn.softmax(x, axis=1) * x),
     lambda x: (torch.softmax(x, dim=1) * x).sum(), (3, 1)),
    ("logsumexp_over_length1", lambda x: gr.sum(gr.logsumexp(x, axis=0)), lambda x: torch.logsumexp(x, dim=0).sum(), (1, 4)),
    ("take_0d_index", lambda x: gr.take(x, np.array(2)) * 3.0, lambda x: x[2] * 3.0, (3,)),
    ("strided_slice_of_length1", lambda x: gr.sum(x[::2] * x[::2]), lambda x: (x[::2] * x[::2]).sum(), (1,)),
    ("row_sum_of_outer_pad", lambda x: gr.sum(gr.sum(gr.pad(x, 1), axis=1) * gr.arange(4.0)),
     lambda x: (torch.nn.functional.pad(x, (1, 1, 1, 1)).sum(1) * torch.arange(4.0, dtype=torch.float64)).sum(), (2, 3)),
    ("row_max_of_outer_concatenate", lambda x: gr.sum(gr.max(gr.concatenate([x, -x], axis=0), axis=1) * gr.arange(4.0)),
     lambda x: (torch.cat([x, -x], 0).amax(1) * torch.arange(4.0, dtype=torch.float64)).sum(), (2, 3)),
    ("pad_of_length1", lambda x: gr.sum(gr.pad(x, 1) * gr.pad(x, 1) * gr.arange(3.0)),
     lambda x: (torch.nn.functional.pad(x, (1, 1)) ** 2 * torch.arange(3.0, dtype=torch.float64)).sum(), (1,)),
    ("empty_after_advanced_index", lambda x: gr.sum(x[np.array(-1), np.array([-2, 0]), -1:-2:3, :1] * 2.0),
     lambda x: (x[-1, [-2, 0], -1:-2:3, :1] * 2.0).sum(), (1, 2, 2, 2)),
    ("gather_of_empty_slice", lambda x: gr.sum(x[4:-4, np.array([1, -2])] * 2.0) + gr.sum(x),
     lambda x: (x[4:-4, [1, -2]] * 2.0).sum() + x.sum(), (3, 2)),
    ("take_0d_index_gradient", lambda x: gr.take(gr.reshape(x, (12,)), np.array(-5)) * 3.0,
     lambda x: x.reshape(12)[-5] * 3.0, (3, 4)),
    ("update_slice_size1", lambda x: gr.sum(_written(x * 1.0, (slice(None), 0), x[:, 0] * 5.0) * W41),
     lambda x: (torch.cat([x[:, :1] * 5.0], 1) * TW41).sum(), (4, 1)),
]
W41, TW41 = (lambda w: (w, torch.tensor(w)))(RNG.standard_normal((4, 1)))
W213, TW213 = (lambda w: (w, torch.tensor(w)))(RNG.standard_normal((2, 1, 3)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name, f, tf, shape", CASES, ids=[c[0] for c in CASES])
def test_edge_program_matches_torch(backend, name, f, tf, shape):
    x = RNG.standard_normal(shape)
    value, grad = gr.compile(gr.value_and_grad(f), backend=backend)(x)
    tx = _t(x)
    want = tf(tx)
    want.backward()
    np.testing.assert_allclose(value, want.item(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grad, tx.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_plan_gives_size1_axes_no_loop_and_merges_only_contiguous_axes():
    """The planner's two promises, read off a plan: a size-1 axis has the constant coordinate 0, and an access
    that is not contiguous across two axes gets a term for each."""
    k = Kernel(0, "loop", domain=(4, 1, 3), outer=None, maps={})
    plan = LoopPlan(k.domain, [LoopPlan._loop(k.domain, [0, 2], False)])
    assert plan.coordinate(1) is None
    assert plan.coordinate(0).div == 3 and plan.coordinate(2).mod == 3
    assert len(plan.terms([3, 0, 1])) == 1           # contiguous across the size-1 axis: one term
    assert len(plan.terms([1, 0, 4])) == 2           # transposed: a term per axis, with div and mod
    assert plan.terms([0, 7, 0]) == []               # moves only along the size-1 axis: no term at all


@pytest.mark.parametrize("backend, module, method", [("llvm", "gradir.backends.llvm.kernels", "LoopKernel"),
                                                     ("triton", "gradir.backends.triton.codegen", "LoopSource")])
def test_a_renderer_failure_is_a_located_gradir_error(backend, module, method, monkeypatch):
    """A renderer's own bug surfaces as a LoweringError naming the op it was lowering and the user's line."""
    if backend == "triton" and triton_missing():
        pytest.skip(triton_missing())
    def broken(self, n, memo):
        raise KeyError(1)

    monkeypatch.setattr(getattr(importlib.import_module(module), method), "gather", broken)
    with pytest.raises(LoweringError, match=r"take: .*KeyError.*test_backend_edges.py:\d+"):
        gr.compile(lambda x: gr.take(x, np.array([1, 0])) * 2.0, backend=backend)(np.ones(3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_by_one_float32_product_with_its_bias(backend):
    """A 1x1 float32 matmul whose backward adds a bias (Triton's tl.dot kernel loaded that one-value bias
    through a scalar pointer under a tile mask)."""
    x = np.array([0.75], np.float32)
    f = gr.value_and_grad(lambda x: gr.sum(gr.astype(x @ x, gr.float64) * 2.0))
    value, grad = gr.compile(f, backend=backend)(x)
    tx = torch.tensor(x, requires_grad=True)
    want = ((tx @ tx).double() * 2.0).sum()
    want.backward()
    np.testing.assert_allclose(value, want.item(), rtol=1e-6)
    np.testing.assert_allclose(grad, tx.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_by_an_index_argument_that_is_one_value_for_every_lane(backend):
    """An index read once for the whole row, feeding a gather and its range check (Triton paired that scalar
    with a block mask)."""
    x, rows = RNG.standard_normal((2, 1, 2)), np.array([[1]])
    cols = np.array([1, 1, 1])
    f = gr.value_and_grad(lambda x, i: gr.sum(gr.sum(x, axis=-2)[i, cols] * np.arange(3.0)))
    value, grad = gr.compile(f, backend=backend)(x, rows)
    tx = _t(x)
    want = (tx.sum(-2)[torch.tensor(rows), torch.tensor(cols)] * torch.arange(3.0, dtype=torch.float64)).sum()
    want.backward()
    np.testing.assert_allclose(value, want.item(), rtol=1e-12)
    np.testing.assert_allclose(grad, tx.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_float32_batched_product_of_an_empty_batch(backend):
    """An empty batch of float32 products (Triton's tl.dot kernel launched one program for it and wrote out of
    bounds: the long mode's seeds 7017 and 7229 segfaulted)."""
    cols = np.array([[-1, -2, 1], [0, -2, -2], [0, 1, 0]])

    def f(x):
        v = gr.astype(x, gr.float32)[:, cols]
        return gr.sum(gr.astype(gr.matmul(v, v), gr.float64)) + gr.sum(x * 2.0)

    value, grad = gr.compile(gr.value_and_grad(f), backend=backend)(np.ones((0, 2)))
    assert value == 0.0 and grad.shape == (0, 2)
