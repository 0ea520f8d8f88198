"""embedding_bag: sums, means or maxima of bags of embedding rows (torch.nn.functional.embedding_bag),
composed of a gather of the rows (`take`) and a segment reduction. Bags given by offsets are found in
the graph (a scatter of the offsets and a running sum), so traced indices and offsets work too."""

from __future__ import annotations

import math

import numpy as np

from gradir.core import dtypes
from gradir.core.errors import DTypeError, ShapeError, UnsupportedOpError
from gradir.core.trace import bind, user_source
from gradir.ops.creation import arange, ones, zeros
from gradir.ops.elementwise import equal, logical_and, maximum, not_equal, where
from gradir.ops.indexing import getitem, take
from gradir.ops.lifting import astype, concrete, lift
from gradir.ops.nn.composite import choice, float_input
from gradir.ops.reductions import cumsum, max, sum
from gradir.ops.shapes import expand_dims

__all__ = ["embedding_bag"]


def _integers(op, v, what, ndim):
    if not dtypes.is_integer(v.dtype):
        raise DTypeError(f"{what} must be integers, got {dtypes.short(v.dtype)}", op=op, source=user_source())
    if v.ndim not in ndim:
        raise ShapeError(f"{what} must be {' or '.join(f'{n}-d' for n in ndim)}, got shape {tuple(v.shape)}", op=op,
                         source=user_source())


def _bag_of_each(op, offsets, length):
    """The bag of each of `length` positions given torch's offsets (each bag's start): the number of
    offsets at or before it, less one."""
    c = concrete(offsets)
    if c is not None and c.size and (c[0] != 0 or np.any(np.diff(c) < 0) or c[-1] > length):
        raise ShapeError(f"offsets must start at 0 and not decrease up to the input length {length}, got "
                         f"{c.tolist()}", op=op, source=user_source())
    marks = bind("index_add", ones(offsets.shape, dtypes.int64), offsets, axis=0, size=length + 1)
    return getitem(cumsum(marks), slice(0, length)) - 1


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False, mode="mean",
                  sparse=False, per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """torch.nn.functional.embedding_bag: for each bag of indices, the sum, mean or max (`mode`) of their rows
    of weight (num_embeddings, dim), as (bags, dim). Bags are the rows of a 2-d input (offsets None), or
    slices input[offsets[i]:offsets[i + 1]] of a 1-d input (the last runs to the end; with include_last_offset
    offsets has one more entry, the input's length, as in CSR). per_sample_weights (input's shape, mode
    "sum") scales each row; entries equal to padding_idx are left out (not counted by the mean); an empty
    bag gives zeros. `sparse` only changes torch's gradient storage and is accepted; max_norm (an in-place
    renorm) and scale_grad_by_freq are not supported."""
    op = "embedding_bag"
    indices, weight = lift(input), lift(weight)
    _integers(op, indices, "input", (1, 2))
    float_input(op, weight)
    if weight.ndim != 2:
        raise ShapeError(f"weight must be (num_embeddings, dim), got shape {tuple(weight.shape)}", op=op,
                         source=user_source())
    choice(op, "mode", mode, ("sum", "mean", "max"))
    if max_norm is not None or scale_grad_by_freq:
        raise UnsupportedOpError("max_norm and scale_grad_by_freq are not supported", op=op, source=user_source())
    n, dim = weight.shape
    scale = None  # each entry's weight in a sum or mean (None: 1)
    if per_sample_weights is not None:
        if mode != "sum":
            raise UnsupportedOpError(f"per_sample_weights needs mode='sum', got mode={mode!r}", op=op,
                                     source=user_source())
        scale = lift(per_sample_weights)
        float_input(op, scale)
        if tuple(scale.shape) != tuple(indices.shape):
            raise ShapeError(f"per_sample_weights must have input's shape {tuple(indices.shape)}, got "
                             f"{tuple(scale.shape)}", op=op, source=user_source())
    keep = None  # entries that take part (all but padding_idx)
    if padding_idx is not None:
        if not isinstance(padding_idx, (int, np.integer)) or not -n <= padding_idx < n:
            raise ShapeError(f"padding_idx={padding_idx!r} must be an int in [-{n}, {n})", op=op, source=user_source())
        keep = not_equal(indices, int(padding_idx) % n)
        scale = where(keep, 1.0 if scale is None else scale, 0.0)
        scale = astype(scale, weight.dtype) if scale.dtype != weight.dtype else scale
    if mode == "mean" and scale is None:
        scale = ones(indices.shape, weight.dtype)
    rows = take(weight, indices, axis=0)
    if indices.ndim == 2:
        if offsets is not None:
            raise ShapeError("offsets must be None for a 2-d input (its rows are the bags)", op=op,
                             source=user_source())
        return _bags_2d(rows, mode, scale, keep)
    if offsets is None:
        raise ShapeError("a 1-d input needs offsets (the start of each bag)", op=op, source=user_source())
    offsets = lift(offsets)
    _integers(op, offsets, "offsets", (1,))
    if include_last_offset:
        if offsets.shape[0] < 1:
            raise ShapeError("include_last_offset needs at least one offset", op=op, source=user_source())
        # the last offset closes the last bag; like torch on CPU, the last bag runs to the input's end
        offsets = getitem(offsets, slice(0, -1))
    bags = offsets.shape[0]
    bag = _bag_of_each(op, offsets, indices.shape[0])
    if mode == "max":
        return _max_of_bags(rows, bag, bags, keep)

    def per_bag(v):  # segment sums; an index past the last bag would wrap, so bags + 1 rows, the last dropped
        return getitem(bind("index_add", v, bag, axis=0, size=bags + 1), slice(0, bags))
    total = per_bag(rows if scale is None else rows * expand_dims(scale, -1))
    if mode == "sum":
        return total
    return total / expand_dims(maximum(per_bag(scale), 1.0), -1)


def _bags_2d(rows, mode, scale, keep):
    """Bags as the rows of a 2-d input: rows (B, L, D) reduced over L."""
    b, length, dim = rows.shape
    if length == 0:
        return zeros((b, dim), rows.dtype)
    if mode == "max":
        if keep is None:
            return max(rows, axis=1)
        best = max(where(expand_dims(keep, -1), rows, -math.inf), axis=1)
        return where(expand_dims(sum(keep, axis=1) > 0, -1), best, 0.0)
    total = sum(rows if scale is None else rows * expand_dims(scale, -1), axis=1)
    return total if mode == "sum" else total / expand_dims(maximum(sum(scale, axis=1), 1.0), -1)


def _max_of_bags(rows, bag, bags, keep):
    """Per-bag maxima of rows (L, D) for positions in `bag` (L,): a (bags, L) membership mask and a masked
    max, O(bags * L * D) (gr.max's gradient; the segment max `index_reduce` of scatter_reduce takes 1-d values
    only); empty bags give zeros."""
    length, dim = rows.shape
    if length == 0 or bags == 0:
        return zeros((bags, dim), rows.dtype)
    member = equal(expand_dims(bag, 0), expand_dims(arange(bags, dtype=dtypes.int64), 1))  # (bags, L)
    if keep is not None:
        member = logical_and(member, expand_dims(keep, 0))
    best = max(where(expand_dims(member, -1), expand_dims(rows, 0), -math.inf), axis=1)
    return where(expand_dims(sum(member, axis=1) > 0, -1), best, 0.0)
