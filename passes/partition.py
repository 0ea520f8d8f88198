"""Split a joint forward+backward graph into a forward program and a backward program.

forward:  primal inputs -> forward outputs + residuals
backward: residuals + output cotangents -> gradients

The forward program computes only what the forward outputs need; every other node of the joint
graph runs in backward. The residuals ("saved tensors") are the forward values the backward
reads. Which forward values are saved is a choice: by default every one the backward reads; with
`saved=` only those (and the primal inputs), and the backward recomputes the others from them.
Recomputed nodes are placed right before the first backward node that needs them, and carry the
scope "recompute" (so cleanup never merges them back into the forward's nodes). Values
computed from constants alone are always recomputed rather than saved.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gradir.core.ir import Graph, Value, topo_values
from gradir.util.gcpause import gc_paused

RECOMPUTE = "recompute"  # scope marking the backward's copies of recomputed forward nodes


@dataclass
class Partition:
    joint: Graph
    forward: Graph
    backward: Graph
    residuals: list[Value]  # joint-graph values saved by forward for backward, in forward order
    joint_of: dict[Value, Value]  # forward/backward graph value -> the joint-graph value it copies
    recomputed: list[Value]  # joint-graph forward values the backward computes again

    @gc_paused
    def stitch(self, backward_order: list[Value] | None = None) -> tuple[Graph, list[Value], list[str]]:
        """Forward and backward programs as one graph (the backward reading the forward's values
        where it received residuals), with its execution order (forward, then backward in
        `backward_order`) and each step's phase: the timeline memory is planned and measured on.
        Recomputed values appear twice, as they run twice."""
        g = Graph(self.joint.name.replace("_joint", "") + "_timeline")
        env: dict[Value, Value] = {}
        for x in self.forward.inputs:
            env[x] = g.add_input(x.shape, x.dtype, x.attrs.get("name"), x.source)
        g.copy_nodes(self.forward.nodes, env)
        k = self.forward.num_forward_outputs
        for r, x in zip(self.forward.outputs[k:], self.backward.inputs):
            env[x] = env[r]
        for x in self.backward.inputs[len(self.residuals):]:
            env[x] = g.add_input(x.shape, x.dtype, x.attrs.get("name"), x.source)
        g.copy_nodes(self.backward.nodes, env)
        g.outputs = [env[o] for o in self.forward.outputs[:k]] + [env[o] for o in self.backward.outputs]
        g.labels = _ProgramLabels(g, self.forward, self.backward)  # name steps as the IR the user reads
        fwd = [env[n] for n in self.forward.nodes]
        bwd = [env[n] for n in (backward_order or self.backward.nodes)]
        return g, fwd + bwd, ["forward"] * len(fwd) + ["backward"] * len(bwd)


class _ProgramLabels(Mapping):
    """A stitched node's name in the program the user reads ("backward %7"), worked out when asked: the
    stitched graph holds the forward's nodes, then the backward's, each in its program's order."""

    def __init__(self, stitched: Graph, forward: Graph, backward: Graph):
        self.graph, self.forward, self.backward = stitched, forward, backward

    def _position(self, v: Value) -> int | None:
        """v's index in the stitched graph's node list (None for its inputs and foreign values)."""
        if v.graph_ref is not self.graph.ref or v.op == "input":
            return None
        return self.graph.number(v) - len(self.graph.inputs)

    def __contains__(self, v) -> bool:
        return self._position(v) is not None

    def __getitem__(self, v: Value) -> str:
        i = self._position(v)
        if i is None:
            raise KeyError(v)
        split = len(self.forward.nodes)
        if i < split:
            return f"forward %{i + len(self.forward.inputs)}"
        return f"backward %{i - split + len(self.backward.inputs)}"

    def __iter__(self):
        return (v for v in self.graph.nodes)

    def __len__(self) -> int:
        return len(self.graph.nodes)


def const_only(graph: Graph) -> set[Value]:
    """Values computed from constants alone."""
    out: set[Value] = set()
    for n in graph.nodes:
        if n.op == "const" or (n.inputs and out.issuperset(n.inputs)):
            out.add(n)
    return out


def forward_values(joint: Graph) -> list[Value]:
    """The joint graph's forward nodes (what the forward outputs need), in order: the candidates a
    recompute plan chooses to save or recompute."""
    k = joint.num_forward_outputs
    fwd = set(topo_values(joint.outputs[:k]))
    return [n for n in joint.nodes if n in fwd]


@gc_paused
def partition(joint: Graph, num_forward_outputs: int | None = None, saved=None) -> Partition:
    """Split `joint`. `saved`: the forward values to keep for backward (default: every one the
    backward reads); the backward recomputes any other forward value it needs."""
    k = joint.num_forward_outputs if num_forward_outputs is None else num_forward_outputs
    primals = joint.inputs[:len(joint.inputs) - k]
    cts = joint.inputs[len(joint.inputs) - k:]
    fwd_outs, grads = joint.outputs[:k], joint.outputs[k:]
    constish = const_only(joint)
    fwd_set = set(fwd_outs)  # what the forward outputs need: one sweep back over the (topological) node list
    for n in reversed(joint.nodes):
        if n in fwd_set:
            fwd_set.update(n.inputs)
    fwd_set.update(primals)
    # the values backward reads from the forward program rather than computing them itself
    kept_set = fwd_set - constish
    if saved is not None:
        chosen = set(saved)
        kept_set = {v for v in kept_set if v.op == "input" or v in chosen}
    kept = kept_set.__contains__

    # backward = what the gradients need, walking up until a kept forward value is reached
    needed, stack = set(), [g for g in grads if not kept(g)]
    while stack:
        v = stack.pop()
        if v not in needed:
            needed.add(v)
            stack.extend([i for i in v.inputs if not kept(i)])
    position = {v: i for i, v in enumerate(joint.all_values())}
    recomputed = {v for v in needed if v in fwd_set}
    bwd_order = _place_recomputation(sorted(needed - recomputed, key=position.__getitem__), recomputed,
                                     [g for g in grads if g in recomputed], position)
    residual_set = {i for n in bwd_order for i in n.inputs if kept(i)} | {g for g in grads if kept(g)}
    residuals = sorted(residual_set, key=position.__getitem__)

    forward = Graph(joint.name.replace("_joint", "") + "_forward")
    env: dict[Value, Value] = {}
    for x in primals:
        env[x] = forward.add_input(x.shape, x.dtype, x.attrs.get("name"), x.source)
    forward.copy_nodes([n for n in joint.nodes if n in fwd_set], env)
    forward.outputs = [env[o] for o in fwd_outs] + [env[r] for r in residuals]
    forward.num_forward_outputs = k

    backward = Graph(joint.name.replace("_joint", "") + "_backward")
    benv: dict[Value, Value] = {}
    for r in residuals:
        # named after its %k in the forward program the user reads (saved_tanh9 is forward %9)
        name = r.attrs.get("name") if r.op == "input" else f"saved_{r.op}{forward.number(env[r])}"
        benv[r] = backward.add_input(r.shape, r.dtype, name, r.source)
    for c in cts:
        benv[c] = backward.add_input(c.shape, c.dtype, c.attrs.get("name"), c.source)
    marked = recomputed - constish  # nodes the backward computes again, scoped as such
    nodes = [n for n in bwd_order if n.op != "input"]
    if not marked:
        backward.copy_nodes(nodes, benv)
    else:
        for n in nodes:
            scope = n.scope + (RECOMPUTE,) if n in marked else n.scope
            benv[n] = backward.append(n.op, tuple([benv[i] for i in n.inputs]), n.attrs, n.shape, n.dtype, n.source,
                                      scope)
    backward.outputs = [benv[g] for g in grads]
    joint_of = {v: j for j, v in env.items()} | {v: j for j, v in benv.items()}
    recomputed_nodes = sorted((v for v in recomputed if v not in constish), key=position.__getitem__)
    return Partition(joint, forward, backward, residuals, joint_of, recomputed_nodes)


def _place_recomputation(backward_nodes, recomputed, recomputed_grads, position) -> list[Value]:
    """Backward nodes in order, each preceded by the recomputed forward values it needs that have
    not been computed yet (in forward order)."""
    if not recomputed:
        return list(backward_nodes)
    order, done = [], set()

    def emit_needed(v):
        stack = [i for i in v.inputs if i in recomputed and i not in done]
        if not stack:
            return
        group = set()
        while stack:  # every recomputed value v needs that is not there yet...
            u = stack.pop()
            if u not in group:
                group.add(u)
                stack.extend(i for i in u.inputs if i in recomputed and i not in done)
        for u in sorted(group, key=position.__getitem__):  # ...run in forward order
            done.add(u)
            order.append(u)

    for n in backward_nodes:
        emit_needed(n)
        order.append(n)
    for g in recomputed_grads:
        if g not in done:
            emit_needed(g)
            done.add(g)
            order.append(g)
    return order
