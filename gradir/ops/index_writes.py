"""torch's index writes as pure ops: index_add/index_copy/index_fill/index_put, select_scatter/
slice_scatter/masked_scatter, and scatter_reduce.

They reuse the indexing primitives (`take` and its adjoint `index_add`) and the update primitives
(`index_update`, `update_slice`), so their gradients are those primitives' rules. One primitive is new:
`index_reduce(v, idx, size, reduce)`, the product, max or min of the entries of v sent to each of `size`
positions (scatter_reduce's prod/amax/amin), with exact rules: a product's partials are right with zeros,
and a max's cotangent is split evenly among ties, as torch's.

A write to a position repeated in the index without accumulation: the last write wins here (torch leaves
the order unspecified).
"""

from __future__ import annotations

import math

import numpy as np

from gradir.core import dtypes
from gradir.core.errors import DTypeError, ShapeError, UnsupportedOpError
from gradir.core.primitive import Primitive, register
from gradir.core.trace import bind, user_source
from gradir.ops.creation import ones
from gradir.ops.elementwise import divide, equal, greater, minimum, remainder, stop_gradient, where
from gradir.ops.indexing import (
    _at_least_1d,
    _check_bounds,
    _check_index,
    _flat_positions,
    _scatter_source,
    check_classes,
    take,
)
from gradir.ops.lifting import astype, broadcast_shape, concrete, lift, lift_all, normalize_axis
from gradir.ops.shapes import broadcast_to, concatenate, reshape, transpose
from gradir.ops.update import setitem

__all__ = ["index_add", "index_copy", "index_fill", "index_put", "masked_scatter", "scatter_reduce", "select_scatter",
           "slice_scatter"]

_REDUCES = ("sum", "prod", "mean", "amax", "amin")


# -- the index_reduce primitive ----------------------------------------------------------------------
def _index_reduce_infer(v, idx, size, reduce):
    _check_index(idx, "index_reduce")
    if reduce not in ("prod", "amax", "amin"):
        raise UnsupportedOpError(f"reduce must be prod, amax or amin, got {reduce!r}", op="index_reduce")
    if len(v.shape) != 1 or tuple(v.shape) != tuple(idx.shape):
        raise ShapeError(f"values {tuple(v.shape)} and indices {tuple(idx.shape)} must be one 1-d shape",
                         op="index_reduce")
    return (size,), v.dtype


def _at(u, idx):
    return bind("take", u, idx, axis=0)


def _segment_sum(v, idx, size):
    return bind("index_add", v, idx, axis=0, size=size)


def _partial(o, v, idx, size, reduce):
    """d out[idx_i] / d v_i. A product: the product of the other entries (with one zero among them only
    the zero's is nonzero; written so its own derivative is right there too, as reductions.prod). A max
    or min: 1/count for each of the `count` entries equal to it."""
    if reduce != "prod":
        hit = astype(equal(v, _at(o, idx)), v.dtype)
        return hit / _at(_segment_sum(hit, idx, size), idx)
    zero = equal(v, 0)
    safe = where(zero, 1.0, v)
    n_zero = _at(_segment_sum(astype(zero, v.dtype), idx, size), idx)
    rest = _at(bind("index_reduce", safe, idx, size=size, reduce="prod"), idx)  # the nonzero entries' product
    zero_value = _at(_segment_sum(where(zero, v, 0.0), idx, size), idx)  # 0, but its derivative is not
    one = where(zero, rest, zero_value * rest / safe)
    return where(equal(n_zero, 0), rest / safe, where(equal(n_zero, 1), one, 0.0))


register(Primitive(
    "index_reduce", ("v", "idx"), _index_reduce_infer,
    "(lambda _o: getattr(np, {'prod': 'multiply', 'amax': 'maximum', 'amin': 'minimum'}[reduce]).at(_o, idx, v)"
    " or _o)(np.full(size, 1 if reduce == 'prod' else (-1 if reduce == 'amax' else 1) * ("
    "np.iinfo(v.dtype).max if np.issubdtype(v.dtype, np.integer) else np.inf), v.dtype))",
    vjp=lambda g, o, v, idx, size, reduce: [_at(g, idx) * _partial(o, v, idx, size, reduce), None],
    jvp=lambda ts, o, v, idx, size, reduce: None if ts[0] is None else
    _segment_sum(ts[0] * _partial(o, v, idx, size, reduce), idx, size),
    kind="index", flops=lambda o, xs, at: math.prod(xs[0].shape),
    doc="The product (1 where none), max or min (-inf / inf where none) of the entries of v sent to each of "
        "`size` positions by idx."))


# -- index_add / index_copy / index_fill -------------------------------------------------------------
def _index_vector(index, n: int, op: str, wrap: bool = False):
    """A 0-d or 1-d integer index into an axis of size n, as 1-d int64: checked now when known, when the
    program runs when traced. torch refuses negative positions here, but index_fill's (`wrap`) count
    from the end."""
    idx = lift(index)
    _check_index(idx, op, user_source())
    if idx.ndim > 1:
        raise ShapeError(f"index must be 0-d or 1-d, got shape {tuple(idx.shape)}", op=op, source=user_source())
    idx = astype(reshape(idx, (-1,)), dtypes.int64)
    c = concrete(idx)
    if c is not None:
        lo = -n if wrap else 0
        if c.size and (c.min() < lo or c.max() >= n):
            bad = c.min() if c.min() < lo else c.max()
            raise ShapeError(f"index {bad} is out of bounds for an axis of size {n}", op=op, source=user_source())
        return lift(c % n if wrap and n else c)
    if wrap:
        return remainder(idx, n) if n else idx
    return check_classes(idx, n, op)


def _index_operands(x, axis, index, op, wrap=False):
    """x (a 0-d one as 1-d, as torch), its axis, the index vector, and x's shape to restore."""
    x = lift(x)
    shape = x.shape
    if x.ndim == 0:
        x = reshape(x, (1,))
    axis = normalize_axis(axis, x.ndim, op)
    return x, axis, _index_vector(index, x.shape[axis], op, wrap), shape


def _source(x, source, axis, n, op):
    """source of x's dtype with x's shape but n along `axis` (torch's rule; a 0-d source counts as 1-d)."""
    x, source = lift_all(x, source, op=op)
    if source.ndim == 0 and x.ndim == 1:
        source = reshape(source, (1,))
    want = tuple(x.shape[:axis]) + (n,) + tuple(x.shape[axis + 1:])
    if tuple(source.shape) != want:
        raise ShapeError(f"source shape {tuple(source.shape)} must be {want} (x's shape with the index's length "
                         f"on axis {axis})", op=op, source=user_source())
    return x, source


def index_add(x, axis, index, source, alpha=1):
    """torch.index_add (`dim`): x with alpha * source's slices added at the positions `index` along
    `axis`; repeated positions accumulate. The gradient of source gathers the cotangent at index."""
    x, axis, idx, shape = _index_operands(x, axis, index, "index_add")
    x, source = _source(x, source, axis, idx.shape[0], "index_add")
    if alpha != 1:
        source = source * alpha
    return reshape(x + bind("index_add", source, idx, axis=axis, size=x.shape[axis]), shape)


def index_copy(x, axis, index, source):
    """torch.index_copy (`dim`): x with its slices at `index` along `axis` replaced by source's. With a
    repeated position the last slice wins (torch: unspecified); x gets no gradient where overwritten."""
    x, axis, idx, shape = _index_operands(x, axis, index, "index_copy")
    x, source = _source(x, source, axis, idx.shape[0], "index_copy")
    return reshape(bind("index_update", x, idx, source, axis=axis), shape)


def index_fill(x, axis, index, value):
    """torch.index_fill (`dim`): x with its slices at `index` along `axis` (negatives count from the end)
    set to the scalar `value`, which is differentiable (each filled element once, as torch)."""
    x, axis, idx, shape = _index_operands(x, axis, index, "index_fill", wrap=True)
    v = lift(value, x.dtype)
    if v.ndim:
        raise ShapeError(f"value must be a scalar (0-d), got shape {tuple(v.shape)}", op="index_fill",
                         source=user_source())
    v = broadcast_to(astype(v, x.dtype), tuple(x.shape[:axis]) + tuple(idx.shape) + tuple(x.shape[axis + 1:]))
    return reshape(bind("index_update", x, idx, v, axis=axis), shape)


# -- index_put ---------------------------------------------------------------------------------------
def _is_bool(i) -> bool:
    return i is not None and getattr(i, "dtype", None) == dtypes.bool_


def index_put(x, indices, values, accumulate=False):
    """torch.index_put: x with x[indices] = values (or += with `accumulate`, where repeated positions
    add up). `indices` is a tuple of integer arrays (broadcast together; negatives count from the end),
    None (a full slice, as ATen's) or boolean masks; the indexed axes' result goes where NumPy's
    advanced indexing puts it, and values broadcast to that. Without accumulate a repeated position
    takes the last write (torch: unspecified). A traced mask must be the only index (a `where`)."""
    x = lift(x)
    entries = list(indices) if isinstance(indices, (tuple, list)) else [indices]
    if any(_is_bool(i) and concrete(i) is None for i in entries):
        return _mask_put(x, entries, values, accumulate)
    expanded = []
    for i in entries:  # a known mask is the integer arrays of its true positions
        expanded.extend(np.nonzero(concrete(i)) if _is_bool(i) else [i])
    if len(expanded) > x.ndim:
        raise ShapeError(f"too many indices ({len(expanded)}) for a {x.ndim}-d value", op="index_put",
                         source=user_source())
    expanded += [None] * (x.ndim - len(expanded))
    pos = [a for a, i in enumerate(expanded) if i is not None]
    if not pos:
        v = _values(x, values, x.shape)
        return x + v if accumulate else v
    idxs = []
    for a in pos:
        i = lift(expanded[a])
        _check_index(i, "index_put", user_source())
        _check_bounds(i, x.shape[a], "index_put")
        idxs.append(remainder(astype(i, dtypes.int64), x.shape[a]) if x.shape[a] else astype(i, dtypes.int64))
    try:
        bshape = broadcast_shape([i.shape for i in idxs])
    except ValueError:
        raise ShapeError(f"indices of shapes {[tuple(i.shape) for i in idxs]} do not broadcast together",
                         op="index_put", source=user_source()) from None
    flat = None
    for a, i in zip(pos, idxs):  # one position in the indexed axes, flattened
        i = broadcast_to(i, bshape)
        flat = i if flat is None else flat * x.shape[a] + i
    rest = [a for a in range(x.ndim) if a not in pos]
    rest_shape = tuple(x.shape[a] for a in rest)
    adjacent = pos == list(range(pos[0], pos[0] + len(pos)))
    nb, p0 = len(bshape), pos[0] if adjacent else 0
    target = tuple(x.shape[:p0]) + bshape + tuple(x.shape[p0 + len(pos):]) if adjacent else bshape + rest_shape
    v = _values(x, values, target)
    if p0:  # the index axes first, as in the flattened x below
        v = transpose(v, list(range(p0, p0 + nb)) + list(range(p0)) + list(range(p0 + nb, v.ndim)))
    perm = pos + rest
    xt = transpose(x, perm)
    xr = reshape(xt, (math.prod(x.shape[a] for a in pos),) + rest_shape)
    fr, vr = reshape(flat, (-1,)), reshape(v, (-1,) + rest_shape)
    if accumulate:
        out = xr + bind("index_add", vr, fr, axis=0, size=xr.shape[0])
    else:
        out = bind("index_update", xr, fr, vr, axis=0)
    return transpose(reshape(out, xt.shape), list(np.argsort(perm)))


def _values(x, values, shape):
    """values cast to x's dtype and broadcast to `shape` (NumPy's rule)."""
    v = lift(values, x.dtype)
    v = astype(v, x.dtype)
    if not _broadcasts_to(v.shape, shape):
        raise ShapeError(f"values of shape {tuple(v.shape)} do not broadcast to the indexed shape {tuple(shape)}",
                         op="index_put", source=user_source())
    return broadcast_to(v, shape)


def _broadcasts_to(shape, target) -> bool:
    """Whether `shape` broadcasts to `target` (NumPy's rule) without changing it."""
    try:
        return broadcast_shape([tuple(shape), tuple(target)]) == tuple(target)
    except ValueError:
        return False


def _mask_put(x, entries, values, accumulate):
    """A traced boolean mask over x's leading axes, with values that broadcast to the axes after them:
    a `where` (the count of true entries is only known when the program runs)."""
    mask = lift(entries[0])
    if len(entries) != 1 or tuple(mask.shape) != tuple(x.shape[:mask.ndim]):
        raise UnsupportedOpError("a traced boolean mask must be the only index and cover x's leading axes "
                                 "(write it with gr.where)", op="index_put", source=user_source())
    v = _values(x, values, x.shape[mask.ndim:])
    m = reshape(mask, tuple(mask.shape) + (1,) * (x.ndim - mask.ndim))
    return where(m, x + v, x) if accumulate else where(m, v, x)


# -- select_scatter / slice_scatter / masked_scatter -----------------------------------------------
def _scatter_into(x, index, src, op):
    """setitem(x, index, src) with torch's rule that src has exactly the selection's shape."""
    x = lift(x)
    src = lift(src, x.dtype)
    want = np.empty(x.shape, np.bool_)[tuple(index)].shape  # the selection's shape, without the data
    if tuple(src.shape) != want:
        raise ShapeError(f"src shape {tuple(src.shape)} must be the selection's shape {want}", op=op,
                         source=user_source())
    return setitem(x, tuple(index), src)


def select_scatter(x, src, axis, index):
    """torch.select_scatter (`dim`): x with the slice at position `index` of `axis` replaced by src
    (x's shape without that axis)."""
    x = lift(x)
    axis = normalize_axis(axis, x.ndim, "select_scatter")
    n = x.shape[axis]
    if not -n <= int(index) < n:
        raise ShapeError(f"index {index} is out of bounds for an axis of size {n}", op="select_scatter",
                         source=user_source())
    return _scatter_into(x, (slice(None),) * axis + (int(index),), src, "select_scatter")


def slice_scatter(x, src, axis=0, start=None, end=None, step=1):
    """torch.slice_scatter (`dim`): x with x[start:end:step] along `axis` replaced by src (exactly that
    slice's shape; step > 0)."""
    x = lift(x)
    axis = normalize_axis(axis, x.ndim, "slice_scatter")
    if int(step) < 1:
        raise ShapeError(f"step must be positive, got {step}", op="slice_scatter", source=user_source())
    return _scatter_into(x, (slice(None),) * axis + (slice(start, end, int(step)),), src, "slice_scatter")


def masked_scatter(x, mask, source):
    """torch.masked_scatter: x with the positions where `mask` (bool, broadcast to x's shape) is true
    filled, in row-major order, by source's first elements. Each position reads source at the running
    count of true entries (a cumsum, so a traced mask works too); source needs at least that many
    elements (checked now for a known mask). Gradients: x where the mask is false, source's used
    elements where it is true."""
    x, source = lift_all(x, source, op="masked_scatter")
    mask = lift(mask)
    if mask.dtype != dtypes.bool_:
        raise DTypeError(f"mask must be bool, got {dtypes.short(mask.dtype)}", op="masked_scatter",
                         source=user_source())
    if not _broadcasts_to(mask.shape, x.shape):
        raise ShapeError(f"mask shape {tuple(mask.shape)} does not broadcast to {tuple(x.shape)}",
                         op="masked_scatter", source=user_source())
    n = math.prod(source.shape)
    c = concrete(mask)
    if c is not None:
        c = np.broadcast_to(c, x.shape).reshape(-1)
        if int(c.sum()) > n:
            raise ShapeError(f"source has {n} elements for {int(c.sum())} true mask entries", op="masked_scatter",
                             source=user_source())
        if not c.any():
            return x
    elif n == 0:
        return x  # (a true entry would have nothing to read)
    m = reshape(broadcast_to(mask, x.shape), (-1,))
    src = reshape(source, (-1,))
    if c is not None:
        read = lift(np.clip(np.cumsum(c) - 1, 0, None))
    else:
        read = bind("cumsum", astype(m, dtypes.int64), axis=0, reverse=False) - 1
        read = minimum(where(greater(read, 0), read, 0), src.shape[0] - 1)
    return reshape(where(m, take(src, read), reshape(x, (-1,))), x.shape)


# -- scatter_reduce ----------------------------------------------------------------------------------
def _identity(reduce, dtype):
    """The entry that never changes a max (min): the lowest (highest) value of the dtype."""
    info = np.iinfo(dtype) if dtypes.is_integer(dtype) else None
    if reduce == "amax":
        return info.min if info else -math.inf
    return info.max if info else math.inf


def scatter_reduce(x, axis, index, src, reduce, include_self=True):
    """torch.scatter_reduce (`dim`): x with the src elements sent by `index` (as torch.scatter's)
    reduced into each position by `reduce`: sum, prod, mean, amax or amin, together with x's own
    element when `include_self`, else replacing it (positions no element reaches keep x's).

    Gradients as torch: a product's partials are exact with zeros; amax/amin split the cotangent
    evenly among the elements equal to the result (without include_self torch also counts an
    excluded x element equal to it and then drops its share; so does this). Integer mean rounds
    down, as torch."""
    if reduce not in _REDUCES:
        raise UnsupportedOpError(f"reduce must be one of {_REDUCES}, got {reduce!r}", op="scatter_reduce",
                                 source=user_source())
    shape = lift(x).shape
    x, index = _at_least_1d(x, index)
    flat, _ = _flat_positions(x, index, axis, "scatter_reduce")
    x, src = _scatter_source(x, src, flat.shape, "scatter_reduce")
    size = math.prod(x.shape)
    xf, sf, pf = reshape(x, (-1,)), reshape(src, (-1,)), reshape(flat, (-1,))
    c = concrete(flat)
    counts = lift(np.bincount(c.reshape(-1), minlength=size)) if c is not None else \
        _segment_sum(ones(sf.shape, dtypes.int64), pf, size)
    hit = greater(counts, 0)
    if reduce in ("sum", "mean"):
        total = _segment_sum(sf, pf, size)
        total = total + xf if include_self else total
        if reduce == "mean":
            n = astype(counts + 1 if include_self else where(hit, counts, 1), x.dtype)
            total = divide(total - remainder(total, n), n) if dtypes.is_integer(x.dtype) else total / n
            total = astype(total, x.dtype)
    else:
        mine = xf
        if not include_self and reduce != "prod":
            # torch also shares a max's cotangent with an excluded x element equal to it, then drops that share:
            # such an element joins as a tie that receives no gradient (it cannot change the max)
            best = stop_gradient(bind("index_reduce", sf, pf, size=size, reduce=reduce))
            mine = stop_gradient(where(equal(xf, best), xf, _identity(reduce, x.dtype)))
        if include_self or reduce != "prod":  # x's elements are entries too, one at each position
            sf = concatenate([mine, sf])
            pf = concatenate([lift(np.arange(size)), pf])
        total = bind("index_reduce", sf, pf, size=size, reduce=reduce)
    out = total if include_self else where(hit, total, xf)
    return reshape(out, shape)
