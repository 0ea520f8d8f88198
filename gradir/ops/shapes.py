"""Shape primitives (reshape, transpose, broadcast_to, slice, pad, concatenate) and the NumPy-named
functions built from them (expand_dims, squeeze, split, swapaxes). All are linear: their JVP is the
op applied to the tangent, their VJP its adjoint."""

from __future__ import annotations

import math

import numpy as np

from gradir.core.errors import ShapeError
from gradir.core.primitive import Primitive, register
from gradir.core.trace import bind, constant, user_source
from gradir.ops.lifting import lift, lift_all, normalize_axes, normalize_axis

__all__ = ["broadcast_to", "concatenate", "expand_dims", "outer", "pad", "reshape", "roll", "split", "squeeze", "stack",
           "swapaxes", "tile", "transpose"]


def _linear_jvp(name):
    def jvp(ts, out, *xs, **attrs):
        if all(t is None for t in ts):
            return None
        ts = [t if t is not None else _zeros_like(x) for t, x in zip(ts, xs)]
        return bind(name, *ts, **attrs)
    return jvp


def _zeros_like(x):
    return broadcast_to(constant(np.zeros((), x.dtype)), x.shape)


# -- reshape -------------------------------------------------------------------------------------
def _reshape_infer(x, shape):
    if math.prod(shape) != math.prod(x.shape):
        raise ShapeError(f"cannot reshape {tuple(x.shape)} ({math.prod(x.shape)} elements) into {shape}",
                         op="reshape")
    return tuple(shape), x.dtype


register(Primitive("reshape", ("x",), _reshape_infer, "np.reshape(x, shape)",
                   vjp=lambda g, o, x, shape: [reshape(g, x.shape)], jvp=_linear_jvp("reshape"), kind="shape"))


def reshape(x, shape):
    """numpy.reshape, one dimension may be -1."""
    x = lift(x)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape) if isinstance(shape, (tuple, list)) else None
    if shape is None or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in shape):
        raise ShapeError("the new shape must be an int or a tuple of ints", op="reshape", source=user_source())
    shape = tuple(int(s) for s in shape)
    if shape.count(-1) > 1:
        raise ShapeError("only one dimension may be -1", op="reshape", source=user_source())
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        if known == 0 or x.size % known:
            raise ShapeError(f"cannot reshape {x.shape} into {shape}", op="reshape", source=user_source())
        shape = tuple(x.size // known if s == -1 else s for s in shape)
    return x if shape == x.shape else bind("reshape", x, shape=shape)


# -- transpose -----------------------------------------------------------------------------------
def _transpose_infer(x, perm):
    if sorted(perm) != list(range(len(x.shape))):
        raise ShapeError(f"perm {perm} is not a permutation of the {len(x.shape)} axes", op="transpose")
    shape = x.shape
    return tuple([shape[p] for p in perm]), x.dtype


register(Primitive("transpose", ("x",), _transpose_infer, "np.transpose(x, perm)",
                   vjp=lambda g, o, x, perm: [transpose(g, tuple(np.argsort(perm).tolist()))],
                   jvp=_linear_jvp("transpose"), kind="shape"))


def transpose(x, axes=None):
    """numpy.transpose (reverses the axes by default)."""
    x = lift(x)
    if axes is None:
        perm = tuple(range(x.ndim))[::-1]
    else:
        axes = tuple(axes)
        perm = tuple(normalize_axes(a, x.ndim, "transpose")[0] for a in axes) if x.ndim else axes
        if len(perm) != x.ndim or len(set(perm)) != len(perm):
            raise ShapeError(f"axes {axes} are not a permutation of the {x.ndim} axes", op="transpose",
                             source=user_source())
    return x if perm == tuple(range(x.ndim)) else bind("transpose", x, perm=perm)


def swapaxes(x, a, b):
    """numpy.swapaxes; a 0-d value (axes 0 or -1) is returned as it is, as torch.swapaxes."""
    x = lift(x)
    if x.ndim == 0:
        for i in (a, b):
            normalize_axes(i, 0, "swapaxes")  # checks each axis is 0 or -1
        return x
    a, b = (normalize_axes(i, x.ndim, "swapaxes")[0] for i in (a, b))
    perm = list(range(x.ndim))
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(x, perm)


def expand_dims(x, axis):
    """numpy.expand_dims: insert length-1 axes at the positions `axis` (int or tuple) of the result."""
    x = lift(x)
    axes = normalize_axes(axis, x.ndim + (1 if isinstance(axis, int) else len(axis)), "expand_dims")
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return reshape(x, shape)


def squeeze(x, axis=None):
    """numpy.squeeze: drop length-1 axes (all of them, or those in `axis`)."""
    x = lift(x)
    axes = tuple(i for i, s in enumerate(x.shape) if s == 1) if axis is None else normalize_axes(axis, x.ndim, "squeeze")
    for a in axes:
        if x.shape[a] != 1:
            raise ShapeError(f"cannot squeeze axis {a} of size {x.shape[a]}", op="squeeze", source=user_source())
    return reshape(x, [s for i, s in enumerate(x.shape) if i not in axes])


# -- broadcast_to --------------------------------------------------------------------------------
def _broadcast_infer(x, shape):
    shape, xs = tuple(shape), tuple(x.shape)
    k = len(shape) - len(xs)
    if k >= 0 and all(type(d) is int and d >= 0 for d in shape) and all(a == 1 or a == b for a, b in zip(xs, shape[k:])):
        return shape, x.dtype  # (what NumPy's rule below says in these cases, without its per-call setup)
    try:
        if np.broadcast_shapes(tuple(x.shape), tuple(shape)) != tuple(shape):
            raise ValueError
    except ValueError:
        raise ShapeError(f"cannot broadcast {tuple(x.shape)} to {tuple(shape)}", op="broadcast_to") from None
    return tuple(shape), x.dtype


def unbroadcast(g, shape):
    """Sum `g` down to `shape`: the adjoint of broadcasting."""
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and g.shape[lead + i] != 1)
    return reshape(bind("sum", g, axes=axes, keepdims=False), shape) if axes else reshape(g, shape)


register(Primitive("broadcast_to", ("x",), _broadcast_infer, "np.broadcast_to(x, shape)",
                   vjp=lambda g, o, x, shape: [unbroadcast(g, x.shape)], jvp=_linear_jvp("broadcast_to"),
                   kind="shape"))


def broadcast_to(x, shape):
    """numpy.broadcast_to."""
    x = lift(x)
    shape = tuple(shape)
    return x if tuple(x.shape) == shape else bind("broadcast_to", x, shape=shape)


# -- slice and pad (each other's adjoint) -------------------------------------------------------
def _slice_infer(x, starts, stops, steps):
    if not len(starts) == len(stops) == len(steps) == len(x.shape):
        raise ShapeError("slice needs a start, stop and step per axis", op="slice")
    out = []
    for n, a, b, c in zip(x.shape, starts, stops, steps):
        if c < 1 or not 0 <= a <= n or not 0 <= b <= n:
            raise ShapeError(f"slice {a}:{b}:{c} is out of range for an axis of size {n}", op="slice")
        out.append(len(range(a, b, c)))
    return tuple(out), x.dtype


def _slice_vjp(g, o, x, starts, stops, steps):
    hi = tuple(n - a - ((m - 1) * c + 1 if m else 0) for n, a, c, m in zip(x.shape, starts, steps, g.shape))
    return [bind("pad", g, lo=tuple(starts), hi=hi, interior=tuple(c - 1 for c in steps), value=0.0)]


register(Primitive("slice", ("x",), _slice_infer, "_k.slice_(x, starts, stops, steps)",
                   vjp=_slice_vjp, jvp=_linear_jvp("slice"), kind="shape"))


def _pad_infer(x, lo, hi, interior, value):
    if not len(lo) == len(hi) == len(interior) == len(x.shape):
        raise ShapeError("pad needs lo, hi and interior per axis", op="pad")
    if min(lo + hi + interior, default=0) < 0:
        raise ShapeError("negative padding", op="pad")
    return tuple(l + h + n + max(n - 1, 0) * i for n, l, h, i in zip(x.shape, lo, hi, interior)), x.dtype


def _pad_vjp(g, o, x, lo, hi, interior, value):
    stops = tuple(l + (n - 1) * (i + 1) + 1 if n else l for n, l, i in zip(x.shape, lo, interior))
    return [bind("slice", g, starts=tuple(lo), stops=stops, steps=tuple(i + 1 for i in interior))]


def _pad_jvp(ts, out, x, lo, hi, interior, value):
    # the padding is a constant: its tangent is 0 whatever `value` is
    return None if ts[0] is None else bind("pad", ts[0], lo=lo, hi=hi, interior=interior, value=0.0)


register(Primitive("pad", ("x",), _pad_infer, "_k.pad(x, lo, hi, interior, value)",
                   vjp=_pad_vjp, jvp=_pad_jvp, kind="shape",
                   doc="Pad `lo`/`hi` elements at each end of each axis and `interior` between neighbours."))


def pad(x, pad_width, constant_values=0.0):
    """numpy.pad in 'constant' mode: pad_width is an int, a (before, after) pair, or one per axis."""
    x = lift(x)
    try:
        pw = np.broadcast_to(np.asarray(pad_width, dtype=int), (x.ndim, 2)).tolist()
    except (ValueError, TypeError):
        raise ShapeError(f"pad_width {pad_width!r} does not give (before, after) for each of the {x.ndim} axes",
                         op="pad", source=user_source()) from None
    return bind("pad", x, lo=tuple(p[0] for p in pw), hi=tuple(p[1] for p in pw),
                interior=(0,) * x.ndim, value=float(constant_values))


def slice_axis(x, axis, start, stop, step=1):
    """x[start:stop:step] along one axis."""
    starts, stops, steps = [0] * x.ndim, list(x.shape), [1] * x.ndim
    starts[axis], stops[axis], steps[axis] = start, stop, step
    return bind("slice", x, starts=tuple(starts), stops=tuple(stops), steps=tuple(steps))


# -- concatenate and split -----------------------------------------------------------------------
def _concat_infer(*xs, axis):
    if not xs:
        raise ShapeError("needs at least one operand", op="concatenate")
    first = xs[0]
    if not 0 <= axis < len(first.shape):
        raise ShapeError(f"axis {axis} out of range", op="concatenate")
    for x in xs[1:]:
        if len(x.shape) != len(first.shape) or any(a != b for i, (a, b) in enumerate(zip(x.shape, first.shape)) if i != axis):
            raise ShapeError(f"shapes {tuple(first.shape)} and {tuple(x.shape)} differ off axis {axis}", op="concatenate")
        if x.dtype != first.dtype:
            raise ShapeError("operands must share a dtype", op="concatenate")
    shape = list(first.shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    return tuple(shape), first.dtype


def _concat_vjp(g, o, *xs, axis):
    out, start = [], 0
    for x in xs:
        out.append(slice_axis(g, axis, start, start + x.shape[axis]))
        start += x.shape[axis]
    return out


register(Primitive("concatenate", ("*xs",), _concat_infer, "np.concatenate(xs, axis=axis)",
                   vjp=_concat_vjp, jvp=_linear_jvp("concatenate"), kind="shape"))


def concatenate(xs, axis=0):
    """numpy.concatenate."""
    if not len(xs):
        raise ShapeError("needs at least one array to concatenate", op="concatenate", source=user_source())
    xs = lift_all(*xs, op="concatenate")
    if any(x.ndim == 0 for x in xs):
        raise ShapeError("zero-dimensional values cannot be concatenated", op="concatenate", source=user_source())
    axis = normalize_axes(axis, xs[0].ndim, "concatenate")[0]
    return xs[0] if len(xs) == 1 else bind("concatenate", *xs, axis=axis)


def stack(xs, axis=0):
    """numpy.stack: join along a new axis."""
    return concatenate([expand_dims(x, axis) for x in lift_all(*xs, op="stack")], axis=axis)


def split(x, indices_or_sections, axis=0):
    """numpy.split: a number of equal sections or a list of split points."""
    x = lift(x)
    axis = normalize_axis(axis, x.ndim, "split")
    n = x.shape[axis]
    if isinstance(indices_or_sections, (int, np.integer)):
        if indices_or_sections < 1 or n % indices_or_sections:
            raise ShapeError(f"axis of size {n} does not split into {indices_or_sections} equal parts",
                             op="split", source=user_source())
        step = n // indices_or_sections
        points = [step * i for i in range(1, int(indices_or_sections))]
    else:
        # as NumPy: negative points count from the end, points past the end clip
        points = [min(max(int(p) + n if p < 0 else int(p), 0), n) for p in indices_or_sections]
    bounds = [0] + points + [n]
    return [slice_axis(x, axis, a, max(a, b)) for a, b in zip(bounds[:-1], bounds[1:])]


# -- composites of the primitives above ------------------------------------------------------------
def roll(x, shift, axis=None):
    """numpy.roll (torch.roll): elements shifted by `shift` along `axis` (ints or tuples of them),
    wrapping around; over the flattened value when axis is None. Two slices and a concatenate."""
    x = lift(x)
    if axis is None:
        return reshape(roll(reshape(x, (-1,)), shift, 0), x.shape)
    shifts = (shift,) if isinstance(shift, (int, np.integer)) else tuple(shift)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    if len(shifts) == 1 and len(axes) > 1:
        shifts = shifts * len(axes)
    if len(shifts) != len(axes):
        raise ShapeError(f"{len(shifts)} shifts for {len(axes)} axes", op="roll", source=user_source())
    for s, a in zip(shifts, axes):
        a = normalize_axis(a, x.ndim, "roll")
        n = x.shape[a]
        s = int(s) % n if n else 0
        if s:
            x = bind("concatenate", slice_axis(x, a, n - s, n), slice_axis(x, a, 0, n - s), axis=a)
    return x


def tile(x, reps):
    """numpy.tile: x repeated `reps` times along each axis (reps are aligned to the trailing axes).
    torch's `x.repeat(*sizes)` is this op. A reshape, a broadcast and a reshape."""
    x = lift(x)
    reps = (int(reps),) if isinstance(reps, (int, np.integer)) else tuple(int(r) for r in reps)
    if any(r < 0 for r in reps):
        raise ShapeError(f"negative repetitions {reps}", op="tile", source=user_source())
    nd = max(len(reps), x.ndim)
    reps = (1,) * (nd - len(reps)) + reps
    shape = (1,) * (nd - x.ndim) + tuple(x.shape)
    y = reshape(x, [d for s in shape for d in (1, s)])
    y = broadcast_to(y, [d for r, s in zip(reps, shape) for d in (r, s)])
    return reshape(y, [r * s for r, s in zip(reps, shape)])


def outer(a, b):
    """numpy.outer: a (flattened) as a column times b (flattened) as a row."""
    a, b = lift_all(a, b, op="outer")
    return reshape(a, (-1, 1)) * reshape(b, (1, -1))
