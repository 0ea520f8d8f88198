"""Reverse-mode differentiation as a graph transform: forward graph -> joint forward+backward graph.

The joint graph takes the forward inputs and one cotangent per forward output, and returns the
forward outputs followed by one gradient per requested input. Walking the forward nodes in reverse,
each node's cotangent is the sum of the contributions of all its users (fan-out accumulation: a
value read k times receives k contributions), and its op's VJP rule, itself written with gradir ops,
emits the contributions to its operands. Nodes of the backward part carry the source line of the
forward node they differentiate. While it is built, a node equal to an earlier one is not made again
(what cse would merge: the rules make the same constants thousands of times), and at the end the
contributions nothing reads (to constants, to inputs not differentiated) are dropped: on big graphs
this spares the cleanup passes whole copies.
"""

from __future__ import annotations

from gradir.core import dtypes
from gradir.core.errors import NonDifferentiableError
from gradir.core.ir import Graph, Value
from gradir.core.primitive import REGISTRY, get_primitive
from gradir.core.source import pop_source, push_source, source_of
from gradir.core.trace import building
from gradir.ops import add, zeros
from gradir.passes.cleanup import live_values
from gradir.util.gcpause import gc_paused


def needs_grad(graph: Graph, wrt: list[int]) -> set[Value]:
    """Values that depend differentiably on the inputs in `wrt` (the "requires_grad" analysis)."""
    live = {graph.inputs[i] for i in wrt}
    passes: dict = {}  # (op, dtype) -> whether such a node can carry a gradient
    for n in graph.nodes:
        key = (n.op, n.dtype)
        ok = passes.get(key)
        if ok is None:
            ok = passes[key] = n.op != "const" and dtypes.is_inexact(n.dtype) and get_primitive(n.op).differentiable
        if ok:
            for i in n.inputs:
                if i in live:
                    live.add(n)
                    break
    return live


def accumulate(contributions: list[Value]) -> Value:
    """Sum a value's cotangent contributions, in the order they were made."""
    total = contributions[0]
    for c in contributions[1:]:
        total = add(total, c)
    return total


@gc_paused
def joint_graph(graph: Graph, wrt: list[int] | None = None) -> Graph:
    """The joint forward+backward graph of `graph` with respect to the inputs at positions `wrt`.

    Inputs: the forward inputs, then one cotangent per forward output (named ``ct0``...).
    Outputs: the forward outputs, then one gradient per input in `wrt`.
    """
    wrt = list(range(len(graph.inputs))) if wrt is None else list(wrt)
    for i in wrt:
        x = graph.inputs[i]
        if not dtypes.is_float(x.dtype):
            raise NonDifferentiableError(
                f"input {x.attrs.get('name')} has dtype {dtypes.short(x.dtype)}; gradients are defined for "
                "real floating inputs only (integer indices and bool masks have none)", op="grad", source=x.source)
    live = needs_grad(graph, wrt)
    joint = Graph(f"{graph.name}_joint")
    env: dict[Value, Value] = {}
    for x in graph.inputs:
        env[x] = joint.add_input(x.shape, x.dtype, x.attrs.get("name"), x.source)
    cts = [joint.add_input(o.shape, o.dtype, f"ct{k}") for k, o in enumerate(graph.outputs)]
    joint.interned = {}  # the many equal constants (and broadcasts of them) VJP rules make are made once
    with building(joint):
        joint.copy_nodes(graph.nodes, env)  # the forward part: a copy (every node's type is known already)
        contributions: dict[Value, list[Value]] = {}
        for o, ct in zip(graph.outputs, cts):
            if o in live:
                contributions.setdefault(o, []).append(ct)
        for n in reversed(graph.nodes):
            cs = contributions.pop(n, None)
            if cs is None:
                continue
            push_source(n.source, n.scope)  # what `with source_of(n.source, n.scope)` does, per node
            try:
                g = cs[0] if len(cs) == 1 else accumulate(cs)
                in_cts = (REGISTRY.get(n.op) or get_primitive(n.op)).vjp(g, env[n], *[env[i] for i in n.inputs],
                                                                        **n.attrs)
            finally:
                pop_source()
            for operand, c in zip(n.inputs, in_cts):
                if c is not None and operand in live:
                    if operand in contributions:
                        contributions[operand].append(c)
                    else:
                        contributions[operand] = [c]
        grads = []
        for i in wrt:
            x = graph.inputs[i]
            with source_of(x.source, x.scope):
                grads.append(accumulate(contributions[x]) if x in contributions else zeros(x.shape, x.dtype))
    joint.interned, joint.distinct = None, True
    joint.outputs = [env[o] for o in graph.outputs] + grads
    live = live_values(joint)  # VJP rules also make contributions nobody needs (to constants): drop them here
    joint.nodes = [n for n in joint.nodes if n in live]
    joint.num_forward_outputs = len(graph.outputs)
    return joint
