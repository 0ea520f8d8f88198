"""gr.nn's convolution, pooling, resampling, padding and embedding_bag (issue 21) against torch float64
through the shared oracle: value, VJP (torch.autograd), JVP (torch.func.jvp) and, for one case per op,
the LLVM backend against NumPy. Tiny shapes with odd sizes, stride > 1, size-1 spatial axes and
ceil_mode windows that hang off the edge. Random inputs keep pooling windows free of ties, where the
gradient is a convention (gradir splits it, torch picks one)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_oracle import check_op

import gradir as gr
from gradir.core.errors import ShapeError, UnsupportedOpError

nn = gr.nn


def normal(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape)


# -- conv3d and conv_transpose1d ------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("xs, ws, kw, backends", [
    ((2, 4, 5, 4, 3), (6, 2, 2, 2, 3), dict(stride=(1, 2, 1), padding=(1, 0, 1), dilation=(2, 1, 1), groups=2), True),
    ((1, 2, 5, 6, 5), (3, 2, 3, 2, 2), dict(stride=2, padding=1), False),             # odd sizes, stride 2
    ((1, 2, 1, 1, 4), (2, 2, 1, 1, 2), dict(), False),                                 # size-1 depth and height
    ((3, 4, 3, 5), (2, 3, 2, 2, 3), dict(padding="same"), False),                      # unbatched; asymmetric "same"
    ((1, 3, 4, 3, 3), (3, 1, 3, 1, 2), dict(groups=3, padding="valid", dilation=(1, 2, 2)), False),
])
def test_conv3d(xs, ws, kw, backends):
    check_op(lambda x, w, b: nn.conv3d(x, w, b, **kw), lambda x, w, b: F.conv3d(x, w, b, **kw),
             normal(*xs), normal(*ws, seed=1), normal(ws[0], seed=2), backends=backends)


@pytest.mark.parametrize("xs, ws, kw, backends", [
    ((2, 4, 5), (4, 3, 3), dict(stride=2, padding=1, output_padding=1, groups=2), True),
    ((1, 2, 4), (2, 3, 2), dict(dilation=2, output_padding=1), False),  # output_padding < dilation, stride 1
    ((3, 1), (3, 2, 3), dict(stride=3), False),                         # unbatched, length 1
    ((1, 2, 6), (2, 1, 4), dict(stride=2, padding=2, groups=2), False),
])
def test_conv_transpose1d(xs, ws, kw, backends):
    check_op(lambda x, w, b: nn.conv_transpose1d(x, w, b, **kw), lambda x, w, b: F.conv_transpose1d(x, w, b, **kw),
             normal(*xs), normal(*ws, seed=1), normal(ws[1] * kw.get("groups", 1), seed=2), backends=backends)


# -- max and average pooling ----------------------------------------------------------------------


@pytest.mark.parametrize("xs, kw, backends", [
    ((2, 3, 7, 6), dict(kernel_size=3, stride=2, ceil_mode=True), True),   # the last windows hang off the edge
    ((1, 2, 5, 7), dict(kernel_size=(2, 3), stride=(2, 3), padding=(1, 1), ceil_mode=True), False),
    ((1, 2, 7, 6), dict(kernel_size=2, stride=1, dilation=(2, 3), padding=1), False),
    ((2, 5, 5), dict(kernel_size=3, stride=2, padding=1, dilation=2, ceil_mode=True), False),  # unbatched
    ((1, 2, 1, 5), dict(kernel_size=(1, 2)), False),                                         # size-1 height
])
@pytest.mark.parametrize("return_indices", [False, True])
def test_max_pool2d(xs, kw, backends, return_indices):
    kw = dict(kw, return_indices=return_indices)
    check_op(lambda x: nn.max_pool2d(x, **kw), lambda x: F.max_pool2d(x, **kw), normal(*xs),
             backends=backends and return_indices)


@pytest.mark.parametrize("xs, kw, backends", [
    ((2, 3, 8), dict(kernel_size=3, stride=2, ceil_mode=True, return_indices=True), True),
    ((1, 2, 7), dict(kernel_size=2, padding=1, dilation=3), False),
    ((3, 5), dict(kernel_size=4, stride=3, padding=2, ceil_mode=True, return_indices=True), False),  # unbatched
    ((1, 1, 1), dict(kernel_size=1), False),
])
def test_max_pool1d(xs, kw, backends):
    check_op(lambda x: nn.max_pool1d(x, **kw), lambda x: F.max_pool1d(x, **kw), normal(*xs), backends=backends)


@pytest.mark.parametrize("xs, kw, backends", [
    ((2, 3, 7, 6), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True), True),
    ((2, 3, 7, 6), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False), False),
    ((1, 2, 5, 5), dict(kernel_size=(2, 3), stride=(3, 2), padding=(1, 0), ceil_mode=True,
                        count_include_pad=False), False),
    ((1, 2, 5, 4), dict(kernel_size=2, padding=1, divisor_override=3), False),
    ((2, 4, 4), dict(kernel_size=2, stride=1, count_include_pad=False), False),  # unbatched, no padding
    ((1, 1, 1, 3), dict(kernel_size=(1, 3), ceil_mode=True), False),
])
def test_avg_pool2d(xs, kw, backends):
    check_op(lambda x: nn.avg_pool2d(x, **kw), lambda x: F.avg_pool2d(x, **kw), normal(*xs), backends=backends)


@pytest.mark.parametrize("xs, kw, backends", [
    ((2, 3, 8), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True), True),
    ((2, 3, 8), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False), False),
    ((3, 5), dict(kernel_size=2), False),
])
def test_avg_pool1d(xs, kw, backends):
    check_op(lambda x: nn.avg_pool1d(x, **kw), lambda x: F.avg_pool1d(x, **kw), normal(*xs), backends=backends)


# -- adaptive pooling -----------------------------------------------------------------------------


@pytest.mark.parametrize("xs, size, backends", [
    ((2, 3, 7), 3, True),    # overlapping windows
    ((2, 3, 8), 4, False),   # tiling windows
    ((3, 5), 1, False),      # unbatched, global
    ((1, 2, 1), 3, False),   # more outputs than inputs
])
def test_adaptive_pool1d(xs, size, backends):
    check_op(lambda x: nn.adaptive_avg_pool1d(x, size), lambda x: F.adaptive_avg_pool1d(x, size), normal(*xs),
             backends=backends)
    for indices in (False, True):
        check_op(lambda x: nn.adaptive_max_pool1d(x, size, indices), lambda x: F.adaptive_max_pool1d(x, size, indices),
                 normal(*xs, seed=3), backends=backends and indices)


def test_adaptive_avg_pool1d_of_a_transposed_input():
    """AdaptiveAvgPool1d over (N, L, C) -> (N, C, L), as a model writes it (no strided views needed)."""
    check_op(lambda x: nn.adaptive_avg_pool1d(gr.swapaxes(x, 1, 2), 2), lambda x: F.adaptive_avg_pool1d(x.transpose(1, 2), 2),
             normal(2, 5, 3), backends=False)


@pytest.mark.parametrize("xs, size", [((2, 3, 5, 7), (2, 3)), ((2, 4, 6), (2, None)), ((1, 1, 1, 3), (2, 2))])
def test_adaptive_max_pool2d_indices(xs, size):
    check_op(lambda x: nn.adaptive_max_pool2d(x, size, return_indices=True),
             lambda x: F.adaptive_max_pool2d(x, size, return_indices=True), normal(*xs), backends=xs[0] == 2)


# -- interpolate ----------------------------------------------------------------------------------


@pytest.mark.parametrize("xs, kw, backends", [
    ((2, 3, 5), dict(size=7), True),
    ((2, 3, 5), dict(scale_factor=1.7), False),
    ((1, 2, 7), dict(size=3), False),                          # downsampling
    ((1, 2, 4, 3), dict(size=(3, 7)), False),
    ((1, 2, 3, 3), dict(scale_factor=(2, 1 / 3)), False),      # 3 * (1/3) scale: a float32 rounding edge
    ((1, 2, 1, 2), dict(scale_factor=2.5), False),             # size-1 axis
    ((1, 2, 5, 4), dict(size=(7, 3), mode="nearest-exact"), False),
    ((1, 1, 2, 3, 2), dict(size=(3, 4, 5)), False),            # 3 spatial axes
])
def test_interpolate_nearest(xs, kw, backends):
    check_op(lambda x: nn.interpolate(x, **kw), lambda x: F.interpolate(x, **kw), normal(*xs), backends=backends)


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("xs, kw, backends", [
    ((2, 3, 4, 5), dict(size=(7, 3)), True),
    ((1, 2, 5, 3), dict(scale_factor=1.5), False),
    ((1, 2, 5, 3), dict(scale_factor=(0.6, 2.4)), False),
    ((1, 2, 5, 3), dict(scale_factor=1.5, recompute_scale_factor=True), False),
    ((1, 2, 1, 4), dict(size=(3, 1)), False),                   # size-1 input and output axes
    ((1, 2, 5, 3), dict(size=(5, 4)), False),                   # an unchanged axis is copied
])
def test_interpolate_bilinear(xs, kw, backends, align_corners):
    kw = dict(kw, mode="bilinear", align_corners=align_corners)
    check_op(lambda x: nn.interpolate(x, **kw), lambda x: F.interpolate(x, **kw), normal(*xs),
             backends=backends and align_corners)


@pytest.mark.parametrize("xs, kw", [
    ((2, 3, 5), dict(size=8, mode="linear")),
    ((2, 3, 5), dict(scale_factor=0.6, mode="linear", align_corners=True)),
    ((1, 1, 2, 3, 4), dict(size=(3, 2, 5), mode="trilinear")),
    ((1, 2, 5, 7), dict(size=(2, 3), mode="area")),
    ((1, 2, 7), dict(scale_factor=0.5, mode="area")),
])
def test_interpolate_other_modes(xs, kw):
    check_op(lambda x: nn.interpolate(x, **kw), lambda x: F.interpolate(x, **kw), normal(*xs), backends=False)


# -- pixel shuffles -------------------------------------------------------------------------------


@pytest.mark.parametrize("xs, r, backends", [((2, 8, 3, 2), 2, True), ((9, 1, 2), 3, False), ((2, 1, 4, 1, 3), 2, False)])
def test_pixel_shuffle(xs, r, backends):
    check_op(lambda x: nn.pixel_shuffle(x, r), lambda x: F.pixel_shuffle(x, r), normal(*xs), backends=backends)
    ys = (*xs[:-3], xs[-3] // (r * r), xs[-2] * r, xs[-1] * r)
    check_op(lambda x: nn.pixel_unshuffle(x, r), lambda x: F.pixel_unshuffle(x, r), normal(*ys), backends=backends)


# -- pad ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("xs, amounts, backends", [
    ((2, 3, 5), (2, 1), True),
    ((2, 3, 4, 5), (1, 3, 3, 0), False),
    ((1, 2, 3, 4, 3), (1, 2, 0, 1, 2, 1), False),
    ((2, 3, 4), (0, 0), False),
    ((1, 2, 6), (-1, 2), False),               # negative amounts crop first, as torch
    ((2, 3, 4, 5), (2, -1, -1, 1), False),
])
def test_pad_modes(xs, amounts, backends, mode):
    check_op(lambda x: nn.pad(x, amounts, mode), lambda x: F.pad(x, amounts, mode), normal(*xs),
             backends=backends and mode == "reflect")


@pytest.mark.parametrize("amounts, value", [((1, 2), None), ((2, 0, 1, 1), 1.5), ((-1, 2, 1, -2), -3.0),
                                            ((1, 1, 0, 0, 2, 0), 0.5)])
def test_pad_constant(amounts, value):
    check_op(lambda x: nn.pad(x, amounts, value=value), lambda x: F.pad(x, amounts, value=value), normal(2, 3, 4),
             backends=value == 1.5)


# -- embedding_bag --------------------------------------------------------------------------------

IDX_1D = np.array([3, 0, 5, 5, 1, 2, 6, 4, 0])
# torch has no forward-mode rule for embedding_bag: the oracle's JVP is central differences, good to ~1e-10
BAG_TOL = dict(rtol=1e-8, atol=1e-10)
OFFSETS = np.array([0, 2, 2, 5])  # bag 1 is empty; bag 1's repeated index 5 is a tie for max


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("layout", ["offsets", "last_offset", "2d", "padding_idx"])
def test_embedding_bag(mode, layout):
    kw = dict(mode=mode)
    if layout == "2d":
        idx, off = IDX_1D[:8].reshape(2, 4), None
    elif layout == "last_offset":
        idx, off, kw = IDX_1D, np.array([0, 2, 2, 5, 9]), dict(kw, include_last_offset=True)  # CSR: ends at 9
    else:
        idx, off = IDX_1D, OFFSETS
    if layout == "padding_idx":
        kw = dict(kw, padding_idx=5)   # bag 1 then has no entry (max and mean give zeros)
    check_op(lambda w: nn.embedding_bag(idx, w, off, **kw), lambda w: F.embedding_bag(
        torch_int(idx), w, None if off is None else torch_int(off), **kw), normal(7, 3), backends=mode != "mean", **BAG_TOL)


@pytest.mark.parametrize("two_d", [False, True])
def test_embedding_bag_per_sample_weights(two_d):
    idx, off = (IDX_1D[:8].reshape(4, 2), None) if two_d else (IDX_1D, OFFSETS)
    check_op(lambda w, p: nn.embedding_bag(idx, w, off, mode="sum", per_sample_weights=p, padding_idx=0),
             lambda w, p: F.embedding_bag(torch_int(idx), w, None if off is None else torch_int(off), mode="sum",
                                          per_sample_weights=p, padding_idx=0),
             normal(7, 3), normal(*idx.shape, seed=1), backends=two_d, **BAG_TOL)


def test_embedding_bag_traced_indices_and_offsets():
    """Indices and offsets that are program inputs (as in a captured model): the bags are found in the graph."""
    w = normal(7, 3)
    f = gr.compile(lambda w, i, o: nn.embedding_bag(i, w, o, mode="mean"))
    want = F.embedding_bag(torch_int(IDX_1D), torch.tensor(w), torch_int(OFFSETS), mode="mean").numpy()
    np.testing.assert_allclose(f(w, IDX_1D, OFFSETS), want, rtol=1e-12, atol=1e-14)


def torch_int(a):
    return torch.tensor(np.asarray(a, np.int64))


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("call, error, words", [
    (lambda: nn.conv3d(np.zeros((1, 2, 3, 3, 3)), np.zeros((2, 2, 4, 1, 1))), ShapeError, "does not fit"),
    (lambda: nn.conv3d(np.zeros((1, 2, 3, 3, 3)), np.zeros((2, 2, 1, 1))), ShapeError, "kd, kh, kw"),
    (lambda: nn.conv_transpose1d(np.zeros((1, 2, 3)), np.zeros((2, 2, 3)), stride=2, output_padding=2), ShapeError,
     "output_padding"),
    (lambda: nn.max_pool2d(np.zeros((1, 1, 4, 4)), 2, padding=2), ShapeError, "half the kernel"),
    (lambda: nn.avg_pool2d(np.zeros((1, 1, 4, 4)), 2, divisor_override=0), ShapeError, "divisor_override"),
    (lambda: nn.max_pool1d(np.zeros((1, 1, 4)), (2, 2)), ShapeError, "kernel_size"),
    (lambda: nn.adaptive_avg_pool1d(np.zeros((1, 1, 4)), (2, 2)), ShapeError, "output_size"),
    (lambda: nn.interpolate(np.zeros((1, 1, 4)), size=3, mode="bilinear"), ShapeError, "4-d"),
    (lambda: nn.interpolate(np.zeros((1, 1, 4)), size=3, align_corners=True), ShapeError, "align_corners"),
    (lambda: nn.interpolate(np.zeros((1, 1, 4)), size=3, scale_factor=2), ShapeError, "exactly one"),
    (lambda: nn.interpolate(np.zeros((1, 1, 4)), size=3, mode="bicubic"), UnsupportedOpError, "mode"),
    (lambda: nn.pixel_shuffle(np.zeros((1, 3, 2, 2)), 2), ShapeError, "pixel_shuffle"),
    (lambda: nn.pad(np.zeros((1, 2, 3)), (3, 0), mode="reflect"), ShapeError, "reflect"),
    (lambda: nn.pad(np.zeros((1, 2, 3)), (1,)), ShapeError, "even"),
    (lambda: nn.pad(np.zeros((1, 2, 3)), (1, 1), mode="replicate", value=1.0), ShapeError, "value"),
    (lambda: nn.embedding_bag(IDX_1D, np.zeros((7, 3)), OFFSETS, mode="mean", per_sample_weights=np.ones(9)),
     UnsupportedOpError, "per_sample_weights"),
    (lambda: nn.embedding_bag(IDX_1D, np.zeros((7, 3))), ShapeError, "offsets"),
    (lambda: nn.embedding_bag(IDX_1D, np.zeros((7, 3)), np.array([1, 4])), ShapeError, "start at 0"),
])
def test_errors_name_the_op_and_the_problem(call, error, words):
    with pytest.raises(error, match=words):
        call()


# -- second order ---------------------------------------------------------------------------------

W3 = normal(2, 2, 2, 1, 2, seed=5)


def bag_max_reference(w, idx, offsets):
    ends = [*offsets[1:], len(idx)]
    return torch.stack([w[torch_int(idx[a:b])].amax(0) if b > a else torch.zeros(w.shape[1], dtype=w.dtype)
                        for a, b in zip(offsets, ends)])


@pytest.mark.parametrize("ours, theirs, xs", [
    (lambda x: nn.conv3d(x, W3, stride=2, padding=1), lambda x: F.conv3d(x, torch.tensor(W3), stride=2, padding=1),
     (1, 2, 3, 4, 3)),
    (lambda x: nn.max_pool2d(x, 3, 2, 1, ceil_mode=True), lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), (1, 2, 6, 5)),
    (lambda x: nn.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
     lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), (2, 2, 6)),
    (lambda x: nn.interpolate(x, scale_factor=1.5, mode="bilinear"),
     lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear"), (1, 2, 3, 4)),
    (lambda x: nn.pad(x, (2, 1, 1, 2), "reflect"), lambda x: F.pad(x, (2, 1, 1, 2), "reflect"), (1, 2, 3, 4)),
    # torch has no double backward for embedding_bag: its reference here is the bags' amax, written out
    (lambda w: nn.embedding_bag(IDX_1D, w, OFFSETS, mode="max"), lambda w: bag_max_reference(w, IDX_1D, OFFSETS), (7, 3)),
])
def test_second_order(ours, theirs, xs):
    """Gradient of <grad <tanh(op(x)), c>, v> against torch's double backward: every rule used is itself
    differentiable."""
    x = normal(*xs, seed=4)
    c = normal(*np.shape(ours(x)), seed=6)
    v = normal(*xs, seed=7)
    got = gr.grad(lambda y: gr.sum(gr.grad(lambda z: gr.sum(gr.tanh(ours(z)) * c))(y) * v))(x)
    xt = torch.tensor(x, requires_grad=True)
    (g,) = torch.autograd.grad((torch.tanh(theirs(xt)) * torch.tensor(c)).sum(), xt, create_graph=True)
    (want,) = torch.autograd.grad((g * torch.tensor(v)).sum(), xt)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-9, atol=1e-11)
