"""Losses: cross_entropy (a composite primitive with a fused VJP), mse, l1, smooth l1, huber, kl_div, nll, binary
cross-entropy."""

from __future__ import annotations

from gradir.core import dtypes
from gradir.core.errors import DTypeError, ShapeError, UnsupportedOpError
from gradir.core.ir import Value
from gradir.core.trace import user_source
from gradir.ops.creation import arange
from gradir.ops.elementwise import abs, equal, exp, less, log, log1p, maximum, not_equal, where
from gradir.ops.indexing import check_classes, getitem, one_hot, take
from gradir.ops.lifting import astype, lift, lift_all, to_numpy, type_str
from gradir.ops.nn.activations import log_softmax, softmax, stable_softplus
from gradir.ops.nn.composite import apply, checked, choice, composite, float_input
from gradir.ops.reductions import sum
from gradir.ops.shapes import expand_dims, reshape, transpose

__all__ = ["binary_cross_entropy", "binary_cross_entropy_with_logits", "cross_entropy", "huber_loss", "kl_div", "l1_loss",
           "mse_loss", "nll_loss", "smooth_l1_loss"]

_REDUCTIONS = ("mean", "sum", "none")  # torch's reduction= of every loss (kl_div adds "batchmean")

# -- cross-entropy (composite) --------------------------------------------------------------------
# Every form is -sum_c Q[i, c] * log_softmax(logits)[i, c] per row i, for a row of target weights Q: one-hot
# (class indices), weight[target] * one-hot (weight=), plus (eps / C) * weight on every class (label smoothing),
# or the given probabilities (smoothed, times weight). Hence one fused VJP: d/dlogits = (sum_c Q) * softmax - Q.


def _ce_infer(logits, targets, *weight, reduction, ignore_index, label_smoothing=0.0):
    if not dtypes.is_float(logits.dtype):
        raise DTypeError(f"logits must be floating, got {dtypes.short(logits.dtype)}", op="cross_entropy")
    if len(logits.shape) < 1:
        raise ShapeError("logits must have a class axis (the last), got a 0-d value", op="cross_entropy")
    if dtypes.is_float(targets.dtype):  # class probabilities
        if tuple(targets.shape) != tuple(logits.shape) or targets.dtype != logits.dtype:
            raise ShapeError(f"probability targets must be {type_str(logits)} as the logits, got {type_str(targets)}",
                             op="cross_entropy")
        if ignore_index is not None and ignore_index >= 0:
            raise UnsupportedOpError(f"ignore_index={ignore_index} is not supported for probability targets (as torch)",
                                     op="cross_entropy")
    elif not dtypes.is_integer(targets.dtype):
        raise DTypeError(f"targets must be integer class indices or float probabilities, got "
                         f"{dtypes.short(targets.dtype)}", op="cross_entropy")
    elif tuple(logits.shape[:-1]) != tuple(targets.shape):
        raise ShapeError(f"logits {tuple(logits.shape)} need targets of shape {tuple(logits.shape[:-1])}, got "
                         f"{tuple(targets.shape)}", op="cross_entropy")
    for w in weight:
        if tuple(w.shape) != (logits.shape[-1],) or w.dtype != logits.dtype:
            raise ShapeError(f"weight must be {dtypes.short(logits.dtype)}[{logits.shape[-1]}] (one per class), got "
                             f"{type_str(w)}", op="cross_entropy")
    return (tuple(logits.shape[:-1]) if reduction == "none" else ()), logits.dtype


def _ce_targets(targets, ignore_index, c):
    """Flat targets with ignored rows pointed at class 0, and the keep mask (None: keep all).
    Targets outside [0, c) (other than ignore_index) raise, at run time when traced (as torch)."""
    t = check_classes(reshape(targets, (-1,)), c, "cross_entropy", ignore_index)
    if ignore_index is None:
        return t, None
    keep = not_equal(t, ignore_index)
    return where(keep, t, 0), keep


def _ce_probs(targets, w, eps, c, weighted=True):
    """Probability targets as rows (-1, C), smoothed toward uniform by eps, times the class weights."""
    q = reshape(targets, (-1, c))
    if eps:
        q = q * (1.0 - eps) + eps / c
    return q * w if weighted and w is not None else q


def _ce_decompose(logits, targets, *weight, reduction, ignore_index, label_smoothing=0.0):
    """-sum(Q * log_softmax(logits)) per row (see above), masked where target == ignore_index, then reduced:
    "mean" divides by the summed weight[target] of the kept rows (class indices) or by the row count
    (probabilities), as torch."""
    c, eps = logits.shape[-1], label_smoothing
    w = weight[0] if weight else None
    if dtypes.is_float(targets.dtype):
        logp = reshape(log_softmax(logits), (-1, c))
        losses = -sum(logp * _ce_probs(targets, w, eps, c), -1)
        if reduction == "none":
            return reshape(losses, logits.shape[:-1])
        return sum(losses) if reduction == "sum" else sum(losses) / losses.shape[0]
    t, keep = _ce_targets(targets, ignore_index, c)
    logp = reshape(log_softmax(logits), (-1, c))
    losses = -getitem(logp, (arange(t.shape[0]), t))
    rows = None  # weight[target] per row (None: all 1), the denominator of "mean"
    if w is not None:
        rows = take(w, t)
        losses = losses * rows
    if eps:
        losses = (1.0 - eps) * losses - (eps / c) * sum(logp if w is None else logp * w, -1)
    if keep is not None:
        losses = where(keep, losses, 0.0)
        rows = astype(keep, logits.dtype) if rows is None else where(keep, rows, 0.0)
    if reduction == "none":
        return reshape(losses, targets.shape)
    total = sum(losses)
    if reduction == "sum":
        return total
    return total / (sum(rows) if rows is not None else t.shape[0])


def _ce_vjp(g, out, logits, targets, *weight, reduction, ignore_index, label_smoothing=0.0):
    """Fused rule: d loss / d logits = ((sum_c Q) * softmax(logits) - Q) * g / n, ignored rows zero; with no
    weight nor smoothing that is (softmax - onehot) * g / n. Probability targets get -(1 - eps) * weight *
    log_softmax * g / n, and weight its sum over rows (mean: less the denominator's share)."""
    c, eps, dt = logits.shape[-1], label_smoothing, logits.dtype
    w = weight[0] if weight else None
    row = reshape(g, (-1,)) if reduction == "none" else g  # upstream cotangent per row (or one scalar)
    if dtypes.is_float(targets.dtype):
        p = reshape(softmax(logits), (-1, c))
        q = _ce_probs(targets, w, eps, c)
        if reduction == "mean":
            row = row / q.shape[0]
        r = expand_dims(row, -1) if row.ndim else row
        logp = reshape(log_softmax(logits), (-1, c))
        dq = logp * (1.0 - eps) if w is None else logp * (w * (1.0 - eps))
        cts = [reshape((expand_dims(sum(q, -1), -1) * p - q) * r, logits.shape), reshape(-(dq * r), targets.shape)]
        if w is not None:
            cts.append(-sum(logp * _ce_probs(targets, w, eps, c, weighted=False) * r, 0))
        return cts
    t, keep = _ce_targets(targets, ignore_index, c)
    a = None if w is None else take(w, t)  # weight[target] per row
    if keep is not None:
        mask = astype(keep, dt)
        row = row * mask
        if reduction == "mean":
            row = row / sum(mask if a is None else mask * a)
    elif reduction == "mean":
        row = row / (t.shape[0] if a is None else sum(a))
    r = expand_dims(row, -1) if row.ndim else row
    p = reshape(softmax(logits), (-1, c))
    onehot = one_hot(t, c, dt)
    if w is None and not eps:
        diff = p - onehot
    elif w is None:  # Q = (1 - eps) * onehot + eps / C, whose rows sum to 1
        diff = p - (onehot * (1.0 - eps) + eps / c)
    else:  # Q = (1 - eps) * weight[t] * onehot + (eps / C) * weight
        share = a * (1.0 - eps)
        q = onehot * expand_dims(share, -1)
        if eps:
            q = q + w * (eps / c)
            share = share + sum(w) * (eps / c)
        diff = expand_dims(share, -1) * p - q
    cts = [reshape(diff * r, logits.shape), None]
    if w is not None:  # d/dweight[k]: the rows whose target is k, and (smoothing) every row; "mean": less out / D
        logp = reshape(log_softmax(logits), (-1, c))
        picked = -getitem(logp, (arange(t.shape[0]), t)) * (1.0 - eps)
        if reduction == "mean":
            picked = picked - out
        dw = sum(onehot * expand_dims(picked * row, -1), 0)
        cts.append(dw - sum(logp * r, 0) * (eps / c) if eps else dw)
    return cts


composite("cross_entropy", ("logits", "targets", "weight"), _ce_infer, _ce_decompose, _ce_vjp,
          doc="Softmax cross-entropy of (..., C) logits against class indices or probabilities (optional class "
              "weight operand, label smoothing), fused VJP (sum Q) * softmax - Q.")


def cross_entropy(logits, targets, reduction="mean", ignore_index=None, vjp="fused", *, weight=None, label_smoothing=0.0):
    """Softmax cross-entropy (torch.nn.functional.cross_entropy) of logits (..., C) over the last axis
    against integer class targets (...) or class probabilities (a float array of the logits' shape).

    reduction: "mean", "sum" or "none"; "mean" divides by the summed weight[target] of the counted rows
    (class indices) or by the number of rows (probabilities), as torch. Rows whose target equals
    `ignore_index` count nothing (class indices only; as torch, a negative one is accepted and unused
    with probabilities). weight: one factor per class. label_smoothing eps in [0, 1] mixes the target
    with the uniform distribution: (1 - eps) * target + eps / C. vjp="fused" records one
    `cross_entropy` node whose VJP is the hand-derived ``((sum Q) * softmax - Q) * g / n`` (Q the
    weighted target distribution); vjp="composed" records log_softmax + gather + mean.
    """
    choice("cross_entropy", "reduction", reduction, _REDUCTIONS)
    choice("cross_entropy", "vjp", vjp, ("fused", "composed"))
    if not 0.0 <= label_smoothing <= 1.0:
        raise UnsupportedOpError(f"label_smoothing={label_smoothing} must lie in [0, 1]", op="cross_entropy",
                                 source=user_source())
    ignore_index = None if ignore_index is None else int(ignore_index)
    logits, targets = lift(logits), lift(targets)
    operands = [logits, targets]
    if dtypes.is_float(targets.dtype) and dtypes.is_float(logits.dtype):
        operands[1] = astype(targets, logits.dtype)  # as torch: the logits' dtype
    if weight is not None:
        weight = lift(weight)
        operands.append(astype(weight, logits.dtype) if dtypes.is_float(logits.dtype) else weight)
    attrs = {"reduction": reduction, "ignore_index": ignore_index}
    if label_smoothing:
        attrs["label_smoothing"] = float(label_smoothing)  # only when set: the default node keeps its short form
    checked("cross_entropy", _ce_infer, *operands, **attrs)
    if not isinstance(targets, Value) and not dtypes.is_float(targets.dtype):
        t = to_numpy(targets)
        bad = (t < 0) | (t >= logits.shape[-1])
        if ignore_index is not None:
            bad &= t != ignore_index
        if bad.any():
            raise ShapeError(f"target {t[bad].flat[0]} is out of range for {logits.shape[-1]} classes",
                             op="cross_entropy", source=user_source())
    if vjp == "composed":
        return _ce_decompose(*operands, **attrs)
    return apply("cross_entropy", _ce_decompose, tuple(operands), attrs)


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
    choice("mse_loss", "reduction", reduction, _REDUCTIONS)
    input, target = lift_all(input, target, op="mse_loss")
    d = input - target
    return _weighted("mse_loss", input, d * d, weight, reduction)


def _weighted(op, input, losses, weight, reduction, mean_over_weight=True):
    """losses * weight (input's shape), reduced as torch's functional losses do: "mean" divides by sum(weight)
    (mse, l1) or by the element count (huber, `mean_over_weight=False`)."""
    if weight is None:
        return _reduce(losses, reduction)
    weight = lift(weight)
    _same_shape(op, input, weight, "weight")
    losses = losses * weight
    return _reduce(losses, reduction, sum(weight) if mean_over_weight else None)


def l1_loss(input, target, *, reduction="mean", weight=None):
    """|input - target|, reduced (torch.nn.functional.l1_loss; input and target broadcast). With `weight`
    (input's shape) each term is weighted and "mean" divides by sum(weight), as torch. The derivative at
    input == target is 0 (abs's, as torch)."""
    choice("l1_loss", "reduction", reduction, _REDUCTIONS)
    input, target = lift_all(input, target, op="l1_loss")
    return _weighted("l1_loss", input, abs(input - target), weight, reduction)


def smooth_l1_loss(input, target, *, reduction="mean", beta=1.0):
    """0.5 * d^2 / beta where |d| < beta, |d| - 0.5 * beta elsewhere, d = input - target, reduced
    (torch.nn.functional.smooth_l1_loss); beta = 0 is l1_loss."""
    choice("smooth_l1_loss", "reduction", reduction, _REDUCTIONS)
    if beta < 0:
        raise UnsupportedOpError(f"beta={beta} must not be negative", op="smooth_l1_loss", source=user_source())
    input, target = lift_all(input, target, op="smooth_l1_loss")
    d = input - target
    a = abs(d)
    if beta == 0:
        return _reduce(a, reduction)
    return _reduce(where(less(a, beta), d * d * (0.5 / beta), a - 0.5 * beta), reduction)


def huber_loss(input, target, *, reduction="mean", delta=1.0, weight=None):
    """0.5 * d^2 where |d| < delta, delta * (|d| - 0.5 * delta) elsewhere, d = input - target, reduced
    (torch.nn.functional.huber_loss; delta > 0). With `weight` (input's shape) each term is weighted and
    "mean" stays the plain mean, as torch."""
    choice("huber_loss", "reduction", reduction, _REDUCTIONS)
    if not delta > 0:
        raise UnsupportedOpError(f"delta={delta} must be positive", op="huber_loss", source=user_source())
    input, target = lift_all(input, target, op="huber_loss")
    d = input - target
    a = abs(d)
    losses = where(less(a, delta), d * d * 0.5, (a - 0.5 * delta) * delta)
    return _weighted("huber_loss", input, losses, weight, reduction, mean_over_weight=False)


def _xlogx(t):
    """t * log(t), 0 at t = 0 (torch.xlogy(t, t)); nan for t < 0. The derivative at 0 is taken as 0 (torch's
    is nan there: t / t)."""
    zero = equal(t, 0.0)
    return where(zero, 0.0, t * log(where(zero, 1.0, t)))


def kl_div(input, target, *, reduction="mean", log_target=False):
    """Kullback-Leibler divergence terms target * (log(target) - input) of log-probabilities `input`
    (torch.nn.functional.kl_div; 0 where target is 0); with log_target the target is a log-probability too:
    exp(target) * (target - input). reduction "batchmean" sums and divides by input.shape[0] (the
    mathematically right KL per sample), "mean" divides by the element count, as torch."""
    choice("kl_div", "reduction", reduction, (*_REDUCTIONS, "batchmean"))
    input, target = lift_all(input, target, op="kl_div")
    float_input("kl_div", input)
    losses = exp(target) * (target - input) if log_target else _xlogx(target) - target * input
    if reduction != "batchmean":
        return _reduce(losses, reduction)
    total = sum(losses)
    return total / input.shape[0] if input.ndim else total


def nll_loss(input, target, weight=None, *, ignore_index=-100, reduction="mean"):
    """Negative log-likelihood (torch.nn.functional.nll_loss): -input[n, target[n]] * weight[target[n]]
    of log-probabilities input (C,), (N, C) or (N, C, d1, ...) (classes on axis 1) against integer
    targets (), (N) or (N, d1, ...). Targets equal to ignore_index count nothing; "mean" divides by the
    summed weight of the counted targets."""
    choice("nll_loss", "reduction", reduction, _REDUCTIONS)
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
    choice("binary_cross_entropy", "reduction", reduction, _REDUCTIONS)
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
    choice("binary_cross_entropy_with_logits", "reduction", reduction, _REDUCTIONS)
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
