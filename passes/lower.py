"""Replace composite ops (those that keep a hand-derived VJP) by their decomposition into
primitives, so backends only ever see primitives. Run after autodiff: the fused VJP is already in
the graph by then."""

from __future__ import annotations

from gradir.core.ir import Graph
from gradir.core.primitive import get_primitive
from gradir.passes.cleanup import _rebuild


def lower_composites(graph: Graph) -> Graph:
    def rewrite(n, operands):
        if n.op == "const":
            return None
        prim = get_primitive(n.op)
        return prim.decompose(*operands, **n.attrs) if prim.decompose is not None else None

    ops = {n.op for n in graph.nodes}  # (asked once per distinct op, not per node)
    ops.discard("const")
    if all(get_primitive(op).decompose is None for op in ops):
        return graph
    return _rebuild(graph, rewrite)
