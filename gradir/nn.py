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

import math

import numpy as np

from gradir import dtypes
from gradir.errors import DTypeError, GradirError, ShapeError, UnsupportedOpError
from gradir.ir import Graph, Value
from gradir.ops import (
    arange,
    astype,
    erf,
    exp,
    expand_dims,
    getitem,
    log,
    matmul,
    max,
    multiply,
    not_equal,
    one_hot,
    ones,
    relu,
    reshape,
    rsqrt,
    sigmoid,
    stop_gradient,
    sum,
    swapaxes,
    take,
    tanh,
    where,
    zeros,
)
from gradir.ops.conv import fold, out_size, pair, unfold
from gradir.ops.indexing import check_classes
from gradir.ops.lifting import lift, lift_all, normalize_axes, to_numpy
from gradir.primitive import Primitive, get_primitive, register
from gradir.trace import EagerOperand, bind, building, constant, is_traced, user_source

__all__ = ["avg_pool2d", "batch_norm", "batch_norm_stats", "composite", "conv2d", "cross_entropy", "dropout",
           "embedding", "fold", "gelu", "layer_norm", "linear", "log_softmax", "max_pool2d", "one_hot", "out_size",
           "relu", "sigmoid", "softmax", "tanh", "unfold"]


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


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along `axis`, shifted by the (non-differentiated) max for stability."""
    x = lift(x)
    e = exp(x - stop_gradient(max(x, axis, keepdims=True)))
    return e / sum(e, axis, keepdims=True)


def log_softmax(x, axis=-1):
    """x - logsumexp(x) along `axis`, shifted by the (non-differentiated) max for stability."""
    x = lift(x)
    z = x - stop_gradient(max(x, axis, keepdims=True))
    return z - log(sum(exp(z), axis, keepdims=True))


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


# -- layers ---------------------------------------------------------------------------------------


def linear(x, weight, bias=None):
    """x @ weight.T + bias, with torch's layout: weight is (out_features, in_features)."""
    y = matmul(x, swapaxes(lift(weight), -1, -2))
    return y if bias is None else y + bias


def embedding(weight, indices):
    """Rows of `weight` (num_embeddings, dim) at integer `indices`: take(weight, indices, axis=0)."""
    return take(weight, indices, axis=0)


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


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1):
    """2-D cross-correlation (torch.nn.functional.conv2d, groups=1) of x (N, C, H, W) with weight
    (O, C, kh, kw): im2col (`unfold`) then one batched matmul. Output (N, O, OH, OW) with
    OH = floor((H + 2p - d(kh-1) - 1)/s) + 1."""
    x, weight = lift_all(x, weight, op="conv2d")
    if x.ndim != 4 or weight.ndim != 4 or x.shape[1] != weight.shape[1]:
        raise ShapeError(f"needs x (N, C, H, W) and weight (O, C, kh, kw), got {tuple(x.shape)} and "
                         f"{tuple(weight.shape)}", op="conv2d", source=user_source())
    o, c, kh, kw = weight.shape
    cols = unfold(x, (kh, kw), stride, padding, dilation)          # (N, C, kh, kw, OH, OW)
    n, oh, ow = x.shape[0], cols.shape[4], cols.shape[5]
    y = matmul(reshape(weight, (o, c * kh * kw)), reshape(cols, (n, c * kh * kw, oh * ow)))
    y = reshape(y, (n, o, oh, ow))
    if bias is not None:
        bias = lift(bias)
        if bias.shape != (o,):
            raise ShapeError(f"bias must have shape ({o},), got {tuple(bias.shape)}", op="conv2d", source=user_source())
        y = y + reshape(bias, (1, o, 1, 1))
    return y


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

