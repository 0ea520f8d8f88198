"""A stride-1 convolution's input gradient as a convolution: fold(W^T @ dY) becomes unfold(dY) times the
flipped weight.

Differentiated as written (unfold, then a product), a convolution's input gradient is a product making
nine times the input's size of column gradients (W^T @ dY: K = O, only the output channels) and a fold
(col2im) adding them back, nine read-modify-writes per pixel. For stride 1 and dilation 1 the same sum is
a convolution of dY, padded by k - 1 - p, with the kernel flipped and its channel axes swapped:

    dX[n, c, y, x] = sum over (o, a, b) of W[o, c, kh-1-a, kw-1-b] * dY[n, o, y + a - (kh-1-p), x + b - (kw-1-p)]

so it runs as the forward does: an unfold and one product with K = O * kh * kw, chained image by image
(backends/llvm/chains.py). The terms are the same; their order of summation differs (one chain of fused
multiply-adds over (o, a, b) instead of nine partial sums over o added by the fold), so results agree to
rounding. PyTorch's CPU convolutions compute the input gradient this way too.
"""

from __future__ import annotations

from gradir.core.ir import Graph, Value
from gradir.core.source import source_of
from gradir.core.trace import building
from gradir.ops import broadcast_to, flip, matmul, reshape, transpose
from gradir.ops.conv import unfold
from gradir.passes.cleanup import dce


def _pattern(fold: Value) -> tuple[Value, Value] | None:
    """(weight (O, C*kh*kw), dY (N, O, OH*OW)) when `fold` adds back W^T @ dY of a stride-1, dilation-1
    convolution whose weight the product broadcasts over the images (as conv2d spells it); else None."""
    a = fold.attrs
    if fold.op != "fold" or a["stride"] != (1, 1) or a["dilation"] != (1, 1) or \
            any(p > k - 1 for p, k in zip(a["padding"], a["kernel"])):
        return None
    cols = fold.inputs[0]
    product = cols.inputs[0] if cols.op == "reshape" else None
    if product is None or product.op != "matmul" or product.ndim != 3:
        return None
    wt, dy = product.inputs
    n, c, kh, kw, oh, ow = cols.shape
    if dy.shape != (n, dy.shape[1], oh * ow) or wt.op != "transpose" or wt.attrs["perm"] != (0, 2, 1):
        return None
    wide = wt.inputs[0]
    if wide.op != "broadcast_to" or wide.inputs[0].shape != (dy.shape[1], c * kh * kw):
        return None
    return wide.inputs[0], dy


def _as_convolution(fold: Value, weight: Value, dy: Value) -> Value:
    """dX: unfold(dY) with the padding k - 1 - p, times the flipped, channel-swapped weight (module docstring)."""
    n, c, (kh, kw), (h, w) = fold.shape[0], fold.shape[1], fold.attrs["kernel"], fold.attrs["size"]
    o, (oh, ow) = dy.shape[1], fold.inputs[0].shape[4:]
    flipped = transpose(flip(reshape(weight, (o, c, kh, kw)), (2, 3)), (1, 0, 2, 3))   # (C, O, kh, kw)
    taps = o * kh * kw
    cols = unfold(reshape(dy, (n, o, oh, ow)), (kh, kw), 1,
                  tuple(k - 1 - p for k, p in zip((kh, kw), fold.attrs["padding"])))  # (N, O, kh, kw, H, W)
    product = matmul(broadcast_to(reshape(flipped, (c, taps)), (n, c, taps)), reshape(cols, (n, taps, h * w)))
    return reshape(product, (n, c, h, w))


def input_grads_as_convolutions(graph: Graph, order: list[Value] | None = None) -> tuple[Graph, list[Value] | None]:
    """(graph, order) with each stride-1 convolution's input gradient (a fold of W^T @ dY) computed as a
    convolution of dY with the flipped weight, the nodes only it read dropped; the same pair when there is none.
    A new graph runs in its node order."""
    order = graph.nodes if order is None else order
    found = {n: p for n in order if n.op == "fold" and (p := _pattern(n)) is not None}
    if not found:
        return graph, None if order is graph.nodes else order
    out = Graph(graph.name).copy_bookkeeping(graph)
    env = {x: out.add_input(x.shape, x.dtype, x.attrs.get("name"), x.source) for x in graph.inputs}
    with building(out):
        for n in order:
            if n in found:
                with source_of(n.source, n.scope):
                    env[n] = _as_convolution(n, *(env[v] for v in found[n]))
            else:
                env[n] = out.append(n.op, tuple(env[i] for i in n.inputs), n.attrs, n.shape, n.dtype, n.source,
                                    n.scope)
    out.outputs = [env[o] for o in graph.outputs]
    return dce(out), None


__all__ = ["input_grads_as_convolutions"]
