"""Resampling and padding with torch.nn.functional's names and arguments: interpolate (nearest,
nearest-exact, linear, bilinear, trilinear, area), pixel_shuffle / pixel_unshuffle and pad (constant,
reflect, replicate, circular). All are compositions of primitives: a constant-index `take` (gather)
per resampled or padded axis, whose gradient is the scatter-add `index_add`; interpolation adds a
linear blend of two gathers; pixel shuffles are a reshape, a transpose and a reshape."""

from __future__ import annotations

import math

import numpy as np

from gradir.core.errors import ShapeError, UnsupportedOpError
from gradir.core.trace import user_source
from gradir.ops.indexing import getitem, take
from gradir.ops.lifting import lift
from gradir.ops.nn.composite import choice, float_input
from gradir.ops.nn.pooling import adaptive_avg_pool1d, adaptive_avg_pool2d
from gradir.ops.shapes import pad as pad_constant
from gradir.ops.shapes import reshape, transpose

__all__ = ["interpolate", "pad", "pixel_shuffle", "pixel_unshuffle"]

# -- interpolate ----------------------------------------------------------------------------------

_MODES = {"nearest": None, "nearest-exact": None, "linear": 1, "bilinear": 2, "trilinear": 3, "area": None}


def _output_sizes(op, x, size, scale_factor, recompute_scale_factor):
    """The output size of each spatial axis and the scale torch's kernels use there (None: in/out).
    As torch, an output size from scale_factor is floor(n * scale_factor), and the kernels then use
    1/scale_factor itself unless recompute_scale_factor."""
    k = x.ndim - 2
    if (size is None) == (scale_factor is None):
        raise ShapeError("give exactly one of size and scale_factor", op=op, source=user_source())
    if size is not None:
        sizes = (size,) * k if isinstance(size, (int, np.integer)) else tuple(size)
        if len(sizes) != k or any(not isinstance(v, (int, np.integer)) or v < 1 for v in sizes):
            raise ShapeError(f"size must be a positive int or {k} of them for a {x.ndim}-d input, got {size!r}",
                             op=op, source=user_source())
        return tuple(int(v) for v in sizes), (None,) * k
    scales = (scale_factor,) * k if isinstance(scale_factor, (int, float, np.number)) else tuple(scale_factor)
    if len(scales) != k or any(not isinstance(v, (int, float, np.number)) or not v > 0 for v in scales):
        raise ShapeError(f"scale_factor must be a positive number or {k} of them for a {x.ndim}-d input, got "
                         f"{scale_factor!r}", op=op, source=user_source())
    sizes = tuple(math.floor(float(n) * float(f)) for n, f in zip(x.shape[2:], scales))
    if any(v < 1 for v in sizes):
        raise ShapeError(f"scale_factor {scale_factor!r} leaves an empty output for spatial size {tuple(x.shape[2:])}",
                         op=op, source=user_source())
    return sizes, (None,) * k if recompute_scale_factor else tuple(float(v) for v in scales)


def _scale(n_in, n_out, scale, align_corners):
    """torch's source-per-destination step: (n_in - 1)/(n_out - 1) with align_corners, else 1/scale_factor
    when one was given, else n_in / n_out."""
    if align_corners:
        return (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    return 1.0 / scale if scale else n_in / n_out


def _nearest_index(n_in, n_out, scale, exact):
    """Source index of each destination for mode nearest (floor(i * step)) or nearest-exact
    (floor((i + 1/2) * step)). torch rounds the source coordinate to float32 before the floor; so do we,
    or near-integer coordinates (3 * (7/3)) would land one index lower."""
    i = np.arange(n_out, dtype=np.float64) + (0.5 if exact else 0.0)
    real = (i * _scale(n_in, n_out, scale, False)).astype(np.float32)
    return np.minimum(np.floor(real).astype(np.int64), n_in - 1)


def _linear_weights(n_in, n_out, scale, align_corners):
    """The two source indices and weights of each destination for (bi/tri)linear modes, as torch: the
    source coordinate i * step (align_corners) or (i + 1/2) * step - 1/2 clamped at 0, its floor
    (taken in float32, as torch) and the next index, blended by the fractional part."""
    step = _scale(n_in, n_out, scale, align_corners)
    i = np.arange(n_out, dtype=np.float64)
    real = i * step if align_corners else np.maximum((i + 0.5) * step - 0.5, 0.0)
    i0 = np.minimum(np.floor(real.astype(np.float32)).astype(np.int64), n_in - 1)
    lam = np.clip(real - i0, 0.0, 1.0)
    return i0, np.minimum(i0 + 1, n_in - 1), 1.0 - lam, lam


def _along(w, axis, ndim, dtype):
    """Per-position weights w shaped to broadcast along `axis` of an ndim-d value."""
    return w.astype(dtype).reshape((-1,) + (1,) * (ndim - axis - 1))


def interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None,
                antialias=False):
    """Resample the spatial axes of x (N, C, *spatial) (torch.nn.functional.interpolate) to `size`, or by
    `scale_factor` (output floor(n * scale_factor)). Modes: "nearest" (source floor(i * in/out)),
    "nearest-exact" (floor((i + 1/2) in/out)), "linear" (3-d), "bilinear" (4-d) and "trilinear" (5-d),
    each with align_corners (corner pixels aligned) or not (pixel centres aligned), and "area"
    (adaptive average pooling, 3-d and 4-d). Separable: one gather per axis (two, blended, for the linear
    modes)."""
    op = "interpolate"
    x = lift(x)
    float_input(op, x)
    choice(op, "mode", mode, tuple(_MODES))
    if x.ndim < 3:
        raise ShapeError(f"needs a batched (N, C, *spatial) input, got shape {tuple(x.shape)}", op=op,
                         source=user_source())
    want = _MODES[mode]
    if want is not None and x.ndim - 2 != want:
        raise ShapeError(f"mode={mode!r} needs a {want + 2}-d input, got shape {tuple(x.shape)}", op=op,
                         source=user_source())
    if want is None and align_corners is not None:
        raise ShapeError(f"align_corners is for the interpolating modes (linear, bilinear, trilinear), not {mode!r}",
                         op=op, source=user_source())
    if antialias:
        raise UnsupportedOpError("antialias=True is not supported", op=op, source=user_source())
    sizes, scales = _output_sizes(op, x, size, scale_factor, recompute_scale_factor)
    if mode == "area":
        if x.ndim not in (3, 4):
            raise UnsupportedOpError(f"mode='area' supports 3-d and 4-d inputs, got shape {tuple(x.shape)}", op=op,
                                     source=user_source())
        return (adaptive_avg_pool1d if x.ndim == 3 else adaptive_avg_pool2d)(x, sizes)
    y = x
    for axis, (n_in, n_out, scale) in enumerate(zip(x.shape[2:], sizes, scales), start=2):
        if want is None:
            idx = _nearest_index(n_in, n_out, scale, mode == "nearest-exact")
            if not np.array_equal(idx, np.arange(n_in)):
                y = take(y, idx, axis=axis)
        elif n_in != n_out:  # torch copies an axis whose size does not change, whatever the scale
            i0, i1, w0, w1 = _linear_weights(n_in, n_out, scale, bool(align_corners))
            y = take(y, i0, axis=axis) * _along(w0, axis, y.ndim, x.dtype) + \
                take(y, i1, axis=axis) * _along(w1, axis, y.ndim, x.dtype)
    return y


# -- pixel shuffles -------------------------------------------------------------------------------


def _factor(op, r, what):
    if not isinstance(r, (int, np.integer)) or isinstance(r, bool) or r < 1:
        raise ShapeError(f"{what} must be a positive int, got {r!r}", op=op, source=user_source())
    return int(r)


def pixel_shuffle(x, upscale_factor):
    """torch.nn.functional.pixel_shuffle: (*, C r^2, H, W) -> (*, C, H r, W r), channel c r^2 + i r + j
    becoming pixel (h r + i, w r + j) of channel c. A reshape, a transpose and a reshape."""
    op = "pixel_shuffle"
    x = lift(x)
    r = _factor(op, upscale_factor, "upscale_factor")
    if x.ndim < 3 or x.shape[-3] % (r * r):
        raise ShapeError(f"needs (*, C * {r * r}, H, W), got shape {tuple(x.shape)}", op=op, source=user_source())
    *lead, c, h, w = x.shape
    b = len(lead)
    y = reshape(x, (*lead, c // (r * r), r, r, h, w))
    y = transpose(y, (*range(b), b, b + 3, b + 1, b + 4, b + 2))
    return reshape(y, (*lead, c // (r * r), h * r, w * r))


def pixel_unshuffle(x, downscale_factor):
    """torch.nn.functional.pixel_unshuffle, the inverse of pixel_shuffle: (*, C, H r, W r) -> (*, C r^2, H, W)."""
    op = "pixel_unshuffle"
    x = lift(x)
    r = _factor(op, downscale_factor, "downscale_factor")
    if x.ndim < 3 or x.shape[-2] % r or x.shape[-1] % r:
        raise ShapeError(f"needs (*, C, H, W) with H and W divisible by {r}, got shape {tuple(x.shape)}", op=op,
                         source=user_source())
    *lead, c, h, w = x.shape
    b = len(lead)
    y = reshape(x, (*lead, c, h // r, r, w // r, r))
    y = transpose(y, (*range(b), b, b + 2, b + 4, b + 1, b + 3))
    return reshape(y, (*lead, c * r * r, h // r, w // r))


# -- pad ------------------------------------------------------------------------------------------


def _source_index(n, lo, hi, mode):
    """For an axis of n padded by lo before and hi after, the source index of every output position:
    mirrored without repeating the edge (reflect), the edge repeated (replicate), or wrapped around
    (circular)."""
    j = np.arange(-lo, n + hi)
    if mode == "reflect":
        j = np.abs(j)
        return np.where(j >= n, 2 * (n - 1) - j, j)
    if mode == "replicate":
        return np.clip(j, 0, n - 1)
    return j % n


def _pad_limit(op, mode, n, lo, hi, axis):
    """torch's bounds: reflect pads less than the axis length, circular at most that, replicate any
    amount of a non-empty axis."""
    limit = {"reflect": n - 1, "circular": n, "replicate": math.inf if n else -1}[mode]
    if max(lo, hi) > limit:
        raise ShapeError(f"{mode} padding ({lo}, {hi}) does not fit axis {axis} of size {n}", op=op,
                         source=user_source())


def pad(x, pad, mode="constant", value=None):
    """torch.nn.functional.pad: `pad` lists (before, after) amounts for the last axes, the last axis first
    ((left, right, top, bottom) pads W then H). Modes: "constant" (fills `value`, default 0; negative
    amounts crop), "reflect" (mirrors, edge not repeated; amounts < axis length), "replicate" (repeats the
    edge) and "circular" (wraps around; amounts <= axis length); negative amounts crop first in every mode.
    Unlike torch, the non-constant modes pad any number of trailing axes. Constant padding is the `pad`
    primitive (numpy.pad, gr.pad); the other modes gather each padded axis at constant indices, so the
    gradient adds the mirrored, repeated or wrapped copies back."""
    op = "pad"
    x = lift(x)
    choice(op, "mode", mode, ("constant", "reflect", "replicate", "circular"))
    try:
        amounts = tuple(pad)
    except TypeError:
        amounts = (None,)
    if len(amounts) % 2 or len(amounts) // 2 > x.ndim or \
            any(not isinstance(v, (int, np.integer)) or isinstance(v, bool) for v in amounts):
        raise ShapeError(f"pad must be an even number (at most {2 * x.ndim}) of ints, got {pad!r}", op=op,
                         source=user_source())
    widths = [(0, 0)] * x.ndim
    for i in range(len(amounts) // 2):
        widths[x.ndim - 1 - i] = (int(amounts[2 * i]), int(amounts[2 * i + 1]))
    if mode == "constant":
        return _pad_constant(op, x, widths, 0.0 if value is None else value)
    if value is not None:
        raise ShapeError(f"mode={mode!r} takes no value (it is for mode='constant')", op=op, source=user_source())
    x = _crop(op, x, widths)  # as torch: negative amounts crop first, the rest pads what is left
    for axis, (lo, hi) in enumerate(widths):
        lo, hi = max(lo, 0), max(hi, 0)
        if lo or hi:
            _pad_limit(op, mode, x.shape[axis], lo, hi, axis)
            x = take(x, _source_index(x.shape[axis], lo, hi, mode), axis=axis)
    return x


def _crop(op, x, widths):
    """x with the negative amounts of widths cut off (the positive ones are padding, done elsewhere)."""
    if any(x.shape[a] + min(lo, 0) + min(hi, 0) < 0 for a, (lo, hi) in enumerate(widths)):
        raise ShapeError(f"cropping {widths} is more than shape {tuple(x.shape)} holds", op=op, source=user_source())
    if any(lo < 0 or hi < 0 for lo, hi in widths):
        x = getitem(x, tuple(slice(-min(lo, 0), n + min(hi, 0)) for n, (lo, hi) in zip(x.shape, widths)))
    return x


def _pad_constant(op, x, widths, value):
    """Positive amounts pad with `value`, negative ones crop (torch's constant_pad_nd)."""
    x = _crop(op, x, widths)
    if any(lo > 0 or hi > 0 for lo, hi in widths):
        x = pad_constant(x, [(max(lo, 0), max(hi, 0)) for lo, hi in widths], constant_values=value)
    return x
