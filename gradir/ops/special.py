"""The elementwise math beyond elementwise.py (issue 21): copies and filled arrays, truth reductions and NaN tests,
torch's fused arithmetic (lerp, addcmul, addcdiv), exponentials and logarithms in other bases, the inverse and
hyperbolic trigonometric functions, C-style rounding and remainders, and the scipy.special family (erfc, erfinv,
lgamma, digamma, polygamma, xlogy, logit).

NumPy names throughout, with torch's spelling as an alias where users expect it (`atan2 = arctan2`, `clone = copy`).
An op is a composite of existing primitives where one short formula is accurate over the whole range (they get
every backend and fusion for free): sinh and cosh from expm1, arctanh from log1p, logaddexp with the max shift,
trunc from floor/ceil, exp2 from power. The others are primitives with a NumPy/SciPy reference, each partial
written with gradir ops so that second derivatives work (lgamma' = digamma, digamma' = polygamma(1, .),
polygamma(n, .)' = polygamma(n + 1, .)). SciPy computes half precision in float32 or float64, so its templates
cast the result back to the operand's dtype.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from gradir.core import dtypes
from gradir.core.errors import DTypeError, UnsupportedOpError
from gradir.core.trace import bind, user_source
from gradir.ops.creation import full
from gradir.ops.elementwise import (
    FLOAT,
    NUMERIC,
    abs,
    binary,
    ceil,
    clip,
    equal,
    exp,
    expm1,
    floor,
    greater,
    less,
    less_equal,
    log,
    log1p,
    logical_and,
    maximum,
    not_equal,
    power,
    rsqrt,
    subtract,
    unary,
    where,
)
from gradir.ops.lifting import astype, lift, lift_all, normalize_axes, to_numpy
from gradir.ops.reductions import sum as sum_

__all__ = ["acos", "acosh", "addcdiv", "addcmul", "all", "any", "arccos", "arccosh", "arcsin", "arcsinh", "arctan", "arctan2",
           "arctanh", "asin", "asinh", "atan", "atan2", "atanh", "clone", "copy", "cosh", "digamma", "erfc", "erfinv", "exp2",
           "floor_divide", "fmod", "full_like", "isinf", "isnan", "lerp", "lgamma", "log10", "log2", "logaddexp", "logit",
           "nan_to_num", "ones_like", "polygamma", "sinh", "trunc", "xlogy", "zeros_like"]

_LN2, _LN10 = math.log(2.0), math.log(10.0)


def as_inexact(x):
    """x lifted, integers and bools cast to float64 (as NumPy's math functions do); scans and gr.linalg use it too."""
    x = lift(x)
    return x if dtypes.is_inexact(x.dtype) else astype(x, dtypes.float64)


def _inexact_all(*xs, op: str):
    """Operands promoted to one dtype (Python scalars weakly typed), then to float64 if not inexact."""
    xs = lift_all(*xs, op=op)
    return xs if dtypes.is_inexact(xs[0].dtype) else [astype(x, dtypes.float64) for x in xs]


# -- copies and filled arrays ----------------------------------------------------------------------------------
def copy(x):
    """numpy.copy (torch's `clone`): a new value equal to x; the gradient passes through unchanged. Inside a trace it
    is a node of its own, so an in-place write to the copy leaves x as it was."""
    x = lift(x)
    if isinstance(x, np.ndarray):  # a concrete array: a real copy (the node's NumPy reference is a view)
        return x.copy()
    return bind("reshape", x, shape=tuple(x.shape))  # the identity node Tensor.clone and in-place rebinding use


clone = copy


def _shape_dtype(a):
    if not hasattr(a, "shape") or not hasattr(a, "dtype"):  # Python scalars, lists, torch tensors
        a = np.asarray(to_numpy(a))
    return tuple(a.shape), a.dtype


def full_like(a, fill_value, dtype=None):
    """numpy.full_like: an array of a's shape filled with `fill_value`, in a's dtype unless `dtype` is given (the
    value cast to it, as NumPy). A constant: no gradient reaches `a`."""
    shape, dt = _shape_dtype(a)
    return full(shape, fill_value, dt if dtype is None else dtype)


def zeros_like(a, dtype=None):
    """numpy.zeros_like: zeros of a's shape, in a's dtype unless `dtype` is given."""
    return full_like(a, 0, dtype)


def ones_like(a, dtype=None):
    """numpy.ones_like: ones of a's shape, in a's dtype unless `dtype` is given."""
    return full_like(a, 1, dtype)


# -- truth reductions and NaN tests ---------------------------------------------------------------------------
def _count(x, axis, keepdims, op, nonzero: bool):
    """How many elements over `axis` are nonzero (or zero), as int64. NaN is nonzero (truthy), as in NumPy; an empty
    axis counts 0, so `any` is False and `all` True there."""
    x = lift(x)
    axes = normalize_axes(axis, x.ndim, op)
    zero = False if x.dtype == dtypes.bool_ else 0
    hit = not_equal(x, zero) if nonzero else equal(x, zero)
    return sum_(astype(hit, dtypes.int64), axes, keepdims)


def any(x, axis=None, keepdims=False):
    """numpy.any (torch.any): whether any element over `axis` (all axes when None) is nonzero; a bool result."""
    return greater(_count(x, axis, keepdims, "any", nonzero=True), 0)


def all(x, axis=None, keepdims=False):
    """numpy.all (torch.all): whether every element over `axis` (all axes when None) is nonzero; a bool result."""
    return equal(_count(x, axis, keepdims, "all", nonzero=False), 0)


def isnan(x):
    """numpy.isnan (bool result): x != x, true only for NaN; integers and bools are never NaN."""
    x = lift(x)
    return not_equal(x, x)


def isinf(x):
    """numpy.isinf (bool result): |x| == inf (for complex x, either part infinite); integers are never infinite."""
    x = lift(x)
    if not dtypes.is_inexact(x.dtype):
        return not_equal(x, x)  # all False, in x's shape
    return equal(abs(x), math.inf)


def nan_to_num(x, nan=0.0, posinf=None, neginf=None):
    """torch.nan_to_num / numpy.nan_to_num: NaN replaced by `nan`, +inf by `posinf` and -inf by `neginf` (by default
    the largest and the most negative finite value of x's dtype). Integers pass unchanged. The gradient is x's
    where x is finite and zero where a value was replaced, as torch."""
    x = lift(x)
    if not dtypes.is_inexact(x.dtype):
        return x
    if dtypes.is_complex(x.dtype):
        raise DTypeError("complex values are not supported (apply it to the real and imaginary parts)",
                         op="nan_to_num", source=user_source())
    info = ml_dtypes.finfo(x.dtype)
    big = float(info.max) if posinf is None else posinf
    small = float(info.min) if neginf is None else neginf
    y = where(equal(x, math.inf), big, where(equal(x, -math.inf), small, x))
    return where(not_equal(x, x), nan, y)


# -- torch's fused arithmetic -----------------------------------------------------------------------------------
def lerp(start, end, weight):
    """torch.lerp: start + weight * (end - start), with `weight` a scalar or an array (broadcast, differentiable).
    Computed as torch does, from the nearer end (end - (end - start) * (1 - weight) for |weight| >= 1/2), so
    weight = 1 gives `end` exactly."""
    start, end, weight = _inexact_all(start, end, weight, op="lerp")
    diff = end - start
    return where(less(abs(weight), 0.5), start + weight * diff, end - diff * (1 - weight))


def addcmul(input, tensor1, tensor2, *, value=1):
    """torch.addcmul: input + value * tensor1 * tensor2 (all broadcast)."""
    input, tensor1, tensor2 = lift_all(input, tensor1, tensor2, op="addcmul")
    return input + (tensor1 * tensor2 if value == 1 else value * tensor1 * tensor2)


def addcdiv(input, tensor1, tensor2, *, value=1):
    """torch.addcdiv: input + value * tensor1 / tensor2 (all broadcast)."""
    input, tensor1, tensor2 = _inexact_all(input, tensor1, tensor2, op="addcdiv")
    return input + (tensor1 / tensor2 if value == 1 else value * tensor1 / tensor2)


# -- exponentials and logarithms ---------------------------------------------------------------------------------
log2 = unary("log2", "np.log2(x)", lambda t, y, x: t / (x * _LN2), flops=10,
             doc="Base-2 logarithm, as numpy.log2 (exact at powers of two, where log(x)/log(2) is not).")
log10 = unary("log10", "np.log10(x)", lambda t, y, x: t / (x * _LN10), flops=10,
              doc="Base-10 logarithm, as numpy.log10 (exact at powers of ten).")


def exp2(x):
    """2 ** x, as numpy.exp2 (through `power`, exact at integers, where exp(x * log(2)) is not)."""
    return power(2.0, as_inexact(x))


def logaddexp(x, y):
    """numpy.logaddexp: log(exp(x) + exp(y)) without overflow, as max(x, y) + log1p(exp(-|x - y|)). Equal
    infinities give that infinity (not inf - inf = NaN); at x == y each operand receives half the gradient."""
    x, y = _inexact_all(x, y, op="logaddexp")
    d = where(equal(x, y), 0.0, abs(subtract(x, y)))
    return maximum(x, y) + log1p(exp(-d))


def _xlogy_dx(t, o, x, y):
    # torch's convention: d/dx = log(y), except 0 where x == 0 and y <= 0 (log(y) there is -inf or NaN); written as
    # xlogy(t, .) so that a zero cotangent gives 0 even where log(y) is infinite
    return bind("xlogy", t, where(logical_and(equal(x, 0), less_equal(y, 0)), 1.0, y))


_xlogy = binary("xlogy", "sc.xlogy(x, y).astype(x.dtype, copy=False)",
                [_xlogy_dx, lambda t, o, x, y: t * x / y], domain=FLOAT,
                doc="x * log(y), 0 where x == 0 (unless y is NaN), as scipy.special.xlogy and torch.xlogy.")


def xlogy(x, y):
    """scipy.special.xlogy / torch.xlogy: x * log(y), and 0 where x == 0 (NaN where y is NaN). The gradient
    follows torch: d/dx = log(y) (0 where x == 0 and y <= 0), d/dy = x / y."""
    return _xlogy(*_inexact_all(x, y, op="xlogy"))


def logit(x, eps=None):
    """torch.logit / scipy.special.logit: log(x / (1 - x)). With `eps`, x is first clamped to [eps, 1 - eps], and the
    gradient is zero where the clamp is active (x < eps or x > 1 - eps), as torch."""
    x = as_inexact(x)
    if eps is not None:
        x = clip(x, eps, 1.0 - eps)
    return log(x / (1 - x))


# -- trigonometric and hyperbolic ----------------------------------------------------------------------------------
def _asin_rate(x):
    """1 / sqrt(1 - x*x), written (1 - x)(1 + x) so that it stays accurate near |x| = 1."""
    return rsqrt((1 - x) * (1 + x))


arcsin = unary("arcsin", "np.arcsin(x)", lambda t, y, x: t * _asin_rate(x), flops=10,
               doc="Inverse sine, as numpy.arcsin (torch.asin).")
arccos = unary("arccos", "np.arccos(x)", lambda t, y, x: -(t * _asin_rate(x)), flops=10,
               doc="Inverse cosine, as numpy.arccos (torch.acos).")
arctan = unary("arctan", "np.arctan(x)", lambda t, y, x: t / (1 + x * x), flops=10,
               doc="Inverse tangent, as numpy.arctan (torch.atan).")
# arcsinh and arccosh stay primitives: their log1p forms need separate branches where x*x overflows (|x| > 1e154)
arcsinh = unary("arcsinh", "np.arcsinh(x)", lambda t, y, x: t * rsqrt(1 + x * x), flops=10,
                doc="Inverse hyperbolic sine, as numpy.arcsinh (torch.asinh).")
arccosh = unary("arccosh", "np.arccosh(x)", lambda t, y, x: t * rsqrt((x - 1) * (x + 1)), flops=10,
                doc="Inverse hyperbolic cosine, as numpy.arccosh (torch.acosh).")


def _atan2_norm(y, x):
    return y * y + x * x


_arctan2 = binary("arctan2", "np.arctan2(x, y)",
                  [lambda t, o, y, x: t * (x / _atan2_norm(y, x)), lambda t, o, y, x: -(t * (y / _atan2_norm(y, x)))],
                  domain=FLOAT, doc="The angle of the point (x, y), as numpy.arctan2(y, x).")


def arctan2(y, x):
    """numpy.arctan2 (torch.atan2): the angle of the point (x, y) in (-pi, pi], with broadcasting. d/dy = x / (x² + y²),
    d/dx = -y / (x² + y²) (NaN at the origin, as torch)."""
    return _arctan2(*_inexact_all(y, x, op="arctan2"))


def _half_expm1(x):
    return expm1(x * 0.5), expm1(x * -0.5)


def sinh(x):
    """Hyperbolic sine, as numpy.sinh: 2 sinh(x/2) cosh(x/2) from u = expm1(x/2), v = expm1(-x/2), i.e.
    ((u - v)/2) (2 + u + v): accurate near 0 (no cancellation) and finite up to sinh's own overflow."""
    u, v = _half_expm1(as_inexact(x))
    return ((u - v) * 0.5) * (2 + u + v)


def cosh(x):
    """Hyperbolic cosine, as numpy.cosh: 1 + 2 sinh(x/2)^2 = 1 + (u - v)(u - v)/2 with u = expm1(x/2), v = expm1(-x/2);
    its derivative (u - v)(2 + u + v)/2 = sinh(x) is then accurate near 0 too."""
    u, v = _half_expm1(as_inexact(x))
    w = u - v
    return 1 + w * (w * 0.5)


def arctanh(x):
    """Inverse hyperbolic tangent, as numpy.arctanh (torch.atanh): (log1p(x) - log1p(-x)) / 2, accurate near 0 and
    near +-1."""
    x = as_inexact(x)
    return (log1p(x) - log1p(-x)) * 0.5


asin, acos, atan, atan2, asinh, acosh, atanh = arcsin, arccos, arctan, arctan2, arcsinh, arccosh, arctanh


# -- rounding and remainders ---------------------------------------------------------------------------------------
def trunc(x):
    """Round toward zero, as numpy.trunc (torch.trunc, numpy.fix); derivative zero. Integers become float64, as
    NumPy's."""
    x = lift(x)
    return where(less(x, 0), ceil(x), floor(x))


fmod = binary("fmod", "np.fmod(x, y)", [lambda t, o, x, y: t, lambda t, o, x, y: -(t * trunc(x / y))],
              doc="C's remainder x - trunc(x/y)*y, with the sign of x, as numpy.fmod and torch.fmod (exact); "
                  "d/dx = 1, d/dy = -trunc(x/y), as torch.")
floor_divide = binary("floor_divide", "np.floor_divide(x, y)", None, domain=NUMERIC,
                      doc="floor(x / y), as numpy.floor_divide, Python's // and torch.floor_divide (integers stay "
                          "integers); integer-valued, so its derivative is zero.")


# -- scipy.special ---------------------------------------------------------------------------------------------------
erfc = unary("erfc", "sc.erfc(x).astype(x.dtype, copy=False)",
             lambda t, y, x: t * (-2 / math.sqrt(math.pi) * exp(-(x * x))), domain=FLOAT, flops=20,
             doc="The complementary error function 1 - erf(x), as scipy.special.erfc: its own primitive, accurate "
                 "where 1 - erf(x) would round to 0 (large x).")
erfinv = unary("erfinv", "sc.erfinv(x).astype(x.dtype, copy=False)",
               lambda t, y, x: t * (math.sqrt(math.pi) / 2 * exp(y * y)), domain=FLOAT, flops=20,
               doc="The inverse error function on (-1, 1), as scipy.special.erfinv and torch.erfinv.")


def _polygamma_dx(t, o, n, x):
    return t * bind("polygamma", n + 1, x)


_polygamma = binary("polygamma", "sc.polygamma(x, y).astype(y.dtype, copy=False)", [None, _polygamma_dx],
                    domain=FLOAT, doc="The n-th derivative of digamma at x (n, an integer, carried in x's dtype).")
digamma = unary("digamma", "sc.psi(x).astype(x.dtype, copy=False)",
                lambda t, y, x: t * bind("polygamma", full(x.shape, 1, x.dtype), x), domain=FLOAT, flops=20,
                doc="The digamma function psi = lgamma', as scipy.special.psi and torch.digamma; its derivative is "
                    "polygamma(1, x).")
lgamma = unary("lgamma", "sc.gammaln(x).astype(x.dtype, copy=False)", lambda t, y, x: t * digamma(x),
               domain=FLOAT, flops=20,
               doc="log|Gamma(x)|, as scipy.special.gammaln and torch.lgamma; its derivative is digamma(x).")


def polygamma(n, x):
    """scipy.special.polygamma / torch.polygamma: the n-th derivative of digamma (n = 0: digamma itself), for an
    integer n >= 0. Differentiable in x to any order (its derivative is polygamma(n + 1, x)); n is not."""
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise DTypeError(f"n must be a Python int, got {type(n).__name__}", op="polygamma", source=user_source())
    if n < 0:
        raise UnsupportedOpError(f"the order n must be >= 0, got {n}", op="polygamma", source=user_source())
    x = as_inexact(x)
    if n == 0:
        return digamma(x)
    return _polygamma(full(x.shape, int(n), x.dtype), x)


# the ops elementwise.py's unary/binary made here belong to this module (help(), pickling, the docs' reference page)
for _op in (log2, log10, arcsin, arccos, arctan, arcsinh, arccosh, fmod, floor_divide, erfc, erfinv, digamma, lgamma):
    _op.__module__ = __name__
del _op
