"""Reductions: sum, max, min, argmax primitives; mean, var, logsumexp, prod-free composites."""

from __future__ import annotations

import builtins
import math

from gradir import dtypes
from gradir.errors import AxisError
from gradir.ops.elementwise import _float_like, equal, exp, log, stop_gradient
from gradir.ops.lifting import lift, normalize_axes
from gradir.ops.shapes import broadcast_to, reshape, squeeze
from gradir.primitive import Primitive, register
from gradir.trace import bind


def _reduced_shape(shape, axes, keepdims):
    if keepdims:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def _reduce_infer(name, out_dtype=None):
    def infer(x, axes, keepdims):
        if any(not 0 <= a < builtins.max(len(x.shape), 1) for a in axes):
            raise AxisError(f"axes {axes} out of range", op=name)
        return _reduced_shape(x.shape, axes, keepdims), (out_dtype or x.dtype)
    return infer


def _expand_back(g, x_shape, axes, keepdims):
    """Broadcast a reduction's cotangent back over the reduced axes."""
    if not keepdims:
        g = reshape(g, _reduced_shape(x_shape, axes, True))
    return broadcast_to(g, x_shape)


register(Primitive(
    "sum", ("x",), _reduce_infer("sum"), "np.sum(x, axis=axes, keepdims=keepdims)",
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

register(Primitive("argmax", ("x",), lambda x, axis: (tuple(s for i, s in enumerate(x.shape) if i != axis), dtypes.int64),
                   "np.argmax(x, axis=axis)", differentiable=False, kind="reduction"))


def _reduce(name, x, axis, keepdims):
    x = lift(x)
    axes = normalize_axes(axis, x.ndim, name)
    if not axes:
        return x
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


def argmax(x, axis=None):
    x = lift(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    return bind("argmax", x, axis=normalize_axes(axis, x.ndim, "argmax")[0])


def _count(x, axis) -> int:
    return math.prod(x.shape[a] for a in normalize_axes(axis, x.ndim, "mean"))


def mean(x, axis=None, keepdims=False):
    """numpy.mean."""
    x = lift(x)
    if not dtypes.is_inexact(x.dtype):
        x = x.astype(dtypes.float64)
    return sum(x, axis, keepdims) / _count(x, axis)


def var(x, axis=None, keepdims=False, ddof=0):
    """numpy.var with `ddof` (ddof=1: the unbiased estimate)."""
    x = lift(x)
    d = x - mean(x, axis, keepdims=True)
    return sum(d * d, axis, keepdims) / (_count(x, axis) - ddof)


def std(x, axis=None, keepdims=False, ddof=0):
    from gradir.ops.elementwise import sqrt

    return sqrt(var(x, axis, keepdims, ddof))


def logsumexp(x, axis=None, keepdims=False):
    """log(sum(exp(x))) computed stably by shifting by the (non-differentiated) max."""
    x = lift(x)
    m = stop_gradient(max(x, axis, keepdims=True))
    out = log(sum(exp(x - m), axis, keepdims=True)) + m
    return out if keepdims else squeeze(out, normalize_axes(axis, x.ndim, "logsumexp")) if x.ndim else out

