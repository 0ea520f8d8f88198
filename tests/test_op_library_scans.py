"""Scans and order statistics (issue 21): cumprod, cummax/cummin, logcumsumexp, diff, median, kthvalue,
quantile, nansum/nanmean, count_nonzero, each against torch autograd in float64 (value, VJP, JVP, LLVM
against NumPy) over non-trailing axes, 0-d, size-1 and empty inputs; second order against torch double
backward for the new primitives (cumprod with zeros, logcumsumexp)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_ops import check_second_order
from torch_oracle import check_op

import gradir as gr
from gradir.core.errors import AxisError, DTypeError, ShapeError


def normal(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def distinct(*shape, seed=0):
    """Values without ties (an order statistic's gradient at a tie depends on which element is picked)."""
    n = int(np.prod(shape))
    return np.random.default_rng(seed).permutation(n).reshape(shape) * 0.37 - 1.1


def with_zeros(x, *positions):
    x = np.array(x)
    for p in positions:
        x[p] = 0.0
    return x


def check_jvp_by_reverse(gfn, tfn, x, rtol=1e-10, atol=1e-12):
    """gr.jvp against torch's Jacobian built by reverse mode, times the tangent: for logcumsumexp over a wide
    range, where torch's forward-mode rule loses digits (and its double-backward trick gives NaN)."""
    t = np.random.default_rng(3).standard_normal(np.shape(x))
    _, got = gr.jvp(gfn, (x,), (t,))
    jac = torch.autograd.functional.jacobian(tfn, torch.tensor(x)).numpy().reshape(np.size(got), np.size(x))
    np.testing.assert_allclose(got, (jac @ t.reshape(-1)).reshape(np.shape(got)), rtol=rtol, atol=atol)


# -- cumprod ---------------------------------------------------------------------------------------
CUMPROD = [  # (x, axis): zeros first, repeated, last; non-trailing axes; 0-d, size-1, empty
    (normal(5), 0),
    (with_zeros(normal(3, 4), (1, 1), (2, 0), (2, 2), (0, 3)), 0),
    (with_zeros(normal(3, 5), (0, 0), (1, 2), (1, 3), (2, 4)), 1),
    (with_zeros(normal(2, 3, 4), (0, 1, 2), (1, 0, 0)), 1),
    (np.array(1.7), 0),
    (np.array(0.0), -1),
    (normal(1, 4), 0),
    (np.zeros((0, 3)), 0),
    (np.zeros((3, 0)), 1),
]


@pytest.mark.parametrize("x, axis", CUMPROD)
def test_cumprod(x, axis):
    check_op(lambda a: gr.cumprod(a, axis), lambda a: torch.cumprod(a, axis), x)


def test_cumprod_flattens_without_axis_and_keeps_integers():
    x = normal(2, 3)
    check_op(lambda a: gr.cumprod(a), lambda a: torch.cumprod(a.reshape(-1), 0), x)
    got = gr.cumprod(np.array([[1, 2], [3, 4]], np.int32), 1)
    np.testing.assert_array_equal(got, np.cumprod(np.array([[1, 2], [3, 4]]), 1))
    assert got.dtype == np.int64


@pytest.mark.parametrize("zeros", [(), (2,), (0,), (5,), (2, 4), (0, 1), (1, 3, 4), (1, 2, 3, 5)])
def test_cumprod_second_order_with_zeros(zeros):
    """The VJP rule's own derivative is exact with any number of zeros (torch's double backward is)."""
    x = with_zeros(normal(6, seed=len(zeros)), *zeros)
    check_second_order(lambda a: gr.cumprod(a, 0), lambda a: torch.cumprod(a, 0), x, np.random.default_rng(5))


def test_cumprod_second_order_non_trailing_axis():
    x = with_zeros(normal(4, 3), (1, 0), (2, 0), (0, 2))
    check_second_order(lambda a: gr.cumprod(a, 0), lambda a: torch.cumprod(a, 0), x, np.random.default_rng(6))


# -- cummax / cummin -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["cummax", "cummin"])
@pytest.mark.parametrize("x, axis", [(normal(3, 4), 0), (normal(3, 4), 1), (normal(2, 3, 4), -2),
                                     (np.array(0.3), 0), (normal(1, 3), 0)])
def test_cummax_cummin(name, x, axis):
    check_op(lambda a: getattr(gr, name)(a, axis), lambda a: tuple(getattr(torch, name)(a, axis)), x)


@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_cummax_cummin_empty(name):
    # (torch's backward of an empty cummax returns a tensor that still requires grad, which the oracle cannot read)
    values, indices = getattr(gr, name)(np.zeros((0, 2)), 0)
    assert values.shape == indices.shape == (0, 2) and indices.dtype == np.int64
    assert gr.grad(lambda a: gr.sum(getattr(gr, name)(a, 1)[0]))(np.zeros((2, 0))).shape == (2, 0)


@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_cummax_cummin_ties_take_the_later_index(name):
    # ties: torch's index is the later one, and the gradient goes to the indexed element
    x = np.array([[1.0, 1.0, 3.0, 3.0, 2.0, 0.0, 0.0], [2.0, 2.0, 2.0, -1.0, 5.0, -1.0, 5.0]])
    check_op(lambda a: getattr(gr, name)(a, 1), lambda a: tuple(getattr(torch, name)(a, 1)), x)


@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_cummax_cummin_nan_propagates_as_torch(name):
    x = np.array([1.0, np.nan, 3.0, np.nan, -2.0])
    values, indices = getattr(gr, name)(x, 0)
    want = getattr(torch, name)(torch.tensor(x), 0)
    np.testing.assert_array_equal(values, want.values.numpy())
    np.testing.assert_array_equal(indices, want.indices.numpy())


def test_cummax_integers():
    x = np.array([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])
    values, indices = gr.cummax(x, 1)
    want = torch.cummax(torch.tensor(x), 1)
    np.testing.assert_array_equal(values, want.values.numpy())
    np.testing.assert_array_equal(indices, want.indices.numpy())


# -- logcumsumexp ----------------------------------------------------------------------------------
@pytest.mark.parametrize("x, axis", [(normal(3, 4), 0), (normal(3, 4), -1), (normal(2, 3, 2), 1),
                                     (np.array(-0.4), 0), (normal(1, 3), 0), (np.zeros((0, 2)), 0),
                                     (np.zeros((2, 0)), 1)])
def test_logcumsumexp(x, axis):
    # (torch's forward mode fails on an empty input: its JVP is checked only where there is one)
    check_op(lambda a: gr.logcumsumexp(a, axis), lambda a: torch.logcumsumexp(a, axis), x, jvp=x.size > 0)


def test_logcumsumexp_is_stable_over_a_wide_range():
    # exp overflows (1000) and underflows (-1000) here; torch's forward-mode rule loses digits on such inputs,
    # so the JVP is checked against torch's reverse mode
    x = np.array([[-1000.0, 0.0, 1000.0, 999.0, -5.0], [700.0, -700.0, 3.0, 710.0, 710.0]])
    check_op(lambda a: gr.logcumsumexp(a, 1), lambda a: torch.logcumsumexp(a, 1), x, jvp=False)
    check_op(lambda a: gr.logcumsumexp(a, 0), lambda a: torch.logcumsumexp(a, 0), x * 0.05, jvp=False)
    check_jvp_by_reverse(lambda a: gr.logcumsumexp(a, 1), lambda a: torch.logcumsumexp(a, 1), x)
    assert np.all(np.isfinite(gr.grad(lambda a: gr.sum(gr.logcumsumexp(a, 1)))(x)))


def test_logcumsumexp_second_order():
    check_second_order(lambda a: gr.logcumsumexp(a, 0), lambda a: torch.logcumsumexp(a, 0), normal(6) * 3,
                       np.random.default_rng(2))


def test_logcumsumexp_of_integers_is_float():
    got = gr.logcumsumexp(np.array([0, 1, 2]), 0)
    np.testing.assert_allclose(got, np.logaddexp.accumulate(np.array([0.0, 1.0, 2.0])))


# -- diff ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, axis", [(1, -1), (2, 0), (3, 1), (0, 0), (5, 0)])
def test_diff(n, axis):
    check_op(lambda a: gr.diff(a, n, axis), lambda a: torch.diff(a, n, axis), normal(4, 3, 2))


def test_diff_prepend_append():
    x, pre, post = normal(3, 4), normal(3, 1, seed=1), normal(3, 2, seed=2)
    check_op(lambda a, p, q: gr.diff(a, 2, 1, prepend=p, append=q),
             lambda a, p, q: torch.diff(a, 2, 1, prepend=p, append=q), x, pre, post)
    # a scalar is spread over the other axes, as NumPy
    np.testing.assert_allclose(gr.diff(x, 1, 0, prepend=0.5), np.diff(x, 1, 0, prepend=0.5))


def test_diff_of_bools_and_empty():
    b = np.array([True, False, False, True])
    np.testing.assert_array_equal(gr.diff(b), torch.diff(torch.tensor(b)).numpy())
    assert gr.diff(np.zeros((0, 3)), 1, 0).shape == (0, 3)
    with pytest.raises(AxisError):
        gr.diff(np.array(1.0))


# -- median / kthvalue -------------------------------------------------------------------------------
@pytest.mark.parametrize("x", [distinct(7), distinct(3, 4), distinct(2, 2), np.array(0.8), distinct(1)])
def test_median_of_all(x):
    check_op(lambda a: gr.median(a), lambda a: torch.median(a), x)


def test_median_of_all_splits_the_gradient_among_ties():
    # torch.median() without dim: the cotangent is shared evenly by every element equal to the median
    x = np.array([3.0, 1.0, 1.0, 1.0, 2.0, 0.5])
    check_op(lambda a: gr.median(a), lambda a: torch.median(a), x)
    np.testing.assert_allclose(gr.grad(gr.median)(x), [0, 1 / 3, 1 / 3, 1 / 3, 0, 0])


@pytest.mark.parametrize("x, axis, keep", [(distinct(3, 4), 0, False), (distinct(3, 4), 1, True),
                                           (distinct(2, 4, 3), -2, False), (np.array(0.8), 0, False),
                                           (distinct(1, 3), 0, True), (np.zeros((0, 3)), 1, False)])
def test_median_along_an_axis(x, axis, keep):
    check_op(lambda a: gr.median(a, axis, keepdims=keep), lambda a: tuple(torch.median(a, axis, keep)), x)


def test_median_nan_and_empty_as_torch():
    x = np.array([[3.0, np.nan, 1.0, np.nan, 2.0], [1.0, 4.0, 2.0, 5.0, 3.0]])
    assert np.isnan(gr.median(x))
    values, indices = gr.median(x, 1)
    want = torch.median(torch.tensor(x), 1)
    np.testing.assert_array_equal(values, want.values.numpy())
    np.testing.assert_array_equal(indices, want.indices.numpy())
    assert np.isnan(gr.median(np.zeros(0)))
    with pytest.raises(ShapeError):
        gr.median(np.zeros((2, 0)), 1)


@pytest.mark.parametrize("k, axis, keep", [(1, 0, False), (3, 0, True), (2, -1, False), (4, 1, False)])
def test_kthvalue(k, axis, keep):
    check_op(lambda a: gr.kthvalue(a, k, axis, keep), lambda a: tuple(torch.kthvalue(a, k, axis, keep)),
             distinct(3, 4))


def test_kthvalue_0d_nan_and_errors():
    check_op(lambda a: gr.kthvalue(a, 1, 0), lambda a: tuple(torch.kthvalue(a, 1, 0)), np.array(2.5))
    x = np.array([3.0, np.nan, 1.0, 2.0])  # NaN counts as the largest
    for k in (1, 4):
        got, want = gr.kthvalue(x, k), torch.kthvalue(torch.tensor(x), k)
        np.testing.assert_array_equal(got[0], want.values.numpy())
        np.testing.assert_array_equal(got[1], want.indices.numpy())
    with pytest.raises(ShapeError):
        gr.kthvalue(x, 5)
    with pytest.raises(ShapeError):
        gr.kthvalue(x, 0)


# -- quantile ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("q", [0.3, 0.0, 1.0, np.array([0.1, 0.5, 0.9]), np.array([0.25])])
@pytest.mark.parametrize("axis, keep", [(None, False), (0, False), (-1, True), (None, True)])
def test_quantile(q, axis, keep):
    check_op(lambda a: gr.quantile(a, q, axis, keep),
             lambda a: torch.quantile(a, torch.tensor(q, dtype=torch.float64), axis, keep), distinct(3, 5))


@pytest.mark.parametrize("method", ["linear", "lower", "higher", "nearest", "midpoint"])
def test_quantile_methods(method):
    q = np.array([0.0, 0.1, 0.125, 0.5, 0.625, 0.7, 1.0])  # ranks on and between the order statistics, halves
    check_op(lambda a: gr.quantile(a, q, 1, method=method),
             lambda a: torch.quantile(a, torch.tensor(q, dtype=torch.float64), 1, interpolation=method), distinct(2, 9))


def test_quantile_edges():
    check_op(lambda a: gr.quantile(a, 0.4, 0), lambda a: torch.quantile(a, 0.4, 0), np.array(1.5))
    check_op(lambda a: gr.quantile(a, [0.2, 0.8], 1), lambda a: torch.quantile(a, torch.tensor([0.2, 0.8],
             dtype=torch.float64), 1), distinct(3, 1))
    x = np.array([1.0, np.nan, 2.0])
    assert np.isnan(gr.quantile(x, 0.5)) and torch.quantile(torch.tensor(x), 0.5).isnan()
    np.testing.assert_allclose(gr.quantile(np.arange(5.0), 0.3), np.quantile(np.arange(5.0), 0.3))
    with pytest.raises(ShapeError):
        gr.quantile(np.arange(3.0), 1.5)
    with pytest.raises(ShapeError):
        gr.quantile(np.zeros(0), 0.5)
    with pytest.raises(DTypeError):
        gr.quantile(np.arange(3), 0.5)


# -- nansum / nanmean / count_nonzero ----------------------------------------------------------------
def with_nans():
    x = normal(3, 4)
    x[0, 1] = x[2, 3] = x[2, 0] = np.nan
    return x


@pytest.mark.parametrize("axis, keep", [(None, False), (0, False), (1, True), ((0, 1), False)])
def test_nansum_nanmean(axis, keep):
    check_op(lambda a: gr.nansum(a, axis, keep), lambda a: torch.nansum(a, axis, keep), with_nans())
    check_op(lambda a: gr.nanmean(a, axis, keep), lambda a: torch.nanmean(a, axis, keep), with_nans())


def test_nansum_nanmean_edges():
    check_op(gr.nansum, torch.nansum, np.array(np.nan))
    # an all-NaN column: NaN, as torch; its elements get a zero cotangent (torch's is NaN there: 0/0)
    x = np.array([[np.nan, 1.0], [np.nan, 3.0]])
    with np.errstate(invalid="ignore"):  # 0/0, evaluated eagerly
        np.testing.assert_array_equal(gr.nanmean(x, 0), torch.nanmean(torch.tensor(x), 0).numpy())
    np.testing.assert_array_equal(gr.grad(lambda a: gr.sum(gr.nanmean(a, 0)))(x), [[0, 0.5], [0, 0.5]])
    check_op(lambda a: gr.nansum(a, 0), lambda a: torch.nansum(a, 0), np.zeros((0, 2)))
    np.testing.assert_array_equal(gr.nansum(np.array([[1, 2], [3, 4]]), 1), [3, 7])


@pytest.mark.parametrize("axis, keep", [(None, False), (0, False), (1, True), ((0, 1), True)])
def test_count_nonzero(axis, keep):
    x = np.array([[0.0, 1.5, -2.0], [0.0, 0.0, 3.0]])
    got = gr.count_nonzero(x, axis, keep)
    np.testing.assert_array_equal(got, np.count_nonzero(x, axis, keepdims=keep))
    assert np.asarray(got).dtype == np.int64
    if not keep:
        np.testing.assert_array_equal(got, torch.count_nonzero(torch.tensor(x), axis).numpy())


# -- traced and errors ------------------------------------------------------------------------------
def test_ops_trace_and_name_their_errors():
    g = gr.trace(lambda a: gr.cumprod(a, 0) + gr.cummax(a, 0)[0] + gr.logcumsumexp(a, 0), normal(3))
    assert {"cumprod", "cumarg", "logcumsumexp"} <= {n.op for n in g.nodes}
    with pytest.raises(AxisError, match="cumprod"):
        gr.cumprod(normal(3), 1)
    with pytest.raises(AxisError, match="cummax"):
        gr.cummax(np.array(1.0), 1)
    with pytest.raises(ShapeError, match="median"):
        gr.median(np.zeros((0, 2)), 0)
