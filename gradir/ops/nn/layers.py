"""Layers: linear, embedding, dropout, and scaled dot-product attention."""

from __future__ import annotations

import math

import numpy as np

from gradir.core import dtypes
from gradir.core.errors import ShapeError, UnsupportedOpError
from gradir.core.trace import user_source
from gradir.ops.creation import arange
from gradir.ops.elementwise import equal, exp, greater_equal, multiply, not_equal, stop_gradient, where
from gradir.ops.indexing import take
from gradir.ops.lifting import lift, lift_all
from gradir.ops.linalg import matmul
from gradir.ops.nn.activations import softmax
from gradir.ops.nn.composite import float_input
from gradir.ops.reductions import max, sum
from gradir.ops.shapes import broadcast_to, expand_dims, reshape, swapaxes

__all__ = ["dropout", "embedding", "linear", "scaled_dot_product_attention"]

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
    float_input(op, q)
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
