"""Activations and softmax (compositions of primitives)."""

from __future__ import annotations

import math

from gradir.core.errors import AxisError, UnsupportedOpError
from gradir.core.trace import user_source
from gradir.ops.elementwise import (
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
from gradir.ops.lifting import lift, normalize_axes
from gradir.ops.nn.composite import choice
from gradir.ops.reductions import max, sum

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


def elu(x, alpha=1.0):
    """x where x > 0, alpha * (exp(x) - 1) elsewhere."""
    x = lift(x)
    pos = greater(x, 0.0)
    # expm1 of x where x <= 0, else of 0: the unselected branch must not overflow (an inf there turns its zero
    # cotangent into nan). A where, not minimum(x, 0), whose tie at x = 0 would halve torch's gradient alpha there
    return where(pos, x, alpha * expm1(where(pos, 0.0, x)))


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
