"""Pooling over NCL and NCHW values (torch.nn.functional's names and arguments): windows by `unfold`
(im2col) then a max or a sum; adaptive pools over torch's (possibly overlapping) windows. The 1-d pools
are the 2-d ones over a height-1 image. All are compositions of primitives."""

from __future__ import annotations

import builtins
import math

import numpy as np

from gradir.core.errors import ShapeError
from gradir.core.trace import user_source
from gradir.ops.conv import ntuple, unfold
from gradir.ops.elementwise import where
from gradir.ops.indexing import take
from gradir.ops.lifting import lift
from gradir.ops.linalg import matmul
from gradir.ops.nn.composite import float_input
from gradir.ops.nn.convolution import batched, unbatch
from gradir.ops.reductions import argmax, max, sum
from gradir.ops.shapes import pad, reshape

__all__ = ["adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_max_pool1d", "adaptive_max_pool2d", "avg_pool1d",
           "avg_pool2d", "max_pool1d", "max_pool2d"]


def _pool_input(op, x, ndim):
    """x lifted, checked floating, with a batch axis (`batched`), and whether that axis was added."""
    x = lift(x)
    float_input(op, x)
    return batched(op, x, ndim)


# -- window geometry ------------------------------------------------------------------------------


def _geometry(op, n, kernel_size, stride, padding, dilation=1):
    """kernel, stride (default: the kernel; torch's stride=None or []), padding and dilation as n-tuples."""
    k = ntuple(kernel_size, n, "kernel_size", op, 1)
    s = k if stride is None or (isinstance(stride, (tuple, list)) and not stride) else ntuple(stride, n, "stride", op, 1)
    p, d = ntuple(padding, n, "padding", op), ntuple(dilation, n, "dilation", op, 1)
    if any(2 * pi > ki for pi, ki in zip(p, k)):
        raise ShapeError(f"padding {p} must be at most half the kernel size {k}", op=op, source=user_source())
    return k, s, p, d


def _pool_out(n, k, s, p, d, ceil_mode):
    """torch's pooled length: (n + 2p - d(k-1) - 1)/s rounded down (up with ceil_mode), plus one; a
    ceil_mode window must still start inside the input or its left padding."""
    o = (n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    return o - 1 if ceil_mode and (o - 1) * s >= n + p else o


def _pool_windows(op, x, geometry, ceil_mode, value):
    """Windows (N, C, kh, kw, OH, OW) of batched x, padding filled with `value`. With ceil_mode the last
    windows may hang past the padding: `pad` fills that overhang with `value` too, then `unfold` slides
    unpadded, so every window it makes is one torch makes."""
    k, s, p, d = geometry
    out = tuple(_pool_out(n, *a, ceil_mode) for n, a in zip(x.shape[2:], zip(k, s, p, d)))
    if any(o < 1 for o in out):
        raise ShapeError(f"kernel {k} (dilation {d}) does not fit input {tuple(x.shape[2:])} padded by {p}", op=op,
                         source=user_source())
    hang = [builtins.max(0, (o - 1) * si + di * (ki - 1) + 1 - (n + 2 * pi))
            for o, n, ki, si, pi, di in zip(out, x.shape[2:], k, s, p, d)]
    if any(p) or any(hang):
        x = pad(x, ((0, 0), (0, 0), *((pi, pi + h) for pi, h in zip(p, hang))), constant_values=value)
    return unfold(x, k, s, 0, d), out


def _window_starts(out, s, p):
    return np.arange(out) * s - p


# -- max and average pooling ----------------------------------------------------------------------


def _max_pool(op, x, geometry, ceil_mode, return_indices):
    """Max pooling of batched (N, C, H, W) x; with return_indices also torch's indices: the flat position
    h * W + w of each maximum in its input plane (the first maximum in window order on ties, as torch).
    The gradient goes to each window's maximum (split evenly among exact ties, where torch picks one)."""
    cols, (oh, ow) = _pool_windows(op, x, geometry, ceil_mode, -math.inf)
    y = max(cols, axis=(2, 3))
    if not return_indices:
        return y
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = geometry
    n, c, _, w = x.shape
    rows = _window_starts(oh, sh, ph)[None, :] + (np.arange(kh) * dh)[:, None]     # (kh, OH)
    columns = _window_starts(ow, sw, pw)[None, :] + (np.arange(kw) * dw)[:, None]  # (kw, OW)
    positions = rows[:, None, :, None] * w + columns[None, :, None, :]            # (kh, kw, OH, OW)
    which = argmax(reshape(cols, (n, c, kh * kw, oh, ow)), axis=2)                  # window offset of the max
    return y, take(positions.reshape(-1), which * (oh * ow) + np.arange(oh * ow).reshape(oh, ow))


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Max over kernel_size windows of x (N, C, H, W) or (C, H, W) (torch.nn.functional.max_pool2d);
    stride defaults to the kernel size, padding counts as -inf, windows are dilated by `dilation`, and
    ceil_mode rounds the output size up (a last window may hang off the edge; it must start inside the
    input or its left padding). return_indices=True also returns, as torch, each maximum's flat index
    h * W + w into its input plane (int64)."""
    op = "max_pool2d"
    x, unbatched = _pool_input(op, x, 4)
    out = _max_pool(op, x, _geometry(op, 2, kernel_size, stride, padding, dilation), ceil_mode, return_indices)
    return tuple(unbatch(o, unbatched) for o in out) if return_indices else unbatch(out, unbatched)


def max_pool1d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Max over kernel_size windows of x (N, C, L) or (C, L) (torch.nn.functional.max_pool1d): max_pool2d
    over a height-1 image, with the same stride, padding, dilation, ceil_mode and return_indices (indices
    into L)."""
    op = "max_pool1d"
    x, unbatched = _pool_input(op, x, 3)
    k, s, p, d = _geometry(op, 1, kernel_size, stride, padding, dilation)
    out = _max_pool(op, _as_image(x), ((1, *k), (1, *s), (0, *p), (1, *d)), ceil_mode,
                    return_indices)
    return tuple(unbatch(_drop_height(o), unbatched) for o in out) if return_indices \
        else unbatch(_drop_height(out), unbatched)


def _as_image(x):
    """Batched (N, C, L) as a height-1 image (N, C, 1, L): the 1-d pools are the 2-d ones over it."""
    return reshape(x, (x.shape[0], x.shape[1], 1, x.shape[2]))


def _drop_height(y):
    """(N, C, 1, L) back to (N, C, L)."""
    return reshape(y, (y.shape[0], y.shape[1], y.shape[3]))


def _avg_divisor(n, out, k, s, p, count_include_pad):
    """torch's avg_pool divisor along one axis: the window's length clipped to the padded input
    (count_include_pad) or to the input itself."""
    start = _window_starts(out, s, p)
    end = np.minimum(start + k, n + p)
    if count_include_pad:
        return end - start
    return np.minimum(end, n) - np.maximum(start, 0)


def _avg_pool(op, x, geometry, ceil_mode, count_include_pad, divisor_override):
    """Average pooling of batched (N, C, H, W) x: window sums over zero padding divided as torch divides."""
    cols, out = _pool_windows(op, x, geometry, ceil_mode, 0.0)
    total = sum(cols, axis=(2, 3))
    if divisor_override is not None:
        if not isinstance(divisor_override, (int, np.integer)) or divisor_override == 0:
            raise ShapeError(f"divisor_override must be a nonzero int, got {divisor_override!r}", op=op,
                             source=user_source())
        return total / float(divisor_override)
    k, s, p, _ = geometry
    dh, dw = (_avg_divisor(n, o, ki, si, pi, count_include_pad) for n, o, ki, si, pi in zip(x.shape[2:], out, k, s, p))
    divisor = np.outer(dh, dw).astype(x.dtype)
    # a window wholly in the padding sums zeros; torch leaves its output 0
    return total / np.where(divisor > 0, divisor, 1).astype(x.dtype)


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    """Mean over kernel_size windows of x (N, C, H, W) or (C, H, W) (torch.nn.functional.avg_pool2d):
    padding is zeros that count toward the divisor when count_include_pad (as torch, the part of a
    ceil_mode window past the padding never counts); divisor_override replaces the divisor."""
    op = "avg_pool2d"
    x, unbatched = _pool_input(op, x, 4)
    y = _avg_pool(op, x, _geometry(op, 2, kernel_size, stride, padding), ceil_mode, count_include_pad, divisor_override)
    return unbatch(y, unbatched)


def avg_pool1d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """Mean over kernel_size windows of x (N, C, L) or (C, L) (torch.nn.functional.avg_pool1d):
    avg_pool2d over a height-1 image."""
    op = "avg_pool1d"
    x, unbatched = _pool_input(op, x, 3)
    k, s, p, _ = _geometry(op, 1, kernel_size, stride, padding)
    y = _avg_pool(op, _as_image(x), ((1, *k), (1, *s), (0, *p), (1, 1)), ceil_mode,
                  count_include_pad, None)
    return unbatch(_drop_height(y), unbatched)


# -- adaptive pooling -----------------------------------------------------------------------------


def _adaptive_size(op, x, output_size, n):
    """torch's output_size (an int, or n of them where None keeps the input's size) as an n-tuple."""
    vals = (output_size,) * n if output_size is None or isinstance(output_size, (int, np.integer)) \
        else tuple(output_size)
    if len(vals) != n:
        what = "an int" if n == 1 else f"an int or {n} of them"
        raise ShapeError(f"output_size must be {what}, got {output_size!r}", op=op, source=user_source())
    out = tuple(int(x.shape[x.ndim - n + i]) if v is None else v for i, v in enumerate(vals))
    if any(not isinstance(v, (int, np.integer)) or v < 1 for v in out):
        raise ShapeError(f"output_size must hold positive ints, got {output_size!r}", op=op, source=user_source())
    return tuple(int(v) for v in out)


def _adaptive_windows(n, m):
    """torch's windows for m outputs over n inputs: [floor(i n / m), ceil((i + 1) n / m))."""
    return [(i * n // m, -(-(i + 1) * n // m)) for i in range(m)]


def _averaging(n, m, dtype):
    """The (m, n) matrix whose rows average torch's adaptive windows."""
    a = np.zeros((m, n), dtype=dtype)
    for i, (lo, hi) in enumerate(_adaptive_windows(n, m)):
        a[i, lo:hi] = 1.0 / (hi - lo)
    return a


def _adaptive_avg(x, size):
    """Adaptive mean of batched (N, C, H, W) x. Where the output divides the input, windows tile it: a
    reshape and a mean; otherwise (windows overlap) the separable mean is two matmuls with constant
    averaging matrices (OH, H) and (W, OW)."""
    (oh, ow), (n, c, h, w) = size, x.shape
    if h % oh == 0 and w % ow == 0:
        return sum(reshape(x, (n, c, oh, h // oh, ow, w // ow)), (3, 5)) * (1.0 / (h // oh * (w // ow)))
    return matmul(matmul(_averaging(h, oh, x.dtype), x), _averaging(w, ow, x.dtype).T)


def adaptive_avg_pool2d(x, output_size):
    """Mean over torch's adaptive windows of x (N, C, H, W) or (C, H, W) (torch.nn.functional.adaptive_avg_pool2d;
    output_size an int or a pair, None keeping that axis): window i of m over n inputs is
    [floor(i n / m), ceil((i + 1) n / m))."""
    op = "adaptive_avg_pool2d"
    x, unbatched = _pool_input(op, x, 4)
    return unbatch(_adaptive_avg(x, _adaptive_size(op, x, output_size, 2)), unbatched)


def adaptive_avg_pool1d(x, output_size):
    """Mean over torch's adaptive windows of x (N, C, L) or (C, L) (torch.nn.functional.adaptive_avg_pool1d):
    adaptive_avg_pool2d over a height-1 image."""
    op = "adaptive_avg_pool1d"
    x, unbatched = _pool_input(op, x, 3)
    (m,) = _adaptive_size(op, x, output_size, 1)
    y = _adaptive_avg(_as_image(x), (1, m))
    return unbatch(_drop_height(y), unbatched)


def _window_max(v, axis, size, m):
    """Max over the adaptive windows of one axis: each window gathered, padded to the longest with -inf."""
    spans = _adaptive_windows(size, m)
    k = builtins.max(hi - lo for lo, hi in spans)
    idx = np.array([[builtins.min(lo + j, hi - 1) for j in range(k)] for lo, hi in spans])
    valid = np.array([[lo + j < hi for j in range(k)] for lo, hi in spans])
    vals = take(v, idx, axis=axis)                   # (..., m, k, ...) at `axis`
    valid = valid.reshape(valid.shape + (1,) * (v.ndim - axis - 1))
    return max(where(valid, vals, -math.inf), axis + 1)


def _adaptive_max_indexed(x, size):
    """Adaptive max of batched (N, C, H, W) x and torch's indices (flat h * W + w in each input plane):
    every window gathered whole from the flattened plane, short windows repeating their last row and
    column (a repeat changes neither the max nor, being later, the first maximum's position)."""
    (oh, ow), (n, c, h, w) = size, x.shape
    rows, columns = _adaptive_windows(h, oh), _adaptive_windows(w, ow)
    kh, kw = (builtins.max(hi - lo for lo, hi in spans) for spans in (rows, columns))
    r = np.array([[builtins.min(lo + a, hi - 1) for a in range(kh)] for lo, hi in rows])     # (OH, kh)
    q = np.array([[builtins.min(lo + b, hi - 1) for b in range(kw)] for lo, hi in columns])  # (OW, kw)
    positions = (r[:, None, :, None] * w + q[None, :, None, :]).reshape(oh, ow, kh * kw)
    vals = take(reshape(x, (n, c, h * w)), positions, axis=2)                              # (N, C, OH, OW, K)
    which = argmax(vals, axis=4)
    return max(vals, axis=4), take(positions.reshape(-1), which + np.arange(oh * ow).reshape(oh, ow) * (kh * kw))


def _adaptive_max(x, size, return_indices):
    """Adaptive max of batched (N, C, H, W) x. Windows that tile the input are a reshape and a max;
    otherwise each axis gathers its (overlapping, unequal) windows padded to the longest with -inf,
    and takes the max (separable: the max of row maxima is the window max)."""
    if return_indices:
        return _adaptive_max_indexed(x, size)
    (oh, ow), (n, c, h, w) = size, x.shape
    if h % oh == 0 and w % ow == 0:
        return max(reshape(x, (n, c, oh, h // oh, ow, w // ow)), (3, 5))
    return _window_max(_window_max(x, 2, h, oh), 3, w, ow)


def adaptive_max_pool2d(x, output_size, return_indices=False):
    """Max over torch's adaptive windows of x (N, C, H, W) or (C, H, W) (torch.nn.functional.adaptive_max_pool2d);
    return_indices=True also returns each maximum's flat index h * W + w into its input plane (int64)."""
    op = "adaptive_max_pool2d"
    x, unbatched = _pool_input(op, x, 4)
    out = _adaptive_max(x, _adaptive_size(op, x, output_size, 2), return_indices)
    return tuple(unbatch(o, unbatched) for o in out) if return_indices else unbatch(out, unbatched)


def adaptive_max_pool1d(x, output_size, return_indices=False):
    """Max over torch's adaptive windows of x (N, C, L) or (C, L) (torch.nn.functional.adaptive_max_pool1d):
    adaptive_max_pool2d over a height-1 image; return_indices=True also returns indices into L."""
    op = "adaptive_max_pool1d"
    x, unbatched = _pool_input(op, x, 3)
    (m,) = _adaptive_size(op, x, output_size, 1)
    out = _adaptive_max(_as_image(x), (1, m), return_indices)
    return tuple(unbatch(_drop_height(o), unbatched) for o in out) if return_indices \
        else unbatch(_drop_height(out), unbatched)
