"""The ATen -> gradir table's `as_strided` (which reads the input's memory layout, so the interpreter passes it)
and upsample_* onto gr.nn.interpolate, assembled into TABLE by aten_table; and `InPlace`, the wrapper under which
the interpreter runs an in-place op (`scatter_` from F.one_hot on the make_fx path) as its out-of-place entry.

torch is not imported here: dtypes and layouts arrive as plain values.
"""

from __future__ import annotations

import math

import numpy as np

from gradir import ops
from gradir.core.errors import UnsupportedOpError
from gradir.core.trace import user_source
from gradir.ops import nn as gnn

# -- as_strided -----------------------------------------------------------------------------------


class NeedsLayout:
    """Marker base for table entries that read their first argument's memory layout: the interpreter passes
    `layout=(strides, storage_offset)` of torch's tensor for that argument at capture."""


def _positions(shape, strides, offset) -> np.ndarray:
    """Storage position of every element of a tensor (row-major array of `shape`)."""
    pos = np.full(tuple(shape), int(offset), dtype=np.int64)
    for axis, (n, s) in enumerate(zip(shape, strides)):
        pos += (np.arange(n, dtype=np.int64) * int(s)).reshape((-1,) + (1,) * (len(shape) - axis - 1))
    return pos


def _read_map(x_shape, layout, size, stride, offset) -> np.ndarray | None:
    """For every element of as_strided's result, the row-major flat index of the element of x it reads; None
    when it reads storage that is not one of x's elements."""
    x_strides, x_offset = layout
    have = _positions(x_shape, x_strides, x_offset).ravel()
    want = _positions(size, stride, x_offset if offset is None else offset)
    if want.size == 0:
        return want
    if have.size == 0 or want.min() < have.min() or want.max() > have.max():
        return None
    index = np.full(int(have.max() - have.min()) + 1, -1, dtype=np.int64)
    index[have - have.min()] = np.arange(have.size)  # an expanded x (stride 0): equal elements, any of them
    out = index[want - have.min()]
    return None if (out < 0).any() else out


def _affine(read: np.ndarray):
    """(base, step per axis) when read[j] = base + sum(j_k * step_k), else None."""
    base = int(read.flat[0])
    steps = [int(read[(0,) * k + (1,) + (0,) * (read.ndim - k - 1)]) - base if n > 1 else 0
             for k, n in enumerate(read.shape)]
    rebuilt = _positions(read.shape, steps, base)
    return (base, steps) if np.array_equal(rebuilt, read) else None


def _nesting(base, size, steps):
    """(base, steps, reversed axes, axes by decreasing step) to read `base + sum(j_k * steps_k)` forwards with
    nested slices and reshapes; None when the steps do not nest (each a multiple of the next, its rows not
    overlapping). Axes of size 1 or step 0 (broadcast) are left out of the order."""
    steps, flips = list(steps), []
    for k, (n, s) in enumerate(zip(size, steps)):
        if s < 0:  # a reversed axis: read it forwards, flip at the end
            base, steps[k] = base + s * (n - 1), -s
            flips.append(k)
    axes = sorted((k for k, (n, s) in enumerate(zip(size, steps)) if n > 1 and s > 0), key=lambda k: -steps[k])
    if all(steps[a] % steps[b] == 0 and steps[a] >= steps[b] * size[b] for a, b in zip(axes, axes[1:])):
        return base, steps, flips, axes
    return None


def _strided_view(flat, n_total, size, nesting):
    """The elements `flat[base + sum(j_k * steps_k)]` for j over `size`, from slices, reshapes, a transpose and
    a broadcast of the 1-d `flat` (n_total elements), as `_nesting` planned them."""
    base, steps, flips, axes = nesting
    if not axes:
        y = ops.getitem(flat, base)
    else:
        first = axes[0]
        span = steps[first] * size[first]
        y = ops.getitem(flat, slice(base, min(base + span, n_total)))
        if base + span > n_total:  # the last row's unread tail lies past the end: zeros nobody reads
            y = ops.pad(y, [(0, base + span - n_total)])
        y = ops.reshape(y, (size[first], steps[first]))
        for i, (prev, k) in enumerate(zip(axes, axes[1:]), start=1):
            lead = tuple(size[a] for a in axes[:i])
            y = ops.reshape(y, lead + (steps[prev] // steps[k], steps[k]))
            y = ops.getitem(y, (slice(None),) * len(lead) + (slice(0, size[k]),))
        y = ops.getitem(y, (Ellipsis, 0))
        order = sorted(range(len(axes)), key=lambda i: axes[i])
        if order != list(range(len(axes))):
            y = ops.transpose(y, order)
    kept = tuple(n if (n > 1 and steps[k] > 0) else 1 for k, n in enumerate(size))
    y = ops.reshape(y, kept)
    if kept != tuple(size):  # step-0 axes: one element repeated
        y = ops.broadcast_to(y, tuple(size))
    if flips:
        y = ops.getitem(y, tuple(slice(None, None, -1) if k in flips else slice(None) for k in range(len(size))))
    return y


class _AsStrided(NeedsLayout):
    """aten.as_strided(x, size, stride, storage_offset) where it is a view of x that slices, reshapes and
    transposes can make (what decompositions such as AdaptiveAvgPool1d of a transposed input emit); a clear
    error for others (overlapping windows, reads outside x), at capture (`check`) and at a call."""

    @staticmethod
    def _plan(x_shape, size, stride, storage_offset, layout):
        """"empty", "reshape", or the nesting of a strided view; UnsupportedOpError for what no view makes."""
        size, stride = tuple(int(n) for n in size), tuple(int(s) for s in stride)
        read = _read_map(tuple(x_shape), layout, size, stride, storage_offset)
        if read is not None and read.size == 0:
            return "empty"
        if read is not None and read.size == math.prod(x_shape) and np.array_equal(read.ravel(), np.arange(read.size)):
            return "reshape"  # the common case: x's own elements in order, restrided
        affine = None if read is None else _affine(read)
        nesting = None if affine is None else _nesting(affine[0], size, affine[1])
        if nesting is None:
            raise UnsupportedOpError(f"as_strided(size={list(size)}, stride={list(stride)}) of a tensor of shape "
                                     f"{list(x_shape)} (strides {list(layout[0])}) is not a view that slices, "
                                     "reshapes and transposes make (overlapping windows, or storage outside the "
                                     "tensor); write it with unfold, reshape or slicing", op="aten.as_strided",
                                     source=user_source())
        return nesting

    def check(self, x_shape, size, stride, storage_offset=None, *, layout):
        """Raise at capture what a call would raise."""
        self._plan(x_shape, size, stride, storage_offset, layout)

    def __call__(self, x, size, stride, storage_offset=None, *, layout):
        size = tuple(int(n) for n in size)
        plan = self._plan(np.shape(x), size, stride, storage_offset, layout)
        if plan == "empty":
            return ops.full(size, 0, x.dtype)
        if plan == "reshape":
            return ops.reshape(x, size)
        return _strided_view(ops.reshape(x, (-1,)), math.prod(np.shape(x)), size, plan)


# -- upsampling -----------------------------------------------------------------------------------


def _resample(op, mode, x, output_size, align_corners, scales):
    """gr.nn.interpolate for aten's upsample_*: by the scale factors where given (torch's kernels then step by
    1/scale), else to the output size. Scales that do not give the output size (a direct aten call) are an
    error: interpolate cannot step by one and stop at the other."""
    k = np.ndim(x) - 2
    scales = list(scales) if isinstance(scales, (list, tuple)) else [scales] * k if scales is not None else None
    if scales is None or any(s is None for s in scales):
        return gnn.interpolate(x, size=tuple(int(n) for n in output_size), mode=mode, align_corners=align_corners)
    sizes = [math.floor(n * s) for n, s in zip(np.shape(x)[2:], scales)]
    if output_size is not None and sizes != list(output_size):
        raise UnsupportedOpError(f"upsampling to {list(output_size)} with scales {scales} (which give {sizes}) has no "
                                 "mapping: give F.interpolate a size or a scale_factor", op=f"aten.{op}",
                                 source=user_source())
    return gnn.interpolate(x, scale_factor=tuple(float(s) for s in scales), mode=mode, align_corners=align_corners)


def _scales(positional, named) -> list | None:
    """The per-axis scales of an upsample_* default overload (scales_d, scales_h, scales_w, or scales)."""
    scales = [*positional, *(named[k] for k in ("scales_d", "scales_h", "scales_w", "scales") if k in named)]
    return scales or None


def _nearest(op, mode):
    def vec(x, output_size, scale_factors):
        return _resample(op, mode, x, output_size, None, scale_factors)

    def sizes(x, output_size, *scales, **named):
        return _resample(op, mode, x, output_size, None, _scales(scales, named))
    return vec, sizes


def _linear(op, mode):
    def vec(x, output_size, align_corners, scale_factors):
        return _resample(op, mode, x, output_size, bool(align_corners), scale_factors)

    def sizes(x, output_size, align_corners, *scales, **named):
        return _resample(op, mode, x, output_size, bool(align_corners), _scales(scales, named))
    return vec, sizes


def _upsample_entries() -> dict:
    out = {}
    for name, mode, make in [("upsample_nearest1d", "nearest", _nearest), ("upsample_nearest2d", "nearest", _nearest),
                             ("upsample_nearest3d", "nearest", _nearest),
                             ("_upsample_nearest_exact1d", "nearest-exact", _nearest),
                             ("_upsample_nearest_exact2d", "nearest-exact", _nearest),
                             ("_upsample_nearest_exact3d", "nearest-exact", _nearest),
                             ("upsample_linear1d", "linear", _linear), ("upsample_bilinear2d", "bilinear", _linear),
                             ("upsample_trilinear3d", "trilinear", _linear)]:
        vec, sizes = make(name, mode)
        out[f"{name}.vec"], out[name] = vec, sizes
    return out


# -- in-place ops ---------------------------------------------------------------------------------


class InPlace:
    """An in-place ATen op (`scatter_`) as its out-of-place entry: the interpreter binds the result to the
    mutated argument too, so later reads of it see the write (torch.export functionalizes these; make_fx's
    decompositions can leave them, on fresh tensors)."""

    def __init__(self, entry):
        self.entry = entry

    def __call__(self, *args, **kwargs):
        return self.entry(*args, **kwargs)


EXTRA: dict = {"as_strided": _AsStrided(), **_upsample_entries()}
"""ATen name (overload or packet) -> function over gradir ops: as_strided and upsampling."""


__all__ = ["EXTRA", "InPlace", "NeedsLayout"]
