"""Reductions: sum, max, min, argmax primitives; mean, var, logsumexp, prod-free composites."""

from __future__ import annotations

import builtins
import math

from gradir.core import dtypes
from gradir.core.errors import AxisError, ShapeError, UnsupportedOpError
from gradir.core.primitive import Primitive, register
from gradir.core.trace import bind, user_source
from gradir.ops.elementwise import _float_like, equal, exp, log, not_equal, sqrt, stop_gradient, where
from gradir.ops.elementwise import abs as abs_
from gradir.ops.lifting import astype, lift, normalize_axes
from gradir.ops.shapes import broadcast_to, expand_dims, reshape, squeeze

__all__ = ["argmax", "argmin", "cumsum", "logsumexp", "max", "mean", "min", "norm", "prod", "std", "sum", "var"]


def _reduced_shape(shape, axes, keepdims):
    if keepdims:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def _reduce_infer(name, out_dtype=None):
    def infer(x, axes, keepdims):
        if any(not 0 <= a < builtins.max(len(x.shape), 1) for a in axes):
            raise AxisError(f"axes {axes} out of range", op=name)
        if name in ("max", "min") and any(x.shape[a] == 0 for a in axes):
            # NumPy would fail only when the program runs; torch refuses too (no identity for max/min)
            raise ShapeError(f"cannot reduce an empty axis (axes {axes} of shape {tuple(x.shape)}): {name} has no "
                             "identity", op=name)
        return _reduced_shape(x.shape, axes, keepdims), (out_dtype(x.dtype) if out_dtype else x.dtype)
    return infer


def _sum_dtype(d):
    """NumPy sums bool and narrow integers in the platform integer (int64)."""
    return dtypes.int64 if d == dtypes.bool_ or dtypes.is_integer(d) else d


def _expand_back(g, x_shape, axes, keepdims):
    """Broadcast a reduction's cotangent back over the reduced axes."""
    if not keepdims:
        g = reshape(g, _reduced_shape(x_shape, axes, True))
    return broadcast_to(g, x_shape)


register(Primitive(
    "sum", ("x",), _reduce_infer("sum", _sum_dtype), "np.sum(x, axis=axes, keepdims=keepdims)",
    vjp=lambda g, o, x, axes, keepdims: [_expand_back(g, x.shape, axes, keepdims)],
    jvp=lambda ts, o, x, axes, keepdims: None if ts[0] is None else bind("sum", ts[0], axes=axes, keepdims=keepdims),
    kind="reduction"))


def _extremum_rule(name):
    """max/min send the cotangent to the extreme elements, split evenly among ties (as torch.amax)."""
    def mask(o, x, axes, keepdims):
        hit = _float_like(equal(x, _expand_back(o, x.shape, axes, keepdims)), x)
        count = bind("sum", hit, axes=axes, keepdims=True)
        return hit / count

    def vjp(g, o, x, axes, keepdims):
        return [_expand_back(g, x.shape, axes, keepdims) * mask(o, x, axes, keepdims)]

    def jvp(ts, o, x, axes, keepdims):
        return None if ts[0] is None else bind("sum", ts[0] * mask(o, x, axes, keepdims), axes=axes, keepdims=keepdims)
    return vjp, jvp


for _name in ("max", "min"):
    _v, _j = _extremum_rule(_name)
    register(Primitive(_name, ("x",), _reduce_infer(_name), f"np.{_name}(x, axis=axes, keepdims=keepdims)",
                       vjp=_v, jvp=_j, kind="reduction"))

def _arg_infer(name):
    def infer(x, axis):
        if not 0 <= axis < len(x.shape):
            raise AxisError(f"axis {axis} out of range for a {len(x.shape)}-d value", op=name)
        if x.shape[axis] == 0:
            raise AxisError(f"attempt to get {name} of an empty axis", op=name)
        return tuple(s for i, s in enumerate(x.shape) if i != axis), dtypes.int64
    return infer


for _name in ("argmax", "argmin"):
    register(Primitive(_name, ("x",), _arg_infer(_name), f"np.{_name}(x, axis=axis)", differentiable=False,
                       kind="reduction", doc=f"numpy.{_name} along one axis (the first index on ties)."))


def _reduce(name, x, axis, keepdims):
    x = lift(x)
    axes = normalize_axes(axis, x.ndim, name)
    if not axes:
        return astype(x, _sum_dtype(x.dtype)) if name in ("sum", "prod") else x
    return bind(name, x, axes=axes, keepdims=bool(keepdims))


def sum(x, axis=None, keepdims=False):
    """numpy.sum."""
    return _reduce("sum", x, axis, keepdims)


def max(x, axis=None, keepdims=False):
    """numpy.max (amax); the gradient is split evenly among tied maxima."""
    return _reduce("max", x, axis, keepdims)


def min(x, axis=None, keepdims=False):
    """numpy.min (amin)."""
    return _reduce("min", x, axis, keepdims)


def _arg(name, x, axis, keepdims):
    x = lift(x)
    if axis is None:
        out = bind(name, reshape(x, (-1,)), axis=0)
        return reshape(out, (1,) * x.ndim) if keepdims else out
    (ax,) = normalize_axes(axis, x.ndim, name) or (0,)
    if x.ndim == 0:
        raise AxisError(f"axis {axis} is out of range for a 0-d value", op=name, source=user_source())
    out = bind(name, x, axis=ax)
    return expand_dims(out, ax) if keepdims else out


def argmax(x, axis=None, keepdims=False):
    """numpy.argmax: index of the first maximum (over the flattened value when axis is None)."""
    return _arg("argmax", x, axis, keepdims)


def argmin(x, axis=None, keepdims=False):
    """numpy.argmin: index of the first minimum (over the flattened value when axis is None)."""
    return _arg("argmin", x, axis, keepdims)


def _count(x, axes) -> int:
    return math.prod(x.shape[a] for a in axes)


def mean(x, axis=None, keepdims=False):
    """numpy.mean (integers and bools average in float64)."""
    x = lift(x)
    axes = normalize_axes(axis, x.ndim, "mean")  # checked here so errors name the composite
    if not dtypes.is_inexact(x.dtype):
        x = astype(x, dtypes.float64)
    return sum(x, axes, keepdims) / _count(x, axes)


def var(x, axis=None, keepdims=False, ddof=0):
    """numpy.var with `ddof` (ddof=1: the unbiased estimate)."""
    x = lift(x)
    axes = normalize_axes(axis, x.ndim, "var")
    d = x - mean(x, axes, keepdims=True)
    return sum(d * d, axes, keepdims) / (_count(x, axes) - ddof)


def std(x, axis=None, keepdims=False, ddof=0):
    """numpy.std with `ddof`."""
    return sqrt(var(x, normalize_axes(axis, lift(x).ndim, "std"), keepdims, ddof))


def logsumexp(x, axis=None, keepdims=False):
    """log(sum(exp(x))) computed stably by shifting by the (non-differentiated) max."""
    x = lift(x)
    axis = normalize_axes(axis, x.ndim, "logsumexp")
    if any(x.shape[a] == 0 for a in axis):
        return sum(x, axis, keepdims) - math.inf  # log(0) over an empty axis, as torch (the max has no value)
    m = max(x, axis, keepdims=True)
    # an infinite max would give inf - inf = nan; shifting by 0 there yields -inf / inf as torch does
    m = stop_gradient(where(abs_(m) == math.inf, 0.0, m))
    out = log(sum(exp(x - m), axis, keepdims=True)) + m
    return out if keepdims else squeeze(out, normalize_axes(axis, x.ndim, "logsumexp")) if x.ndim else out



# -- prod ------------------------------------------------------------------------------------------
def _prod_partial(x, axes):
    """d prod / dx_i = the product of the other elements, right with zeros in x: with no zero it is
    P / x_i; with one zero only that element's is nonzero (the product of the rest); with more, all
    are 0. Written so that its own derivative is right too where at most one element is zero."""
    zero = equal(x, 0)
    nz = bind("sum", astype(zero, dtypes.int64), axes=axes, keepdims=True)
    safe = where(zero, 1.0, x)
    rest = bind("prod", safe, axes=axes, keepdims=True)  # the product of the nonzero elements
    # with one zero x_k, a nonzero x_i's partial is x_k * rest / x_i: 0, but its derivative in x_k is not
    x_zero = bind("sum", where(zero, x, 0.0), axes=axes, keepdims=True)
    one = where(zero, rest, x_zero * rest / safe)
    return where(equal(nz, 0), rest / safe, where(equal(nz, 1), one, 0.0))


register(Primitive(
    "prod", ("x",), _reduce_infer("prod", _sum_dtype), "np.prod(x, axis=axes, keepdims=keepdims)",
    vjp=lambda g, o, x, axes, keepdims: [_expand_back(g, x.shape, axes, keepdims) * _prod_partial(x, axes)],
    jvp=lambda ts, o, x, axes, keepdims: None if ts[0] is None else
    bind("sum", ts[0] * _prod_partial(x, axes), axes=axes, keepdims=keepdims),
    kind="reduction", doc="Product over `axes`."))


def prod(x, axis=None, keepdims=False):
    """numpy.prod; the gradient is exact with zeros in x (the product of the other elements)."""
    return _reduce("prod", x, axis, keepdims)


# -- cumsum ----------------------------------------------------------------------------------------
def _cumsum_infer(x, axis, reverse):
    if not 0 <= axis < len(x.shape):
        raise AxisError(f"axis {axis} out of range for a {len(x.shape)}-d value", op="cumsum")
    return tuple(x.shape), _sum_dtype(x.dtype)


register(Primitive(
    "cumsum", ("x",), _cumsum_infer, "_k.cumsum(x, axis, reverse)",
    # linear; its adjoint sums from the other end
    vjp=lambda g, o, x, axis, reverse: [bind("cumsum", g, axis=axis, reverse=not reverse)],
    jvp=lambda ts, o, x, axis, reverse: None if ts[0] is None else bind("cumsum", ts[0], axis=axis, reverse=reverse),
    kind="other", flops=lambda o, xs, at: math.prod(o.shape),
    doc="Inclusive running sum along `axis` (from the end when `reverse`)."))


def cumsum(x, axis=None):
    """numpy.cumsum (over the flattened value when axis is None)."""
    x = lift(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    if x.ndim == 0:
        raise AxisError("cumsum of a 0-d value needs axis=None", op="cumsum", source=user_source())
    (axis,) = normalize_axes(axis, x.ndim, "cumsum")
    return bind("cumsum", x, axis=axis, reverse=False)


# -- norm ------------------------------------------------------------------------------------------
def _safe_root(s, p):
    """s ** (1/p) whose derivative at s = 0 is 0, not inf (then 0 * inf = nan): torch's norms give a
    zero gradient at x = 0. The root is taken of 1 there and the result replaced by 0 ** (1/p): 0,
    or inf for p < 0 (where s = 0 only when every |x| is inf)."""
    zero = equal(s, 0)
    safe = where(zero, 1.0, s)
    return where(zero, 0.0 if p > 0 else math.inf, sqrt(safe) if p == 2 else safe ** (1.0 / p))


def norm(x, ord=2, axis=None, keepdims=False):
    """Vector norm over `axis` (all axes when None), as torch.linalg.vector_norm: ord 2 (default),
    1, inf, -inf, 0 (the count of nonzeros) or any other real p (sum(|x|**p)**(1/p)). The gradient
    at x = 0 is 0 (as torch), not nan."""
    x = lift(x)
    if not dtypes.is_inexact(x.dtype):
        x = astype(x, dtypes.float64)
    axes = normalize_axes(axis, x.ndim, "norm")
    if isinstance(ord, str) or not isinstance(ord, (int, float)) or ord != ord:
        raise UnsupportedOpError(f"ord must be a real number or inf, got {ord!r}", op="norm", source=user_source())
    a = abs_(x)
    if ord == math.inf:
        return max(a, axes, keepdims)
    if ord == -math.inf:
        return min(a, axes, keepdims)
    if ord == 0:
        return sum(stop_gradient(_float_like(a != 0, a)), axes, keepdims)
    if ord == 1:
        return sum(a, axes, keepdims)
    if ord == 2:
        return _safe_root(sum(a * a, axes, keepdims), 2)
    if ord < 1:
        # |x| ** p for p < 1 has an infinite derivative at x = 0 (and is inf for p < 0), which abs's zero
        # cotangent there turns into nan: raise 1 instead and put 0 ** p back. The gradient at 0 is then 0
        # (for p < 0 the sum is inf, the norm 0 and every gradient 0), as torch's
        nz = not_equal(a, 0)
        powered = where(nz, where(nz, a, 1.0) ** float(ord), 0.0 if ord > 0 else math.inf)
        return _safe_root(sum(powered, axes, keepdims), ord)
    return _safe_root(sum(a ** float(ord), axes, keepdims), ord)
