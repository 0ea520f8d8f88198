"""Convolution data movement: `unfold` (im2col) and `fold` (col2im), each other's adjoint.

    unfold: (N, C, H, W)          -> (N, C, kh, kw, OH, OW)   window (i, j) of output pixel (oh, ow)
    fold:   (N, C, kh, kw, OH, OW) -> (N, C, H, W)            patches summed back where they came from

Both are linear, so the JVP of each is itself applied to the tangent and the VJP is the other one.
Padded positions of `unfold` are constants (`value`: 0 for convolution, -inf for max pooling): they
receive no gradient (fold crops the padding away) and carry zero tangent (the JVP pads with 0).
Convolution and pooling in `gr.nn` are built on these plus matmul and reductions.
"""

from __future__ import annotations

import math

import numpy as np

from gradir.core import dtypes
from gradir.core.errors import DTypeError, ShapeError
from gradir.core.primitive import Primitive, register
from gradir.core.trace import bind, user_source
from gradir.ops.lifting import lift

__all__ = ["fold", "out_size", "unfold"]


def out_size(n: int, k: int, s: int, p: int, d: int) -> int:
    """Output length of a window sliding over n: floor((n + 2p - d(k-1) - 1)/s) + 1."""
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def ntuple(v, n: int, what: str, op: str, minimum: int = 0) -> tuple[int, ...]:
    """An int or n ints as an n-tuple (kernel_size=3 -> (3, 3, 3) for n = 3)."""
    try:
        vals = (v,) * n if isinstance(v, (int, np.integer)) else tuple(v)
    except TypeError:
        vals = ()
    if len(vals) != n or any(not isinstance(a, (int, np.integer)) or a < minimum for a in vals):
        many = {1: "a 1-tuple", 2: "a pair"}.get(n, f"{n}")
        raise ShapeError(f"{what} must be an int >= {minimum} or {many} of them, got {v!r}", op=op,
                         source=user_source())
    return tuple(int(a) for a in vals)


def pair(v, what: str, op: str, minimum: int = 0) -> tuple[int, int]:
    """An int or a pair of ints as a pair (kernel_size=3 -> (3, 3))."""
    return ntuple(v, 2, what, op, minimum)


def _unfold_infer(x, kernel, stride, padding, dilation, value):
    if len(x.shape) != 4:
        raise ShapeError(f"needs an (N, C, H, W) operand, got shape {tuple(x.shape)}", op="unfold")
    if not dtypes.is_inexact(x.dtype):
        raise DTypeError(f"needs a float operand, got {dtypes.short(x.dtype)}", op="unfold")
    n, c, h, w = x.shape
    oh, ow = (out_size(size, *a) for size, a in zip((h, w), zip(kernel, stride, padding, dilation)))
    if oh < 1 or ow < 1:
        raise ShapeError(f"kernel {tuple(kernel)} (dilation {tuple(dilation)}) does not fit input {h}x{w} "
                         f"padded by {tuple(padding)}", op="unfold")
    return (n, c, *kernel, oh, ow), x.dtype


def _fold_infer(cols, kernel, stride, padding, dilation, size):
    if len(cols.shape) != 6 or tuple(cols.shape[2:4]) != tuple(kernel):
        raise ShapeError(f"needs (N, C, kh, kw, OH, OW) patches with kernel {tuple(kernel)}, got shape "
                         f"{tuple(cols.shape)}", op="fold")
    want = tuple(out_size(n, *a) for n, a in zip(size, zip(kernel, stride, padding, dilation)))
    if tuple(cols.shape[4:]) != want:
        raise ShapeError(f"{tuple(cols.shape[4:])} patch positions do not tile an output of size {tuple(size)} "
                         f"(expected {want})", op="fold")
    return (*cols.shape[:2], *size), cols.dtype


def _geometry(attrs) -> dict:
    return {k: attrs[k] for k in ("kernel", "stride", "padding", "dilation")}


register(Primitive(
    "unfold", ("x",), _unfold_infer, "_k.unfold(x, kernel, stride, padding, dilation, value)",
    vjp=lambda g, o, x, **at: [bind("fold", g, **_geometry(at), size=tuple(x.shape[2:]))],
    jvp=lambda ts, o, x, **at: None if ts[0] is None else bind("unfold", ts[0], **_geometry(at), value=0.0),
    kind="index", doc="im2col: sliding windows of an NCHW value; padded positions hold `value`."))

register(Primitive(
    "fold", ("cols",), _fold_infer, "_k.fold(cols, kernel, stride, padding, dilation, size)",
    vjp=lambda g, o, cols, **at: [bind("unfold", g, **_geometry(at), value=0.0)],
    jvp=lambda ts, o, cols, **at: None if ts[0] is None else bind("fold", ts[0], **at),
    kind="index", flops=lambda out, xs, at: math.prod(xs[0].shape),
    doc="col2im, the adjoint of unfold: patches added back into an (N, C, *size) value."))


def unfold(x, kernel_size, stride=1, padding=0, dilation=1, value=0.0):
    """Sliding windows (im2col) of an (N, C, H, W) value as (N, C, kh, kw, OH, OW).

    Unlike torch.nn.functional.unfold the window and position axes stay separate; padding is
    filled with `value`."""
    return bind("unfold", lift(x), kernel=pair(kernel_size, "kernel_size", "unfold", 1),
                stride=pair(stride, "stride", "unfold", 1), padding=pair(padding, "padding", "unfold"),
                dilation=pair(dilation, "dilation", "unfold", 1), value=float(value))


def fold(cols, output_size, kernel_size, stride=1, padding=0, dilation=1):
    """col2im: add (N, C, kh, kw, OH, OW) patches back into an (N, C, *output_size) value (adjoint of unfold)."""
    cols = lift(cols)
    return bind("fold", cols, kernel=pair(kernel_size, "kernel_size", "fold", 1), stride=pair(stride, "stride", "fold", 1),
                padding=pair(padding, "padding", "fold"), dilation=pair(dilation, "dilation", "fold", 1),
                size=pair(output_size, "output_size", "fold", 1))
