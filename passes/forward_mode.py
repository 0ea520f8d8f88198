"""Forward-mode differentiation (JVP) as a graph transform.

`jvp_graph(g)` takes the forward inputs and one tangent per input, and returns the forward outputs
followed by one output tangent per output. Each node's JVP rule, written with gradir ops, maps its
operands' tangents to its own; zero tangents are tracked symbolically (None) and never computed.
"""

from __future__ import annotations

from gradir.core import dtypes
from gradir.core.ir import Graph, Value
from gradir.core.primitive import get_primitive
from gradir.core.trace import bind, building, constant, source_of
from gradir.ops import zeros
from gradir.util.gcpause import gc_paused


@gc_paused
def jvp_graph(graph: Graph) -> Graph:
    out = Graph(f"{graph.name}_jvp")
    env: dict[Value, Value] = {}
    tangent: dict[Value, Value | None] = {}
    for x in graph.inputs:
        env[x] = out.add_input(x.shape, x.dtype, x.attrs.get("name"), x.source)
    for x in graph.inputs:
        t = out.add_input(x.shape, x.dtype, f"t_{x.attrs.get('name')}")
        tangent[x] = t if dtypes.is_inexact(x.dtype) else None
    with building(out):
        for n in graph.nodes:
            with source_of(n.source, n.scope):
                if n.op == "const":
                    env[n], tangent[n] = constant(n.attrs["value"]), None
                    continue
                operands = [env[i] for i in n.inputs]
                env[n] = bind(n.op, *operands, **n.attrs)
                ts = [tangent[i] for i in n.inputs]
                prim = get_primitive(n.op)
                live = prim.differentiable and dtypes.is_inexact(n.dtype) and any(t is not None for t in ts)
                tangent[n] = prim.jvp(ts, env[n], *operands, **n.attrs) if live else None
        t_outs = []
        for o in graph.outputs:
            with source_of(o.source, o.scope):
                t_outs.append(tangent[o] if tangent[o] is not None else zeros(o.shape, o.dtype))
    out.outputs = [env[o] for o in graph.outputs] + t_outs
    return out
