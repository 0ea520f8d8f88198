"""The ATen -> gradir table's neural-network ops onto gr.nn: normalization, convolution, pooling, padding and
pixel shuffles, embeddings, losses and distances, attention and dropout, assembled into TABLE by aten_table."""

from __future__ import annotations

import math

import numpy as np

from gradir import ops
from gradir.core import dtypes
from gradir.frontends.aten_common import REDUCTION, Multi, NeedsSeed, ndim_of, not_computed, shape_of, unsupported
from gradir.ops import nn as gnn

# -- normalization --------------------------------------------------------------------------------


def _layer_norm_axes(x, normalized_shape):
    return tuple(range(ndim_of(x) - len(normalized_shape), ndim_of(x)))


def _native_layer_norm(x, normalized_shape, weight, bias, eps):
    axes = _layer_norm_axes(x, normalized_shape)

    def rstd():
        return ops.rsqrt(ops.add(ops.var(x, axes, keepdims=True), eps))
    return Multi(lambda: gnn.layer_norm(x, weight, bias, eps, axis=axes),
                 lambda: ops.mean(x, axes, keepdims=True), rstd)


def _layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    return gnn.layer_norm(x, weight, bias, eps, axis=_layer_norm_axes(x, normalized_shape))


def _bn_eval(x, weight, bias, mean, var, eps):
    return gnn.batch_norm(x, weight, bias, eps, running_mean=mean, running_var=var, training=False)


def _bn_train(x, weight, bias, running_mean, running_var, momentum, eps):
    """(out, batch mean, batch invstd, new running mean, new running var), as torch's functional op:
    running stats move by `momentum` toward the batch mean and the unbiased batch variance."""
    n = math.prod(shape_of(x)) // shape_of(x)[1]

    def stats():
        return gnn.batch_norm_stats(ops.stop_gradient(x))

    def running(i, old, scale):
        return lambda: ops.add(ops.multiply(old, 1.0 - momentum), ops.multiply(stats()[i], momentum * scale))
    return Multi(lambda: gnn.batch_norm(x, weight, bias, eps),
                 lambda: gnn.batch_norm_stats(x)[0], lambda: ops.rsqrt(ops.add(gnn.batch_norm_stats(x)[1], eps)),
                 running(0, running_mean, 1.0), running(1, running_var, n / max(n - 1, 1)))


def _bn_functional(x, weight, bias, running_mean, running_var, training, momentum, eps):
    if training:
        return _bn_train(x, weight, bias, running_mean, running_var, momentum, eps)
    return Multi(lambda: _bn_eval(x, weight, bias, running_mean, running_var, eps), lambda: running_mean,
                 lambda: running_var, lambda: running_mean, lambda: running_var)


def _bn_no_training(x, weight, bias, running_mean, running_var, momentum, eps):
    return Multi(lambda: _bn_eval(x, weight, bias, running_mean, running_var, eps), lambda: running_mean,
                 lambda: running_var)


def _bn_no_stats(x, weight, bias, training, momentum, eps):
    return Multi(lambda: gnn.batch_norm(x, weight, bias, eps), lambda: gnn.batch_norm_stats(x)[0],
                 lambda: ops.rsqrt(ops.add(gnn.batch_norm_stats(x)[1], eps)))


def _batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled=True):
    if training:
        return gnn.batch_norm(x, weight, bias, eps)
    return _bn_eval(x, weight, bias, running_mean, running_var, eps)


def _instance_norm(x, weight, bias, running_mean, running_var, use_input_stats, momentum, eps, cudnn_enabled=True):
    """With input statistics, torch also moves given running statistics in place, which the graph that keeps
    instance_norm whole (decompose=False) does not record; from_torch says so on f.notes. The decomposed capture
    (the default) records the update as a buffer output."""
    stats = (None, None) if use_input_stats else (running_mean, running_var)
    return gnn.instance_norm(x, *stats, weight, bias, use_input_stats, momentum, eps)


def _group_norm(x, weight, bias, n, c, hw, group, eps):
    """native_group_norm -> (out, mean, rstd); mean and rstd per (sample, group)."""
    def stats(i):
        g = ops.reshape(x, (n, group, c // group * hw))  # not -1, which an empty batch (n = 0) leaves open
        return [lambda: ops.mean(g, 2), lambda: ops.rsqrt(ops.add(ops.var(g, 2), eps))][i]()
    return Multi(lambda: gnn.group_norm(x, group, weight, bias, eps), lambda: stats(0), lambda: stats(1))


def _rms_norm(x, normalized_shape, weight=None, eps=None):
    return gnn.rms_norm(x, tuple(normalized_shape), weight, eps)


def _fused_rms_norm(x, normalized_shape, weight=None, eps=None):
    return Multi(lambda: _rms_norm(x, normalized_shape, weight, eps), not_computed("_fused_rms_norm", "rstd"))


# -- convolution ----------------------------------------------------------------------------------


def _spatial(v, k):
    """ATen's per-axis convolution parameter for k spatial axes: a list of one entry means that entry on every
    axis (nn.Conv2d(padding="valid") records padding [0])."""
    v = tuple(v) if isinstance(v, (list, tuple)) else (v,)
    return v * k if len(v) == 1 else v


def _conv(x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    k = ndim_of(x) - 2
    stride, padding, dilation, output_padding = (_spatial(v, k) for v in (stride, padding, dilation, output_padding))
    geometry = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    if transposed:
        if k == 1:
            return gnn.conv_transpose1d(x, w, b, output_padding=output_padding, **geometry)
        if k != 2:
            unsupported("convolution", f"{k}-d transposed convolution has no mapping (1-d and 2-d do)")
        return gnn.conv_transpose2d(x, w, b, output_padding=output_padding, **geometry)
    if k not in (1, 2, 3):
        unsupported("convolution", f"{k}-d convolution has no mapping (1-d, 2-d and 3-d do)")
    return (gnn.conv1d, gnn.conv2d, gnn.conv3d)[k - 1](x, w, b, **geometry)


def _conv_k(k):
    """aten.conv{k}d (what decompose=False keeps); padding may be a string ("same", "valid")."""
    def conv(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
        pad = padding if isinstance(padding, str) else _spatial(padding, k)
        geometry = {"stride": _spatial(stride, k), "padding": pad, "dilation": _spatial(dilation, k), "groups": groups}
        return (gnn.conv1d, gnn.conv2d, gnn.conv3d)[k - 1](x, w, b, **geometry)
    return conv


def _conv_transpose(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """aten.conv_transpose{1,2}d (what decompose=False keeps): the transposed branch of `convolution`."""
    return _conv(x, w, b, stride, padding, dilation, True, output_padding, groups)


# -- pooling --------------------------------------------------------------------------------------


def _t(v):
    """ATen's int[] pooling argument as a tuple (an int stays an int); an empty stride (the default) as None."""
    return (tuple(v) or None) if isinstance(v, (list, tuple)) else v


def _max_pool(k):
    """max_pool{k}d and max_pool{k}d_with_indices -> (values, indices): indices only where the graph reads them."""
    pool = (gnn.max_pool1d, gnn.max_pool2d)[k - 1]

    def with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        args = (x, _t(kernel_size), _t(stride), _t(padding), _t(dilation), ceil_mode)
        return Multi(lambda: pool(*args), lambda: pool(*args, return_indices=True)[1])

    def values(*args, **kwargs):
        return with_indices(*args, **kwargs)[0]
    return values, with_indices


def _avg_pool1d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True):
    return gnn.avg_pool1d(x, _t(kernel_size), _t(stride), _t(padding), ceil_mode, count_include_pad)


def _avg_pool2d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    return gnn.avg_pool2d(x, _t(kernel_size), _t(stride), _t(padding), ceil_mode, count_include_pad, divisor_override)


def _adaptive_max(pool):
    def indexed(x, output_size):
        size = tuple(output_size)
        return Multi(lambda: pool(x, size), lambda: pool(x, size, return_indices=True)[1])
    return indexed


# -- padding --------------------------------------------------------------------------------------

_PAD_MODES = ("reflect", "replicate", "circular", "constant")  # c10::padding_mode, by position


def _pad(mode):
    return lambda x, pad: gnn.pad(x, tuple(pad), mode)


# -- embeddings, losses, attention, dropout -------------------------------------------------------


def _embedding(w, idx, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """aten.embedding: padding_idx -1 means none (nn.Embedding passes a negative one already counted from
    the end); that row gets no gradient. sparse only changes torch's gradient layout."""
    if scale_grad_by_freq:
        unsupported("embedding", "scale_grad_by_freq=True has no mapping")
    return gnn.embedding(w, idx, None if padding_idx < 0 else padding_idx)


def _embedding_bag(op):
    """embedding_bag -> (out, offset2bag, bag_size, max_indices): torch's bookkeeping results are not computed.
    padding_idx -1 (or None) means none, as F.embedding_bag passes it."""
    def bag(w, idx, offsets, scale_grad_by_freq=False, mode=0, sparse=False, per_sample_weights=None,
            include_last_offset=False, padding_idx=-1):
        return Multi(lambda: gnn.embedding_bag(
            idx, w, offsets, scale_grad_by_freq=scale_grad_by_freq, mode=("sum", "mean", "max")[mode],
            per_sample_weights=per_sample_weights, include_last_offset=include_last_offset,
            padding_idx=None if padding_idx is None or padding_idx < 0 else padding_idx),
            *(not_computed(op, what) for what in ("offset2bag", "bag_size", "max_indices")))
    return bag


def _nll(logp, target, weight, reduction, ignore_index):
    """nll_loss over (N, C) or (C,) log-probabilities: -logp[i, target[i]] weighted, ignored rows zero."""
    if ndim_of(logp) == 1:
        logp, target = ops.expand_dims(logp, 0), ops.expand_dims(target, 0)
    keep = ops.not_equal(target, ignore_index)
    safe = ops.where(keep, target, 0)
    picked = ops.squeeze(ops.negative(ops.gather(logp, 1, ops.expand_dims(safe, 1))), 1)
    w = ops.astype(keep, logp.dtype)
    if weight is not None:
        w = ops.multiply(w, ops.take(weight, safe, axis=0))
    losses = ops.multiply(picked, w)
    total = ops.sum(w)
    if reduction == 0:
        return losses, total
    s = ops.sum(losses)
    return (ops.divide(s, total) if reduction == 1 else s), total


def _nll_loss_forward(logp, target, weight, reduction, ignore_index):
    return Multi.of_one_call(lambda: _nll(logp, target, weight, reduction, ignore_index), 2)


def _classes_last(x):
    """ATen's class axis 1 moved last, where gnn.cross_entropy keeps it."""
    return ops.transpose(x, (0, *range(2, ndim_of(x)), 1)) if ndim_of(x) > 2 else x


def _cross_entropy(x, target, weight=None, reduction=1, ignore_index=-100, label_smoothing=0.0):
    """cross_entropy_loss (what decompose=False keeps): class indices or probabilities, (N, C, ...) or (C,)
    logits, class weights and label smoothing, onto gnn.cross_entropy's fused rule."""
    prob = dtypes.is_float(target.dtype)
    return gnn.cross_entropy(_classes_last(x), _classes_last(target) if prob else target, REDUCTION[reduction],
                             None if prob else ignore_index, weight=weight, label_smoothing=label_smoothing)


def _loss(fn, **defaults):
    """An ATen loss (input, target, reduction enum, extra arguments by position in `defaults`' order)."""
    names = list(defaults)

    def loss(x, y, reduction=1, *args, **kwargs):
        extra = {**defaults, **dict(zip(names, args)), **kwargs}
        return fn(x, y, reduction=REDUCTION[reduction], **extra)
    return loss


def _sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p:
        unsupported("scaled_dot_product_attention", "dropout_p > 0 has no mapping")
    return gnn.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
                                            enable_gqa=enable_gqa)


class _Dropout(NeedsSeed):
    """native_dropout(x, p, train) -> (out, mask): the mask from the call's seed (explicit, never hidden)."""

    def __call__(self, x, p, train=True, *, rng):
        if not train or p == 0:
            return Multi(lambda: x, lambda: ops.full(shape_of(x), True, dtypes.bool_))
        keep = rng(x).random(shape_of(x)) >= p
        scale = (keep / (1.0 - p)) if p < 1 else np.zeros(shape_of(x))
        return Multi(lambda: ops.multiply(x, scale.astype(x.dtype)), lambda: keep)


class _PlainDropout(_Dropout):
    def __call__(self, x, p, train=True, *, rng):
        return super().__call__(x, p, train, rng=rng)[0]


_max_pool1d, _max_pool1d_with_indices = _max_pool(1)
_max_pool2d, _max_pool2d_with_indices = _max_pool(2)

NN = {
    "native_layer_norm": _native_layer_norm, "layer_norm": _layer_norm,
    "_native_batch_norm_legit_functional": _bn_functional, "_native_batch_norm_legit_no_training": _bn_no_training,
    "_native_batch_norm_legit.no_stats": _bn_no_stats, "_native_batch_norm_legit.default": _bn_functional,
    "native_batch_norm": _bn_functional, "batch_norm": _batch_norm, "instance_norm": _instance_norm,
    "native_group_norm": _group_norm,
    "group_norm": lambda x, groups, w=None, b=None, eps=1e-5, cudnn=True: gnn.group_norm(x, groups, w, b, eps),
    "rms_norm": _rms_norm, "_fused_rms_norm": _fused_rms_norm,
    # convolution
    "convolution": _conv, "conv1d": _conv_k(1), "conv2d": _conv_k(2), "conv3d": _conv_k(3),
    "conv_transpose1d": _conv_transpose, "conv_transpose2d": _conv_transpose,
    # pooling
    "max_pool1d": _max_pool1d, "max_pool1d_with_indices": _max_pool1d_with_indices,
    "max_pool2d": _max_pool2d, "max_pool2d_with_indices": _max_pool2d_with_indices,
    "avg_pool1d": _avg_pool1d, "avg_pool2d": _avg_pool2d,
    "adaptive_avg_pool1d": lambda x, size: gnn.adaptive_avg_pool1d(x, tuple(size)),
    "_adaptive_avg_pool2d": lambda x, size: gnn.adaptive_avg_pool2d(x, tuple(size)),
    "adaptive_avg_pool2d": lambda x, size: gnn.adaptive_avg_pool2d(x, tuple(size)),
    "adaptive_max_pool1d": _adaptive_max(gnn.adaptive_max_pool1d),
    "adaptive_max_pool2d": _adaptive_max(gnn.adaptive_max_pool2d),
    # padding (negative amounts crop) and pixel shuffles
    "constant_pad_nd": lambda x, pad, value=0.0: gnn.pad(x, tuple(pad), value=value),
    **{f"{name}_pad{k}d": _pad(mode) for name, mode in (("reflection", "reflect"), ("replication", "replicate"))
       for k in (1, 2, 3)},
    "_pad_circular": _pad("circular"),
    "pad": lambda x, pad, mode="constant", value=None: gnn.pad(x, tuple(pad), mode, value),
    "_pad_enum": lambda x, pad, mode, value=None: gnn.pad(x, tuple(pad), _PAD_MODES[mode], value),
    "pixel_shuffle": gnn.pixel_shuffle, "pixel_unshuffle": gnn.pixel_unshuffle,
    # embeddings
    "embedding": _embedding, "embedding_bag": _embedding_bag("embedding_bag"),
    "_embedding_bag": _embedding_bag("_embedding_bag"),
    "_embedding_bag_forward_only": _embedding_bag("_embedding_bag_forward_only"),
    # losses and distances
    "mse_loss": _loss(gnn.mse_loss), "l1_loss": _loss(gnn.l1_loss), "smooth_l1_loss": _loss(gnn.smooth_l1_loss, beta=1.0),
    "huber_loss": _loss(gnn.huber_loss, delta=1.0), "kl_div": _loss(gnn.kl_div, log_target=False),
    "binary_cross_entropy": lambda x, y, weight=None, reduction=1:
        gnn.binary_cross_entropy(x, y, weight, reduction=REDUCTION[reduction]),
    "binary_cross_entropy_with_logits": lambda x, y, weight=None, pos_weight=None, reduction=1:
        gnn.binary_cross_entropy_with_logits(x, y, weight, reduction=REDUCTION[reduction], pos_weight=pos_weight),
    "nll_loss_forward": _nll_loss_forward, "cross_entropy_loss": _cross_entropy,
    "cosine_similarity": lambda a, b, dim=1, eps=1e-8: gnn.cosine_similarity(a, b, dim, eps),
    "pairwise_distance": lambda a, b, p=2.0, eps=1e-6, keepdim=False: gnn.pairwise_distance(a, b, p, eps, keepdim),
    "cdist": lambda a, b, p=2.0, compute_mode=None: gnn.cdist(a, b, p),
    "_cdist_forward": lambda a, b, p, compute_mode=None: gnn.cdist(a, b, p),
    # attention and dropout
    "scaled_dot_product_attention": _sdpa, "native_dropout": _Dropout(), "dropout": _PlainDropout(),
}

__all__ = ["NN"]
