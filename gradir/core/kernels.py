"""NumPy kernels for primitives whose reference is more than one NumPy call.

The op library's NumPy templates call these as ``_k.name(...)``; generated backend source does too.
"""

from __future__ import annotations

import numpy as np
import scipy.special


def sigmoid(x):
    if np.iscomplexobj(x):
        return 1.0 / (1.0 + np.exp(-x))
    return scipy.special.expit(x) if x.dtype in (np.float32, np.float64) else \
        scipy.special.expit(x.astype(np.float32)).astype(x.dtype)


def erf(x):
    if x.dtype in (np.float32, np.float64, np.complex128):
        return scipy.special.erf(x)
    return scipy.special.erf(x.astype(np.float32)).astype(x.dtype)


def matmul(a, b):
    """a @ b in the operands' dtype (NumPy computes bfloat16 products in float32 and returns those)."""
    out = a @ b
    return out if out.dtype == a.dtype else out.astype(a.dtype)


def slice_(x, starts, stops, steps):
    return x[tuple(slice(a, b, c) for a, b, c in zip(starts, stops, steps))]


def pad(x, lo, hi, interior, value):
    """XLA-style pad: `lo`/`hi` elements at each end and `interior` between neighbours."""
    shape = tuple(l + h + n + max(n - 1, 0) * i for n, l, h, i in zip(x.shape, lo, hi, interior))
    out = np.full(shape, value, dtype=x.dtype)
    out[tuple(slice(l, l + (n - 1) * (i + 1) + 1 if n else l, i + 1)
              for n, l, i in zip(x.shape, lo, interior))] = x
    return out


def check_classes(idx, size, ignore, what):
    """idx, unchanged (a copy), after checking every entry is a class in [0, size) or `ignore`."""
    bad = (idx < 0) | (idx >= size)
    if ignore is not None:
        bad &= idx != ignore
    if bad.any():
        raise IndexError(f"{what}: class index {idx[bad].flat[0]} is out of range for {size} classes")
    return idx.copy()


def index_add(g, idx, axis, size):
    """The adjoint of take: zeros of length `size` along `axis`, with g's slices added at idx."""
    pre, post = g.shape[:axis], g.shape[axis + idx.ndim:]
    out = np.zeros(pre + (size,) + post, dtype=g.dtype)
    g2 = g.reshape(pre + (idx.size,) + post)
    flat = idx.reshape(-1) % size
    if axis == 0 and g2.ndim == 2 and g.dtype in (np.float64, np.float32):
        # a row-wise segment sum via a sparse-free trick: sort once, reduceat
        order = np.argsort(flat, kind="stable")
        uniq, starts = np.unique(flat[order], return_index=True)
        out[uniq] = np.add.reduceat(g2[order], starts, axis=0)
        return out
    np.add.at(out, (slice(None),) * axis + (flat,), g2)
    return out


def unfold(x, kernel, stride, padding, dilation, value):
    """im2col: (N, C, H, W) -> (N, C, kh, kw, OH, OW) patches, padding filled with `value`."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    n, c, h, w = x.shape
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if ph or pw:
        x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)
    out = np.empty((n, c, kh, kw, oh, ow), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            out[:, :, i, j] = x[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
    return out


def fold(cols, kernel, stride, padding, dilation, size):
    """col2im, the adjoint of unfold: patches (N, C, kh, kw, OH, OW) summed back into (N, C, H, W)."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    n, c, _, _, oh, ow = cols.shape
    h, w = size
    out = np.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=cols.dtype)
    for i in range(kh):
        for j in range(kw):
            out[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw] += cols[:, :, i, j]
    # a copy when padded: a view would keep the whole padded buffer alive (the memory plan counts h x w)
    return out[:, :, ph: ph + h, pw: pw + w].copy() if ph or pw else out


def cumsum(x, axis, reverse):
    """np.cumsum along `axis`, from the far end when `reverse` (the adjoint of the forward sum)."""
    if not reverse:
        return np.cumsum(x, axis=axis)
    flip = (slice(None),) * axis + (slice(None, None, -1),)
    return np.ascontiguousarray(np.cumsum(x[flip], axis=axis)[flip])


def argsort(x, axis, descending):
    """Stable argsort; descending keeps ties in index order (sorting the reversed array ascending)."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    n = x.shape[axis]
    rev = np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
    return np.ascontiguousarray(n - 1 - rev)
