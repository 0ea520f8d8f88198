"""Arranging elements: flip, rot90, hstack/vstack, meshgrid, and the diagonal family (diagonal, diag,
diag_embed, linalg_trace). All are composites of the linear shape primitives: a diagonal is a strided
`slice` of the flattened matrix axes, and writing one is its adjoint, a `pad` with interior spacing, so
their gradients and every backend come with them."""

from __future__ import annotations

from gradir.core.errors import AxisError, ShapeError
from gradir.core.trace import bind, user_source
from gradir.ops.indexing import getitem
from gradir.ops.lifting import broadcast_shape, lift, lift_all, normalize_axes, normalize_axis
from gradir.ops.reductions import sum as sum_
from gradir.ops.shapes import broadcast_to, concatenate, reshape, slice_axis, transpose

__all__ = ["diag", "diag_embed", "diagonal", "flip", "hstack", "linalg_trace", "meshgrid", "rot90", "vstack"]


def flip(x, axis=None):
    """numpy.flip / torch.flip: the order of elements reversed along `axis` (an int, a tuple, or every
    axis when None)."""
    x = lift(x)
    axes = normalize_axes(axis, x.ndim, "flip")
    return getitem(x, tuple(slice(None, None, -1) if a in axes else slice(None) for a in range(x.ndim)))


def rot90(x, k=1, axes=(0, 1)):
    """numpy.rot90 / torch.rot90 (`dims`): x rotated by 90 degrees k times in the plane of `axes`, from
    the first axis towards the second."""
    x = lift(x)
    axes = tuple(axes)
    if len(axes) != 2:
        raise AxisError(f"axes must name 2 axes, got {axes}", op="rot90", source=user_source())
    if x.ndim < 2:
        raise ShapeError(f"needs a value of at least 2 dimensions, got {x.ndim}", op="rot90", source=user_source())
    a, b = (normalize_axis(i, x.ndim, "rot90") for i in axes)
    if a == b:
        raise AxisError(f"axes {axes} must be different", op="rot90", source=user_source())
    k = int(k) % 4
    if k == 0:
        return x
    if k == 2:
        return flip(x, (a, b))
    perm = list(range(x.ndim))
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(flip(x, b), perm) if k == 1 else flip(transpose(x, perm), b)


def _at_least(x, n):
    """numpy.atleast_1d (n=1) / atleast_2d (n=2): a 0-d value as (1,) or (1, 1), a 1-d one as (1, m)."""
    return x if x.ndim >= n else reshape(x, (1,) * (n - x.ndim) + tuple(x.shape))


def hstack(xs):
    """numpy.hstack / torch.hstack: concatenated along axis 1, or axis 0 for 1-d (and 0-d) values."""
    xs = [_at_least(x, 1) for x in lift_all(*xs, op="hstack")] if len(xs) else []
    return concatenate(xs, axis=0 if xs and xs[0].ndim == 1 else 1)


def vstack(xs):
    """numpy.vstack / torch.vstack: concatenated along axis 0, 1-d values taken as rows."""
    xs = [_at_least(x, 2) for x in lift_all(*xs, op="vstack")] if len(xs) else []
    return concatenate(xs, axis=0)


def meshgrid(*xs, indexing="xy"):
    """numpy.meshgrid / torch.meshgrid: coordinate arrays, one per input (flattened), broadcast to
    the grid's shape. indexing='xy' (NumPy's default) swaps the first two axes; 'ij' (torch's) does
    not. Each output is a broadcast of its input, so its gradient sums over the other axes."""
    if indexing not in ("xy", "ij"):
        raise ShapeError(f"indexing must be 'xy' or 'ij', got {indexing!r}", op="meshgrid", source=user_source())
    xs = [reshape(lift(x), (-1,)) for x in xs]
    n = len(xs)
    shapes = [[1] * n for _ in xs]
    for i, x in enumerate(xs):
        shapes[i][i] = x.shape[0]
    if indexing == "xy" and n > 1:
        for s in shapes[:2]:
            s[0], s[1] = s[1], s[0]
    grid = broadcast_shape([tuple(s) for s in shapes])
    return tuple(broadcast_to(reshape(x, s), grid) for x, s in zip(xs, shapes))


# -- diagonals -------------------------------------------------------------------------------------
def _diagonal_span(n: int, m: int, offset: int):
    """Where the offset diagonal of an n x m matrix lies in its flattened form: (start, length); the
    step is m + 1."""
    if offset >= 0:
        return offset, max(0, min(n, m - offset))
    return -offset * m, max(0, min(n + offset, m))


def diagonal(x, offset=0, axis1=0, axis2=1):
    """numpy.diagonal / torch.diagonal (`dim1`, `dim2`): the `offset` diagonal of the matrices in
    axes (axis1, axis2), which are removed, as a new last axis. A strided slice of the flattened
    matrix axes."""
    x = lift(x)
    if x.ndim < 2:
        raise ShapeError(f"needs a value of at least 2 dimensions, got {x.ndim}", op="diagonal",
                         source=user_source())
    a, b = (normalize_axis(i, x.ndim, "diagonal") for i in (axis1, axis2))
    if a == b:
        raise AxisError(f"axis1 and axis2 must be different, got {axis1} and {axis2}", op="diagonal",
                        source=user_source())
    rest = [i for i in range(x.ndim) if i not in (a, b)]
    n, m = x.shape[a], x.shape[b]
    flat = reshape(transpose(x, rest + [a, b]), tuple(x.shape[i] for i in rest) + (n * m,))
    start, length = _diagonal_span(n, m, int(offset))
    if not length:
        return slice_axis(flat, flat.ndim - 1, 0, 0)
    return slice_axis(flat, flat.ndim - 1, start, start + (length - 1) * (m + 1) + 1, m + 1)


def _embed_last(x, offset: int):
    """x's last axis (length n) as the offset diagonal of new last two axes of size n + |offset|: a pad of
    the last axis with n + |offset| zeros between neighbours (the adjoint of diagonal's slice)."""
    n = x.shape[-1]
    size = n + abs(offset)
    start, _ = _diagonal_span(size, size, offset)
    used = (n - 1) * (size + 1) + 1 if n else 0
    lead = (0,) * (x.ndim - 1)
    y = bind("pad", x, lo=lead + (start,), hi=lead + (size * size - start - used,), interior=lead + (size,),
             value=0.0)
    return reshape(y, tuple(x.shape[:-1]) + (size, size))


def diag(v, k=0):
    """numpy.diag / torch.diag: a 1-d v as the k-th diagonal of a square matrix (zeros elsewhere);
    the k-th diagonal of a 2-d v."""
    v = lift(v)
    if v.ndim == 1:
        return _embed_last(v, int(k))
    if v.ndim == 2:
        return diagonal(v, k)
    raise ShapeError(f"needs a 1-d or 2-d value, got {v.ndim}-d", op="diag", source=user_source())


def diag_embed(x, offset=0, axis1=-2, axis2=-1):
    """torch.diag_embed (`dim1`, `dim2`): x's last axis as the `offset` diagonal of the matrices in axes
    (axis1, axis2) of the result, which has one more dimension; so diagonal(diag_embed(x, o, a, b), o,
    a, b) == x."""
    x = lift(x)
    if x.ndim == 0:
        raise ShapeError("needs a value of at least 1 dimension", op="diag_embed", source=user_source())
    nd = x.ndim + 1
    a, b = (normalize_axis(i, nd, "diag_embed") for i in (axis1, axis2))
    if a == b:
        raise AxisError(f"axis1 and axis2 must be different, got {axis1} and {axis2}", op="diag_embed",
                        source=user_source())
    y = _embed_last(x, int(offset))  # (..., rows, cols)
    lead = iter(range(nd - 2))
    return transpose(y, [nd - 2 if i == a else nd - 1 if i == b else next(lead) for i in range(nd)])


def linalg_trace(x, offset=0, axis1=-2, axis2=-1):
    """The trace: the sum of the `offset` diagonal of the matrices in axes (axis1, axis2), as
    numpy.linalg.trace (the last two axes by default; numpy.trace's axis1=0, axis2=1 on request) and
    torch.trace (2-d). Named `linalg_trace` because `gr.trace` is gradir's tracer (a function to its
    graph), whose name stays; the gradient is the identity pattern of that diagonal."""
    x = lift(x)
    return sum_(diagonal(x, offset, axis1, axis2), -1)
