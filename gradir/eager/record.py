"""What a `Tensor.backward()` differentiated, as gradir's IR: `last_backward()`'s record.

`BackwardRecord` turns the reachable tape into a forward `Graph` (every leaf an input), builds when
asked the partition `gr.grad`'s pipeline makes of it, and counts which of that partition's residuals
are values the tape holds and which it would recompute from them (matched by structure).
"""

from __future__ import annotations

import functools

import numpy as np

from gradir.core.ir import Graph, Value
from gradir.core.trace import EagerOperand
from gradir.eager.tape import Frozen, Node, compact
from gradir.passes import joint_graph, run_pipeline
from gradir.passes import partition as partition_joint


class BackwardRecord:
    """What the latest `backward()` differentiated, as gradir's IR (built when asked): the tape as a
    forward `Graph` (every leaf an input), the partition `gr.grad`'s pipeline makes of it (forward and
    backward programs, residuals), and how many of those residuals are values the tape holds
    (`from_tape`) vs values it would recompute from them (`recomputed`)."""

    def __init__(self, nodes: list[Node], root: Node, retained: set):
        self._nodes, self._root, self._retained = nodes, root, retained

    @functools.cached_property
    def tape(self) -> _TapeGraph:
        return _TapeGraph(self._nodes, self._root, self._retained)

    @property
    def graph(self) -> Graph:
        return self.tape.graph

    @functools.cached_property
    def partition(self):
        return partition_joint(run_pipeline(joint_graph(self.tape.graph, self.tape.wrt)))

    @functools.cached_property
    def recomputed(self) -> int:
        return self.tape.count_recomputed(self.partition)

    @property
    def from_tape(self) -> int:
        return len(self.partition.residuals) - self.recomputed


class _TapeGraph:
    """The forward Graph of the reachable tape (every leaf, requiring grad or not, an input; a retained
    tensor's value v as v + eps, eps an input, so d/d(eps) is its gradient), and the values it holds."""

    def __init__(self, nodes: list[Node], root: Node, retained: set):
        g = Graph("tape")
        self.graph = g
        self.saved: list[Value] = []  # graph values the tape keeps for backward (saved operands/outputs)
        leaf_in: dict = {}
        kinds: list[bool] = []  # per graph input: a leaf that requires grad?
        eps: list[int] = []
        out_of: dict[Node, Value] = {}
        for n in nodes:
            operands = []
            for h in n.inputs:
                if isinstance(h, Node):
                    operands.append(out_of[h])
                elif isinstance(h, (EagerOperand, Frozen)):
                    key = h if isinstance(h, EagerOperand) else (id(h.storage), h.version)
                    if key not in leaf_in:
                        arr = h._storage.array if isinstance(h, EagerOperand) else h.storage.array
                        leaf_in[key] = g.add_input(arr.shape, arr.dtype, f"t{len(leaf_in)}", h._source if
                                                   isinstance(h, EagerOperand) else h.source)
                        kinds.append(isinstance(h, EagerOperand))
                    operands.append(leaf_in[key])
                else:  # a constant; a broadcast one enters as its compact value and a broadcast_to
                    base = np.array(compact(h))
                    c = g.append("const", (), {"value": base}, base.shape, h.dtype, n.source)
                    operands.append(c if base.shape == h.shape else
                                    g.append("broadcast_to", [c], {"shape": h.shape}, h.shape, h.dtype, n.source))
            v = g.append(n.op, operands, dict(n.attrs), n.shape, n.dtype, n.source)
            self.saved += [v if i < 0 else operands[i] for i in n.had_saved]
            if n in retained:  # d/d(eps) of v + eps, eps = 0, is the gradient at v
                e = g.add_input(n.shape, n.dtype, f"retained{len(eps)}", n.source)
                eps.append(len(g.inputs) - 1)
                v = g.append("add", [v, e], {}, n.shape, n.dtype, n.source)
            out_of[n] = v
        g.outputs = [out_of[root]]
        self.wrt = [k for k, leaf in enumerate(kinds) if leaf] + eps

    def count_recomputed(self, part) -> int:
        """How many of the backward program's residuals no tape value holds: matched by structure (op,
        operands, attributes) to a saved value or a leaf, the others are recomputed from those."""
        table: dict = {}
        keys = [("in", k) for k in range(len(self.graph.inputs))]
        fwd_ids = _structural_ids(self.graph, keys, table)
        jid = _structural_ids(part.joint, keys + [("ct",)], table)
        known = {fwd_ids[x] for x in self.graph.inputs} | {fwd_ids[v] for v in self.saved}
        done: set[Value] = set()
        stop = lambda u: u in done or jid[u] in known or u.op == "const"  # noqa: E731
        count = 0
        for r in part.residuals:
            count += not stop(r)
            done.update(_topo_until(r, stop))
        return count


def _topo_until(v: Value, stop) -> list[Value]:
    """Values v depends on, operands first, not expanding past values for which `stop` holds."""
    order, seen, stack = [], set(), [(v, False)]
    while stack:
        u, done = stack.pop()
        if done:
            order.append(u)
        elif u not in seen:
            seen.add(u)
            stack.append((u, True))
            if not stop(u):
                stack.extend((i, False) for i in u.inputs if i not in seen)
    return order


def _structural_ids(graph: Graph, input_keys: list, table: dict) -> dict[Value, int]:
    """An id per value, equal for values computed the same way (op, operand ids, attributes)."""
    ids: dict[Value, int] = {}
    for x, key in zip(graph.inputs, input_keys):
        ids[x] = table.setdefault(key, len(table))
    for n in graph.nodes:
        if n.op == "const":
            a = n.attrs["value"]
            key = ("const", a.dtype.str, a.shape, a.tobytes())
        else:
            key = (n.op, tuple(ids[i] for i in n.inputs), repr(sorted(n.attrs.items())))
        ids[n] = table.setdefault(key, len(table))
    return ids
