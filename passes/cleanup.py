"""Cleanup passes that keep generated backward graphs as small as a hand-written backward:
dead-code elimination, common-subexpression elimination, and algebraic simplification with
constant folding (x*1, x+0, reshape/broadcast/convert to the same type, small all-constant nodes).
Each takes a Graph and returns a new Graph."""

from __future__ import annotations

import numpy as np

from gradir.core.ir import Graph, Value, attrs_key, node_key
from gradir.core.primitive import get_primitive
from gradir.core.trace import bind, building, constant, current_graph, source_of

FOLD_LIMIT = 64  # fold all-constant nodes whose result has at most this many elements


def _rebuild(graph: Graph, rewrite, records: bool = True, stateless: bool = False, merge_equal: bool = False) -> Graph:
    """Copy `graph` node by node; `rewrite(node, operands)` returns a replacement value, DROP, or None
    to copy the node unchanged. With `records`, ops recorded inside `rewrite` go into the new graph,
    attributed to the node's source line and scope. A `stateless` rewrite (one whose answer depends on
    the node and operands alone) is first tried on the graph as it is: if it changes nothing, the graph
    is returned unchanged instead of copied. With `merge_equal`, a node equal to one already copied is
    not copied again (Graph.interned: what cse would merge)."""
    k = 0
    if stateless:
        # what a tried rewrite records goes to a scratch graph (so its source lines do not matter)
        with building(graph), building(Graph(graph.name)):
            k = next((k for k, n in enumerate(graph.nodes) if rewrite(n, list(n.inputs)) is not None), None)
        if k is None:
            return graph
    out = Graph(graph.name).copy_bookkeeping(graph)
    env: dict[Value, Value] = {}
    for x in graph.inputs:
        env[x] = out.add_input(x.shape, x.dtype, x.attrs.get("name"), x.source)
    append = out.append
    out.interned = {} if merge_equal else None
    with building(out):
        out.copy_nodes(graph.nodes[:k], env)
        for n in graph.nodes[k:]:
            try:
                operands = [env[i] for i in n.inputs]
            except KeyError:
                continue  # an operand was dropped
            if records:
                with source_of(n.source, n.scope):
                    new = rewrite(n, operands)
            else:
                new = rewrite(n, operands)
            if new is None:
                env[n] = append(n.op, tuple(operands), n.attrs, n.shape, n.dtype, n.source, n.scope)
            elif new is not DROP:
                env[n] = new
    out.interned = None
    out.distinct = merge_equal
    out.outputs = [env[o] for o in graph.outputs]
    return out


DROP = object()


def live_values(graph: Graph) -> set[Value]:
    """The values some output depends on."""
    live: set[Value] = set(graph.outputs)
    for n in reversed(graph.nodes):
        if n in live:
            live.update(n.inputs)
    return live


def dce(graph: Graph) -> Graph:
    """Drop nodes no output depends on."""
    live = live_values(graph)
    if all(n in live for n in graph.nodes):
        return graph  # nothing to drop
    return _rebuild(graph, lambda n, ops: None if n in live else DROP, records=False)


def cse(graph: Graph) -> Graph:
    """Merge nodes with the same op, operands and attributes (constants by value)."""
    seen: dict = {}
    attr_keys: dict[int, tuple] = {}  # by the attrs dict's id: copies of a graph share their nodes' dicts

    def key(n, operands):
        if n.op == "const":
            return node_key("const", (), n.attrs, n.scope)
        akey = attr_keys.get(id(n.attrs))
        if akey is None:
            akey = attr_keys[id(n.attrs)] = attrs_key(n.attrs)
        return node_key(n.op, operands, akey, n.scope)

    nodes = [n for n in graph.nodes if n.op == "const"] if graph.distinct else graph.nodes
    if len({key(n, n.inputs) for n in nodes}) == len(nodes):
        return graph  # no two nodes alike: nothing to merge (the graph was cleaned already)

    def rewrite(n, operands):
        k = key(n, operands)
        value = seen.get(k)
        if value is None:
            value = seen[k] = current_graph().append(n.op, tuple(operands), n.attrs, n.shape, n.dtype, n.source, n.scope)
        return value
    return _rebuild(graph, rewrite, records=False)


def _scalar_const(v: Value):
    """The constant's value if `v` is a constant (or a broadcast of one) holding one repeated number."""
    while v.op == "broadcast_to":
        v = v.inputs[0]
    if v.op != "const":
        return None
    a = v.attrs["value"]
    if a.size == 1:
        return a.flat[0]
    return a.flat[0] if a.size and (a == a.flat[0]).all() else None


def _is(v: Value, number) -> bool:
    c = _scalar_const(v)
    return c is not None and c == number


_CONSTISH = ("const", "broadcast_to")  # the operands simplify's folding rules look at


def simplify(graph: Graph) -> Graph:
    """Algebraic identities and constant folding. The copy it makes when something simplifies holds
    each distinct node once (what cse would merge, left out while copying: the cse after it then
    finds nothing to do and copies nothing)."""
    def rewrite(n, ops):
        op = n.op
        if op in ("reshape", "broadcast_to") and ops[0].shape == n.shape:
            return ops[0]
        if op == "convert" and ops[0].dtype == n.dtype:
            return ops[0]
        if op == "reshape" and ops[0].op == "reshape":
            return bind("reshape", ops[0].inputs[0], **n.attrs)
        if op == "transpose" and ops[0].op == "transpose":
            perm = tuple(ops[0].attrs["perm"][p] for p in n.attrs["perm"])
            inner = ops[0].inputs[0]
            return inner if perm == tuple(range(len(perm))) else bind("transpose", inner, perm=perm)
        if op == "multiply":
            if _is(ops[1], 1):
                return ops[0]
            if _is(ops[0], 1):
                return ops[1]
        if op == "add":
            if _is(ops[1], 0):
                return ops[0]
            if _is(ops[0], 0):
                return ops[1]
        if op == "subtract" and _is(ops[1], 0):
            return ops[0]
        if op == "divide" and _is(ops[1], 1):
            return ops[0]
        if op == "power" and _is(ops[1], 1):
            return ops[0]
        if op == "power" and _is(ops[1], 2):
            return bind("multiply", ops[0], ops[0])
        if op == "negative" and ops[0].op == "negative":
            return ops[0].inputs[0]
        if not ops or op == "broadcast_to" or any(o.op not in _CONSTISH for o in ops):
            return None  # (the common case, decided without looking at any constant)
        scalars = [_scalar_const(o) for o in ops]
        if any(o.op == "broadcast_to" for o in ops) and all(c is not None for c in scalars) and \
                get_primitive(op).kind == "elementwise":
            # an elementwise op on broadcast scalars: compute the scalar once, broadcast the result
            value = bind(op, *[np.asarray(c, dtype=o.dtype) for c, o in zip(scalars, ops)], **n.attrs)
            return bind("broadcast_to", constant(value), shape=n.shape)
        if all(o.op == "const" for o in ops) and n.size <= FOLD_LIMIT \
                and get_primitive(op).numpy:  # (a broadcast constant stays a scalar: the text stays small)
            value = bind(op, *[o.attrs["value"] for o in ops], **n.attrs)
            return constant(value)
        return None
    return _rebuild(graph, rewrite, stateless=True, merge_equal=True)


def cleanup(graph: Graph, verify: bool = True) -> Graph:
    """simplify -> cse -> dce, verified after each when `verify`."""
    for p in (simplify, cse, dce):
        graph = p(graph)
        if verify:
            graph.verify()
    return graph
