"""Convolution columns recomputed, not kept: an unfold (im2col) that a product reads at once and another reads
much later (the convolution's weight gradient) gets a second unfold, with the views between, right before
that later reader.

Kept, a 3x3 convolution's columns are nine times its input (18 MB for 16 channels of 32 images of 32x32) and
go to memory between the forward and the backward. Made again from the input (which the backward keeps for
the activation before it anyway), each reader's columns can be made image by image next to it and reused
image after image (backends/llvm/chains.py), so they never leave the cache. PyTorch's convolutions likewise
keep their input and weight, not columns. The results are the same: an unfold only moves elements.
"""

from __future__ import annotations

from gradir.core.ir import Graph, Value
from gradir.passes.aliasing import VIEW_OPS


def recompute_columns(graph: Graph, order: list[Value] | None = None) -> tuple[Graph, list[Value] | None]:
    """(graph, order) with every reader of an unfold's columns (through views) after the first computing its
    own copy of them just before it; the same pair when there is none. A new graph runs in its node order."""
    order = graph.nodes if order is None else order
    root: dict[Value, Value] = {}  # an unfold or a view of one -> the unfold
    first: dict[Value, Value] = {}  # unfold -> the first node reading its columns other than through a view
    later = False
    for n in order:
        if n.op == "unfold":
            root[n] = n
        elif n.op in VIEW_OPS and n.inputs and n.inputs[0] in root:
            root[n] = root[n.inputs[0]]
            continue
        for u in n.inputs:
            if u in root:
                later |= first.setdefault(root[u], n) is not n
    if not later:
        return graph, None if order is graph.nodes else order
    out = Graph(graph.name).copy_bookkeeping(graph)
    env = {x: out.add_input(x.shape, x.dtype, x.attrs.get("name"), x.source) for x in graph.inputs}

    def columns(u: Value, again: bool) -> Value:
        """u (an unfold or a view of one) as its reader gets it: the copy its first reader made, or (`again`)
        one more, made now from the operands' copies."""
        if not again and u in env:
            return env[u]
        operands = [env[i] for i in u.inputs] if u.op == "unfold" else \
            [columns(u.inputs[0], again)] + [env[i] for i in u.inputs[1:]]
        v = out.append(u.op, tuple(operands), u.attrs, u.shape, u.dtype, u.source, u.scope)
        if not again:
            env[u] = v
        return v

    for n in order:
        if n not in root:  # (columns are made where they are read)
            operands = tuple(columns(u, first[root[u]] is not n) if u in root else env[u] for u in n.inputs)
            env[n] = out.append(n.op, operands, n.attrs, n.shape, n.dtype, n.source, n.scope)
    out.outputs = [columns(o, False) if o in root else env[o] for o in graph.outputs]
    return out, None


__all__ = ["recompute_columns"]
