"""Ops the LLVM backend once left on the NumPy fallback, now compiled: each compared with the NumPy backend
(values, and gradients through gr.grad of a weighted sum) at edge shapes, and absent from the fallback listing."""

from __future__ import annotations

import re

import numpy as np
import pytest

import gradir as gr
from gradir.backends.llvm.gemm import host_shapes
from gradir.core.trace import bind

CUMSUM_CASES = [((3, 4, 5), 0), ((3, 4, 5), 1), ((3, 4, 5), 2), ((1,), 0), ((7,), 0), ((2, 1, 3), 1),
                ((0, 3), 0), ((3, 0), 1), ((0, 3), 1), ((4, 1), 0), ((33, 17), 0), ((5, 40), 1)]


def both(f, *args):
    return gr.compile(f, backend="numpy")(*args), gr.compile(f, backend="llvm")(*args)


def listing(f, *args) -> str:
    c = gr.compile(f, backend="llvm")
    c(*args)
    return c.source(*args).split("\n\n", 1)[0]


def data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 3).astype(dtype)


@pytest.mark.parametrize("shape,axis", CUMSUM_CASES)
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.bool_])
def test_cumsum_matches_numpy(shape, axis, reverse, dtype):
    x = data(shape, dtype)

    def f(x):
        return bind("cumsum", x, axis=axis, reverse=reverse) if reverse else gr.cumsum(x, axis=axis)
    ref, got = both(f, x)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    np.testing.assert_array_equal(got, ref)  # the same summation order: bit for bit


@pytest.mark.parametrize("shape,axis", CUMSUM_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cumsum_gradient_matches_numpy(shape, axis, dtype):
    x, w = data(shape, dtype), data(shape, dtype, seed=1)

    def loss(x):
        return gr.sum(gr.cumsum(gr.tanh(x), axis=axis) * w)
    ref, got = both(gr.grad(loss), x)
    np.testing.assert_allclose(got, ref, rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-4 if dtype == np.float32 else 1e-12)  # tanh (mathlib) differs by ulps


def test_cumsum_of_a_view_and_low_precision():
    x = data((6, 5), np.float64)
    ref, got = both(lambda x: gr.cumsum(gr.transpose(x)[1:, ::2], axis=1), x)
    np.testing.assert_array_equal(got, ref)
    h = data((9, 4), np.float16)
    ref, got = both(lambda h: gr.cumsum(h, axis=0), h)
    np.testing.assert_array_equal(got, ref)


def test_cumsum_leaves_the_fallback():
    x = data((4, 6), np.float32)

    def loss(x):
        return gr.sum(gr.cumsum(x * x, axis=1) * 0.5)
    text = listing(gr.grad(loss), x)
    assert "cumsum" in text and "scan loop along axis 1" in text and "(reverse)" in text
    assert "numpy" not in text.lower(), text


# -- unfold (im2col) and fold (col2im) ------------------------------------------------------------------

WINDOWS = [  # (N, C, H, W), kernel, stride, padding, dilation
    ((2, 3, 7, 6), (3, 2), (1, 1), (0, 0), (1, 1)),
    ((2, 3, 7, 6), (3, 3), (2, 1), (1, 2), (1, 1)),
    ((1, 1, 5, 5), (2, 2), (1, 1), (1, 1), (2, 2)),
    ((1, 2, 1, 1), (1, 1), (1, 1), (0, 0), (1, 1)),
    ((2, 1, 4, 9), (3, 2), (3, 2), (2, 1), (2, 3)),
    ((1, 1, 3, 3), (3, 3), (1, 1), (1, 1), (1, 1)),
    ((0, 2, 4, 4), (2, 2), (1, 1), (0, 0), (1, 1)),
    # many window offsets, windows partly or wholly in the padding (EfficientNet's AvgPool2d(320, ceil_mode) on a
    # 1x1 map once unrolled 102,400 windows and compiled for minutes)
    ((2, 3, 6, 5), (9, 8), (2, 3), (4, 3), (1, 1)),
    ((1, 2, 1, 1), (12, 12), (12, 12), (6, 6), (1, 1)),
    ((1, 1, 5, 4), (5, 14), (1, 1), (2, 6), (2, 1)),
    # stride-1 rows as whole masked vectors (index_kernels.whole_rows): a partial last vector; rows too long for it
    ((1, 2, 3, 33), (3, 3), (1, 1), (1, 1), (1, 1)),
    ((1, 1, 2, 200), (1, 3), (1, 1), (0, 1), (1, 1)),
]


@pytest.mark.parametrize("shape,kernel,stride,padding,dilation", WINDOWS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unfold_and_fold_match_numpy(shape, kernel, stride, padding, dilation, dtype):
    geometry = dict(stride=stride, padding=padding, dilation=dilation)
    x = data(shape, dtype)
    for value in (0.0, -np.inf):
        ref, got = both(lambda x: gr.nn.unfold(x, kernel, value=value, **geometry), x)
        assert got.dtype == ref.dtype and got.shape == ref.shape
        np.testing.assert_array_equal(got, ref)
    cols = data(ref.shape, dtype, seed=1)
    ref, got = both(lambda c: gr.nn.fold(c, shape[2:], kernel, **geometry), cols)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    np.testing.assert_array_equal(got, ref)  # the windows added in the reference's order

    def loss(x):
        return gr.sum(gr.nn.unfold(gr.tanh(x), kernel, **geometry) * cols)
    ref, got = both(gr.grad(loss), x)
    np.testing.assert_allclose(got, ref, rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-5 if dtype == np.float32 else 1e-12)

    def loss_fold(c):
        return gr.sum(gr.tanh(gr.nn.fold(c * c, shape[2:], kernel, **geometry)) * x)
    ref, got = both(gr.grad(loss_fold), cols)
    np.testing.assert_allclose(got, ref, rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-5 if dtype == np.float32 else 1e-12)


def test_conv_and_pool_steps_leave_the_fallback():
    x, w = data((2, 3, 8, 8), np.float32), data((4, 3, 3, 3), np.float32, seed=1)

    def loss(x, w):
        h = gr.nn.conv2d(x, w, stride=1, padding=1)
        return gr.sum(gr.nn.max_pool2d(gr.relu(h), 2) * 0.5)
    ref, got = both(gr.grad(loss, argnums=(0, 1)), x, w)
    for r, g in zip(ref, got):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)
    text = listing(gr.grad(loss, argnums=(0, 1)), x, w)
    assert "im2col gather loop" in text and "col2im scatter-add loop" in text
    assert "numpy" not in text.lower(), text


def test_stride_one_unfold_rows_are_whole_masked_vectors():
    """A stride-1 unfold's rows are copied as whole vectors, masked where the window lies in the padding (a loop
    over the part inside became a memcpy call per row); the padding holds `value` and the result is NumPy's."""
    if host_shapes() is None:
        pytest.skip("masked rows need AVX2 or AVX-512")
    x = data((2, 3, 8, 8), np.float32)
    f = lambda x: gr.nn.unfold(x, (3, 3), padding=(1, 1), value=-1.5)
    assert "llvm.masked.load" in gr.compile(f).executable(x).module_ir
    ref, got = both(f, x)
    np.testing.assert_array_equal(got, ref)
    # rows that are not contiguous (a transposed view, read in place) take the element loops
    ref, got = both(lambda x: gr.nn.unfold(gr.transpose(x, (0, 1, 3, 2)), (3, 2), padding=(1, 0)),
                    data((2, 3, 8, 7), np.float32))
    np.testing.assert_array_equal(got, ref)


def test_window_rows_are_loops_llvm_may_not_unroll():
    """A window's row of pixels is a short loop inside the loop over rows; unrolled whole, LLVM vectorized the
    rows with gathers and scatters (fold 10x slower than now). Its latch carries a self-referential loop ID
    asking for no unrolling (llvmlite writes none; emitter.module_text makes it), and LLVM accepts the module."""
    cols = data((2, 3, 3, 3, 8, 8), np.float32)
    f = gr.compile(lambda c: gr.nn.fold(c, (8, 8), (3, 3), padding=(1, 1)))
    ir_text = f.executable(cols).module_ir
    ids = re.findall(r"^(!\d+) = distinct !\{ (!\d+), (!\d+) \}", ir_text, flags=re.M)
    assert ids and all(own == first for own, first, _ in ids)
    assert '!"llvm.loop.unroll.disable"' in ir_text and "gradir.loop.id" not in ir_text
    np.testing.assert_array_equal(f(cols), gr.compile(lambda c: gr.nn.fold(c, (8, 8), (3, 3), padding=(1, 1)),
                                                      backend="numpy")(cols))


PLACEMENTS = {
    "concatenate of three": lambda x, y, z: gr.concatenate([x, y[..., :1], z[..., :5]], axis=-1) * 2.0,
    "two pads summed": lambda x, y, z: gr.pad(x, [(0, 0), (0, 0), (2, 7)]) + gr.pad(z, [(0, 0), (0, 0), (1, 7)]),
    "a slice written": lambda x, y, z: gr.slice_scatter(gr.tanh(z), x[..., :4], axis=2, start=3, end=7),
    "softmax over a concatenate": lambda x, y, z: gr.nn.softmax(gr.concatenate([x, z], axis=-1), axis=-1),
    "a strided slice written": lambda x, y, z: gr.slice_scatter(z, x[..., :3], axis=2, start=1, end=7, step=2),
}


@pytest.mark.parametrize("case", PLACEMENTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_placements_cut_their_innermost_loop_and_match_numpy(case, dtype):
    """A kernel placing operands along its innermost axis runs that loop in pieces where each operand is wholly in
    or out (conditional loads there were vectorized as gathers); values and gradients are the NumPy backend's.
    A strided placement keeps one loop with a condition per element."""
    f = PLACEMENTS[case]
    x, y, z = data((2, 3, 8), dtype, 1), data((2, 3, 2), dtype, 2), data((2, 3, 9), dtype, 3)
    loss = lambda x, y, z: gr.sum(f(x, y, z) * gr.arange(f(x, y, z).shape[-1], dtype=dtype))
    for fn in (f, gr.grad(loss, argnums=(0, 1, 2))):
        want, got = both(fn, x, y, z)
        for w, g in zip(*(v if isinstance(v, tuple) else (v,) for v in (want, got))):
            np.testing.assert_allclose(g, w, rtol=1e-6 if dtype == np.float32 else 1e-13, atol=1e-6)
    ir_text = gr.compile(f).executable(x, y, z).module_ir
    assert bool(re.search(r'"p0s\d+', ir_text)) == ("strided" not in case)
