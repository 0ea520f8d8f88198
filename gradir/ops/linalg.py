"""matmul: one primitive on equal-batch operands of rank >= 2; the public function adds NumPy's
1-D and batch-broadcasting rules around it. The other products (dot, einsum, tensordot, inner, kron, cross)
are composites of it and the shape and elementwise ops."""

from __future__ import annotations

import math

import numpy as np

from gradir.core import dtypes
from gradir.core.errors import DTypeError, ShapeError, UnsupportedOpError
from gradir.core.ir import Value
from gradir.core.primitive import Primitive, register
from gradir.core.trace import bind, user_source
from gradir.ops.lifting import broadcast_shape, lift, lift_all, normalize_axis, type_str
from gradir.ops.reductions import sum as sum_
from gradir.ops.shapes import broadcast_to, concatenate, reshape, slice_axis, transpose

__all__ = ["addmm", "baddbmm", "cross", "dot", "einsum", "inner", "kron", "matmul", "matrix_transpose", "tensordot"]


def _matmul_infer(a, b):
    if len(a.shape) < 2 or len(b.shape) < 2 or tuple(a.shape[:-2]) != tuple(b.shape[:-2]):
        raise ShapeError(f"primitive needs rank >= 2 operands with equal batch dims, got {tuple(a.shape)} "
                         f"and {tuple(b.shape)}", op="matmul")
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"inner dimensions differ: {tuple(a.shape)} @ {tuple(b.shape)}", op="matmul")
    if a.dtype != b.dtype or a.dtype == dtypes.bool_:
        raise DTypeError("operands must share one numeric (non-bool) dtype", op="matmul")
    return tuple(a.shape[:-1]) + (b.shape[-1],), a.dtype


def matrix_transpose(x):
    """numpy.linalg.matrix_transpose (torch's `x.mT`): the last two axes swapped."""
    if type(x) is not Value:
        x = lift(x)
    n = len(x.shape)
    if n < 2:
        raise ShapeError(f"needs a value of at least 2 dimensions, got {n}", op="matrix_transpose",
                         source=user_source())
    return bind("transpose", x, perm=tuple(range(n - 2)) + (n - 1, n - 2))


register(Primitive(
    "matmul", ("a", "b"), _matmul_infer, "_k.matmul(a, b)",
    vjp=lambda g, o, a, b: [matmul(g, matrix_transpose(b)), matmul(matrix_transpose(a), g)],
    jvp=lambda ts, o, a, b: _sum_terms([None if ts[0] is None else matmul(ts[0], b),
                                        None if ts[1] is None else matmul(a, ts[1])]),
    kind="matmul",
    flops=lambda o, xs, at: 2 * math.prod(o.shape) * xs[0].shape[-1]))


def _sum_terms(terms):
    terms = [t for t in terms if t is not None]
    return None if not terms else terms[0] if len(terms) == 1 else terms[0] + terms[1]


def matmul(a, b):
    """numpy.matmul: 1-D operands are promoted to matrices and squeezed back; batch dims broadcast."""
    if type(a) is Value and type(b) is Value and len(a.shape) == 2 == len(b.shape) and a.shape[1] == b.shape[0] \
            and (a.dtype is b.dtype or a.dtype == b.dtype) and a.dtype != dtypes.bool_:
        return bind("matmul", a, b)  # two matrices: what the general path below comes to
    a, b = lift_all(a, b, op="matmul")
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError("matmul of a 0-d value; use * for scaling", op="matmul", source=user_source())
    if a.dtype == dtypes.bool_:
        raise DTypeError("matmul of bool operands; cast them first", op="matmul", source=user_source())
    a2 = reshape(a, (1,) + a.shape) if a.ndim == 1 else a
    b2 = reshape(b, b.shape + (1,)) if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ShapeError(f"inner dimensions differ: {type_str(a)} @ {type_str(b)}", op="matmul", source=user_source())
    if b.ndim == 2 and a.ndim > 2:  # a stack of rows times one matrix (a linear layer): one product, not one per row block,
        rows = bind("matmul", reshape(a, (math.prod(a.shape[:-1]), a.shape[-1])), b)  # and its weight gradient too
        return reshape(rows, a.shape[:-1] + b.shape[-1:])
    try:
        batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    except ValueError:
        raise ShapeError(f"batch dimensions of {type_str(a)} and {type_str(b)} do not broadcast", op="matmul",
                         source=user_source()) from None
    a2 = broadcast_to(a2, batch + a2.shape[-2:])
    b2 = broadcast_to(b2, batch + b2.shape[-2:])
    out = bind("matmul", a2, b2)
    # NumPy drops the dimension a 1-D operand was promoted with
    shape = batch + (a.shape[-2:-1] if a.ndim > 1 else ()) + (b.shape[-1:] if b.ndim > 1 else ())
    return reshape(out, shape)


def dot(a, b):
    """numpy.dot for 1-D and 2-D operands (= matmul)."""
    return matmul(a, b)


# -- torch's fused products ----------------------------------------------------------------------------------
def _add_product(op, input, a, b, rank, beta, alpha):
    a, b = lift_all(a, b, op=op)
    if a.ndim != rank or b.ndim != rank:
        raise ShapeError(f"needs {rank}-d operands, got {type_str(a)} and {type_str(b)}", op=op, source=user_source())
    ab = matmul(a, b)
    input = lift(input)
    if len(input.shape) > len(ab.shape) or any(d not in (1, s) for d, s in zip(input.shape[::-1], ab.shape[::-1])):
        raise ShapeError(f"input {type_str(input)} does not broadcast to the product's shape {ab.shape}", op=op,
                         source=user_source())
    scaled = ab if alpha == 1 else ab * alpha
    if beta == 0:  # as torch: input is ignored (a NaN or inf in it does not propagate)
        return scaled
    return (input if beta == 1 else input * beta) + scaled


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """torch.addmm: beta * input + alpha * (mat1 @ mat2) for matrices (n, k) and (k, m); input broadcasts to (n, m).
    With beta = 0 input is ignored, as torch."""
    return _add_product("addmm", input, mat1, mat2, 2, beta, alpha)


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """torch.baddbmm: beta * input + alpha * (batch1 @ batch2) for batches (B, n, k) and (B, k, m); input broadcasts to
    (B, n, m). With beta = 0 input is ignored, as torch."""
    return _add_product("baddbmm", input, batch1, batch2, 3, beta, alpha)


# -- tensordot, inner, kron, cross -------------------------------------------------------------------
def _contracted_axes(a, b, axes):
    """tensordot's `axes` (an int N: a's last N with b's first N; or a pair of ints or int lists) as two
    lists of non-negative axes."""
    src = user_source()
    if isinstance(axes, (int, np.integer)):
        n = int(axes)
        if not 0 <= n <= min(a.ndim, b.ndim):
            raise ShapeError(f"axes={n} for operands of {a.ndim} and {b.ndim} dimensions", op="tensordot", source=src)
        return list(range(a.ndim - n, a.ndim)), list(range(n))
    try:
        xa, xb = axes
    except (TypeError, ValueError):
        raise ShapeError(f"axes must be an int or a pair of axis lists, got {axes!r}", op="tensordot",
                         source=src) from None
    xa, xb = ([x] if isinstance(x, (int, np.integer)) else list(x) for x in (xa, xb))
    if len(xa) != len(xb):
        raise ShapeError(f"{len(xa)} axes of the first operand paired with {len(xb)} of the second", op="tensordot",
                         source=src)
    xa = [normalize_axis(x, a.ndim, "tensordot") for x in xa]
    xb = [normalize_axis(x, b.ndim, "tensordot") for x in xb]
    if len(set(xa)) != len(xa) or len(set(xb)) != len(xb):
        raise ShapeError(f"repeated axis in {axes!r}", op="tensordot", source=src)
    return xa, xb


def tensordot(a, b, axes=2):
    """numpy.tensordot (torch.tensordot's `dims`): the sum of products over a's axes `axes[0]` and b's
    `axes[1]` (an int N: a's last N and b's first N); the result has a's other axes, then b's. One
    transpose and reshape per operand around one matmul."""
    a, b = lift_all(a, b, op="tensordot")
    xa, xb = _contracted_axes(a, b, axes)
    for i, j in zip(xa, xb):
        if a.shape[i] != b.shape[j]:
            raise ShapeError(f"contracted axes differ in size: {type_str(a)} axis {i} and {type_str(b)} axis {j}",
                             op="tensordot", source=user_source())
    fa = [i for i in range(a.ndim) if i not in xa]
    fb = [j for j in range(b.ndim) if j not in xb]
    k = math.prod(a.shape[i] for i in xa)
    a2 = reshape(transpose(a, fa + xa), (math.prod(a.shape[i] for i in fa), k))
    b2 = reshape(transpose(b, xb + fb), (k, math.prod(b.shape[j] for j in fb)))
    return reshape(matmul(a2, b2), [a.shape[i] for i in fa] + [b.shape[j] for j in fb])


def inner(a, b):
    """numpy.inner (torch.inner): the sum of products over the last axes (a product when one is 0-d)."""
    a, b = lift_all(a, b, op="inner")
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    return tensordot(a, b, ([a.ndim - 1], [b.ndim - 1]))


def kron(a, b):
    """numpy.kron (torch.kron): the Kronecker product, block (i, j, ...) being a[i, j, ...] * b; the
    operand with fewer axes gets leading ones. An interleaving reshape, a broadcast product, a reshape."""
    a, b = lift_all(a, b, op="kron")
    nd = max(a.ndim, b.ndim)
    sa, sb = (1,) * (nd - a.ndim) + a.shape, (1,) * (nd - b.ndim) + b.shape
    out = reshape(a, [d for s in sa for d in (s, 1)]) * reshape(b, [d for s in sb for d in (1, s)])
    return reshape(out, [x * y for x, y in zip(sa, sb)])


def _move_axis(x, src: int, dst: int):
    perm = [i for i in range(x.ndim) if i != src]
    perm.insert(dst, src)
    return transpose(x, perm)


def cross(a, b, axis=-1, *, dim=None):
    """numpy.cross of 3-vectors along `axis` (torch.linalg.cross's `dim`, an alias), other axes
    broadcasting; the result's vectors lie along `axis` too."""
    a, b = lift_all(a, b, op="cross")
    axis = axis if dim is None else dim
    ia, ib = normalize_axis(axis, a.ndim, "cross"), normalize_axis(axis, b.ndim, "cross")
    if a.shape[ia] != 3 or b.shape[ib] != 3:
        raise ShapeError(f"needs 3-vectors along axis {axis}, got {type_str(a)} and {type_str(b)}", op="cross",
                         source=user_source())
    a, b = _move_axis(a, ia, a.ndim - 1), _move_axis(b, ib, b.ndim - 1)
    try:
        broadcast_shape([a.shape, b.shape])
    except ValueError:
        raise ShapeError(f"{type_str(a)} and {type_str(b)} do not broadcast", op="cross", source=user_source()) from None
    x = [slice_axis(a, a.ndim - 1, i, i + 1) for i in range(3)]
    y = [slice_axis(b, b.ndim - 1, i, i + 1) for i in range(3)]
    c = concatenate([x[1] * y[2] - x[2] * y[1], x[2] * y[0] - x[0] * y[2], x[0] * y[1] - x[1] * y[0]], axis=-1)
    return _move_axis(c, c.ndim - 1, normalize_axis(axis, c.ndim, "cross"))


# -- einsum ------------------------------------------------------------------------------------------
def _einsum_spec(subscripts: str, n: int):
    spec = subscripts.replace(" ", "")
    src = user_source()
    if "." in spec:
        raise UnsupportedOpError("ellipsis (...) subscripts are not supported", op="einsum", source=src)
    lhs, arrow, out = spec.partition("->")
    ins = lhs.split(",")
    if len(ins) != n:
        raise ShapeError(f"{len(ins)} operand subscripts for {n} operands", op="einsum", source=src)
    if not all(s.isalpha() for s in ins + [out] if s) or not 1 <= n <= 3:
        raise UnsupportedOpError(f"supports 1 to 3 operands with letter subscripts, got {subscripts!r}", op="einsum",
                                 source=src)
    for s in ins + [out]:
        if len(set(s)) != len(s):
            raise UnsupportedOpError(f"repeated subscript in {s!r} (diagonals) is not supported", op="einsum", source=src)
    if not arrow:  # implicit form: the letters seen once, in alphabetical order (as NumPy)
        letters = "".join(ins)
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    if set(out) - set("".join(ins)):
        raise ShapeError(f"output subscript {out!r} names a letter no operand has", op="einsum", source=src)
    return ins, out


def _einsum_sum_to(x, have: str, keep: str):
    """Sum x (subscripts `have`) over the letters not in `keep`; return it and its subscripts."""
    drop = tuple(i for i, c in enumerate(have) if c not in keep)
    if not drop:
        return x, have
    return sum_(x, drop), "".join(c for c in have if c in keep)


def _einsum_pair(a, sa: str, b, sb: str, keep: str):
    """Contract two operands, keeping the letters in `keep`: batch letters (in both, kept), letters of
    one side only, and contracted ones (in both, not kept) become one batched matmul."""
    a, sa = _einsum_sum_to(a, sa, keep + sb)
    b, sb = _einsum_sum_to(b, sb, keep + sa)
    size = dict(zip(sa, a.shape)) | dict(zip(sb, b.shape))
    batch = [c for c in sa if c in sb and c in keep]
    con = [c for c in sa if c in sb and c not in keep]
    fa = [c for c in sa if c not in sb]
    fb = [c for c in sb if c not in sa]
    prod = math.prod
    a = transpose(a, [sa.index(c) for c in batch + fa + con])
    b = transpose(b, [sb.index(c) for c in batch + con + fb])
    nb, m, k, n = prod(size[c] for c in batch), prod(size[c] for c in fa), prod(size[c] for c in con), \
        prod(size[c] for c in fb)
    if not con:  # no contraction: a broadcast product
        out = reshape(a, (nb, m, 1)) * reshape(b, (nb, 1, n))
    else:
        out = matmul(reshape(a, (nb, m, k)), reshape(b, (nb, k, n)))
    return reshape(out, [size[c] for c in batch + fa + fb]), "".join(batch + fa + fb)


def einsum(subscripts, *operands):
    """numpy.einsum for up to 3 operands with explicit (`'ij,jk->ik'`) or implicit subscripts,
    each letter at most once per operand (no diagonals, no `...`); anything else raises
    UnsupportedOpError. Lowered to sums, transposes, reshapes and batched matmuls (pairwise, left to
    right), so the gradient is that of those ops."""
    ins, out = _einsum_spec(subscripts, len(operands))
    xs = lift_all(*operands, op="einsum")
    size = {}
    for s, x in zip(ins, xs):
        if len(s) != x.ndim:
            raise ShapeError(f"subscripts {s!r} for an operand of {x.ndim} dimensions", op="einsum",
                             source=user_source())
        for c, d in zip(s, x.shape):
            if size.setdefault(c, d) != d:
                raise ShapeError(f"letter {c!r} has sizes {size[c]} and {d}", op="einsum", source=user_source())
    y, sy = _einsum_sum_to(xs[0], ins[0], out + "".join(ins[1:]))
    for i in range(1, len(xs)):
        y, sy = _einsum_pair(y, sy, xs[i], ins[i], out + "".join(ins[i + 1:]))
    y, sy = _einsum_sum_to(y, sy, out)
    return transpose(y, [sy.index(c) for c in out]) if y.ndim else y
