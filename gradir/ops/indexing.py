"""Indexing: basic slicing, integer-array gathers (`C[Xb]`) and their scatter-add adjoint, one_hot.

Primitives: `take` (gather along one axis) and `index_add` (its adjoint). Basic indexing lowers to
`slice` + `reshape`; several integer-array indices on leading axes lower to one `take` on a
flattened view (so ``logp[arange(n), y]`` is one gather).
"""

from __future__ import annotations

import numpy as np

from gradir import dtypes
from gradir.errors import DTypeError, ShapeError, UnsupportedOpError
from gradir.ir import Value
from gradir.ops.lifting import astype, lift
from gradir.ops.shapes import reshape
from gradir.primitive import Primitive, register
from gradir.trace import bind, user_source


def _check_index(idx, op):
    if not dtypes.is_integer(idx.dtype):
        raise DTypeError(f"indices must be integers, got {dtypes.short(idx.dtype)}", op=op)


def _take_infer(x, idx, axis):
    _check_index(idx, "take")
    if not 0 <= axis < len(x.shape):
        raise ShapeError(f"axis {axis} out of range for {len(x.shape)}-d operand", op="take")
    return tuple(x.shape[:axis]) + tuple(idx.shape) + tuple(x.shape[axis + 1:]), x.dtype


def _index_add_infer(g, idx, axis, size):
    _check_index(idx, "index_add")
    n = len(idx.shape)
    return tuple(g.shape[:axis]) + (size,) + tuple(g.shape[axis + n:]), g.dtype


register(Primitive(
    "take", ("x", "idx"), _take_infer, "np.take(x, idx, axis=axis)",
    vjp=lambda g, o, x, idx, axis: [bind("index_add", g, idx, axis=axis, size=x.shape[axis]), None],
    jvp=lambda ts, o, x, idx, axis: None if ts[0] is None else bind("take", ts[0], idx, axis=axis),
    kind="index", doc="Gather slices of x along `axis` at integer positions idx (negatives wrap)."))

register(Primitive(
    "index_add", ("g", "idx"), _index_add_infer, "_k.index_add(g, idx, axis, size)",
    vjp=lambda g, o, x, idx, axis, size: [bind("take", g, idx, axis=axis), None],
    jvp=lambda ts, o, x, idx, axis, size: None if ts[0] is None else bind("index_add", ts[0], idx, axis=axis, size=size),
    kind="index", doc="Adjoint of take: zeros of length `size` on `axis`, with g's slices added at idx."))


def take(x, indices, axis=0):
    """numpy.take."""
    x, idx = lift(x), lift(indices)
    axis = int(axis) % x.ndim
    return bind("take", x, idx, axis=axis)


def one_hot(idx, num_classes, dtype=dtypes.float64):
    """one_hot(idx, n)[..., k] = (idx == k), as a float array."""
    from gradir.ops.creation import arange
    from gradir.ops.elementwise import equal
    from gradir.ops.shapes import expand_dims

    idx = lift(idx)
    _check_index(idx, "one_hot")
    return astype(equal(expand_dims(idx, -1), arange(num_classes, dtype=idx.dtype)), dtype)


def _is_int_array(i) -> bool:
    if isinstance(i, Value):
        return dtypes.is_integer(i.dtype) or i.dtype == dtypes.bool_
    if isinstance(i, (list, np.ndarray)) or type(i).__module__.startswith("torch"):
        return True
    return isinstance(i, range)


def getitem(x, index):
    """x[index]: ints, slices (positive steps or reversed), None, Ellipsis, and integer arrays."""
    x = lift(x)
    index = index if isinstance(index, tuple) else (index,)
    if any(isinstance(i, Value) and i.dtype == dtypes.bool_ for i in index) or \
            any(isinstance(i, np.ndarray) and i.dtype == np.bool_ for i in index):
        raise UnsupportedOpError("boolean-mask indexing has a data-dependent shape; use gr.where",
                                 op="getitem", source=user_source())
    if any(_is_int_array(i) for i in index):
        return _advanced(x, index)
    return _basic(x, index)


def _expand_ellipsis(index, ndim):
    used = sum(1 for i in index if i is not None and i is not Ellipsis)
    if used > ndim:
        raise ShapeError(f"too many indices ({used}) for a {ndim}-d value", op="getitem", source=user_source())
    out = []
    for i in index:
        if i is Ellipsis:
            out.extend([slice(None)] * (ndim - used))
            ndim = used  # only the first Ellipsis expands
        else:
            out.append(i)
    return out + [slice(None)] * (ndim - sum(1 for i in out if i is not None))


def _basic(x, index):
    index = _expand_ellipsis(index, x.ndim)
    starts, stops, steps, out_shape, reverse = [], [], [], [], []
    axis = 0
    for i in index:
        if i is None:
            out_shape.append(1)
            continue
        n = x.shape[axis]
        if isinstance(i, slice):
            a, b, c = i.indices(n)
            if c < 0:  # reversed: slice the covered range forward, then flip it with a gather
                r = range(a, b, c)
                a, b, c = (r[-1], r[0] + 1, -c) if len(r) else (0, 0, 1)
                reverse.append(len(out_shape))
            starts.append(a), stops.append(max(b, a)), steps.append(c)
            out_shape.append(len(range(a, max(b, a), c)))
        else:
            k = int(i)
            if not -n <= k < n:
                raise ShapeError(f"index {k} out of range for axis {axis} of size {n}", op="getitem",
                                 source=user_source())
            k %= n
            starts.append(k), stops.append(k + 1), steps.append(1)
        axis += 1
    y = x
    if (tuple(starts), tuple(stops), tuple(steps)) != ((0,) * x.ndim, tuple(x.shape), (1,) * x.ndim):
        y = bind("slice", x, starts=tuple(starts), stops=tuple(stops), steps=tuple(steps))
    y = reshape(y, out_shape)
    for ax in reverse:
        y = take(y, np.arange(y.shape[ax] - 1, -1, -1), axis=ax)
    return y


def _advanced(x, index):
    """Integer-array indices on consecutive leading axes (after optional full slices)."""
    index = _expand_ellipsis(index, x.ndim)
    lead = 0
    while lead < len(index) and isinstance(index[lead], slice) and index[lead] == slice(None):
        lead += 1
    arrays = index[lead:]
    k = 0
    while k < len(arrays) and _is_int_array(arrays[k]):
        k += 1
    if k == 0 or any(not (isinstance(i, slice) and i == slice(None)) for i in arrays[k:]):
        raise UnsupportedOpError("integer-array indexing is supported on consecutive axes, with only full "
                                 "slices (:) around them", op="getitem", source=user_source())
    idxs = [lift(np.asarray(i) if isinstance(i, (list, range)) else i) for i in arrays[:k]]
    idxs = [astype(i, dtypes.int64) for i in idxs]
    from gradir.ops.lifting import broadcast_all

    idxs = broadcast_all(*idxs, op="getitem")
    sizes = x.shape[lead:lead + k]
    flat = idxs[0] % sizes[0] if k > 1 else idxs[0]
    for i, n in zip(idxs[1:], sizes[1:]):
        flat = flat * n + i % n
    xr = reshape(x, x.shape[:lead] + (int(np.prod(sizes)),) + x.shape[lead + k:]) if k > 1 else x
    return take(xr, flat, axis=lead)


