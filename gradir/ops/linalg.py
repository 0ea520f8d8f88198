"""matmul: one primitive on equal-batch operands of rank >= 2; the public function adds NumPy's
1-D and batch-broadcasting rules around it."""

from __future__ import annotations

import math

import numpy as np

from gradir import dtypes
from gradir.errors import DTypeError, ShapeError
from gradir.ir import Value
from gradir.ops.lifting import lift_all, type_str
from gradir.ops.shapes import broadcast_to, reshape, swapaxes
from gradir.primitive import Primitive, register
from gradir.trace import bind, user_source


def _matmul_infer(a, b):
    if len(a.shape) < 2 or len(b.shape) < 2 or tuple(a.shape[:-2]) != tuple(b.shape[:-2]):
        raise ShapeError(f"primitive needs rank >= 2 operands with equal batch dims, got {tuple(a.shape)} "
                         f"and {tuple(b.shape)}", op="matmul")
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"inner dimensions differ: {tuple(a.shape)} @ {tuple(b.shape)}", op="matmul")
    if a.dtype != b.dtype or a.dtype == dtypes.bool_:
        raise DTypeError("operands must share one numeric (non-bool) dtype", op="matmul")
    return tuple(a.shape[:-1]) + (b.shape[-1],), a.dtype


def _mT(x):
    if type(x) is Value and len(x.shape) >= 2:  # swapaxes(x, -1, -2)'s permutation, made directly
        n = len(x.shape)
        return bind("transpose", x, perm=tuple(range(n - 2)) + (n - 1, n - 2))
    return swapaxes(x, -1, -2)


register(Primitive(
    "matmul", ("a", "b"), _matmul_infer, "_k.matmul(a, b)",
    vjp=lambda g, o, a, b: [matmul(g, _mT(b)), matmul(_mT(a), g)],
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


