"""Indexing: basic slicing, integer-array gathers (`C[Xb]`) and their scatter-add adjoint, one_hot.

Primitives: `take` (gather along one axis) and `index_add` (its adjoint). Basic indexing lowers to
`slice` + `reshape` (+ a reversing `take` for negative steps); integer arrays, on any axes, lower to
one `take` on a view with the indexed axes flattened into one (so ``logp[arange(n), y]`` is one gather).
"""

from __future__ import annotations

import numpy as np

from gradir.core import dtypes
from gradir.core.errors import DTypeError, ShapeError, UnsupportedOpError
from gradir.core.ir import Value
from gradir.core.primitive import Primitive, register
from gradir.core.trace import bind, user_source
from gradir.ops.creation import arange
from gradir.ops.elementwise import equal, where
from gradir.ops.lifting import astype, broadcast_all, concrete, lift, lift_all, normalize_axes, normalize_axis
from gradir.ops.shapes import broadcast_to, expand_dims, reshape, slice_axis, transpose

__all__ = ["argsort", "gather", "getitem", "masked_fill", "one_hot", "repeat", "scatter", "scatter_add", "sort", "take", "topk",
           "tril", "triu"]


def _check_index(idx, op, source=None):
    if not dtypes.is_integer(idx.dtype):
        raise DTypeError(f"indices must be integers, got {dtypes.short(idx.dtype)}", op=op, source=source)


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
    """numpy.take: slices of x along `axis` at the integer positions `indices` (negatives wrap)."""
    x, idx = lift(x), lift(indices)
    _check_index(idx, "take", user_source())
    if x.ndim == 0:
        raise ShapeError("cannot take from a 0-d value", op="take", source=user_source())
    (axis,) = normalize_axes(axis, x.ndim, "take")
    _check_bounds(idx, x.shape[axis], "take")
    return bind("take", x, idx, axis=axis)


def _check_bounds(idx, n: int, op: str):
    """Indices known now (not traced) are checked here; NumPy would raise a bare IndexError later."""
    idx = concrete(idx)
    if idx is None or not idx.size or not dtypes.is_integer(idx.dtype):
        return
    lo, hi = int(np.min(idx)), int(np.max(idx))
    if lo < -n or hi >= n:
        bad = hi if hi >= n else lo
        raise ShapeError(f"index {bad} is out of bounds for an axis of size {n}", op=op, source=user_source())


def _check_classes_infer(idx, size, ignore, what):
    _check_index(idx, "check_classes")
    return tuple(idx.shape), idx.dtype


register(Primitive(
    "check_classes", ("idx",), _check_classes_infer, "_k.check_classes(idx, size, ignore, what)",
    differentiable=False, kind="index",
    doc="idx unchanged; raises at run time if an entry is outside [0, size) and not `ignore` (class targets of `what`)."))


def check_classes(idx, num_classes: int, what: str, ignore_index=None):
    """idx, checked to hold class indices in [0, num_classes) (or ignore_index): now for concrete
    indices (ShapeError), at run time for traced ones (ExecutionError naming `what`)."""
    idx = lift(idx)
    c = concrete(idx)
    if c is None:
        return bind("check_classes", idx, size=int(num_classes), ignore=ignore_index, what=what)
    bad = (c < 0) | (c >= num_classes)
    if ignore_index is not None:
        bad &= c != ignore_index
    if bad.any():
        raise ShapeError(f"class index {c[bad].flat[0]} is out of range for {num_classes} classes", op=what,
                         source=user_source())
    return idx


def one_hot(idx, num_classes, dtype=dtypes.float64):
    """one_hot(idx, n)[..., k] = (idx == k), as a float array; indices outside [0, n) raise (as torch)."""
    idx = lift(idx)
    _check_index(idx, "one_hot", user_source())
    idx = check_classes(idx, num_classes, "one_hot")
    return astype(equal(expand_dims(idx, -1), arange(num_classes, dtype=idx.dtype)), dtype)


def _is_int_array(i) -> bool:
    if isinstance(i, Value):
        return dtypes.is_integer(i.dtype) or i.dtype == dtypes.bool_
    if isinstance(i, (list, np.ndarray)) or type(i).__module__.startswith("torch"):
        return True
    return isinstance(i, range)


def _is_int(i) -> bool:
    return isinstance(i, (int, np.integer)) and not isinstance(i, bool)


def getitem(x, index):
    """x[index], as NumPy: ints, slices (any step), None, Ellipsis, and integer arrays (gathers).
    Integer arrays broadcast together; their result axes replace theirs when they are adjacent and
    go first otherwise. Boolean masks are refused (their result shape depends on the data)."""
    x = lift(x)
    index = index if isinstance(index, tuple) else (index,)
    for i in index:
        is_bool_array = (isinstance(i, Value) and i.dtype == dtypes.bool_) or \
            (isinstance(i, np.ndarray) and i.dtype == np.bool_) or isinstance(i, bool)
        if is_bool_array:
            raise UnsupportedOpError("boolean-mask indexing has a data-dependent shape; use gr.where",
                                     op="getitem", source=user_source())
        if not (i is None or i is Ellipsis or isinstance(i, slice) or _is_int(i) or _is_int_array(i)):
            raise UnsupportedOpError(f"cannot index with a {type(i).__name__}", op="getitem", source=user_source())
    index = _expand_ellipsis(index, x.ndim)
    if any(_is_int_array(i) for i in index):
        return _advanced(x, index)
    return _basic(x, index)


def _expand_ellipsis(index, ndim):
    if sum(1 for i in index if i is Ellipsis) > 1:
        raise ShapeError("an index can only have a single ellipsis (...)", op="getitem", source=user_source())
    used = sum(1 for i in index if i is not None and i is not Ellipsis)
    if used > ndim:
        raise ShapeError(f"too many indices ({used}) for a {ndim}-d value", op="getitem", source=user_source())
    if not any(i is Ellipsis for i in index):
        index = tuple(index) + (Ellipsis,)
    out = []
    for i in index:
        out.extend([slice(None)] * (ndim - used) if i is Ellipsis else [i])
    return out


def basic_box(shape, index, op: str):
    """Ints, slices and None (Ellipsis already expanded) on an array of `shape`: the strided box
    they select, as (starts, stops, steps) with positive steps, the selection's shape, and the axes
    of that shape a negative step reverses."""
    starts, stops, steps, out_shape, reverse = [], [], [], [], []
    axis = 0
    for i in index:
        if i is None:
            out_shape.append(1)
            continue
        n = shape[axis]
        if isinstance(i, slice):
            a, b, c = i.indices(n)
            r = range(a, b, c)
            if c < 0:  # reversed: the covered range forward, flipped afterwards
                a, b, c = (r[-1], r[0] + 1, -c) if len(r) else (0, 0, 1)
                if len(r) > 1:
                    reverse.append(len(out_shape))
            starts.append(a), stops.append(max(b, a)), steps.append(c)
            out_shape.append(len(r))
        else:
            k = int(i)
            if not -n <= k < n:
                raise ShapeError(f"index {k} is out of bounds for axis {axis} of size {n}", op=op, source=user_source())
            k %= n
            starts.append(k), stops.append(k + 1), steps.append(1)
        axis += 1
    return starts, stops, steps, out_shape, reverse


def _basic(x, index):
    """Ints, slices and None (Ellipsis already expanded): one strided slice, a reshape, and a
    reversing gather per axis sliced with a negative step."""
    starts, stops, steps, out_shape, reverse = basic_box(x.shape, index, "getitem")
    y = x
    if (tuple(starts), tuple(stops), tuple(steps)) != ((0,) * x.ndim, tuple(x.shape), (1,) * x.ndim):
        y = bind("slice", x, starts=tuple(starts), stops=tuple(stops), steps=tuple(steps))
    y = reshape(y, out_shape)
    for ax in reverse:
        y = take(y, np.arange(y.shape[ax] - 1, -1, -1), axis=ax)
    return y


def _advanced(x, index):
    """Integer arrays (and ints beside them) on any axes: the basic part first, then one gather on
    a flattened view of the indexed axes (so ``logp[arange(n), y]`` is one `take`)."""
    adv = [_is_int_array(i) or _is_int(i) for i in index]
    # every entry of the expanded index (slices, None, and the advanced ones kept whole) is one axis of y
    y = _basic(x, [slice(None) if a else i for i, a in zip(index, adv)])
    pos = [j for j, a in enumerate(adv) if a]
    if pos != list(range(pos[0], pos[0] + len(pos))):  # not adjacent: NumPy puts their axes first
        y = transpose(y, pos + [j for j in range(y.ndim) if j not in pos])
        pos = list(range(len(pos)))
    lead, k = pos[0], len(pos)
    sizes = y.shape[lead:lead + k]
    idxs = []
    for n, i in zip(sizes, (index[j] for j in (p for p, a in enumerate(adv) if a))):
        i = lift(np.asarray(i) if isinstance(i, (list, range, int, np.integer)) else i)
        _check_index(i, "getitem", user_source())
        _check_bounds(i, n, "getitem")
        idxs.append(astype(i, dtypes.int64))
    idxs = broadcast_all(*idxs, op="getitem")
    flat = idxs[0] % sizes[0] if k > 1 else idxs[0]
    for i, n in zip(idxs[1:], sizes[1:]):
        flat = flat * n + i % n
    yr = reshape(y, y.shape[:lead] + (int(np.prod(sizes)),) + y.shape[lead + k:]) if k > 1 else y
    return bind("take", yr, flat, axis=lead)


# -- torch-style gather / scatter along one axis -------------------------------------------------------
def _flat_positions(x, index, axis: int, op: str, checked: bool = True):
    """Positions in x.reshape(-1) of the elements that torch.gather(x, axis, index) reads: index
    along `axis`, the element's own coordinates on the other axes (index may be smaller there)."""
    index = lift(index)
    _check_index(index, op, user_source())
    if x.ndim == 0:
        raise ShapeError("needs a value of at least 1 dimension", op=op, source=user_source())
    if index.ndim != x.ndim:
        raise ShapeError(f"index has {index.ndim} dimensions, the operand {x.ndim} (they must match)", op=op,
                         source=user_source())
    (axis,) = normalize_axes(axis, x.ndim, op)
    if any(i > n for d, (i, n) in enumerate(zip(index.shape, x.shape)) if d != axis):
        raise ShapeError(f"index shape {tuple(index.shape)} exceeds the operand's {tuple(x.shape)} off axis {axis}",
                         op=op, source=user_source())
    strides = [int(np.prod(x.shape[d + 1:])) for d in range(x.ndim)]
    grid = np.indices(index.shape, dtype=np.int64)
    offsets = sum((grid[d] * strides[d] for d in range(x.ndim) if d != axis), np.zeros(index.shape, np.int64))
    n = x.shape[axis]
    c = concrete(index)
    if c is not None:
        if c.size and (c.min() < 0 or c.max() >= n):  # torch refuses negative indices too
            bad = c.min() if c.min() < 0 else c.max()
            raise ShapeError(f"index {bad} is out of bounds for an axis of size {n}", op=op, source=user_source())
        return lift(c.astype(np.int64) * strides[axis] + offsets), axis
    if checked:
        index = check_classes(index, n, op)  # a traced index is checked when the program runs
    return astype(index, dtypes.int64) * strides[axis] + offsets, axis


def _at_least_1d(x, index):
    """torch's gather and scatter read a 0-d operand or index as 1-d of size 1."""
    x, index = lift(x), lift(index)
    if x.ndim == 0 or index.ndim == 0:
        x, index = (reshape(v, (1,)) if v.ndim == 0 else v for v in (x, index))
    return x, index


def gather(x, axis, index):
    """torch.gather (numpy.take_along_axis with torch's shapes): `out[i][j] = x[index[i][j]][j]` for
    axis 0. index has x's number of dimensions and is at most x's size off `axis`; the result has
    index's shape (a 0-d x or index counts as 1-d, as torch). One `take` on the flattened x, so the
    gradient is a scatter-add into x."""
    shape = lift(index).shape
    x, index = _at_least_1d(x, index)
    flat, _ = _flat_positions(x, index, axis, "gather")
    return reshape(bind("take", reshape(x, (-1,)), flat, axis=0), shape)


def _scatter_source(x, src, index_shape, op):
    x, src = lift_all(x, src, op=op)
    if src.ndim == 0:  # torch's `value=` form

        return x, broadcast_to(src, index_shape)
    if src.ndim != len(index_shape) or any(i > s for i, s in zip(index_shape, src.shape)):
        raise ShapeError(f"src shape {tuple(src.shape)} is smaller than the index shape {tuple(index_shape)}",
                         op=op, source=user_source())
    if tuple(src.shape) != tuple(index_shape):  # torch reads only the index-shaped corner of src
        src = bind("slice", src, starts=(0,) * src.ndim, stops=tuple(index_shape), steps=(1,) * src.ndim)
    return x, src


def scatter_add(x, axis, index, src):
    """torch.scatter_add: x with `src[i][j]` added at `x[index[i][j]][j]` (axis 0); repeated positions
    accumulate (a 0-d x, index or src counts as 1-d, as torch). Differentiable in x (identity) and src
    (a gather of the cotangent)."""
    shape = lift(x).shape
    x, index = _at_least_1d(x, index)
    flat, _ = _flat_positions(x, index, axis, "scatter_add")
    x, src = _scatter_source(x, src, flat.shape, "scatter_add")
    added = bind("index_add", src, flat, axis=0, size=int(np.prod(x.shape)))
    return reshape(x + reshape(added, x.shape), shape)


def scatter(x, axis, index, src):
    """torch.scatter: x with `x[index[i][j]][j] = src[i][j]` (axis 0); src may be a scalar. With
    repeated positions the last write wins (torch leaves the order unspecified). Differentiable in x
    (zero where overwritten) and src; a 0-d x, index or src counts as 1-d, as torch."""
    shape = lift(x).shape
    x, index = _at_least_1d(x, index)
    flat, _ = _flat_positions(x, index, axis, "scatter")
    x, src = _scatter_source(x, src, flat.shape, "scatter")
    return reshape(bind("index_update", reshape(x, (-1,)), flat, src, axis=0), shape)


def masked_fill(x, mask, value):
    """torch.masked_fill: `value` where the bool `mask` (broadcast to x's shape) is true, x elsewhere."""
    x, mask = lift(x), lift(mask)
    if mask.dtype != dtypes.bool_:
        raise DTypeError(f"mask must be bool, got {dtypes.short(mask.dtype)}", op="masked_fill", source=user_source())
    value = lift(value, x.dtype)
    if value.dtype != x.dtype:
        value = astype(value, x.dtype)
    if value.ndim:
        raise ShapeError(f"value must be a scalar (0-d), got shape {tuple(value.shape)}", op="masked_fill",
                         source=user_source())
    try:
        if np.broadcast_shapes(tuple(mask.shape), tuple(x.shape)) != tuple(x.shape):
            raise ValueError
    except ValueError:
        raise ShapeError(f"mask shape {tuple(mask.shape)} does not broadcast to {tuple(x.shape)}", op="masked_fill",
                         source=user_source()) from None
    mask, _ = broadcast_all(mask, x, op="masked_fill") if tuple(mask.shape) != tuple(x.shape) else (mask, x)
    return where(mask, value, x)


# -- sorting -----------------------------------------------------------------------------------------
def _argsort_infer(x, axis, descending):
    if not 0 <= axis < len(x.shape):
        raise ShapeError(f"axis {axis} out of range for a {len(x.shape)}-d value", op="argsort")
    if dtypes.is_complex(x.dtype):
        raise DTypeError("complex values have no order", op="argsort")
    return tuple(x.shape), dtypes.int64


register(Primitive(
    "argsort", ("x",), _argsort_infer, "_k.argsort(x, axis, descending)", differentiable=False, kind="other",
    flops=lambda o, xs, at: int(np.prod(o.shape)) * max(1, int(np.log2(max(2, o.shape[at["axis"]])))),
    doc="Stable argsort along `axis` (ties keep their order, also when descending)."))


def argsort(x, axis=-1, descending=False):
    """numpy.argsort (stable; `descending` as torch.argsort, ties in index order). Integer result,
    no gradient; a 0-d x (axis 0 or -1) gives a 0-d 0, as torch."""
    x = lift(x)
    if x.ndim == 0:
        normalize_axes(axis, 0, "argsort")
        return reshape(bind("argsort", reshape(x, (1,)), axis=0, descending=bool(descending)), ())
    (axis,) = normalize_axes(axis, x.ndim, "argsort")
    return bind("argsort", x, axis=axis, descending=bool(descending))


def _take_along(x, idx, axis):
    """gather with indices known to be in range (an argsort's): no run-time check."""
    flat, _ = _flat_positions(x, idx, axis, "gather", checked=False)
    return bind("take", reshape(x, (-1,)), flat, axis=0)


def sort(x, axis=-1, descending=False):
    """numpy.sort / torch.sort(...).values: the gradient flows back to each element's position. A 0-d x
    (axis 0 or -1) is its own sort, as torch."""
    x = lift(x)
    if x.ndim == 0:
        normalize_axes(axis, 0, "sort")
        return x
    idx = argsort(x, axis, descending)
    return _take_along(x, idx, axis)


def topk(x, k, axis=-1, largest=True):
    """torch.topk: the k largest (or smallest) elements along `axis`, sorted, and their int64
    indices, as (values, indices). Gradients flow to the selected elements."""
    x = lift(x)
    if x.ndim == 0:
        raise ShapeError("cannot take topk of a 0-d value", op="topk", source=user_source())
    (axis,) = normalize_axes(axis, x.ndim, "topk")
    k = int(k)
    if not 0 <= k <= x.shape[axis]:
        raise ShapeError(f"k={k} is out of range for an axis of size {x.shape[axis]}", op="topk", source=user_source())
    idx = slice_axis(argsort(x, axis, descending=largest), axis, 0, k)
    return _take_along(x, idx, axis), idx


# -- composites that select or repeat elements ----------------------------------------------------
def _triangle(name, x, k, lower):
    x = lift(x)
    if x.ndim < 2:
        raise ShapeError(f"needs a value of at least 2 dimensions, got {x.ndim}", op=name, source=user_source())
    m, n = x.shape[-2:]
    keep = np.tri(m, n, k, dtype=bool) if lower else ~np.tri(m, n, k - 1, dtype=bool)
    return where(keep, x, 0)


def tril(x, k=0):
    """numpy.tril / torch.tril: zero the elements above the k-th diagonal of the last two axes."""
    return _triangle("tril", x, int(k), True)


def triu(x, k=0):
    """numpy.triu / torch.triu: zero the elements below the k-th diagonal of the last two axes."""
    return _triangle("triu", x, int(k), False)


def repeat(x, repeats, axis=None):
    """numpy.repeat (torch.repeat_interleave): each element repeated `repeats` times along `axis`
    (over the flattened value when None). An int repeats by reshape and broadcast; a list of counts
    is a gather with constant indices. (torch's `Tensor.repeat` is gr.tile.)"""
    x = lift(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    axis = normalize_axis(axis, x.ndim, "repeat")
    n = x.shape[axis]
    if isinstance(repeats, (int, np.integer)):
        r = int(repeats)
        if r < 0:
            raise ShapeError(f"negative repetitions {r}", op="repeat", source=user_source())
        y = reshape(x, x.shape[:axis + 1] + (1,) + x.shape[axis + 1:])
        y = broadcast_to(y, x.shape[:axis + 1] + (r,) + x.shape[axis + 1:])
        return reshape(y, x.shape[:axis] + (n * r,) + x.shape[axis + 1:])
    counts = np.asarray(repeats)
    counts = counts.astype(np.int64) if counts.size == 0 else counts  # ([] is a float64 array: no counts, no type)
    if counts.shape not in ((n,), (1,)) or not np.issubdtype(counts.dtype, np.integer) or np.any(counts < 0):
        raise ShapeError(f"repeats must be non-negative ints, one per element of an axis of size {n} (or one)",
                         op="repeat", source=user_source())
    return take(x, np.repeat(np.arange(n), np.broadcast_to(counts, (n,))), axis=axis)
