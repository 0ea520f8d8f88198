"""Elementwise primitives. Each is one line of rule table: NumPy reference and its partials.

A partial is written as the contribution of one operand's tangent/cotangent `t` to the result,
e.g. tanh's is ``t * (1 - y*y)``. Elementwise derivatives are diagonal, so that one expression is
both the VJP (t = output cotangent) and the JVP term (t = operand tangent).
"""

from __future__ import annotations

import math

import numpy as np

from gradir.core import dtypes
from gradir.core.errors import DTypeError, ShapeError
from gradir.core.ir import Value
from gradir.core.primitive import Primitive, register
from gradir.core.trace import bind, user_source
from gradir.ops.lifting import astype, broadcast_all, concrete, elementwise_operands, lift, lift_all

__all__ = ["abs", "add", "ceil", "clamp", "clip", "cos", "divide", "equal", "erf", "exp", "expm1", "floor", "greater",
           "greater_equal", "imag", "isfinite", "less", "less_equal", "log", "log1p", "logical_and", "logical_not", "logical_or",
           "maximum", "minimum", "multiply", "negative", "not_equal", "power", "real", "relu", "remainder", "round", "rsqrt",
           "sigmoid", "sign", "sin", "sqrt", "square", "stop_gradient", "subtract", "tan", "tanh", "where"]

INEXACT = "inexact"  # float or complex
FLOAT = "float"
ANY = "any"
NUMERIC = "numeric"  # anything but bool


_DOMAINS = {
    INEXACT: dtypes.is_inexact,
    FLOAT: dtypes.is_float,
    NUMERIC: lambda d: np.dtype(d) != dtypes.bool_,
    ANY: lambda d: True,
}


def _check_dtype(op: str, dtype, domain: str):
    if not _DOMAINS[domain](dtype):
        raise DTypeError(f"does not accept dtype {dtypes.short(dtype)} (needs {domain} operands)", op=op)


def _same_type(op: str, *xs):
    if len(xs) == 2 and xs[0].shape == xs[1].shape and xs[0].dtype == xs[1].dtype:
        return
    shapes = {tuple(x.shape) for x in xs}
    if len(shapes) != 1:
        raise ShapeError(f"operands must have one shape, got {sorted(shapes)}", op=op)
    dts = {np.dtype(x.dtype) for x in xs}
    if len(dts) != 1:
        raise DTypeError(f"operands must have one dtype, got {sorted(map(dtypes.short, dts))}", op=op)


def _vjp_from_partials(partials):
    if len(partials) == 1 and partials[0] is not None:  # (the same rule without a loop: autodiff calls it per node)
        (p,) = partials

        def vjp(g, out, x, **attrs):
            return [p(g, out, x)]
        return vjp
    if len(partials) == 2 and partials[0] is not None and partials[1] is not None:
        p0, p1 = partials

        def vjp(g, out, x, y, **attrs):
            return [p0(g, out, x, y), p1(g, out, x, y)]
        return vjp

    def vjp(g, out, *xs, **attrs):
        return [None if p is None else p(g, out, *xs) for p in partials]
    return vjp


def _jvp_from_partials(partials):
    def jvp(tangents, out, *xs, **attrs):
        terms = [p(t, out, *xs) for p, t in zip(partials, tangents) if p is not None and t is not None]
        if not terms:
            return None
        total = terms[0]
        for t in terms[1:]:
            total = total + t
        return total
    return jvp


def unary(name, numpy, partial, domain=INEXACT, out_dtype=None, flops=1, doc=""):
    """Register an elementwise unary primitive and return its public function."""
    accepts = _DOMAINS[domain]

    def infer(x):
        if not accepts(x.dtype):
            _check_dtype(name, x.dtype, domain)
        return x.shape, (out_dtype(x.dtype) if out_dtype else x.dtype)

    partials = [partial]
    floating = domain in (INEXACT, FLOAT)
    register(Primitive(
        name, ("x",), infer, numpy,
        vjp=_vjp_from_partials(partials) if partial else None,
        jvp=_jvp_from_partials(partials) if partial else None,
        kind="elementwise", differentiable=partial is not None,
        flops=lambda out, xs, at: flops * math.prod(out.shape), doc=doc))

    def public(x):
        if type(x) is Value and (not floating or x.dtype in dtypes.FLOATING):
            return bind(name, x)  # what the lines below give a traced value that needs no cast
        x = lift(x)
        if domain in (INEXACT, FLOAT) and not dtypes.is_inexact(x.dtype):
            x = astype(x, dtypes.float64)  # as NumPy: np.exp(int array) is float64
        return bind(name, x)
    public.__name__ = public.__qualname__ = name
    public.__doc__ = doc or f"Elementwise {name}, as numpy.{name}."
    return public


def binary(name, numpy, partials, domain=NUMERIC, out_dtype=None, doc=""):
    """Register an elementwise binary primitive; the public function broadcasts and promotes."""
    accepts = _DOMAINS[domain]

    def infer(x, y):
        _same_type(name, x, y)
        if not accepts(x.dtype):
            _check_dtype(name, x.dtype, domain)
        return x.shape, (out_dtype if out_dtype is not None else x.dtype)

    differentiable = partials is not None
    register(Primitive(
        name, ("x", "y"), infer, numpy,
        vjp=_vjp_from_partials(partials) if differentiable else None,
        jvp=_jvp_from_partials(partials) if differentiable else None,
        kind="elementwise", differentiable=differentiable, doc=doc))

    def public(x, y):
        if type(x) is Value and type(y) is Value and x.shape == y.shape and (x.dtype is y.dtype or x.dtype == y.dtype):
            return bind(name, x, y)  # what elementwise_operands gives two Values of one type
        return bind(name, *elementwise_operands(x, y, op=name))
    public.__name__ = public.__qualname__ = name
    public.__doc__ = doc or f"Elementwise {name} with NumPy broadcasting, as numpy.{name}."
    return public


def _float_like(x, like):
    return astype(x, like.dtype)


# -- unary ---------------------------------------------------------------------------------------
negative = unary("negative", "np.negative(x)", lambda t, y, x: -t, domain=NUMERIC)
exp = unary("exp", "np.exp(x)", lambda t, y, x: t * y)
log = unary("log", "np.log(x)", lambda t, y, x: t / x)
tanh = unary("tanh", "np.tanh(x)", lambda t, y, x: t * (1 - y * y))
sigmoid = unary("sigmoid", "_k.sigmoid(x)", lambda t, y, x: t * (y * (1 - y)), doc="Logistic 1/(1+exp(-x)).")
relu = unary("relu", "np.maximum(x, 0)", lambda t, y, x: t * _float_like(y > 0, y), domain=FLOAT,
             doc="max(x, 0); its derivative at 0 is taken as 0, as in PyTorch.")
sqrt = unary("sqrt", "np.sqrt(x)", lambda t, y, x: t * (0.5 / y))
rsqrt = unary("rsqrt", "1 / np.sqrt(x)", lambda t, y, x: t * (-0.5 * y / x), doc="1/sqrt(x).")
sin = unary("sin", "np.sin(x)", lambda t, y, x: t * cos(x))
cos = unary("cos", "np.cos(x)", lambda t, y, x: -(t * sin(x)))
erf = unary("erf", "_k.erf(x)", lambda t, y, x: t * (2 / math.sqrt(math.pi) * exp(-(x * x))),
            doc="The error function (scipy.special.erf).")
sign = unary("sign", "np.sign(x)", None, domain=NUMERIC, doc="-1, 0 or 1; derivative zero.")
abs = unary("abs", "np.abs(x)", lambda t, y, x: t * sign(x), domain=NUMERIC, out_dtype=dtypes.real_dtype,
            doc="|x|; on complex input the modulus (which a complex-step check cannot see through).")
log1p = unary("log1p", "np.log1p(x)", lambda t, y, x: t / (1 + x), doc="log(1 + x), accurate for small x.")
expm1 = unary("expm1", "np.expm1(x)", lambda t, y, x: t * exp(x),  # not y + 1: exp(-60) is not 0
              doc="exp(x) - 1, accurate for small x.")
tan = unary("tan", "np.tan(x)", lambda t, y, x: t * (1 + y * y))
# rounding: piecewise constant, so a zero derivative everywhere (as torch); ints are cast to float64 as NumPy does
floor = unary("floor", "np.floor(x)", None, domain=FLOAT, doc="Round down, as numpy.floor; derivative zero.")
ceil = unary("ceil", "np.ceil(x)", None, domain=FLOAT, doc="Round up, as numpy.ceil; derivative zero.")
_rint = unary("rint", "np.rint(x)", None, domain=FLOAT,
              doc="Round to the nearest integer, halves to even (numpy.rint, torch.round); derivative zero.")


def round(x, decimals=0):
    """numpy.round: halves go to the nearest even value (as torch.round); derivative zero."""
    if not decimals:
        return _rint(x)
    scale = 10.0 ** decimals  # what NumPy does too: round(x * 10**d) / 10**d
    return _rint(x * scale) / scale


def _real_partial(t, y, x):
    if not dtypes.is_complex(x.dtype):
        return t  # the identity on real values
    # complex operand: the JVP takes the real part of the tangent; the VJP lifts the real cotangent
    return real(t) if dtypes.is_complex(t.dtype) else astype(t, x.dtype)


real = unary("real", "np.real(x)", _real_partial, domain=ANY, out_dtype=dtypes.real_dtype,
             doc="Real part (the identity on real values, gradient included).")
imag = unary("imag", "np.imag(x)", None, domain=ANY, out_dtype=dtypes.real_dtype, doc="Imaginary part.")
stop_gradient = unary("stop_gradient", "x", None, domain=ANY,
                      doc="Identity whose derivative is zero (jax.lax.stop_gradient, torch .detach()).")

# -- binary --------------------------------------------------------------------------------------
# add, multiply, maximum, minimum accept bool as NumPy does (logical or / and); subtract does not
add = binary("add", "x + y", [lambda t, o, x, y: t, lambda t, o, x, y: t], domain=ANY)
subtract = binary("subtract", "x - y", [lambda t, o, x, y: t, lambda t, o, x, y: -t])
multiply = binary("multiply", "x * y", [lambda t, o, x, y: t * y, lambda t, o, x, y: t * x], domain=ANY)
_divide = binary("divide", "x / y", [lambda t, o, x, y: t / y, lambda t, o, x, y: -(t * o / y)], domain=INEXACT)
def _nonzero_const(v) -> bool:
    """True when `v` is a constant (or a broadcast of one) without zeros: no mask needed."""
    while v.op == "broadcast_to":
        v = v.inputs[0]
    return v.op == "const" and bool(np.all(v.attrs["value"] != 0))


def _power_dx(t, o, x, y):
    d = y * x ** (y - 1)
    if dtypes.is_complex(x.dtype) or _nonzero_const(y):
        return t * d
    return t * where(y == 0, 0.0, d)  # as torch: x**0 has derivative 0 even at x = 0


def _power_dy(t, o, x, y):
    d = log(x) * o
    if dtypes.is_complex(x.dtype):
        return t * d
    return t * where(logical_and(x == 0, y >= 0), 0.0, d)  # as torch: 0**y (y >= 0) has d/dy 0


_power = binary("power", "np.power(x, y)", [_power_dx, _power_dy], domain=NUMERIC)


def power(x, y):
    """numpy.power with broadcasting (also `x ** y`)."""
    x, y = lift_all(x, y, op="power")
    if dtypes.is_integer(y.dtype) and concrete(y) is not None and np.any(concrete(y) < 0):
        raise DTypeError("integers to negative integer powers are not allowed (cast to float first)",
                         op="power", source=user_source())
    return _power(x, y)


def _max_share(x, y):
    """Which share of the gradient max(x, y) sends to x: 1 where x wins, 1/2 on ties."""
    return _float_like(x > y, x) + 0.5 * _float_like(x == y, x)


maximum = binary("maximum", "np.maximum(x, y)", [
    lambda t, o, x, y: t * _max_share(x, y), lambda t, o, x, y: t * _max_share(y, x)], domain=ANY)
minimum = binary("minimum", "np.minimum(x, y)", [
    lambda t, o, x, y: t * _max_share(y, x), lambda t, o, x, y: t * _max_share(x, y)], domain=ANY)

less = binary("less", "x < y", None, domain=ANY, out_dtype=dtypes.bool_)
less_equal = binary("less_equal", "x <= y", None, domain=ANY, out_dtype=dtypes.bool_)
greater = binary("greater", "x > y", None, domain=ANY, out_dtype=dtypes.bool_)
greater_equal = binary("greater_equal", "x >= y", None, domain=ANY, out_dtype=dtypes.bool_)
equal = binary("equal", "x == y", None, domain=ANY, out_dtype=dtypes.bool_)
not_equal = binary("not_equal", "x != y", None, domain=ANY, out_dtype=dtypes.bool_)
remainder = binary("remainder", "np.remainder(x, y)",
                   [lambda t, o, x, y: t, lambda t, o, x, y: -(t * floor(x / y))],  # x - floor(x/y)*y, as torch
                   doc="numpy.remainder (Python's %): x - floor(x/y)*y; d/dx = 1, d/dy = -floor(x/y) as torch.")
logical_and = binary("logical_and", "np.logical_and(x, y)", None, domain=ANY, out_dtype=dtypes.bool_)
logical_or = binary("logical_or", "np.logical_or(x, y)", None, domain=ANY, out_dtype=dtypes.bool_)
logical_not = unary("logical_not", "np.logical_not(x)", None, domain=ANY, out_dtype=lambda d: dtypes.bool_,
                    doc="Elementwise not, as numpy.logical_not (bool result).")


def divide(x, y):
    """True division with broadcasting; integer operands are promoted to float64 first."""
    x, y = lift_all(x, y, op="divide")
    if not dtypes.is_inexact(x.dtype):
        x, y = astype(x, dtypes.float64), astype(y, dtypes.float64)
    return _divide(x, y)


def square(x):
    """x * x elementwise (numpy.square): one multiply, so its gradient is the product rule's 2 x."""
    return multiply(x, x)


def isfinite(x):
    """Elementwise test for a finite number, as numpy.isfinite (bool result): ``|x| < inf``, an ordered
    comparison, so NaN and +-inf give False. Integers and bools are always finite."""
    x = lift(x)
    if not dtypes.is_inexact(x.dtype):
        return equal(x, x)  # all True, in x's shape
    return less(abs(x), math.inf)


# -- where and convert ---------------------------------------------------------------------------
def _where_infer(c, x, y):
    _same_type("where", x, y)
    if tuple(c.shape) != tuple(x.shape):
        raise ShapeError(f"condition shape {tuple(c.shape)} differs from value shape {tuple(x.shape)}", op="where")
    if np.dtype(c.dtype) != dtypes.bool_:
        raise DTypeError(f"condition must be bool, got {dtypes.short(c.dtype)}", op="where")
    return x.shape, x.dtype


register(Primitive(
    "where", ("c", "x", "y"), _where_infer, "np.where(c, x, y)",
    vjp=lambda g, o, c, x, y: [None, where(c, g, 0.0), where(c, 0.0, g)],
    jvp=lambda ts, o, c, x, y: where(c, ts[1] if ts[1] is not None else 0.0, ts[2] if ts[2] is not None else 0.0),
    kind="elementwise"))


def where(cond, x, y):
    """Select x where cond is true, else y (all three broadcast); the traced-value `if`."""
    x, y = lift_all(x, y, op="where")
    cond = lift(cond)
    if cond.dtype != dtypes.bool_:
        cond = astype(cond, dtypes.bool_)
    return bind("where", *_broadcast3(cond, x, y))


def _broadcast3(c, x, y):
    return broadcast_all(c, x, y, op="where")


def _convert_infer(x, dtype):
    return x.shape, dtypes.as_dtype(dtype)


def _convert_vjp(g, out, x, dtype):
    return [astype(g, x.dtype) if dtypes.is_inexact(x.dtype) and dtypes.is_inexact(dtype) else None]


def _convert_jvp(ts, out, x, dtype):
    return None if ts[0] is None or not dtypes.is_inexact(dtype) else astype(ts[0], dtype)


register(Primitive("convert", ("x",), _convert_infer, "x.astype(dtype)", vjp=_convert_vjp, jvp=_convert_jvp,
                   kind="elementwise", doc="Cast to `dtype`."))


# -- clip ------------------------------------------------------------------------------------------
def clip(x, min=None, max=None):
    """numpy.clip (torch.clamp): `min`/`max` are None, scalars or arrays (all broadcast).

    Gradients follow torch's convention: x receives the cotangent where min <= x <= max (both
    boundaries included), min where x < min < max, and max where x > max or max < min (where
    max < min the result is max, as torch). A NaN in x or in a bound gives NaN there, as torch."""
    if min is None and max is None:
        raise DTypeError("needs at least one of min and max", op="clip", source=user_source())
    present = [b for b in (min, max) if b is not None]
    x, *bounds = lift_all(x, *present, op="clip")
    lo = bounds.pop(0) if min is not None else None
    hi = bounds.pop(0) if max is not None else None
    clo, chi = concrete(lo), concrete(hi)
    # a bound known to hold no NaN: absent, not floating, or a constant without one
    lo_ok = lo is None or not dtypes.is_inexact(lo.dtype) or (clo is not None and not np.isnan(clo).any())
    hi_ok = hi is None or not dtypes.is_inexact(hi.dtype) or (chi is not None and not np.isnan(chi).any())
    if hi is None and lo_ok:
        return where(x < lo, lo, x)  # torch: x's cotangent where x >= min, min's where x < min
    if lo is None and hi_ok:
        return where(x > hi, hi, x)
    if clo is not None and chi is not None and lo_ok and hi_ok and np.all(clo < chi):
        return where(x < lo, lo, where(x > hi, hi, x))  # the common case: constant bounds in order
    # general bounds: disjoint masks give torch's cotangents; what none covers (a NaN in x or a bound, or
    # min == max > x) takes its value from a non-differentiated clip, as NumPy's (NaN propagates), which
    # torch gives no cotangent either
    if hi is None:
        return where(x >= lo, x, where(x < lo, lo, stop_gradient(maximum(x, lo))))
    if lo is None:
        return where(x <= hi, x, where(x > hi, hi, stop_gradient(minimum(x, hi))))
    take_x = logical_and(x >= lo, x <= hi)
    take_hi = logical_or(x > hi, hi < lo)
    take_lo = logical_and(x < lo, lo < hi)
    rest = stop_gradient(minimum(maximum(x, lo), hi))
    # max taken with a NaN min (x > max) or a NaN x (max < min): torch's value is NaN there, while max still
    # receives the cotangent
    hi_value = hi
    if dtypes.is_inexact(hi.dtype):
        nan_in = not_equal(x, x) if lo_ok else logical_or(not_equal(x, x), not_equal(lo, lo))
        hi_value = where(nan_in, hi + math.nan, hi)
    return where(take_x, x, where(take_hi, hi_value, where(take_lo, lo, rest)))


clamp = clip
