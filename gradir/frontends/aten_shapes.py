"""The ATen -> gradir table's shape and indexing ops (views, slices, concatenation, diagonals, gathers and
index writes) and creation ops, assembled into TABLE by aten_table."""

from __future__ import annotations

import math

import numpy as np

from gradir import ops
from gradir.core import dtypes
from gradir.frontends.aten_common import axis_of, cast, ndim_of, np_dtype, shape_of, unsupported
from gradir.ops.lifting import concrete

# -- views and slices -----------------------------------------------------------------------------


def _expand(x, size, implicit=False):
    shape = shape_of(x)
    lead = len(size) - len(shape)
    out = tuple(shape[i - lead] if s == -1 else s for i, s in enumerate(size))
    return x if out == shape else ops.broadcast_to(x, out)


def _squeeze(x, dim=None):
    if dim is None:
        return ops.squeeze(x)
    dims = [d % max(ndim_of(x), 1) for d in (dim if isinstance(dim, (list, tuple)) else [dim])]
    keep = tuple(d for d in dims if ndim_of(x) and shape_of(x)[d] == 1)  # torch ignores non-1 dims
    return ops.squeeze(x, keep) if keep else x


def _unsqueeze(x, dim):
    return ops.expand_dims(x, dim % (ndim_of(x) + 1))


def _permute(x, dims):
    return ops.transpose(x, [d % ndim_of(x) for d in dims])


def _flatten(x, start=0, end=-1):
    shape, n = shape_of(x), max(ndim_of(x), 1)
    start, end = start % n, end % n
    return ops.reshape(x, shape[:start] + (math.prod(shape[start:end + 1]),) + shape[end + 1:])


def _unflatten(x, dim, sizes):
    shape = shape_of(x)
    dim %= len(shape)
    return ops.reshape(x, shape[:dim] + tuple(sizes) + shape[dim + 1:])


def _index(dim, ndim, i):
    return (slice(None),) * (dim % ndim) + (i,)


def _slice(x, dim=0, start=None, end=None, step=1):
    return ops.getitem(x, _index(dim, ndim_of(x), slice(start, end, step)))


def _select(x, dim, index):
    return ops.getitem(x, _index(dim, ndim_of(x), index))


def _split_points(x, sizes, dim):
    return ops.split(x, list(np.cumsum(sizes)[:-1]), axis=dim % ndim_of(x))


def _split(x, split_size, dim=0):
    n = shape_of(x)[dim]
    if isinstance(split_size, (list, tuple)):
        return _split_points(x, split_size, dim)
    return _split_points(x, [min(split_size, n - i) for i in range(0, n, split_size)], dim)


def _chunk(x, chunks, dim=0):
    return _split(x, -(-shape_of(x)[dim] // chunks), dim)


def _unbind(x, dim=0):
    return [_select(x, dim, i) for i in range(shape_of(x)[dim])]


def _cat(xs, dim=0):
    xs = [x for x in xs if shape_of(x) != (0,)]  # torch skips legacy empty (0,) tensors
    return ops.concatenate(xs, axis=dim % ndim_of(xs[0]))


def _stack(xs, dim=0):
    return ops.stack(xs, axis=dim % (ndim_of(xs[0]) + 1))


def _to_copy(x, dtype=None, **_layout):  # layout, device, pin_memory, memory_format: no meaning here
    return cast(x, dtype)


def _identity(x, *_args, **_kwargs):
    return x


def _stop_gradient(x):
    """detach: a constant stays a constant (an op that needs constant arguments, quantile's q, can read it)."""
    value = concrete(x)
    return ops.stop_gradient(x) if value is None else value


def _copy(dst, src, non_blocking=False):
    return ops.broadcast_to(ops.astype(src, dst.dtype), shape_of(dst))


def _broadcast_tensors(xs):
    shape = np.broadcast_shapes(*(shape_of(x) for x in xs))
    return [x if shape_of(x) == shape else ops.broadcast_to(x, shape) for x in xs]


# -- indexing and index writes --------------------------------------------------------------------


def _index_tensor(x, indices):
    for i in indices:
        if i is not None and dtypes.as_dtype(i.dtype) == dtypes.bool_:
            unsupported("index.Tensor", "boolean-mask indexing has a data-dependent shape; write it with torch.where")
    return ops.getitem(x, tuple(slice(None) if i is None else i for i in indices))


def _scatter(x, dim, index, src=None, value=None, reduce=None):
    """scatter (src or a scalar value), and its legacy reduce="add"/"multiply" as scatter_reduce's sum/prod
    with x's own element included, which is what that form computes."""
    axis, src = axis_of(dim, x), src if src is not None else value
    if reduce is None:
        return ops.scatter(x, axis, index, src)
    if reduce not in ("add", "multiply"):
        unsupported("scatter", f"reduce={reduce!r} (torch allows 'add' and 'multiply')")
    if not hasattr(src, "shape") or shape_of(src) != shape_of(index):  # a scalar value: one per index entry
        src = np.full(shape_of(index), src, dtype=x.dtype)
    return ops.scatter_reduce(x, axis, index, src, {"add": "sum", "multiply": "prod"}[reduce], include_self=True)


def _index_put(x, indices, values, accumulate=False):
    return ops.index_put(x, list(indices), values, accumulate)


# -- creation -------------------------------------------------------------------------------------


def _full(size, value, dtype=None, **_layout):
    dt = np_dtype(dtype) or dtypes.as_dtype(np.asarray(value).dtype)
    return ops.full(tuple(size), value, dt)


def _arange(*args, dtype=None, **_layout):
    nums = [a for a in args if isinstance(a, (int, float))]
    return ops.arange(*nums, dtype=np_dtype(dtype))


def _full_like(x, value, dtype=None, **_layout):
    return ops.full(shape_of(x), value, np_dtype(dtype) or x.dtype)


def _eye(n, m=None, dtype=None, **_layout):
    """torch.eye (what decompose=False keeps): a constant; torch's dtype is applied to every result."""
    return np.eye(n, m, dtype=np_dtype(dtype) or dtypes.float64)


SHAPES = {
    "view": lambda x, size: ops.reshape(x, tuple(size)), "_unsafe_view": lambda x, size: ops.reshape(x, tuple(size)),
    "reshape": lambda x, size: ops.reshape(x, tuple(size)), "view_copy": lambda x, size: ops.reshape(x, tuple(size)),
    "expand": _expand, "expand_copy": _expand, "permute": _permute, "permute_copy": _permute,
    "expand_as": lambda x, other: _expand(x, shape_of(other)),
    "transpose": lambda x, a, b: ops.swapaxes(x, a, b) if ndim_of(x) else x, "numpy_T": lambda x: ops.transpose(x),
    "mT": lambda x: ops.swapaxes(x, -2, -1),
    "squeeze": _squeeze, "unsqueeze": _unsqueeze, "flatten": _flatten, "unflatten": _unflatten,
    "slice": _slice, "select": _select, "split": _split, "split_with_sizes": _split, "chunk": _chunk,
    "unbind": _unbind, "cat": _cat, "concat": _cat, "stack": _stack, "hstack": ops.hstack, "vstack": ops.vstack,
    "broadcast_tensors": _broadcast_tensors,
    "meshgrid.default": lambda xs: list(ops.meshgrid(*xs, indexing="ij")),  # torch's default, unlike NumPy's
    "meshgrid.indexing": lambda xs, indexing: list(ops.meshgrid(*xs, indexing=indexing)),
    "flip": lambda x, dims: ops.flip(x, tuple(d % ndim_of(x) for d in dims)),
    "rot90": lambda x, k=1, dims=(0, 1): ops.rot90(x, k, tuple(dims)),
    "tril": lambda x, diagonal=0: ops.tril(x, diagonal), "triu": lambda x, diagonal=0: ops.triu(x, diagonal),
    "diagonal": lambda x, offset=0, dim1=0, dim2=1: ops.diagonal(x, offset, dim1, dim2),
    "diag_embed": lambda x, offset=0, dim1=-2, dim2=-1: ops.diag_embed(x, offset, dim1, dim2),
    "diag": lambda x, diagonal=0: ops.diag(x, diagonal), "trace": lambda x: ops.linalg_trace(x),
    "roll": lambda x, shifts, dims=(): ops.roll(x, tuple(shifts), tuple(dims)) if len(dims) else ops.roll(x, shifts[0]),
    "repeat": lambda x, repeats: ops.tile(x, tuple(repeats)),
    # indexing and index writes
    "index": _index_tensor, "gather": lambda x, dim, index, sparse_grad=False: ops.gather(x, axis_of(dim, x), index),
    "index_select": lambda x, dim, index: ops.take(x, index, axis=axis_of(dim, x)),
    "masked_fill": ops.masked_fill, "masked_scatter": ops.masked_scatter, "scatter": _scatter,
    "scatter_add": lambda x, dim, index, src: ops.scatter_add(x, axis_of(dim, x), index, src),
    "scatter_reduce.two": lambda x, dim, index, src, reduce, include_self=True:
        ops.scatter_reduce(x, axis_of(dim, x), index, src, reduce, include_self=include_self),
    "index_put": _index_put,
    "index_add": lambda x, dim, index, source, alpha=1: ops.index_add(x, axis_of(dim, x), index, source, alpha=alpha),
    "index_copy": lambda x, dim, index, source: ops.index_copy(x, axis_of(dim, x), index, source),
    "index_fill": lambda x, dim, index, value: ops.index_fill(x, axis_of(dim, x), index, value),
    "slice_scatter": lambda x, src, dim=0, start=None, end=None, step=1: ops.slice_scatter(x, src, dim, start, end, step),
    "select_scatter": ops.select_scatter, "copy": _copy,
    # no-ops here: gradir values are immutable, and devices and memory formats have no meaning
    "clone": _identity, "contiguous": _identity, "alias": _identity, "lift_fresh_copy": _identity,
    "_to_copy": _to_copy, "to": _to_copy, "detach": _stop_gradient, "stop_gradient": _stop_gradient,
    "_assert_tensor_metadata": lambda *a, **k: None, "_assert_async": lambda *a, **k: None,
    "sym_size": lambda x, dim: shape_of(x)[dim], "sym_numel": lambda x: math.prod(shape_of(x)),
}


CREATION = {
    "full": _full, "zeros": lambda size, dtype=None, **k: _full(size, 0.0, dtype),
    "ones": lambda size, dtype=None, **k: _full(size, 1.0, dtype),
    "empty": lambda size, dtype=None, **k: _full(size, 0.0, dtype),  # contents unspecified: zeros
    "empty_strided": lambda size, stride, dtype=None, **k: _full(size, 0.0, dtype),
    "scalar_tensor": lambda v, dtype=None, **k: _full((), v, dtype),
    "arange": _arange, "full_like": _full_like, "eye": _eye,
    "zeros_like": lambda x, dtype=None, **k: _full_like(x, 0, dtype),
    "ones_like": lambda x, dtype=None, **k: _full_like(x, 1, dtype),
    "empty_like": lambda x, dtype=None, **k: _full_like(x, 0, dtype),
    "new_zeros": lambda x, size, dtype=None, **k: _full(size, 0, dtype or x.dtype),
    "new_ones": lambda x, size, dtype=None, **k: _full(size, 1, dtype or x.dtype),
    "new_empty": lambda x, size, dtype=None, **k: _full(size, 0, dtype or x.dtype),
    "new_full": lambda x, size, v, dtype=None, **k: _full(size, v, dtype or x.dtype),
    "fill": lambda x, v: _full_like(x, v),
}

__all__ = ["CREATION", "SHAPES"]
