"""Neural-network ops (`gr.nn`), with PyTorch-like signatures.

Most are plain compositions of primitives (softmax, layer_norm, gelu, conv2d, pooling, ...), so
autodiff differentiates them node by node. `cross_entropy` and `batch_norm` are *composite
primitives*: one node in the traced graph that carries a hand-derived fused VJP, e.g.
``d loss / d logits = (softmax - onehot) / n``, instead of the chain of its pieces. Before execution
`lower_composites` replaces the node by its decomposition, so backends only see primitives; forward
mode differentiates the decomposition. Pass ``vjp="composed"`` to get the plain composition instead
(same gradients, longer backward graph).
"""

from __future__ import annotations

import builtins
import math

import ml_dtypes
import numpy as np

from gradir import dtypes
from gradir.errors import AxisError, DTypeError, GradirError, ShapeError, UnsupportedOpError
from gradir.ir import Graph, Value
from gradir.ops import (
    arange,
    astype,
    broadcast_to,
    equal,
    erf,
    exp,
    expand_dims,
    expm1,
    getitem,
    greater,
    greater_equal,
    less_equal,
    log,
    log1p,
    matmul,
    max,
    maximum,
    multiply,
    not_equal,
    one_hot,
    ones,
    pad,
    relu,
    reshape,
    rsqrt,
    sigmoid,
    stop_gradient,
    sum,
    swapaxes,
    take,
    tanh,
    transpose,
    where,
    zeros,
)
from gradir.ops.conv import fold, out_size, pair, unfold
from gradir.ops.indexing import check_classes
from gradir.ops.lifting import lift, lift_all, normalize_axes, to_numpy
from gradir.primitive import Primitive, get_primitive, register
from gradir.trace import EagerOperand, bind, building, constant, is_traced, user_source

__all__ = ["adaptive_avg_pool2d", "adaptive_max_pool2d", "avg_pool2d", "batch_norm", "batch_norm_stats",
           "binary_cross_entropy", "binary_cross_entropy_with_logits", "composite", "conv1d", "conv2d",
           "conv_transpose2d", "cross_entropy", "dropout", "elu", "embedding", "fold", "gelu", "group_norm", "hardtanh",
           "layer_norm", "leaky_relu", "linear", "log_softmax", "max_pool2d", "mse_loss", "nll_loss", "one_hot",
           "out_size", "relu", "relu6", "rms_norm", "scaled_dot_product_attention", "sigmoid", "silu", "softmax",
           "softplus", "tanh", "unfold"]


# -- composite primitives --------------------------------------------------------------------------


def composite(name: str, args: tuple[str, ...], infer, decompose, vjp, doc: str = "") -> Primitive:
    """Register a composite primitive: no NumPy template; `decompose` (the computation in primitives)
    is what runs, `vjp` is the hand-derived rule autodiff uses, and the JVP is forward mode over the
    decomposition."""
    return register(Primitive(name, args, infer, numpy=None, vjp=vjp, jvp=_decomposition_jvp(decompose),
                              kind="composite", decompose=decompose, doc=doc))


def _decomposition_jvp(decompose):
    """JVP rule of a composite: trace `decompose` into a scratch graph, then replay it into the graph
    being built, applying each primitive's JVP rule as forward mode does."""
    def jvp(ts, out, *xs, **attrs):
        scratch = Graph("decomposition")
        with building(scratch):
            holders = [scratch.add_input(x.shape, x.dtype) for x in xs]
            result = decompose(*holders, **attrs)
        env: dict[Value, Value] = dict(zip(holders, xs))
        tangent: dict[Value, Value | None] = dict(zip(holders, ts))
        for n in scratch.nodes:
            if n.op == "const":
                env[n], tangent[n] = constant(n.attrs["value"]), None
                continue
            operands = [env[i] for i in n.inputs]
            env[n] = bind(n.op, *operands, **n.attrs)
            prim, n_ts = get_primitive(n.op), [tangent[i] for i in n.inputs]
            live = prim.differentiable and dtypes.is_inexact(n.dtype) and any(t is not None for t in n_ts)
            tangent[n] = prim.jvp(n_ts, env[n], *operands, **n.attrs) if live else None
        return tangent[result]
    return jvp


def _checked(op: str, infer, *operands, **attrs):
    """Run a composite's shape rule up front, so errors name the user's line on the eager path too."""
    try:
        infer(*operands, **attrs)
    except GradirError as e:
        raise type(e)(e.detail, op=op, source=user_source()) from None


def _apply(op: str, decompose, operands, attrs):
    """Bind the composite inside a trace; on concrete operands run its decomposition eagerly."""
    if any(isinstance(o, EagerOperand) for o in operands):
        return bind(op, *operands, **attrs)  # eager Tensors record one fused node on their tape
    if not is_traced(*operands):
        return decompose(*operands, **attrs)
    return bind(op, *[o if isinstance(o, Value) else lift(o) for o in operands], **attrs)


def _choice(op: str, name: str, value, allowed):
    if value not in allowed:
        raise UnsupportedOpError(f"{name}={value!r} is not supported (use one of {', '.join(map(repr, allowed))})",
                                 op=op, source=user_source())


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


def _softplus(x):
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
    return where(greater(bx, threshold), x, _softplus(bx) * (1.0 / beta))


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
    _choice("gelu", "approximate", approximate, ("none", "tanh"))
    x = lift(x)
    if approximate == "tanh":
        return 0.5 * x * (1.0 + tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * (x * x * x))))
    return 0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))


# -- cross-entropy (composite) --------------------------------------------------------------------


def _ce_infer(logits, targets, reduction, ignore_index):
    if not dtypes.is_float(logits.dtype):
        raise DTypeError(f"logits must be floating, got {dtypes.short(logits.dtype)}", op="cross_entropy")
    if not dtypes.is_integer(targets.dtype):
        raise DTypeError(f"targets must be integer class indices, got {dtypes.short(targets.dtype)}", op="cross_entropy")
    if len(logits.shape) < 1 or tuple(logits.shape[:-1]) != tuple(targets.shape):
        raise ShapeError(f"logits {tuple(logits.shape)} need targets of shape {tuple(logits.shape[:-1])}, got "
                         f"{tuple(targets.shape)}", op="cross_entropy")
    return (tuple(targets.shape) if reduction == "none" else ()), logits.dtype


def _ce_targets(targets, ignore_index, c):
    """Flat targets with ignored rows pointed at class 0, and the keep mask (None: keep all).
    Targets outside [0, c) (other than ignore_index) raise, at run time when traced (as torch)."""
    t = check_classes(reshape(targets, (-1,)), c, "cross_entropy", ignore_index)
    if ignore_index is None:
        return t, None
    keep = not_equal(t, ignore_index)
    return where(keep, t, 0), keep


def _ce_decompose(logits, targets, reduction, ignore_index):
    """-log_softmax(logits)[row, target], masked where target == ignore_index, then reduced."""
    c = logits.shape[-1]
    t, keep = _ce_targets(targets, ignore_index, c)
    logp = reshape(log_softmax(logits), (-1, c))
    losses = -getitem(logp, (arange(t.shape[0]), t))
    if keep is not None:
        losses = where(keep, losses, 0.0)
    if reduction == "none":
        return reshape(losses, targets.shape)
    total = sum(losses)
    if reduction == "sum":
        return total
    return total / (sum(astype(keep, logits.dtype)) if keep is not None else t.shape[0])


def _ce_vjp(g, out, logits, targets, reduction, ignore_index):
    """Fused rule: d loss / d logits = (softmax(logits) - onehot(targets)) * g / n, ignored rows zero."""
    c = logits.shape[-1]
    t, keep = _ce_targets(targets, ignore_index, c)
    row = reshape(g, (-1,)) if reduction == "none" else g  # upstream cotangent per row (or one scalar)
    if keep is not None:
        mask = astype(keep, logits.dtype)
        row = row * mask
        if reduction == "mean":
            row = row / sum(mask)
    elif reduction == "mean":
        row = row / t.shape[0]
    diff = reshape(softmax(logits), (-1, c)) - one_hot(t, c, logits.dtype)
    scaled = diff * (expand_dims(row, -1) if row.ndim else row)
    return [reshape(scaled, logits.shape), None]


composite("cross_entropy", ("logits", "targets"), _ce_infer, _ce_decompose, _ce_vjp,
          doc="Softmax cross-entropy of (..., C) logits against integer targets, fused VJP softmax - onehot.")


def cross_entropy(logits, targets, reduction="mean", ignore_index=None, vjp="fused"):
    """Softmax cross-entropy (torch.nn.functional.cross_entropy) of logits (..., C) against integer
    class targets (...) over the last axis.

    reduction: "mean" (over non-ignored rows), "sum" or "none". Rows whose target equals
    `ignore_index` contribute nothing. vjp="fused" records one `cross_entropy` node whose VJP is the
    hand-derived ``(softmax - onehot) * g / n``; vjp="composed" records log_softmax + gather + mean.
    """
    _choice("cross_entropy", "reduction", reduction, ("mean", "sum", "none"))
    _choice("cross_entropy", "vjp", vjp, ("fused", "composed"))
    ignore_index = None if ignore_index is None else int(ignore_index)
    logits, targets = lift(logits), lift(targets)
    attrs = {"reduction": reduction, "ignore_index": ignore_index}
    _checked("cross_entropy", _ce_infer, logits, targets, **attrs)
    if not isinstance(targets, Value):
        t = to_numpy(targets)
        bad = (t < 0) | (t >= logits.shape[-1])
        if ignore_index is not None:
            bad &= t != ignore_index
        if bad.any():
            raise ShapeError(f"target {t[bad].flat[0]} is out of range for {logits.shape[-1]} classes",
                             op="cross_entropy", source=user_source())
    if vjp == "composed":
        return _ce_decompose(logits, targets, **attrs)
    return _apply("cross_entropy", _ce_decompose, (logits, targets), attrs)


# -- other losses (compositions) ------------------------------------------------------------------


def _reduce(losses, reduction, denominator=None):
    """torch's reduction of elementwise losses: "none", "sum", or "mean" (over `denominator` if given)."""
    if reduction == "none":
        return losses
    total = sum(losses)
    if reduction == "sum":
        return total
    return total / (losses.size if denominator is None else denominator)


def _same_shape(op, a, b, what="target"):
    if tuple(a.shape) != tuple(b.shape):
        raise ShapeError(f"{what} of shape {tuple(b.shape)} must match the input's shape {tuple(a.shape)}", op=op,
                         source=user_source())


def _float_input(op, x):
    if not dtypes.is_float(x.dtype):
        raise DTypeError(f"needs a floating input, got {dtypes.short(x.dtype)}", op=op, source=user_source())


def mse_loss(input, target, *, reduction="mean", weight=None):
    """(input - target)^2, reduced (torch.nn.functional.mse_loss; input and target broadcast). With
    `weight` (input's shape) each term is weighted and "mean" divides by sum(weight), as torch."""
    _choice("mse_loss", "reduction", reduction, ("mean", "sum", "none"))
    input, target = lift_all(input, target, op="mse_loss")
    d = input - target
    losses = d * d
    if weight is None:
        return _reduce(losses, reduction)
    weight = lift(weight)
    _same_shape("mse_loss", input, weight, "weight")
    losses = losses * weight
    return _reduce(losses, reduction, sum(weight))


def nll_loss(input, target, weight=None, *, ignore_index=-100, reduction="mean"):
    """Negative log-likelihood (torch.nn.functional.nll_loss): -input[n, target[n]] * weight[target[n]]
    of log-probabilities input (C,), (N, C) or (N, C, d1, ...) (classes on axis 1) against integer
    targets (), (N) or (N, d1, ...). Targets equal to ignore_index count nothing; "mean" divides by the
    summed weight of the counted targets."""
    _choice("nll_loss", "reduction", reduction, ("mean", "sum", "none"))
    x, t = lift(input), lift(target)
    _float_input("nll_loss", x)
    if not dtypes.is_integer(t.dtype):
        raise DTypeError(f"target must hold integer class indices, got {dtypes.short(t.dtype)}", op="nll_loss",
                         source=user_source())
    want = () if x.ndim == 1 else (x.shape[0], *x.shape[2:])
    if x.ndim < 1 or tuple(t.shape) != want:
        raise ShapeError(f"input {tuple(x.shape)} needs target of shape {want}, got {tuple(t.shape)}", op="nll_loss",
                         source=user_source())
    c = x.shape[0 if x.ndim == 1 else 1]
    if x.ndim > 2:  # classes last, then one row per target
        x = transpose(x, (0, *range(2, x.ndim), 1))
    rows = reshape(x, (-1, c))
    flat = check_classes(reshape(t, (-1,)), c, "nll_loss", int(ignore_index))  # now if concrete, else at run time
    keep = not_equal(flat, int(ignore_index))
    safe = where(keep, flat, 0)
    w = astype(keep, x.dtype)
    if weight is not None:
        weight = lift(weight)
        if tuple(weight.shape) != (c,):
            raise ShapeError(f"weight must have shape ({c},), got {tuple(weight.shape)}", op="nll_loss",
                             source=user_source())
        w = w * take(weight, safe)
    losses = -getitem(rows, (arange(rows.shape[0]), safe)) * w
    if reduction == "none":
        return reshape(losses, t.shape)
    return _reduce(losses, reduction, sum(w))


def binary_cross_entropy(input, target, weight=None, *, reduction="mean"):
    """-(target * log(input) + (1 - target) * log(1 - input)) * weight, each log clamped at -100 as
    torch (so a probability of exactly 0 or 1 gives a finite loss). input and target share a shape."""
    _choice("binary_cross_entropy", "reduction", reduction, ("mean", "sum", "none"))
    x, y = lift_all(input, target, op="binary_cross_entropy")
    _float_input("binary_cross_entropy", x)
    _same_shape("binary_cross_entropy", x, y)
    if not isinstance(x, Value):
        v = to_numpy(x)
        if ((v < 0) | (v > 1)).any():
            raise ShapeError("input values must lie in [0, 1]", op="binary_cross_entropy", source=user_source())
    losses = -(y * maximum(log(x), -100.0) + (1.0 - y) * maximum(log1p(-x), -100.0))
    if weight is not None:
        losses = losses * weight
    return _reduce(losses, reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, *, reduction="mean", pos_weight=None):
    """binary_cross_entropy(sigmoid(input), target) in the stable form torch uses:
    (1 - target) * x + (1 + (pos_weight - 1) * target) * softplus(-x), times weight; pos_weight
    (broadcast against the last axis, one per class) weighs the positive term."""
    _choice("binary_cross_entropy_with_logits", "reduction", reduction, ("mean", "sum", "none"))
    x, y = lift_all(input, target, op="binary_cross_entropy_with_logits")
    _float_input("binary_cross_entropy_with_logits", x)
    _same_shape("binary_cross_entropy_with_logits", x, y)
    sp = _softplus(-x)
    if pos_weight is not None:
        sp = (1.0 + (lift(pos_weight) - 1.0) * y) * sp
    losses = (1.0 - y) * x + sp
    if weight is not None:
        losses = losses * weight
    return _reduce(losses, reduction)


# -- normalisation --------------------------------------------------------------------------------


def layer_norm(x, weight=None, bias=None, eps=1e-5, axis=-1):
    """(x - mean) / sqrt(var + eps) over `axis` (int or tuple; biased variance), then * weight + bias.

    weight and bias have the shape of the normalised axes (torch's normalized_shape for trailing axes)."""
    x = lift(x)
    axes = normalize_axes(axis, x.ndim, "layer_norm")
    n = math.prod(x.shape[a] for a in axes)
    d = x - sum(x, axes, keepdims=True) / n
    y = d * rsqrt(sum(d * d, axes, keepdims=True) / n + eps)
    keep = tuple(x.shape[i] if i in axes else 1 for i in range(x.ndim))
    if weight is not None:
        y = y * _reshape_param(weight, keep, "layer_norm", "weight")
    if bias is not None:
        y = y + _reshape_param(bias, keep, "layer_norm", "bias")
    return y


def _reshape_param(p, keep, op, what):
    p = lift(p)
    if p.size != math.prod(keep):
        want = tuple(s for s in keep if s != 1)
        raise ShapeError(f"{what} of shape {tuple(p.shape)} does not match the normalised shape {want}", op=op,
                         source=user_source())
    return reshape(p, keep)


def _bn_axes(x):
    return (0, *range(2, x.ndim))


def batch_norm_stats(x, unbiased=False):
    """Per-channel batch mean and variance of x (N, C, ...) over every axis but 1 (for running stats)."""
    x = lift(x)
    axes = _bn_axes(x)
    n = math.prod(x.shape[a] for a in axes)
    mean = sum(x, axes, keepdims=True) / n
    d = x - mean
    var = sum(d * d, axes, keepdims=True) / (n - int(unbiased))
    return reshape(mean, (x.shape[1],)), reshape(var, (x.shape[1],))


def _bn_normalized(x, eps, unbiased):
    """(xhat, rstd, axes, n): x normalised with batch statistics, and the pieces the fused VJP reuses."""
    axes = _bn_axes(x)
    n = math.prod(x.shape[a] for a in axes)
    d = x - sum(x, axes, keepdims=True) / n
    rstd = rsqrt(sum(d * d, axes, keepdims=True) / (n - int(unbiased)) + eps)
    return d * rstd, rstd, axes, n


def _channel(v, ndim):
    return reshape(v, (1, v.shape[0]) + (1,) * (ndim - 2))


def _bn_infer(x, weight, bias, eps, unbiased):
    if len(x.shape) < 2 or not dtypes.is_float(x.dtype):
        raise ShapeError(f"needs a floating (N, C, ...) input, got {dtypes.short(x.dtype)}{list(x.shape)}",
                         op="batch_norm")
    for what, p in (("weight", weight), ("bias", bias)):
        if tuple(p.shape) != (x.shape[1],) or p.dtype != x.dtype:
            raise ShapeError(f"{what} must be {dtypes.short(x.dtype)}[{x.shape[1]}], got "
                             f"{dtypes.short(p.dtype)}{list(p.shape)}", op="batch_norm")
    if math.prod(x.shape) // x.shape[1] < 2:
        raise ShapeError(f"needs more than one value per channel in training mode, got shape {tuple(x.shape)}",
                         op="batch_norm")
    return tuple(x.shape), x.dtype


def _bn_decompose(x, weight, bias, eps, unbiased):
    xhat = _bn_normalized(x, eps, unbiased)[0]
    return xhat * _channel(weight, x.ndim) + _channel(bias, x.ndim)


def _bn_vjp(g, out, x, weight, bias, eps, unbiased):
    """Fused rule, per channel over its n values (ddof = 1 if unbiased else 0):
    dx = weight * rstd / n * (n*g - sum(g) - n/(n - ddof) * xhat * sum(g*xhat)),
    dweight = sum(g*xhat), dbias = sum(g)."""
    xhat, rstd, axes, n = _bn_normalized(x, eps, unbiased)
    sum_g = sum(g, axes, keepdims=True)
    sum_gx = sum(g * xhat, axes, keepdims=True)
    # the same formula with 1/n moved inside: per-channel factors first, 4 full-size ops instead of 6
    dx = (_channel(weight, x.ndim) * rstd) * (g - sum_g * (1.0 / n) - xhat * (sum_gx * (1.0 / (n - int(unbiased)))))
    c = (x.shape[1],)
    return [dx, reshape(sum_gx, c), reshape(sum_g, c)]


composite("batch_norm", ("x", "weight", "bias"), _bn_infer, _bn_decompose, _bn_vjp,
          doc="Training-mode batch normalisation over every axis but 1, fused three-term VJP.")


def batch_norm(x, weight=None, bias=None, eps=1e-5, unbiased=False, vjp="fused"):
    """Training-mode batch normalisation of x (N, C) or (N, C, H, W) with the batch's statistics over
    every axis but the channel axis 1, then * weight + bias (per channel).

    unbiased=False normalises with the biased variance (as torch.nn.functional.batch_norm does);
    unbiased=True with the n-1 estimate. vjp="fused" records one `batch_norm` node with the
    hand-derived three-term VJP; vjp="composed" records the plain composition."""
    _choice("batch_norm", "vjp", vjp, ("fused", "composed"))
    x = lift(x)
    if x.ndim < 2:
        raise ShapeError(f"needs an (N, C, ...) input, got shape {tuple(x.shape)}", op="batch_norm", source=user_source())
    c = x.shape[1]
    weight = ones((c,), x.dtype) if weight is None else weight
    bias = zeros((c,), x.dtype) if bias is None else bias
    x, weight, bias = lift_all(x, weight, bias, op="batch_norm")
    attrs = {"eps": float(eps), "unbiased": bool(unbiased)}
    _checked("batch_norm", _bn_infer, x, weight, bias, **attrs)
    if vjp == "composed":
        return _bn_decompose(x, weight, bias, **attrs)
    return _apply("batch_norm", _bn_decompose, (x, weight, bias), attrs)


def _normalized_axes(op, x, normalized_shape):
    """The trailing axes named by torch's normalized_shape (an int or a tuple), checked against x."""
    shape = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) else tuple(normalized_shape)
    k = len(shape)
    if k == 0 or k > x.ndim or tuple(x.shape[x.ndim - k:]) != tuple(int(s) for s in shape):
        raise ShapeError(f"normalized_shape {shape} is not the trailing shape of an input of shape {tuple(x.shape)}",
                         op=op, source=user_source())
    return tuple(range(x.ndim - k, x.ndim)), shape


def rms_norm(x, normalized_shape, weight=None, eps=None):
    """x / sqrt(mean(x^2) + eps) over the trailing `normalized_shape` axes, then * weight
    (torch.nn.functional.rms_norm). eps=None means the machine epsilon of x's dtype, as torch."""
    x = lift(x)
    _float_input("rms_norm", x)
    axes, shape = _normalized_axes("rms_norm", x, normalized_shape)
    if eps is None:
        eps = float(ml_dtypes.finfo(x.dtype).eps)
    y = x * rsqrt(sum(x * x, axes, keepdims=True) * (1.0 / math.prod(shape)) + eps)
    if weight is not None:
        weight = lift(weight)
        if tuple(weight.shape) != shape:
            raise ShapeError(f"weight of shape {tuple(weight.shape)} must have the normalized shape {shape}",
                             op="rms_norm", source=user_source())
        y = y * weight
    return y


def group_norm(x, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalise x (N, C, ...) over each group of C // num_groups channels and all positions (biased
    variance), then * weight + bias per channel (torch.nn.functional.group_norm)."""
    x = lift(x)
    _float_input("group_norm", x)
    if x.ndim < 2 or num_groups < 1 or x.shape[1] % num_groups:
        raise ShapeError(f"needs an (N, C, ...) input with C divisible by num_groups={num_groups}, got shape "
                         f"{tuple(x.shape)}", op="group_norm", source=user_source())
    n, c = x.shape[:2]
    m = c // num_groups * math.prod(x.shape[2:])  # explicit, not -1: an empty batch (N = 0) leaves -1 open
    g = reshape(x, (n, num_groups, m))
    if g.size == 0:  # nothing to normalise (torch: an empty result; the parameters' gradients are zero)
        y = x
    else:
        d = g - sum(g, 2, keepdims=True) * (1.0 / m)
        y = reshape(d * rsqrt(sum(d * d, 2, keepdims=True) * (1.0 / m) + eps), x.shape)
    keep = (1, c) + (1,) * (x.ndim - 2)
    if weight is not None:
        y = y * _reshape_param(weight, keep, "group_norm", "weight")
    if bias is not None:
        y = y + _reshape_param(bias, keep, "group_norm", "bias")
    return y


# -- layers ---------------------------------------------------------------------------------------


def linear(x, weight, bias=None):
    """x @ weight.T + bias, with torch's layout: weight is (out_features, in_features)."""
    y = matmul(x, swapaxes(lift(weight), -1, -2))
    return y if bias is None else y + bias


def embedding(weight, indices, padding_idx=None):
    """Rows of `weight` (num_embeddings, dim) at integer `indices`: take(weight, indices, axis=0).
    Positions whose index is `padding_idx` (negative counts from the end) pass no gradient to that row,
    as torch.nn.functional.embedding; the value is unchanged."""
    weight, indices = lift(weight), lift(indices)
    rows = take(weight, indices, axis=0)
    if padding_idx is None:
        return rows
    n = weight.shape[0]
    if not isinstance(padding_idx, (int, np.integer)) or not -n <= padding_idx < n:
        raise ShapeError(f"padding_idx={padding_idx!r} must be an int in [-{n}, {n})", op="embedding",
                         source=user_source())
    live = expand_dims(not_equal(indices, int(padding_idx) % n), -1)
    return where(live, rows, stop_gradient(rows))


def dropout(x, p=0.5, seed=0, training=True):
    """Zero each element with probability p and scale the rest by 1/(1-p). The mask comes from
    np.random.default_rng(seed) and is baked into the graph as a constant (same seed, same mask)."""
    if not 0.0 <= p <= 1.0:
        raise UnsupportedOpError(f"p={p} must lie in [0, 1]", op="dropout", source=user_source())
    x = lift(x)
    if not training or p == 0.0:
        return x
    keep = np.random.default_rng(seed).random(x.shape) >= p
    scale = keep / (1.0 - p) if p < 1.0 else np.zeros(x.shape)
    return multiply(x, scale.astype(x.dtype))


# -- convolution and pooling ----------------------------------------------------------------------


def _batched(op, x, ndim):
    """x with a batch axis (torch accepts unbatched inputs with one axis fewer) and whether it was added."""
    if x.ndim == ndim - 1:
        return reshape(x, (1, *x.shape)), True
    if x.ndim != ndim:
        raise ShapeError(f"needs a {ndim}-d batched or {ndim - 1}-d unbatched input, got shape {tuple(x.shape)}", op=op,
                         source=user_source())
    return x, False


def _groups(op, groups, *channels):
    if not isinstance(groups, (int, np.integer)) or groups < 1 or any(ch % groups for ch in channels):
        raise ShapeError(f"groups={groups!r} must be a positive int dividing the channel counts {channels}", op=op,
                         source=user_source())
    return int(groups)


def _add_bias(op, y, bias):
    if bias is None:
        return y
    bias = lift(bias)
    o = y.shape[1]
    if tuple(bias.shape) != (o,):
        raise ShapeError(f"bias must have shape ({o},), got {tuple(bias.shape)}", op=op, source=user_source())
    return y + reshape(bias, (1, o, 1, 1))


def _conv(op, x, weight, stride, padding, dilation, groups):
    """Grouped 2-D cross-correlation of batched x (N, C, H, W) with weight (O, C/groups, kh, kw): im2col
    (`unfold`), then one batched matmul per group."""
    o, cg, kh, kw = weight.shape
    g = _groups(op, groups, x.shape[1], o)
    if x.shape[1] != cg * g:
        raise ShapeError(f"weight {tuple(weight.shape)} expects {cg * g} input channels (groups={g}), got x of shape "
                         f"{tuple(x.shape)}", op=op, source=user_source())
    cols = unfold(x, (kh, kw), stride, padding, dilation)          # (N, C, kh, kw, OH, OW)
    n, oh, ow = x.shape[0], cols.shape[4], cols.shape[5]
    k = cg * kh * kw
    if g == 1:
        y = matmul(reshape(weight, (o, k)), reshape(cols, (n, k, oh * ow)))
    else:  # (G, O/G, K) @ (N, G, K, P): channels are group-major in x, weight and the output, as torch
        y = matmul(reshape(weight, (g, o // g, k)), reshape(cols, (n, g, k, oh * ow)))
    return reshape(y, (n, o, oh, ow))


def _string_padding(op, x, padding, kernel, stride, dilation):
    """torch's padding="valid" (none) or "same" (output as large as the input; stride 1; an odd total
    pads one more at the end, as torch) for batched NCHW x; other paddings pass through."""
    if not isinstance(padding, str):
        return x, padding
    _choice(op, "padding", padding, ("valid", "same"))
    if padding == "valid":
        return x, 0
    if any(si != 1 for si in stride):
        raise ShapeError(f"padding='same' needs stride 1, got stride {stride}", op=op, source=user_source())
    totals = [di * (ki - 1) for di, ki in zip(dilation, kernel)]
    if all(t % 2 == 0 for t in totals):
        return x, tuple(t // 2 for t in totals)
    return pad(x, ((0, 0), (0, 0), *((t // 2, t - t // 2) for t in totals))), 0


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D cross-correlation (torch.nn.functional.conv2d) of x (N, C, H, W) or (C, H, W) with weight
    (O, C/groups, kh, kw): im2col (`unfold`) then a batched matmul. Output (N, O, OH, OW) with
    OH = floor((H + 2p - d(kh-1) - 1)/s) + 1; padding may also be "valid" or "same"."""
    x, weight = lift_all(x, weight, op="conv2d")
    if weight.ndim != 4:
        raise ShapeError(f"needs weight (O, C/groups, kh, kw), got shape {tuple(weight.shape)}", op="conv2d",
                         source=user_source())
    x, unbatched = _batched("conv2d", x, 4)
    stride, dilation = pair(stride, "stride", "conv2d", 1), pair(dilation, "dilation", "conv2d", 1)
    x, padding = _string_padding("conv2d", x, padding, weight.shape[2:], stride, dilation)
    y = _add_bias("conv2d", _conv("conv2d", x, weight, stride, padding, dilation, groups), bias)
    return reshape(y, y.shape[1:]) if unbatched else y


def _single(v, what, op, minimum=0):
    """An int or a 1-tuple of ints, as an int (conv1d's stride=2 or stride=(2,))."""
    vals = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    if len(vals) != 1 or not isinstance(vals[0], (int, np.integer)) or vals[0] < minimum:
        raise ShapeError(f"{what} must be an int >= {minimum}, got {v!r}", op=op, source=user_source())
    return int(vals[0])


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D cross-correlation (torch.nn.functional.conv1d) of x (N, C, L) or (C, L) with weight
    (O, C/groups, k): conv2d over a height-1 image. Output (N, O, OL), OL = floor((L + 2p - d(k-1) - 1)/s) + 1;
    padding may also be "valid" or "same"."""
    x, weight = lift_all(x, weight, op="conv1d")
    if weight.ndim != 3:
        raise ShapeError(f"needs weight (O, C/groups, k), got shape {tuple(weight.shape)}", op="conv1d",
                         source=user_source())
    x, unbatched = _batched("conv1d", x, 3)
    s, d = _single(stride, "stride", "conv1d", 1), _single(dilation, "dilation", "conv1d", 1)
    x4 = reshape(x, (x.shape[0], x.shape[1], 1, x.shape[2]))
    if isinstance(padding, str):
        x4, p = _string_padding("conv1d", x4, padding, (1, weight.shape[2]), (1, s), (1, d))
    else:
        p = (0, _single(padding, "padding", "conv1d"))
    y = _conv("conv1d", x4, reshape(weight, (*weight.shape[:2], 1, -1)), (1, s), p, (1, d), groups)
    y = _add_bias("conv1d", y, bias)
    y = reshape(y, (y.shape[0], y.shape[1], y.shape[3]))
    return reshape(y, y.shape[1:]) if unbatched else y


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """Transposed convolution (torch.nn.functional.conv_transpose2d), the adjoint of conv2d in its input:
    x (N, Cin, H, W) or (Cin, H, W), weight (Cin, Cout/groups, kh, kw); each input pixel scatters
    weight-scaled patches (a matmul) that `fold` (col2im) adds up. Output height
    (H - 1)s - 2p + d(kh - 1) + output_padding + 1, the output_padding rows/columns added at the end."""
    op = "conv_transpose2d"
    x, weight = lift_all(x, weight, op=op)
    if weight.ndim != 4:
        raise ShapeError(f"needs weight (Cin, Cout/groups, kh, kw), got shape {tuple(weight.shape)}", op=op,
                         source=user_source())
    x, unbatched = _batched(op, x, 4)
    s, p = pair(stride, "stride", op, 1), pair(padding, "padding", op)
    d, op_ = pair(dilation, "dilation", op, 1), pair(output_padding, "output_padding", op)
    cin, cog, kh, kw = weight.shape
    g = _groups(op, groups, cin)
    n, _, h, w = x.shape
    if x.shape[1] != cin:
        raise ShapeError(f"weight {tuple(weight.shape)} expects {cin} input channels, got x of shape {tuple(x.shape)}",
                         op=op, source=user_source())
    if any(q >= si and q >= di for q, si, di in zip(op_, s, d)):
        raise ShapeError(f"output_padding {op_} must be smaller than either stride {s} or dilation {d}", op=op,
                         source=user_source())
    full = tuple((i - 1) * si + di * (ki - 1) + 1 for i, si, di, ki in zip((h, w), s, d, (kh, kw)))
    size = tuple(f - 2 * pi + q for f, pi, q in zip(full, p, op_))  # torch's output size
    if any(v < 1 for v in size):
        raise ShapeError(f"padding {p} leaves no output for input {h}x{w} and kernel {(kh, kw)}", op=op,
                         source=user_source())
    k = cog * kh * kw
    # (G, K, Cin/G) @ (N, G, Cin/G, HW) -> (N, G, K, HW): group-major output channels, as torch
    wt = swapaxes(reshape(weight, (g, cin // g, k)), -1, -2)
    cols = reshape(matmul(wt, reshape(x, (n, g, cin // g, h * w))), (n, g * cog, kh, kw, h, w))
    # the output is the full scatter-add cropped to [p, p + size), which may reach output_padding past its end
    if all(q < si for q, si in zip(op_, s)):  # then fold's own symmetric crop does exactly that
        y = fold(cols, size, (kh, kw), s, p, d)
    else:
        y = fold(cols, full, (kh, kw), s, 0, d)
        y = pad(y, ((0, 0), (0, 0), *((0, builtins.max(0, pi + v - f)) for pi, v, f in zip(p, size, full))))
        y = getitem(y, (slice(None), slice(None), slice(p[0], p[0] + size[0]), slice(p[1], p[1] + size[1])))
    y = _add_bias(op, y, bias)
    return reshape(y, y.shape[1:]) if unbatched else y


def _pool_windows(op, x, kernel_size, stride, padding, value):
    k = pair(kernel_size, "kernel_size", op, 1)
    s = k if stride is None else pair(stride, "stride", op, 1)
    p = pair(padding, "padding", op)
    if any(2 * pi > ki for pi, ki in zip(p, k)):
        raise ShapeError(f"padding {p} must be at most half the kernel size {k}", op=op, source=user_source())
    return unfold(x, k, s, p, 1, value=value), k


def max_pool2d(x, kernel_size, stride=None, padding=0):
    """Max over kernel_size windows of x (N, C, H, W) (torch.nn.functional.max_pool2d); stride defaults
    to the kernel size, padding counts as -inf. The gradient goes to each window's maximum."""
    cols, _ = _pool_windows("max_pool2d", x, kernel_size, stride, padding, -math.inf)
    return max(cols, axis=(2, 3))


def avg_pool2d(x, kernel_size, stride=None, padding=0):
    """Mean over kernel_size windows of x (N, C, H, W) (torch.nn.functional.avg_pool2d with
    count_include_pad=True: padded zeros count toward the kh*kw divisor)."""
    cols, k = _pool_windows("avg_pool2d", x, kernel_size, stride, padding, 0.0)
    return sum(cols, axis=(2, 3)) / (k[0] * k[1])


def _adaptive_size(op, x, output_size):
    """torch's output_size (an int, or a pair whose None entries keep the input's size) as a pair."""
    vals = (output_size, output_size) if output_size is None or isinstance(output_size, (int, np.integer)) \
        else tuple(output_size)
    if len(vals) != 2:
        raise ShapeError(f"output_size must be an int or a pair, got {output_size!r}", op=op, source=user_source())
    out = tuple(int(x.shape[2 + i]) if v is None else v for i, v in enumerate(vals))
    if any(not isinstance(v, (int, np.integer)) or v < 1 for v in out):
        raise ShapeError(f"output_size must hold positive ints, got {output_size!r}", op=op, source=user_source())
    return out


def _adaptive_windows(n, m):
    """torch's windows for m outputs over n inputs: [floor(i n / m), ceil((i + 1) n / m))."""
    return [(i * n // m, -(-(i + 1) * n // m)) for i in range(m)]


def adaptive_avg_pool2d(x, output_size):
    """Mean over torch's adaptive windows of x (N, C, H, W) or (C, H, W). Where the output divides
    the input, windows tile it: a reshape and a mean; otherwise (windows overlap) the separable mean
    is two matmuls with constant averaging matrices (OH, H) and (W, OW)."""
    op = "adaptive_avg_pool2d"
    x = lift(x)
    _float_input(op, x)
    x, unbatched = _batched(op, x, 4)
    (oh, ow), (n, c, h, w) = _adaptive_size(op, x, output_size), x.shape
    if h % oh == 0 and w % ow == 0:
        y = sum(reshape(x, (n, c, oh, h // oh, ow, w // ow)), (3, 5)) * (1.0 / (h // oh * (w // ow)))
    else:
        def averaging(size, m):
            a = np.zeros((m, size), dtype=x.dtype)
            for i, (lo, hi) in enumerate(_adaptive_windows(size, m)):
                a[i, lo:hi] = 1.0 / (hi - lo)
            return a
        y = matmul(matmul(averaging(h, oh), x), averaging(w, ow).T)
    return reshape(y, y.shape[1:]) if unbatched else y


def adaptive_max_pool2d(x, output_size, return_indices=False):
    """Max over torch's adaptive windows of x (N, C, H, W) or (C, H, W). Windows that tile the input
    are a reshape and a max; otherwise each axis gathers its (overlapping, unequal) windows padded to
    the longest with -inf, and takes the max (separable: the max of row maxima is the window max)."""
    op = "adaptive_max_pool2d"
    if return_indices:
        raise UnsupportedOpError("return_indices=True is not supported", op=op, source=user_source())
    x = lift(x)
    _float_input(op, x)
    x, unbatched = _batched(op, x, 4)
    (oh, ow), (n, c, h, w) = _adaptive_size(op, x, output_size), x.shape
    if h % oh == 0 and w % ow == 0:
        y = max(reshape(x, (n, c, oh, h // oh, ow, w // ow)), (3, 5))
    else:
        def window_max(v, axis, size, m):
            spans = _adaptive_windows(size, m)
            k = builtins.max(hi - lo for lo, hi in spans)
            idx = np.array([[builtins.min(lo + j, hi - 1) for j in range(k)] for lo, hi in spans])
            valid = np.array([[lo + j < hi for j in range(k)] for lo, hi in spans])
            vals = take(v, idx, axis=axis)                   # (..., m, k, ...) at `axis`
            valid = valid.reshape(valid.shape + (1,) * (v.ndim - axis - 1))
            return max(where(valid, vals, -math.inf), axis + 1)
        y = window_max(window_max(x, 2, h, oh), 3, w, ow)
    return reshape(y, y.shape[1:]) if unbatched else y


# -- attention ------------------------------------------------------------------------------------


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False, seed=None):
    """softmax(query @ key^T * scale + bias) @ value over (..., L, E), (..., S, E), (..., S, Ev) operands
    (torch.nn.functional.scaled_dot_product_attention); leading axes broadcast.

    scale defaults to 1/sqrt(E). attn_mask (broadcast to (..., L, S)): a bool mask keeps positions where
    True, a float mask is added. is_causal keeps key j <= query i (top-left aligned, as torch). A query
    row with every key masked gives zeros (as torch). enable_gqa repeats each key/value head (axis -3)
    for its group of query heads. dropout_p > 0 needs `seed`: the mask is a graph constant drawn as
    gr.nn.dropout draws it."""
    op = "scaled_dot_product_attention"
    q, k, v = lift_all(query, key, value, op=op)
    _float_input(op, q)
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2 or q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ShapeError(f"needs query (..., L, E), key (..., S, E) and value (..., S, Ev), got {tuple(q.shape)}, "
                         f"{tuple(k.shape)} and {tuple(v.shape)}", op=op, source=user_source())
    if attn_mask is not None and is_causal:
        raise UnsupportedOpError("pass either attn_mask or is_causal=True, not both (as torch)", op=op, source=user_source())
    if dropout_p > 0.0 and seed is None:
        raise UnsupportedOpError(f"dropout_p={dropout_p} needs seed=<int>: gradir bakes the dropout mask into the graph "
                                 "as a constant (see gr.nn.dropout)", op=op, source=user_source())
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        hq, hk = q.shape[-3], k.shape[-3]
        if hk == 0 or hq % hk:
            raise ShapeError(f"enable_gqa needs the query heads ({hq}) to be a multiple of the key heads ({hk})", op=op,
                             source=user_source())

        def repeat_heads(t):  # torch's repeat_interleave on axis -3: query head i uses key head i // (hq // hk)
            t = expand_dims(t, -3)
            t = broadcast_to(t, (*t.shape[:-4], hk, hq // hk, *t.shape[-2:]))
            return reshape(t, (*t.shape[:-4], hq, *t.shape[-2:]))
        k, v = repeat_heads(k), repeat_heads(v)
    e, (lq, s) = q.shape[-1], (q.shape[-2], k.shape[-2])
    scores = matmul(q, swapaxes(k, -1, -2)) * (1.0 / math.sqrt(e) if scale is None else float(scale))
    if is_causal:  # top-left aligned: every query keeps key 0, so no row is fully masked
        scores = where(greater_equal(expand_dims(arange(lq), 1), expand_dims(arange(s), 0)), scores, -math.inf)
    elif attn_mask is not None:
        mask = lift(attn_mask)
        scores = where(mask, scores, -math.inf) if mask.dtype == dtypes.bool_ else scores + mask
    if attn_mask is not None:  # a mask may hide a whole row: softmax that maps an all -inf row to zeros, not 0/0
        m = stop_gradient(max(scores, -1, keepdims=True))
        ex = exp(scores - where(equal(m, -math.inf), 0.0, m))
        total = sum(ex, -1, keepdims=True)
        attn = ex / where(equal(total, 0.0), 1.0, total)
    else:
        attn = softmax(scores, -1)
    if dropout_p > 0.0:
        attn = dropout(attn, dropout_p, seed)
    return matmul(attn, v)
