"""Scans and order statistics: cumprod, cummax/cummin, logcumsumexp, diff; median, kthvalue, quantile;
the NaN-aware reductions nansum/nanmean and count_nonzero.

Primitives: `cumprod` (its rules exact with zeros in x, as torch's), `cumarg` (the index of the running
max/min, no gradient) and `logcumsumexp` (a stable running log-sum-exp, forward or from the end). The rest
are composites of cumsum, argsort and gathers: cummax's values are x gathered at its running argmax, an
order statistic is x gathered at an argsort's rank, so gradients flow to the selected elements.

A 0-d operand is read as a 1-d one of size 1 (axis 0 or -1), as torch does.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from gradir.core import dtypes
from gradir.core.errors import AxisError, DTypeError, ShapeError
from gradir.core.primitive import Primitive, register
from gradir.core.trace import bind, user_source
from gradir.ops.creation import full
from gradir.ops.elementwise import (
    equal,
    exp,
    greater,
    isfinite,
    less,
    log,
    logical_and,
    logical_or,
    not_equal,
    stop_gradient,
    where,
)
from gradir.ops.indexing import _take_along, argsort, take
from gradir.ops.lifting import astype, lift, lift_all, normalize_axes, normalize_axis
from gradir.ops.reductions import _sum_dtype, argmax
from gradir.ops.reductions import sum as sum_
from gradir.ops.shapes import broadcast_to, concatenate, reshape, slice_axis, squeeze, transpose
from gradir.ops.special import any as any_
from gradir.ops.special import as_inexact, isnan

__all__ = ["count_nonzero", "cummax", "cummin", "cumprod", "diff", "kthvalue", "logcumsumexp", "median", "nanmean", "nansum",
           "quantile"]


def _scan_infer(name, out_dtype=None):
    def infer(x, axis, **_attrs):
        if not 0 <= axis < len(x.shape):
            raise AxisError(f"axis {axis} out of range for a {len(x.shape)}-d value", op=name)
        if name != "cumprod" and dtypes.is_complex(x.dtype):
            raise DTypeError("complex values have no order", op=name)
        return tuple(x.shape), out_dtype(x.dtype) if out_dtype else x.dtype
    return infer


def _scan_operand(x, axis, op):
    """x and a non-negative axis; a 0-d x as shape (1,) (axis 0 or -1), with its original shape to restore."""
    x = lift(x)
    if x.ndim == 0:
        normalize_axes(axis, 0, op)  # 0 or -1
        return reshape(x, (1,)), 0, ()
    return x, normalize_axis(axis, x.ndim, op), None


def _restore(y, shape):
    return y if shape is None else reshape(y, shape)


def _rcumsum(v, axis):
    return bind("cumsum", v, axis=axis, reverse=True)


# -- cumprod ---------------------------------------------------------------------------------------
def _cumprod_parts(x, axis):
    """What cumprod's rules need to be exact with zeros: masks of the elements before the first zero, of
    the first and of the second zero; x with zeros as 1; the running product with the first zero left out
    (the partial of every later output in it), and with the first two left out."""
    zero = equal(x, 0)
    seen = bind("cumsum", astype(zero, dtypes.int64), axis=axis, reverse=False)  # zeros up to here
    first, second = logical_and(zero, equal(seen, 1)), logical_and(zero, equal(seen, 2))
    skip = bind("cumprod", where(first, 1.0, x), axis=axis)
    skip2 = bind("cumprod", where(logical_or(first, second), 1.0, x), axis=axis)
    return equal(seen, 0), first, second, where(zero, 1.0, x), skip, skip2


def _cumprod_vjp(g, y, x, axis):
    # dx_i = sum_{j >= i} g_j prod_{k <= j, k != i} x_k: before the first zero y_j / x_i; at it, the products
    # without it; after it, 0, written as (the first zero) * (the products without both) so that this rule's own
    # derivative, the second derivative, is exact too
    before, first, second, safe, skip, skip2 = _cumprod_parts(x, axis)
    x_first = broadcast_to(bind("sum", where(first, x, 0.0), axes=(axis,), keepdims=True), x.shape)
    after = where(second, x_first * _rcumsum(g * skip2, axis), x_first * _rcumsum(g * skip, axis) / safe)
    return [where(before, _rcumsum(g * y, axis) / safe, where(first, _rcumsum(g * skip, axis), after))]


def _cumprod_jvp(ts, y, x, axis):
    if ts[0] is None:
        return None
    before, first, _, safe, skip, _ = _cumprod_parts(x, axis)
    t_first = bind("sum", where(first, ts[0], 0.0), axes=(axis,), keepdims=True)
    cum = bind("cumsum", ts[0] / safe, axis=axis, reverse=False)
    return where(before, y * cum, broadcast_to(t_first, x.shape) * skip)


register(Primitive(
    "cumprod", ("x",), _scan_infer("cumprod", _sum_dtype), "np.cumprod(x, axis=axis)",
    vjp=_cumprod_vjp, jvp=_cumprod_jvp, kind="other", flops=lambda o, xs, at: math.prod(o.shape),
    doc="Inclusive running product along `axis`; its rules are exact with zeros in x."))


def cumprod(x, axis=None):
    """numpy.cumprod / torch.cumprod (over the flattened value when axis is None). The gradient is
    exact with zeros in x (each element's partial is the product of the others), as torch's."""
    x = lift(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    x, axis, shape = _scan_operand(x, axis, "cumprod")
    return _restore(bind("cumprod", x, axis=axis), shape)


# -- cummax / cummin -------------------------------------------------------------------------------
# the last index where x equals the running extreme (ties go to the later index, as torch; a NaN is an
# extreme that later NaNs replace and numbers do not, as torch)
register(Primitive(
    "cumarg", ("x",), _scan_infer("cumarg", lambda d: dtypes.int64),
    "(lambda _m: np.maximum.accumulate(np.where((x == _m) | (x != x), np.arange(x.shape[axis]).reshape("
    "(-1,) + (1,) * (x.ndim - axis - 1)), 0), axis=axis).astype(np.int64))("
    "(np.maximum if largest else np.minimum).accumulate(x, axis=axis))",
    differentiable=False, kind="other", flops=lambda o, xs, at: math.prod(o.shape),
    doc="Index of the running max (`largest`) or min along `axis`; ties and NaNs take the later index."))


def _cum_extreme(name, x, axis, largest):
    x, axis, shape = _scan_operand(x, axis, name)
    idx = bind("cumarg", x, axis=axis, largest=largest)
    return _restore(_take_along(x, idx, axis), shape), _restore(idx, shape)


def cummax(x, axis):
    """torch.cummax: the running maximum along `axis` and its int64 indices, as (values, indices).
    Ties take the later index and a NaN propagates, as torch; the gradient goes to the indexed element."""
    return _cum_extreme("cummax", x, axis, True)


def cummin(x, axis):
    """torch.cummin: the running minimum along `axis` and its int64 indices, as (values, indices)."""
    return _cum_extreme("cummin", x, axis, False)


# -- logcumsumexp ----------------------------------------------------------------------------------
def _log_parts(w, dtype):
    """log(w) where w > 0 and log(-w) where w < 0, each the lowest float elsewhere (so exp gives 0 with no
    inf - inf); the log reads 1 off its branch, so no 0 * inf in its own derivative."""
    lowest = float(ml_dtypes.finfo(dtype).min)
    pos, neg = greater(w, 0), less(w, 0)
    return (where(pos, log(where(pos, w, 1.0)), lowest), where(neg, log(where(neg, -w, 1.0)), lowest))


def _signed_scan(w, a, b, axis, reverse):
    """exp(b_j) * sum over the scan of w_i exp(a_i), split by the sign of w so each part is a stable
    logcumsumexp (torch's logcumsumexp backward)."""
    lp, ln = _log_parts(w, w.dtype)
    scan = [bind("logcumsumexp", v + a, axis=axis, reverse=reverse) for v in (lp, ln)]
    return exp(scan[0] + b) - exp(scan[1] + b)


def _lcse_infer(x, axis, reverse):
    if not dtypes.is_inexact(x.dtype) or dtypes.is_complex(x.dtype):
        raise DTypeError(f"needs a real floating value, got {dtypes.short(x.dtype)}", op="logcumsumexp")
    return _scan_infer("logcumsumexp")(x, axis)


register(Primitive(
    "logcumsumexp", ("x",), _lcse_infer,
    "np.flip(np.logaddexp.accumulate(np.flip(x, axis), axis=axis), axis) if reverse "
    "else np.logaddexp.accumulate(x, axis=axis)",
    # dx_i = sum_{j >= i} g_j exp(x_i - y_j); t_y_j = sum_{i <= j} t_i exp(x_i - y_j)
    vjp=lambda g, y, x, axis, reverse: [_signed_scan(g, -y, x, axis, not reverse)],
    jvp=lambda ts, y, x, axis, reverse: None if ts[0] is None else _signed_scan(ts[0], x, -y, axis, reverse),
    kind="other", flops=lambda o, xs, at: 4 * math.prod(o.shape),
    doc="log(cumsum(exp(x))) along `axis` (from the end when `reverse`), as a running logaddexp: stable."))


def logcumsumexp(x, axis):
    """torch.logcumsumexp: log(cumsum(exp(x), axis)), computed as a running logaddexp, so neither large
    nor very negative x overflow or underflow; the gradient is the softmax of each prefix."""
    x, axis, shape = _scan_operand(as_inexact(x), axis, "logcumsumexp")
    return _restore(bind("logcumsumexp", x, axis=axis, reverse=False), shape)


# -- diff ------------------------------------------------------------------------------------------
def _edge(v, x, axis, op):
    """prepend/append as NumPy: a scalar is spread over x's shape with length 1 along `axis`."""
    if v.ndim == 0:
        return broadcast_to(v, x.shape[:axis] + (1,) + x.shape[axis + 1:])
    if v.ndim != x.ndim:
        raise ShapeError(f"{op} has {v.ndim} dimensions, the value {x.ndim}", op="diff", source=user_source())
    return v


def diff(x, n=1, axis=-1, prepend=None, append=None):
    """numpy.diff / torch.diff: the n-th forward difference x[i+1] - x[i] along `axis` (bools: x[i+1] !=
    x[i]), after joining `prepend` and `append` (scalars or arrays) to x along that axis."""
    n = int(n)
    if n < 0:
        raise ShapeError(f"order n={n} must be non-negative", op="diff", source=user_source())
    given = [v for v in (prepend, append) if v is not None]
    x, *edges = lift_all(x, *given, op="diff") if given else [lift(x)]
    axis = normalize_axis(axis, x.ndim, "diff")
    if edges:
        pre = _edge(edges.pop(0), x, axis, "prepend") if prepend is not None else None
        post = _edge(edges.pop(0), x, axis, "append") if append is not None else None
        x = concatenate([v for v in (pre, x, post) if v is not None], axis)
    for _ in range(n):
        m = x.shape[axis]
        if m == 0:
            break
        hi, lo = slice_axis(x, axis, 1, m), slice_axis(x, axis, 0, m - 1)
        x = not_equal(hi, lo) if x.dtype == dtypes.bool_ else hi - lo
    return x


# -- order statistics ------------------------------------------------------------------------------
def _rank(x, k, axis, keepdims):
    """The k-th smallest element (0-based; stable order, NaNs last) along `axis` and its index."""
    idx = slice_axis(argsort(x, axis), axis, k, k + 1)
    vals = _take_along(x, idx, axis)
    return (vals, idx) if keepdims else (squeeze(vals, axis), squeeze(idx, axis))


def _ordered(x, axis, op):
    x, axis, shape = _scan_operand(x, axis, op)
    if dtypes.is_complex(x.dtype):
        raise DTypeError("complex values have no order", op=op, source=user_source())
    if x.shape[axis] == 0:
        raise ShapeError(f"axis {axis} of shape {tuple(x.shape)} is empty", op=op, source=user_source())
    return x, axis, shape


def median(x, axis=None, keepdims=False):
    """torch.median: the lower of the two middle values (NumPy's median averages them; for that use
    quantile(x, 0.5)). A NaN gives NaN, as torch.

    With axis None: the median of all elements, whose gradient is split evenly among the elements
    equal to it (as torch; an empty x gives NaN). With an axis: (values, indices) along it; the
    gradient goes to the indexed element (which of tied elements is unspecified, as torch's)."""
    x = lift(x)
    if axis is None:
        flat = reshape(x, (-1,))
        out_shape = (1,) * x.ndim if keepdims else ()
        if flat.shape[0] == 0:
            return full(out_shape, math.nan, x.dtype if dtypes.is_inexact(x.dtype) else dtypes.float64)
        v, _ = _rank(flat, (flat.shape[0] - 1) // 2, 0, False)
        if dtypes.is_inexact(x.dtype):
            v = stop_gradient(v)
            hit = equal(x, v)  # the cotangent is shared by every element equal to the median
            share = sum_(where(hit, x - v, 0.0)) / sum_(astype(hit, x.dtype))  # 0, with the gradient mask/count
            v = where(isfinite(v), v + share, v)  # (an infinite median: inf - inf would give NaN)
            v = where(any_(isnan(x)), math.nan, v)
        return reshape(v, out_shape)
    x, ax, shape = _ordered(x, axis, "median")
    vals, idx = _rank(x, (x.shape[ax] - 1) // 2, ax, True)
    if dtypes.is_inexact(x.dtype):  # torch: the first NaN and its index
        nan = isnan(x)
        idx = where(any_(nan, ax, True), argmax(nan, ax, True), idx)
        vals = _take_along(x, idx, ax)
    return _keep(vals, idx, ax, keepdims, shape)


def _keep(vals, idx, axis, keepdims, shape):
    if shape is not None:
        return reshape(vals, shape), reshape(idx, shape)
    return (vals, idx) if keepdims else (squeeze(vals, axis), squeeze(idx, axis))


def kthvalue(x, k, axis=-1, keepdims=False):
    """torch.kthvalue: the k-th smallest element (k from 1) along `axis` and its int64 index, as
    (values, indices); NaNs count as the largest. The gradient goes to the indexed element."""
    x, ax, shape = _ordered(x, axis, "kthvalue")
    k = int(k)
    if not 1 <= k <= x.shape[ax]:
        raise ShapeError(f"k={k} is out of range for an axis of size {x.shape[ax]}", op="kthvalue",
                         source=user_source())
    vals, idx = _rank(x, k - 1, ax, True)
    return _keep(vals, idx, ax, keepdims, shape)


_METHODS = ("linear", "lower", "higher", "nearest", "midpoint")


def quantile(x, q, axis=None, keepdims=False, method="linear"):
    """numpy.quantile / torch.quantile: the q-th quantiles (q a scalar or 1-d, in [0, 1]) along `axis`
    (of all elements when None). `method` (torch's `interpolation`): linear, lower, higher, nearest
    (half to even) or midpoint. A 1-d q adds a leading axis; a NaN gives NaN, as torch. Gradients
    flow to the two order statistics each quantile interpolates."""
    x = lift(x)
    if not dtypes.is_inexact(x.dtype) or dtypes.is_complex(x.dtype):
        raise DTypeError(f"needs a real floating value, got {dtypes.short(x.dtype)}", op="quantile",
                         source=user_source())
    if method not in _METHODS:
        raise ShapeError(f"method {method!r} is not one of {_METHODS}", op="quantile", source=user_source())
    qs = np.asarray(q, dtype=np.float64)
    if qs.ndim > 1 or not np.all((qs >= 0) & (qs <= 1)):
        raise ShapeError(f"q must be a scalar or 1-d with entries in [0, 1], got {q!r}", op="quantile",
                         source=user_source())
    ndim = x.ndim
    if axis is None:
        x, ax, shape = reshape(x, (-1,)), 0, None
    else:
        x, ax, shape = _scan_operand(x, axis, "quantile")
    n = x.shape[ax]
    if n == 0:
        raise ShapeError("needs a non-empty input (torch refuses one too)", op="quantile", source=user_source())
    s = _take_along(x, argsort(x, ax), ax)  # sort; NaNs last
    rank = qs.reshape(-1) * (n - 1)
    rank = {"lower": np.floor, "higher": np.ceil, "nearest": np.round}.get(method, lambda r: r)(rank)
    below, above = np.floor(rank).astype(np.int64), np.ceil(rank).astype(np.int64)
    weight = rank - below if method == "linear" else np.where(rank == below, 0.0, 0.5)
    lo = take(s, below, axis=ax)
    out = lo
    if method in ("linear", "midpoint") and np.any(weight):
        w = weight.reshape((1,) * ax + (-1,) + (1,) * (x.ndim - ax - 1))
        out = lo + (take(s, above, axis=ax) - lo) * w.astype(x.dtype)
    out = where(any_(isnan(x), ax, True), math.nan, out)
    out = transpose(out, (ax,) + tuple(i for i in range(out.ndim) if i != ax))  # the q axis first
    if axis is None:
        kept = (1,) * ndim if keepdims else ()
    elif shape is not None:  # a 0-d x
        kept = ()
    else:
        kept = tuple(1 if i == ax else d for i, d in enumerate(x.shape) if keepdims or i != ax)
    out = reshape(out, (rank.size,) + kept)
    return reshape(out, kept) if qs.ndim == 0 else out


# -- NaN-aware reductions and counting ---------------------------------------------------------------
def nansum(x, axis=None, keepdims=False):
    """numpy.nansum / torch.nansum: the sum with NaNs read as 0 (they get no gradient)."""
    x = lift(x)
    if dtypes.is_inexact(x.dtype):
        x = where(isnan(x), 0.0, x)
    return sum_(x, axis, keepdims)


def nanmean(x, axis=None, keepdims=False):
    """numpy.nanmean / torch.nanmean: the mean of the non-NaN elements (NaN where there are none)."""
    x = as_inexact(x)
    count = sum_(astype(equal(x, x), x.dtype), axis, keepdims)
    return nansum(x, axis, keepdims) / count


def count_nonzero(x, axis=None, keepdims=False):
    """numpy.count_nonzero / torch.count_nonzero: the number of nonzero elements (int64, no gradient)."""
    x = lift(x)
    return sum_(astype(not_equal(x, 0), dtypes.int64), axis, keepdims)
