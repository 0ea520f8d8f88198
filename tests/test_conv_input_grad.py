"""passes/conv_input_grad.py: a stride-1 convolution's input gradient, fold(W^T @ dY), computed as unfold(dY)
times the flipped weight. The rewritten graph gives the original's results on the NumPy interpreter (float64,
to rounding: the sum's order differs) for any geometry; only stride-1, dilation-1 convolutions are rewritten;
the LLVM backend, which applies it, matches PyTorch's float64 gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

import gradir as gr
from gradir.backends import run
from gradir.passes.conv_input_grad import input_grads_as_convolutions
from gradir.passes.lower import lower_composites


@st.composite
def geometries(draw):
    kh, kw = draw(st.sampled_from((1, 2, 3, 5))), draw(st.sampled_from((1, 2, 3)))
    stride, dilation = draw(st.sampled_from((1, 2))), draw(st.sampled_from((1, 2)))
    ph, pw = draw(st.integers(0, kh)), draw(st.integers(0, kw))  # kh: more than a stride-1 rewrite takes
    h = draw(st.integers(max(1, dilation * (kh - 1) + 1 - 2 * ph), 10))
    w = draw(st.integers(max(1, dilation * (kw - 1) + 1 - 2 * pw), 10))
    return draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 4)), (h, w), (kh, kw), \
        stride, (ph, pw), dilation


def joint(n, c, o, size, kernel, stride, padding, dilation):
    """The lowered joint graph of sum(tanh(conv2d(x, w))) and its arguments (x, w, the cotangent 1)."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((n, c, *size)), rng.standard_normal((o, c, *kernel))
    f = lambda x, w: gr.sum(gr.tanh(gr.nn.conv2d(x, w, None, stride, padding, dilation)))
    return lower_composites(gr.trace_grad(f, x, w, argnums=(0, 1)).joint), [x, w, np.float64(1.0)]


@settings(max_examples=40)
@given(geometries())
@example((1, 1, 1, (1, 1), (1, 1), 1, (0, 0), 1))       # one pixel, a 1x1 kernel
@example((2, 3, 2, (4, 5), (3, 2), 1, (2, 1), 1))       # padding k - 1: the gradient's unfold is unpadded
def test_the_rewritten_graph_computes_the_same_gradients(geometry):
    graph, args = joint(*geometry)
    rewritten, order = input_grads_as_convolutions(graph)
    stride, padding, dilation, kernel = geometry[5], geometry[6], geometry[7], geometry[4]
    fits = stride == dilation == 1 and all(p <= k - 1 for p, k in zip(padding, kernel))
    assert order is None
    assert (rewritten is not graph) == fits
    assert not any(n.op == "fold" for n in rewritten.nodes) if fits else rewritten is graph
    for got, want in zip(run(rewritten, args), run(graph, args)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("geometry", [
    (4, 3, 5, (8, 8), (3, 3), 1, (1, 1), 1),
    (2, 2, 3, (5, 7), (3, 5), 1, (0, 2), 1),
    (3, 4, 2, (6, 6), (3, 3), 2, (1, 1), 1),   # stride 2: kept as a fold
])
def test_the_llvm_backends_input_gradient_is_torchs(geometry):
    n, c, o, size, kernel, stride, padding, dilation = geometry
    rng = np.random.default_rng(1)
    x, w, r = rng.standard_normal((n, c, *size)), rng.standard_normal((o, c, *kernel)), rng.standard_normal(())

    def f(x, w):  # a residual: the input gradient's product gets an epilogue adding the other path's gradient
        return gr.sum(gr.tanh(gr.nn.conv2d(x, w, None, stride, padding, dilation)) ** 2) + r * gr.sum(x * x)
    got = gr.compile(gr.grad(f, argnums=(0, 1)), backend="llvm")(x, w)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    loss = (torch.tanh(torch.nn.functional.conv2d(tx, tw, None, stride, padding, dilation)) ** 2).sum() + \
        float(r) * (tx * tx).sum()
    for g, want in zip(got, torch.autograd.grad(loss, (tx, tw))):
        np.testing.assert_allclose(g, want.numpy(), rtol=1e-10, atol=1e-10)
