"""Losses: cross_entropy (a composite primitive with a fused VJP), mse, nll, binary cross-entropy."""

from __future__ import annotations

from gradir.core import dtypes
from gradir.core.errors import DTypeError, ShapeError
from gradir.core.ir import Value
from gradir.core.trace import user_source
from gradir.ops.creation import arange
from gradir.ops.elementwise import log, log1p, maximum, not_equal, where
from gradir.ops.indexing import check_classes, getitem, one_hot, take
from gradir.ops.lifting import astype, lift, lift_all, to_numpy
from gradir.ops.nn.activations import log_softmax, softmax, stable_softplus
from gradir.ops.nn.composite import apply, checked, choice, composite, float_input
from gradir.ops.reductions import sum
from gradir.ops.shapes import expand_dims, reshape, transpose

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
    choice("cross_entropy", "reduction", reduction, ("mean", "sum", "none"))
    choice("cross_entropy", "vjp", vjp, ("fused", "composed"))
    ignore_index = None if ignore_index is None else int(ignore_index)
    logits, targets = lift(logits), lift(targets)
    attrs = {"reduction": reduction, "ignore_index": ignore_index}
    checked("cross_entropy", _ce_infer, logits, targets, **attrs)
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
    return apply("cross_entropy", _ce_decompose, (logits, targets), attrs)


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



def mse_loss(input, target, *, reduction="mean", weight=None):
    """(input - target)^2, reduced (torch.nn.functional.mse_loss; input and target broadcast). With
    `weight` (input's shape) each term is weighted and "mean" divides by sum(weight), as torch."""
    choice("mse_loss", "reduction", reduction, ("mean", "sum", "none"))
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
    choice("nll_loss", "reduction", reduction, ("mean", "sum", "none"))
    x, t = lift(input), lift(target)
    float_input("nll_loss", x)
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
    choice("binary_cross_entropy", "reduction", reduction, ("mean", "sum", "none"))
    x, y = lift_all(input, target, op="binary_cross_entropy")
    float_input("binary_cross_entropy", x)
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
    choice("binary_cross_entropy_with_logits", "reduction", reduction, ("mean", "sum", "none"))
    x, y = lift_all(input, target, op="binary_cross_entropy_with_logits")
    float_input("binary_cross_entropy_with_logits", x)
    _same_shape("binary_cross_entropy_with_logits", x, y)
    sp = stable_softplus(-x)
    if pos_weight is not None:
        sp = (1.0 + (lift(pos_weight) - 1.0) * y) * sp
    losses = (1.0 - y) * x + sp
    if weight is not None:
        losses = losses * weight
    return _reduce(losses, reduction)
