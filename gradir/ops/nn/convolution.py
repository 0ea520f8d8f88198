"""Convolution and pooling over NCHW (and NCL) values: unfold into a product, pool over windows."""

from __future__ import annotations

import builtins
import math

import numpy as np

from gradir.core.errors import ShapeError, UnsupportedOpError
from gradir.core.trace import user_source
from gradir.ops.conv import fold, pair, unfold
from gradir.ops.elementwise import where
from gradir.ops.indexing import getitem, take
from gradir.ops.lifting import lift, lift_all
from gradir.ops.linalg import matmul
from gradir.ops.nn.composite import choice, float_input
from gradir.ops.reductions import max, sum
from gradir.ops.shapes import pad, reshape, swapaxes

# -- convolution and pooling ----------------------------------------------------------------------


def _batched(op, x, ndim):
    """x with a batch axis (torch accepts unbatched inputs with one axis fewer) and whether it was added."""
    if x.ndim == ndim - 1:
        return reshape(x, (1, *x.shape)), True
    if x.ndim != ndim:
        raise ShapeError(f"needs a {ndim}-d batched or {ndim - 1}-d unbatched input, got shape {tuple(x.shape)}", op=op,
                         source=user_source())
    return x, False


def _groups(op, groups, *channels):
    if not isinstance(groups, (int, np.integer)) or groups < 1 or any(ch % groups for ch in channels):
        raise ShapeError(f"groups={groups!r} must be a positive int dividing the channel counts {channels}", op=op,
                         source=user_source())
    return int(groups)


def _add_bias(op, y, bias):
    if bias is None:
        return y
    bias = lift(bias)
    o = y.shape[1]
    if tuple(bias.shape) != (o,):
        raise ShapeError(f"bias must have shape ({o},), got {tuple(bias.shape)}", op=op, source=user_source())
    return y + reshape(bias, (1, o, 1, 1))


def _conv(op, x, weight, stride, padding, dilation, groups):
    """Grouped 2-D cross-correlation of batched x (N, C, H, W) with weight (O, C/groups, kh, kw): im2col
    (`unfold`), then one batched matmul per group."""
    o, cg, kh, kw = weight.shape
    g = _groups(op, groups, x.shape[1], o)
    if x.shape[1] != cg * g:
        raise ShapeError(f"weight {tuple(weight.shape)} expects {cg * g} input channels (groups={g}), got x of shape "
                         f"{tuple(x.shape)}", op=op, source=user_source())
    cols = unfold(x, (kh, kw), stride, padding, dilation)          # (N, C, kh, kw, OH, OW)
    n, oh, ow = x.shape[0], cols.shape[4], cols.shape[5]
    k = cg * kh * kw
    if g == 1:
        y = matmul(reshape(weight, (o, k)), reshape(cols, (n, k, oh * ow)))
    else:  # (G, O/G, K) @ (N, G, K, P): channels are group-major in x, weight and the output, as torch
        y = matmul(reshape(weight, (g, o // g, k)), reshape(cols, (n, g, k, oh * ow)))
    return reshape(y, (n, o, oh, ow))


def _string_padding(op, x, padding, kernel, stride, dilation):
    """torch's padding="valid" (none) or "same" (output as large as the input; stride 1; an odd total
    pads one more at the end, as torch) for batched NCHW x; other paddings pass through."""
    if not isinstance(padding, str):
        return x, padding
    choice(op, "padding", padding, ("valid", "same"))
    if padding == "valid":
        return x, 0
    if any(si != 1 for si in stride):
        raise ShapeError(f"padding='same' needs stride 1, got stride {stride}", op=op, source=user_source())
    totals = [di * (ki - 1) for di, ki in zip(dilation, kernel)]
    if all(t % 2 == 0 for t in totals):
        return x, tuple(t // 2 for t in totals)
    return pad(x, ((0, 0), (0, 0), *((t // 2, t - t // 2) for t in totals))), 0


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D cross-correlation (torch.nn.functional.conv2d) of x (N, C, H, W) or (C, H, W) with weight
    (O, C/groups, kh, kw): im2col (`unfold`) then a batched matmul. Output (N, O, OH, OW) with
    OH = floor((H + 2p - d(kh-1) - 1)/s) + 1; padding may also be "valid" or "same"."""
    x, weight = lift_all(x, weight, op="conv2d")
    if weight.ndim != 4:
        raise ShapeError(f"needs weight (O, C/groups, kh, kw), got shape {tuple(weight.shape)}", op="conv2d",
                         source=user_source())
    x, unbatched = _batched("conv2d", x, 4)
    stride, dilation = pair(stride, "stride", "conv2d", 1), pair(dilation, "dilation", "conv2d", 1)
    x, padding = _string_padding("conv2d", x, padding, weight.shape[2:], stride, dilation)
    y = _add_bias("conv2d", _conv("conv2d", x, weight, stride, padding, dilation, groups), bias)
    return reshape(y, y.shape[1:]) if unbatched else y


def _single(v, what, op, minimum=0):
    """An int or a 1-tuple of ints, as an int (conv1d's stride=2 or stride=(2,))."""
    vals = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    if len(vals) != 1 or not isinstance(vals[0], (int, np.integer)) or vals[0] < minimum:
        raise ShapeError(f"{what} must be an int >= {minimum}, got {v!r}", op=op, source=user_source())
    return int(vals[0])


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D cross-correlation (torch.nn.functional.conv1d) of x (N, C, L) or (C, L) with weight
    (O, C/groups, k): conv2d over a height-1 image. Output (N, O, OL), OL = floor((L + 2p - d(k-1) - 1)/s) + 1;
    padding may also be "valid" or "same"."""
    x, weight = lift_all(x, weight, op="conv1d")
    if weight.ndim != 3:
        raise ShapeError(f"needs weight (O, C/groups, k), got shape {tuple(weight.shape)}", op="conv1d",
                         source=user_source())
    x, unbatched = _batched("conv1d", x, 3)
    s, d = _single(stride, "stride", "conv1d", 1), _single(dilation, "dilation", "conv1d", 1)
    x4 = reshape(x, (x.shape[0], x.shape[1], 1, x.shape[2]))
    if isinstance(padding, str):
        x4, p = _string_padding("conv1d", x4, padding, (1, weight.shape[2]), (1, s), (1, d))
    else:
        p = (0, _single(padding, "padding", "conv1d"))
    y = _conv("conv1d", x4, reshape(weight, (*weight.shape[:2], 1, -1)), (1, s), p, (1, d), groups)
    y = _add_bias("conv1d", y, bias)
    y = reshape(y, (y.shape[0], y.shape[1], y.shape[3]))
    return reshape(y, y.shape[1:]) if unbatched else y


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """Transposed convolution (torch.nn.functional.conv_transpose2d), the adjoint of conv2d in its input:
    x (N, Cin, H, W) or (Cin, H, W), weight (Cin, Cout/groups, kh, kw); each input pixel scatters
    weight-scaled patches (a matmul) that `fold` (col2im) adds up. Output height
    (H - 1)s - 2p + d(kh - 1) + output_padding + 1, the output_padding rows/columns added at the end."""
    op = "conv_transpose2d"
    x, weight = lift_all(x, weight, op=op)
    if weight.ndim != 4:
        raise ShapeError(f"needs weight (Cin, Cout/groups, kh, kw), got shape {tuple(weight.shape)}", op=op,
                         source=user_source())
    x, unbatched = _batched(op, x, 4)
    s, p = pair(stride, "stride", op, 1), pair(padding, "padding", op)
    d, op_ = pair(dilation, "dilation", op, 1), pair(output_padding, "output_padding", op)
    cin, cog, kh, kw = weight.shape
    g = _groups(op, groups, cin)
    n, _, h, w = x.shape
    if x.shape[1] != cin:
        raise ShapeError(f"weight {tuple(weight.shape)} expects {cin} input channels, got x of shape {tuple(x.shape)}",
                         op=op, source=user_source())
    if any(q >= si and q >= di for q, si, di in zip(op_, s, d)):
        raise ShapeError(f"output_padding {op_} must be smaller than either stride {s} or dilation {d}", op=op,
                         source=user_source())
    full = tuple((i - 1) * si + di * (ki - 1) + 1 for i, si, di, ki in zip((h, w), s, d, (kh, kw)))
    size = tuple(f - 2 * pi + q for f, pi, q in zip(full, p, op_))  # torch's output size
    if any(v < 1 for v in size):
        raise ShapeError(f"padding {p} leaves no output for input {h}x{w} and kernel {(kh, kw)}", op=op,
                         source=user_source())
    k = cog * kh * kw
    # (G, K, Cin/G) @ (N, G, Cin/G, HW) -> (N, G, K, HW): group-major output channels, as torch
    wt = swapaxes(reshape(weight, (g, cin // g, k)), -1, -2)
    cols = reshape(matmul(wt, reshape(x, (n, g, cin // g, h * w))), (n, g * cog, kh, kw, h, w))
    # the output is the full scatter-add cropped to [p, p + size), which may reach output_padding past its end
    if all(q < si for q, si in zip(op_, s)):  # then fold's own symmetric crop does exactly that
        y = fold(cols, size, (kh, kw), s, p, d)
    else:
        y = fold(cols, full, (kh, kw), s, 0, d)
        y = pad(y, ((0, 0), (0, 0), *((0, builtins.max(0, pi + v - f)) for pi, v, f in zip(p, size, full))))
        y = getitem(y, (slice(None), slice(None), slice(p[0], p[0] + size[0]), slice(p[1], p[1] + size[1])))
    y = _add_bias(op, y, bias)
    return reshape(y, y.shape[1:]) if unbatched else y


def _pool_windows(op, x, kernel_size, stride, padding, value):
    k = pair(kernel_size, "kernel_size", op, 1)
    s = k if stride is None else pair(stride, "stride", op, 1)
    p = pair(padding, "padding", op)
    if any(2 * pi > ki for pi, ki in zip(p, k)):
        raise ShapeError(f"padding {p} must be at most half the kernel size {k}", op=op, source=user_source())
    return unfold(x, k, s, p, 1, value=value), k


def max_pool2d(x, kernel_size, stride=None, padding=0):
    """Max over kernel_size windows of x (N, C, H, W) (torch.nn.functional.max_pool2d); stride defaults
    to the kernel size, padding counts as -inf. The gradient goes to each window's maximum."""
    cols, _ = _pool_windows("max_pool2d", x, kernel_size, stride, padding, -math.inf)
    return max(cols, axis=(2, 3))


def avg_pool2d(x, kernel_size, stride=None, padding=0):
    """Mean over kernel_size windows of x (N, C, H, W) (torch.nn.functional.avg_pool2d with
    count_include_pad=True: padded zeros count toward the kh*kw divisor)."""
    cols, k = _pool_windows("avg_pool2d", x, kernel_size, stride, padding, 0.0)
    return sum(cols, axis=(2, 3)) / (k[0] * k[1])


def _adaptive_size(op, x, output_size):
    """torch's output_size (an int, or a pair whose None entries keep the input's size) as a pair."""
    vals = (output_size, output_size) if output_size is None or isinstance(output_size, (int, np.integer)) \
        else tuple(output_size)
    if len(vals) != 2:
        raise ShapeError(f"output_size must be an int or a pair, got {output_size!r}", op=op, source=user_source())
    out = tuple(int(x.shape[2 + i]) if v is None else v for i, v in enumerate(vals))
    if any(not isinstance(v, (int, np.integer)) or v < 1 for v in out):
        raise ShapeError(f"output_size must hold positive ints, got {output_size!r}", op=op, source=user_source())
    return out


def _adaptive_windows(n, m):
    """torch's windows for m outputs over n inputs: [floor(i n / m), ceil((i + 1) n / m))."""
    return [(i * n // m, -(-(i + 1) * n // m)) for i in range(m)]


def adaptive_avg_pool2d(x, output_size):
    """Mean over torch's adaptive windows of x (N, C, H, W) or (C, H, W). Where the output divides
    the input, windows tile it: a reshape and a mean; otherwise (windows overlap) the separable mean
    is two matmuls with constant averaging matrices (OH, H) and (W, OW)."""
    op = "adaptive_avg_pool2d"
    x = lift(x)
    float_input(op, x)
    x, unbatched = _batched(op, x, 4)
    (oh, ow), (n, c, h, w) = _adaptive_size(op, x, output_size), x.shape
    if h % oh == 0 and w % ow == 0:
        y = sum(reshape(x, (n, c, oh, h // oh, ow, w // ow)), (3, 5)) * (1.0 / (h // oh * (w // ow)))
    else:
        def averaging(size, m):
            a = np.zeros((m, size), dtype=x.dtype)
            for i, (lo, hi) in enumerate(_adaptive_windows(size, m)):
                a[i, lo:hi] = 1.0 / (hi - lo)
            return a
        y = matmul(matmul(averaging(h, oh), x), averaging(w, ow).T)
    return reshape(y, y.shape[1:]) if unbatched else y


def adaptive_max_pool2d(x, output_size, return_indices=False):
    """Max over torch's adaptive windows of x (N, C, H, W) or (C, H, W). Windows that tile the input
    are a reshape and a max; otherwise each axis gathers its (overlapping, unequal) windows padded to
    the longest with -inf, and takes the max (separable: the max of row maxima is the window max)."""
    op = "adaptive_max_pool2d"
    if return_indices:
        raise UnsupportedOpError("return_indices=True is not supported", op=op, source=user_source())
    x = lift(x)
    float_input(op, x)
    x, unbatched = _batched(op, x, 4)
    (oh, ow), (n, c, h, w) = _adaptive_size(op, x, output_size), x.shape
    if h % oh == 0 and w % ow == 0:
        y = max(reshape(x, (n, c, oh, h // oh, ow, w // ow)), (3, 5))
    else:
        def window_max(v, axis, size, m):
            spans = _adaptive_windows(size, m)
            k = builtins.max(hi - lo for lo, hi in spans)
            idx = np.array([[builtins.min(lo + j, hi - 1) for j in range(k)] for lo, hi in spans])
            valid = np.array([[lo + j < hi for j in range(k)] for lo, hi in spans])
            vals = take(v, idx, axis=axis)                   # (..., m, k, ...) at `axis`
            valid = valid.reshape(valid.shape + (1,) * (v.ndim - axis - 1))
            return max(where(valid, vals, -math.inf), axis + 1)
        y = window_max(window_max(x, 2, h, oh), 3, w, ow)
    return reshape(y, y.shape[1:]) if unbatched else y
