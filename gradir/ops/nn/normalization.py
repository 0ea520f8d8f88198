"""Normalisation: layer_norm, batch_norm (a composite primitive; evaluation mode with running statistics), rms_norm,
group_norm, instance_norm."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from gradir.core import dtypes
from gradir.core.errors import ShapeError, UnsupportedOpError
from gradir.core.trace import user_source
from gradir.ops.creation import ones, zeros
from gradir.ops.elementwise import rsqrt
from gradir.ops.lifting import lift, lift_all, normalize_axes
from gradir.ops.nn.composite import apply, checked, choice, composite, float_input
from gradir.ops.reductions import sum
from gradir.ops.shapes import reshape

__all__ = ["batch_norm", "batch_norm_stats", "group_norm", "instance_norm", "layer_norm", "rms_norm"]

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


def batch_norm(x, weight=None, bias=None, eps=1e-5, unbiased=False, vjp="fused", *, running_mean=None,
               running_var=None, training=True):
    """Batch normalisation of x (N, C) or (N, C, H, W) over every axis but the channel axis 1, then
    * weight + bias (per channel).

    training=True (the default) normalises with the batch's statistics: unbiased=False with the biased
    variance (as torch.nn.functional.batch_norm does), unbiased=True with the n-1 estimate; vjp="fused"
    records one `batch_norm` node with the hand-derived three-term VJP, vjp="composed" the plain
    composition. training=False is torch's evaluation mode: (x - running_mean) / sqrt(running_var + eps)
    with the given per-channel statistics (a plain composition, differentiable in all five operands).
    gradir values are immutable, so training mode does not update running statistics in place: compute
    the batch's with batch_norm_stats and blend them yourself."""
    choice("batch_norm", "vjp", vjp, ("fused", "composed"))
    x = lift(x)
    if x.ndim < 2:
        raise ShapeError(f"needs an (N, C, ...) input, got shape {tuple(x.shape)}", op="batch_norm", source=user_source())
    if not training:
        return _with_statistics("batch_norm", x, running_mean, running_var, weight, bias, eps)
    if running_mean is not None or running_var is not None:
        raise UnsupportedOpError("training mode cannot update running_mean/running_var in place (gradir values are "
                                 "immutable): leave them out, and compute the batch's with gr.nn.batch_norm_stats",
                                 op="batch_norm", source=user_source())
    c = x.shape[1]
    weight = ones((c,), x.dtype) if weight is None else weight
    bias = zeros((c,), x.dtype) if bias is None else bias
    x, weight, bias = lift_all(x, weight, bias, op="batch_norm")
    attrs = {"eps": float(eps), "unbiased": bool(unbiased)}
    checked("batch_norm", _bn_infer, x, weight, bias, **attrs)
    if vjp == "composed":
        return _bn_decompose(x, weight, bias, **attrs)
    return apply("batch_norm", _bn_decompose, (x, weight, bias), attrs)


def _with_statistics(op, x, mean, var, weight, bias, eps):
    """(x - mean) / sqrt(var + eps) * weight + bias with given per-channel statistics (C,) on axis 1:
    batch_norm's evaluation mode and instance_norm's use_input_stats=False."""
    float_input(op, x)
    if mean is None or var is None:
        raise ShapeError("needs running_mean and running_var (one per channel) to normalise with given statistics",
                         op=op, source=user_source())
    keep = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    mean, var = _reshape_param(mean, keep, op, "running_mean"), _reshape_param(var, keep, op, "running_var")
    y = (x - mean) * rsqrt(var + eps)
    if weight is not None:
        y = y * _reshape_param(weight, keep, op, "weight")
    if bias is not None:
        y = y + _reshape_param(bias, keep, op, "bias")
    return y


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5):
    """Normalise each sample's channel of input (N, C, ...) over its positions (biased variance), then
    * weight + bias per channel (torch.nn.functional.instance_norm; group_norm with one group per channel).

    use_input_stats=False normalises with the given running_mean and running_var (C,) instead, as torch's
    evaluation form. With use_input_stats=True torch would update given running statistics in place, which
    gradir's immutable values cannot: pass them only with use_input_stats=False. `momentum` (the update's rate)
    is accepted for torch's signature and never used."""
    x = lift(input)
    float_input("instance_norm", x)
    if x.ndim < 2:
        raise ShapeError(f"needs an (N, C, ...) input, got shape {tuple(x.shape)}", op="instance_norm",
                         source=user_source())
    if not use_input_stats:
        return _with_statistics("instance_norm", x, running_mean, running_var, weight, bias, eps)
    if running_mean is not None or running_var is not None:
        raise UnsupportedOpError("use_input_stats=True cannot update running_mean/running_var in place (gradir values "
                                 "are immutable): pass them only with use_input_stats=False", op="instance_norm",
                                 source=user_source())
    if math.prod(x.shape[2:]) <= 1:
        raise ShapeError(f"needs more than one position per channel, got shape {tuple(x.shape)} (as torch)",
                         op="instance_norm", source=user_source())
    return group_norm(x, x.shape[1], weight, bias, eps)


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
    float_input("rms_norm", x)
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
    float_input("group_norm", x)
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
