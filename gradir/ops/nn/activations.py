"""Activations and softmax (compositions of primitives)."""

from __future__ import annotations

import math

from gradir.core.errors import AxisError, ShapeError, UnsupportedOpError
from gradir.core.trace import user_source
from gradir.ops.elementwise import (
    abs,
    erf,
    exp,
    expm1,
    greater,
    greater_equal,
    less_equal,
    log,
    log1p,
    sigmoid,
    stop_gradient,
    tanh,
    where,
)
from gradir.ops.lifting import lift, lift_all, normalize_axes, normalize_axis
from gradir.ops.nn.composite import choice, float_input
from gradir.ops.reductions import max, sum
from gradir.ops.shapes import reshape, split

__all__ = ["celu", "elu", "gelu", "glu", "hardsigmoid", "hardswish", "hardtanh", "leaky_relu", "log_softmax", "logsigmoid",
           "mish", "prelu", "relu6", "selu", "silu", "softmax", "softmin", "softplus", "softsign", "threshold"]

# -- activations and softmax ----------------------------------------------------------------------


def _shifted(x, axis, op):
    """x minus its (non-differentiated) max along `axis`, for stability; an empty axis has no max and
    needs no shift (the result is empty, as torch's). A 0-d x (axis 0 or -1) is its own max, so its
    softmax is 1 and its log_softmax 0, as torch's."""
    axes = normalize_axes(axis, x.ndim, op)  # () for a 0-d x
    if len(axes) > 1:
        raise AxisError(f"needs one axis, got {axis!r}", op=op, source=user_source())
    if x.ndim == 0:
        return x - stop_gradient(x)
    return x if x.shape[axes[0]] == 0 else x - stop_gradient(max(x, axes, keepdims=True))


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along `axis`, shifted by the (non-differentiated) max for stability."""
    e = exp(_shifted(lift(x), axis, "softmax"))
    return e / sum(e, axis, keepdims=True)


def log_softmax(x, axis=-1):
    """x - logsumexp(x) along `axis`, shifted by the (non-differentiated) max for stability."""
    z = _shifted(lift(x), axis, "log_softmax")
    return z - log(sum(exp(z), axis, keepdims=True))


def stable_softplus(x):
    """log(1 + exp(x)) without overflow: x + log1p(exp(-x)) for x > 0, log1p(exp(x)) elsewhere. Each
    branch sees only its own side's x (the unused one 0), so neither overflows, and the gradient at 0 is
    sigmoid(0) = 1/2 (relu(x) + log1p(exp(-|x|)) would give relu's and abs's 0 there)."""
    pos = greater(x, 0.0)
    xp, xn = where(pos, x, 0.0), where(pos, 0.0, x)
    return where(pos, xp + log1p(exp(-xp)), log1p(exp(xn)))


def silu(x):
    """x * sigmoid(x) (torch.nn.functional.silu, a.k.a. swish)."""
    x = lift(x)
    return x * sigmoid(x)


def softplus(x, beta=1.0, threshold=20.0):
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold (as torch)."""
    x = lift(x)
    bx = x * beta
    return where(greater(bx, threshold), x, stable_softplus(bx) * (1.0 / beta))


def leaky_relu(x, negative_slope=0.01):
    """x where x > 0, negative_slope * x elsewhere."""
    x = lift(x)
    return where(greater(x, 0.0), x, x * negative_slope)


def _elu(x, alpha, scale=1.0, input_scale=1.0):
    """scale * (x where x > 0, alpha * (exp(input_scale * x) - 1) elsewhere): elu, selu and celu. At x = 0 the
    negative branch's derivative counts, as torch's."""
    x = lift(x)
    pos = greater(x, 0.0)
    # expm1 of x where x <= 0, else of 0: the unselected branch must not overflow (an inf there turns its zero
    # cotangent into nan). A where, not minimum(x, 0), whose tie at x = 0 would halve torch's gradient alpha there
    z = where(pos, 0.0, x)
    y = where(pos, x, alpha * expm1(z if input_scale == 1.0 else z * input_scale))
    return y if scale == 1.0 else y * scale


def elu(x, alpha=1.0):
    """x where x > 0, alpha * (exp(x) - 1) elsewhere."""
    return _elu(x, alpha)


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def selu(x):
    """scale * elu(x, alpha) with torch's constants alpha = 1.6733 and scale = 1.0507 (self-normalising)."""
    return _elu(x, _SELU_ALPHA, _SELU_SCALE)


def celu(x, alpha=1.0):
    """x where x > 0, alpha * (exp(x / alpha) - 1) elsewhere (torch.nn.functional.celu); alpha must not be 0."""
    if alpha == 0:
        raise UnsupportedOpError("alpha=0 is not supported (the negative branch divides by alpha)", op="celu",
                                 source=user_source())
    return _elu(x, alpha, 1.0, 1.0 / alpha)  # x * (1/alpha), as torch computes it


def hardtanh(x, min_val=-1.0, max_val=1.0):
    """x clamped to [min_val, max_val]; the gradient is zero outside the open interval (as torch)."""
    if min_val > max_val:
        raise UnsupportedOpError(f"min_val={min_val} exceeds max_val={max_val}", op="hardtanh", source=user_source())
    x = lift(x)
    return where(less_equal(x, min_val), min_val, where(greater_equal(x, max_val), max_val, x))


def relu6(x):
    """min(max(x, 0), 6): hardtanh(x, 0, 6)."""
    return hardtanh(x, 0.0, 6.0)


def gelu(x, approximate="none"):
    """Gaussian error linear unit x * Phi(x): erf form ("none") or tanh approximation ("tanh"), as torch."""
    choice("gelu", "approximate", approximate, ("none", "tanh"))
    x = lift(x)
    if approximate == "tanh":
        return 0.5 * x * (1.0 + tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * (x * x * x))))
    return 0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))


def softmin(x, axis=-1):
    """softmax(-x) along `axis` (torch.nn.functional.softmin's dim)."""
    return softmax(-lift(x), axis)


def logsigmoid(x):
    """log(sigmoid(x)) = -softplus(-x), in the overflow-free form (finite, with finite gradients, for any x)."""
    return -stable_softplus(-lift(x))


def mish(x):
    """x * tanh(softplus(x)) (torch.nn.functional.mish), softplus in the overflow-free form."""
    x = lift(x)
    return x * tanh(stable_softplus(x))


def glu(x, dim=-1):
    """Gated linear unit: a * sigmoid(b), a and b the two halves of x along `dim` (of even size)."""
    x = lift(x)
    axis = normalize_axis(dim, x.ndim, "glu")
    if x.shape[axis] % 2:
        raise ShapeError(f"needs an even size along dim {dim}, got shape {tuple(x.shape)}", op="glu",
                         source=user_source())
    a, b = split(x, 2, axis)
    return a * sigmoid(b)


def hardswish(x):
    """x * relu6(x + 3) / 6. At the kinks x = -3 and x = 3 the derivative is the outer branch's (0 and 1), as
    torch's."""
    x = lift(x)
    return where(less_equal(x, -3.0), 0.0, where(greater_equal(x, 3.0), x, x * (x + 3.0) / 6.0))


def hardsigmoid(x):
    """relu6(x + 3) / 6; the derivative is 1/6 inside (-3, 3) and 0 elsewhere, kinks included (as torch)."""
    x = lift(x)
    return where(less_equal(x, -3.0), 0.0, where(greater_equal(x, 3.0), 1.0, (x + 3.0) / 6.0))


def softsign(x):
    """x / (1 + |x|)."""
    x = lift(x)
    return x / (1.0 + abs(x))


def threshold(x, threshold, value):
    """x where x > threshold, else `value` (torch.nn.functional.threshold); no gradient where replaced."""
    x = lift(x)
    return where(greater(x, threshold), x, value)


def prelu(x, weight):
    """x where x > 0, weight * x elsewhere (torch.nn.functional.prelu): weight holds 1 slope, or one per
    channel on axis 1 (C slopes; a 1-d x has one channel). The derivative at x = 0 is weight's, as torch's."""
    x, weight = lift_all(x, weight, op="prelu")
    float_input("prelu", x)
    channels = x.shape[1] if x.ndim >= 2 else 1
    if weight.ndim > 1 or weight.size not in (1, channels) or (weight.size != 1 and x.ndim == 0):
        raise ShapeError(f"weight of shape {tuple(weight.shape)} must hold 1 slope or one per channel ({channels}) "
                         f"of an input of shape {tuple(x.shape)}", op="prelu", source=user_source())
    if weight.ndim == 1 and x.ndim >= 2:
        weight = reshape(weight, (1, weight.size) + (1,) * (x.ndim - 2))
    elif weight.ndim == 1 and x.ndim == 0:
        weight = reshape(weight, ())  # as torch: a 0-d x keeps its shape
    return where(greater(x, 0.0), x, weight * x)
