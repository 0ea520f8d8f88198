"""The ``mincut`` recompute policy: keep the fewest bytes, by a minimum cut of the joint graph.

In the spirit of AOTAutograd's min-cut partitioner. A flow network is built on the forward values:

- the source feeds the primal inputs (always available to backward, so "saving" one costs 0);
- each forward value v is split into v_in -> v_out, whose capacity is what keeping v costs: the
  bytes of the buffer it owns, as `remat.evaluate` counts saved bytes (views own none);
- v_out -> u_in with infinite capacity for each forward node u reading v (recomputing u needs v);
- v_out -> sink, infinite, for each forward value a backward node reads.

A finite cut separates the inputs from what backward reads; the split edges it cuts are the values
kept, and the backward recomputes the rest (everything on the sink side that it needs). Infinite
capacities say "cannot be kept": values that are not `remat.candidates` (inside a gr.checkpoint
region, constant-only) and views of another activation (keeping the view keeps its owner's buffer:
keep the owner instead, the view is recomputed for free). `forbid` names ops that must not be
recomputed (AOTAutograd bans matmuls and other compute-bound ops): those are tied to the source, so
the cut keeps them if backward needs them. User-marked regions win over `forbid`.

Among cuts of minimum bytes the one closest to the sink is taken (the smallest sink side: the
fewest forward nodes left to recompute). The default forbids nothing: the literal minimum of saved
bytes, which can be zero (recompute the whole forward from the inputs) and say nothing about the
activation peak; `forbid=("matmul",)` gives AOTAutograd's trade.
"""

from __future__ import annotations

import networkx as nx

from gradir.core.ir import Graph, Value
from gradir.passes.aliasing import owners
from gradir.passes.partition import forward_values
from gradir.passes.remat.base import RematPlan, candidates

INF = float("inf")


def _cost(v: Value, owner: dict[Value, Value], cands: set[Value]) -> float:
    """Capacity of v's split edge: bytes kept by saving v (inf: v may not be kept)."""
    if v not in cands:
        return INF
    o = owner[v]
    if o is v:
        return v.nbytes
    if o.op in ("input", "const"):
        return 0  # a view of caller memory: free to keep
    # a view of an activation: keep its input instead (the view is recomputed for free), unless
    # that input may not be kept (a view leaving a checkpoint region): then keeping the view
    # keeps its owner's buffer
    return INF if v.inputs[0] in cands else o.nbytes


def plan_mincut(joint: Graph, forbid=()) -> RematPlan:
    """The plan keeping the fewest bytes (see the module docstring). `forbid`: op names whose
    results are never recomputed (kept instead when the backward needs them)."""
    forbid = tuple(forbid)
    k = joint.num_forward_outputs
    fwd = forward_values(joint)
    fwd_set = set(fwd)
    primals = joint.inputs[:len(joint.inputs) - k]
    primal_set = set(primals)
    owner = owners(joint)
    cands = set(candidates(joint))
    net = nx.DiGraph()
    src, sink = "source", "sink"

    def add(a, b, cap):
        if cap == INF:
            net.add_edge(a, b)  # networkx: an edge without capacity is infinite
        else:
            net.add_edge(a, b, capacity=cap)

    for x in primals:
        add(src, ("in", x), INF)
        add(("in", x), ("out", x), 0)
    for v in fwd:
        cap = _cost(v, owner, cands)
        add(("in", v), ("out", v), cap)
        for i in v.inputs:
            if i in fwd_set or i in primal_set:
                add(("out", i), ("in", v), INF)
        if v.op in forbid and cap != INF:
            add(src, ("in", v), INF)
    read_by_backward = {i for n in joint.nodes if n not in fwd_set and n.op != "input" for i in n.inputs}
    read_by_backward |= set(joint.outputs[k:])  # a gradient that is a forward value
    for v in read_by_backward:
        if v in fwd_set:
            add(("out", v), sink, INF)
    if sink not in net:
        return RematPlan("mincut", frozenset(), {"forbid": forbid}, note="backward reads no forward value")

    flow_value, flow = nx.maximum_flow(net, src, sink)  # finite: inputs and forbidden values can be kept
    # the sink side of the cut closest to the sink: nodes that reach the sink in the residual graph
    sink_side, stack = {sink}, [sink]
    while stack:
        b = stack.pop()
        for a in net.predecessors(b):
            if a not in sink_side and net[a][b].get("capacity", INF) - flow[a][b] > 0:
                sink_side.add(a)
                stack.append(a)
        for c in net.successors(b):  # residual of a reverse edge: flow on c -> b can be pushed back
            if c not in sink_side and flow[b][c] > 0:
                sink_side.add(c)
                stack.append(c)
    kept = frozenset(v for v in fwd if ("in", v) not in sink_side and ("out", v) in sink_side)
    return RematPlan("mincut", kept & cands, {"forbid": forbid},
                     note=f"min cut: {int(flow_value):,} bytes" + (f", {', '.join(forbid)} not recomputed" if forbid else ""))
