"""Indexing: basic slicing, integer-array gathers (`C[Xb]`) and their scatter-add adjoint, one_hot.

Primitives: `take` (gather along one axis) and `index_add` (its adjoint). Basic indexing lowers to
`slice` + `reshape` (+ a reversing `take` for negative steps); integer arrays, on any axes, lower to
one `take` on a view with the indexed axes flattened into one (so ``logp[arange(n), y]`` is one gather).
"""

from __future__ import annotations

import numpy as np

from gradir import dtypes
from gradir.errors import DTypeError, ShapeError, UnsupportedOpError
from gradir.ir import Value
from gradir.ops.lifting import astype, concrete, lift
from gradir.ops.shapes import reshape
from gradir.primitive import Primitive, register
from gradir.trace import bind, user_source


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
    from gradir.ops.lifting import normalize_axes

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
    from gradir.ops.creation import arange
    from gradir.ops.elementwise import equal
    from gradir.ops.shapes import expand_dims

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
    from gradir.ops.lifting import broadcast_all
    from gradir.ops.shapes import transpose

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
