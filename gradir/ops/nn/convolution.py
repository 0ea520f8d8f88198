"""Convolution over NCL, NCHW and NCDHW values: sliding windows (im2col: `unfold`, plus a gather along
depth) contracted with the weight in one batched matmul; transposed convolution scatters patches back
with `fold` (col2im). Pooling lives in pooling.py, resampling and padding in resample.py."""

from __future__ import annotations

import builtins
import math

import numpy as np

from gradir.core.errors import ShapeError
from gradir.core.trace import user_source
from gradir.ops.conv import fold, ntuple, out_size, pair, unfold
from gradir.ops.indexing import getitem, take
from gradir.ops.lifting import lift, lift_all
from gradir.ops.linalg import matmul
from gradir.ops.nn.composite import choice
from gradir.ops.shapes import pad, reshape, swapaxes, transpose

__all__ = ["conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d"]

# -- shared argument handling (pooling.py and resample.py use these too) -----------------------------


def batched(op, x, ndim):
    """x with a batch axis (torch accepts unbatched inputs with one axis fewer) and whether it was added."""
    if x.ndim == ndim - 1:
        return reshape(x, (1, *x.shape)), True
    if x.ndim != ndim:
        raise ShapeError(f"needs a {ndim}-d batched or {ndim - 1}-d unbatched input, got shape {tuple(x.shape)}", op=op,
                         source=user_source())
    return x, False


def unbatch(y, unbatched):
    """Drop the batch axis `batched` added."""
    return reshape(y, y.shape[1:]) if unbatched else y


def _operands(op, x, weight, layout: str):
    """x and weight lifted to one dtype, weight checked against its `layout` (e.g. "O, C/groups, kh, kw", one
    name per axis), and x batched (`batched`) to as many axes."""
    x, weight = lift_all(x, weight, op=op)
    ndim = layout.count(",") + 1
    if weight.ndim != ndim:
        raise ShapeError(f"needs weight ({layout}), got shape {tuple(weight.shape)}", op=op, source=user_source())
    x, unbatched = batched(op, x, ndim)
    return x, weight, unbatched


def single(v, what, op, minimum=0):
    """An int or a 1-tuple of ints, as an int (conv1d's stride=2 or stride=(2,))."""
    return ntuple(v, 1, what, op, minimum)[0]


def _groups(op, groups, *channels):
    if not isinstance(groups, (int, np.integer)) or groups < 1 or any(ch % groups for ch in channels):
        raise ShapeError(f"groups={groups!r} must be a positive int dividing the channel counts {channels}", op=op,
                         source=user_source())
    return int(groups)


def _check_channels(op, x, weight, groups):
    """The group count, checked against x (N, C, ...) and weight (O, C/groups, ...)."""
    o, cg = weight.shape[:2]
    g = _groups(op, groups, x.shape[1], o)
    if x.shape[1] != cg * g:
        raise ShapeError(f"weight {tuple(weight.shape)} expects {cg * g} input channels (groups={g}), got x of shape "
                         f"{tuple(x.shape)}", op=op, source=user_source())
    return g


def _add_bias(op, y, bias):
    if bias is None:
        return y
    bias = lift(bias)
    o = y.shape[1]
    if tuple(bias.shape) != (o,):
        raise ShapeError(f"bias must have shape ({o},), got {tuple(bias.shape)}", op=op, source=user_source())
    return y + reshape(bias, (1, o) + (1,) * (y.ndim - 2))


def _contract(cols, weight, g):
    """Windows (N, C, *kernel, *out) times weight (O, C/g, *kernel) -> (N, O, *out): one batched matmul,
    per group when g > 1 (channels are group-major in x, weight and the output, as torch)."""
    o, cg, *kernel = weight.shape
    n, spatial = cols.shape[0], cols.shape[2 + len(kernel):]
    k, positions = cg * math.prod(kernel), math.prod(spatial)
    if g == 1:
        y = matmul(reshape(weight, (o, k)), reshape(cols, (n, k, positions)))
    else:  # (G, O/G, K) @ (N, G, K, P)
        y = matmul(reshape(weight, (g, o // g, k)), reshape(cols, (n, g, k, positions)))
    return reshape(y, (n, o, *spatial))


def _string_padding(op, x, padding, kernel, stride, dilation):
    """torch's padding="valid" (none) or "same" (output as large as the input; stride 1; an odd total
    pads one more at the end, as torch) for batched x with len(kernel) spatial axes; other paddings pass
    through."""
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


# -- convolution ----------------------------------------------------------------------------------


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D cross-correlation (torch.nn.functional.conv2d) of x (N, C, H, W) or (C, H, W) with weight
    (O, C/groups, kh, kw): im2col (`unfold`) then a batched matmul. Output (N, O, OH, OW) with
    OH = floor((H + 2p - d(kh-1) - 1)/s) + 1; padding may also be "valid" or "same"."""
    op = "conv2d"
    x, weight, unbatched = _operands(op, x, weight, "O, C/groups, kh, kw")
    stride, dilation = pair(stride, "stride", op, 1), pair(dilation, "dilation", op, 1)
    x, padding = _string_padding(op, x, padding, weight.shape[2:], stride, dilation)
    g = _check_channels(op, x, weight, groups)
    cols = unfold(x, weight.shape[2:], stride, padding, dilation)          # (N, C, kh, kw, OH, OW)
    return unbatch(_add_bias(op, _contract(cols, weight, g), bias), unbatched)


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D cross-correlation (torch.nn.functional.conv1d) of x (N, C, L) or (C, L) with weight
    (O, C/groups, k): conv2d over a height-1 image. Output (N, O, OL), OL = floor((L + 2p - d(k-1) - 1)/s) + 1;
    padding may also be "valid" or "same"."""
    op = "conv1d"
    x, weight, unbatched = _operands(op, x, weight, "O, C/groups, k")
    s, d = single(stride, "stride", op, 1), single(dilation, "dilation", op, 1)
    x4 = reshape(x, (x.shape[0], x.shape[1], 1, x.shape[2]))
    if isinstance(padding, str):
        x4, p = _string_padding(op, x4, padding, (1, weight.shape[2]), (1, s), (1, d))
    else:
        p = (0, single(padding, "padding", op))
    g = _check_channels(op, x4, weight, groups)
    w4 = reshape(weight, (*weight.shape[:2], 1, -1))
    y = _add_bias(op, _contract(unfold(x4, w4.shape[2:], (1, s), p, (1, d)), w4, g), bias)
    return unbatch(reshape(y, (y.shape[0], y.shape[1], y.shape[3])), unbatched)


def _windows3d(op, x, kernel, stride, padding, dilation):
    """Windows of x (N, C, D, H, W) as (N, C, kd, kh, kw, OD, OH, OW): the depth windows by one gather
    (padded depth first), then im2col (`unfold`) of every (H, W) plane."""
    n, c, depth, h, w = x.shape
    kd, sd, pd, dd = kernel[0], stride[0], padding[0], dilation[0]
    od = out_size(depth, kd, sd, pd, dd)
    if od < 1:
        raise ShapeError(f"kernel {tuple(kernel)} (dilation {tuple(dilation)}) does not fit input {depth}x{h}x{w} "
                         f"padded by {tuple(padding)}", op=op, source=user_source())
    if pd:
        x = pad(x, ((0, 0), (0, 0), (pd, pd), (0, 0), (0, 0)))
    idx = np.arange(od)[:, None] * sd + np.arange(kd)[None, :] * dd
    planes = reshape(take(x, idx, axis=2), (n, c * od * kd, h, w))       # (N, C, OD, kd, H, W) flattened
    cols = unfold(planes, kernel[1:], stride[1:], padding[1:], dilation[1:])
    cols = reshape(cols, (n, c, od, kd, *kernel[1:], *cols.shape[4:]))
    return transpose(cols, (0, 1, 3, 4, 5, 2, 6, 7))


def conv3d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-D cross-correlation (torch.nn.functional.conv3d) of x (N, C, D, H, W) or (C, D, H, W) with weight
    (O, C/groups, kd, kh, kw): depth windows by a gather, in-plane windows by im2col, then one batched
    matmul. Each output size is floor((n + 2p - d(k-1) - 1)/s) + 1; padding may also be "valid" or "same"."""
    op = "conv3d"
    x, weight, unbatched = _operands(op, x, weight, "O, C/groups, kd, kh, kw")
    s, d = ntuple(stride, 3, "stride", op, 1), ntuple(dilation, 3, "dilation", op, 1)
    x, padding = _string_padding(op, x, padding, weight.shape[2:], s, d)
    p = ntuple(padding, 3, "padding", op)
    g = _check_channels(op, x, weight, groups)
    cols = _windows3d(op, x, tuple(weight.shape[2:]), s, p, d)
    return unbatch(_add_bias(op, _contract(cols, weight, g), bias), unbatched)


def _conv_transpose(op, x, weight, bias, s, p, op_, groups, d):
    """Transposed 2-D convolution of batched x (N, Cin, H, W) with weight (Cin, Cout/groups, kh, kw) and
    pairs s, p, op_ (output padding), d."""
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
    return _add_bias(op, y, bias)


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """Transposed convolution (torch.nn.functional.conv_transpose2d), the adjoint of conv2d in its input:
    x (N, Cin, H, W) or (Cin, H, W), weight (Cin, Cout/groups, kh, kw); each input pixel scatters
    weight-scaled patches (a matmul) that `fold` (col2im) adds up. Output height
    (H - 1)s - 2p + d(kh - 1) + output_padding + 1, the output_padding rows/columns added at the end."""
    op = "conv_transpose2d"
    x, weight, unbatched = _operands(op, x, weight, "Cin, Cout/groups, kh, kw")
    s, p = pair(stride, "stride", op, 1), pair(padding, "padding", op)
    d, op_ = pair(dilation, "dilation", op, 1), pair(output_padding, "output_padding", op)
    return unbatch(_conv_transpose(op, x, weight, bias, s, p, op_, groups, d), unbatched)


def conv_transpose1d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """Transposed 1-D convolution (torch.nn.functional.conv_transpose1d) of x (N, Cin, L) or (Cin, L) with
    weight (Cin, Cout/groups, k): conv_transpose2d over a height-1 image. Output length
    (L - 1)s - 2p + d(k - 1) + output_padding + 1."""
    op = "conv_transpose1d"
    x, weight, unbatched = _operands(op, x, weight, "Cin, Cout/groups, k")
    s, p = single(stride, "stride", op, 1), single(padding, "padding", op)
    d, q = single(dilation, "dilation", op, 1), single(output_padding, "output_padding", op)
    x4 = reshape(x, (x.shape[0], x.shape[1], 1, x.shape[2]))
    w4 = reshape(weight, (*weight.shape[:2], 1, weight.shape[2]))
    y = _conv_transpose(op, x4, w4, bias, (1, s), (0, p), (0, q), groups, (1, d))
    return unbatch(reshape(y, (y.shape[0], y.shape[1], y.shape[3])), unbatched)
