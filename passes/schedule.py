"""Dependency-counted scheduling: the job PyTorch's autograd engine does with its ready queue.

Every node of a graph owes a count: the number of its operand edges whose producer has not run yet
(graph inputs and constants are there from the start). Nodes whose count is zero wait in a ready
queue; a policy picks which ready node runs next; running it decrements the counts of its users,
and users reaching zero join the queue. The result is the order a backend executes.

Policies:
- ``engine``: most recent forward op first, as PyTorch's engine orders its ready queue by sequence
  number. Autodiff emits VJP rules from the last forward op to the first, so a backward node's
  position in its graph is its forward op's recency: the earliest-emitted ready node runs first.
- ``memory``: the ready node that frees the most bytes first (bytes of operands it reads for the
  last time, minus the bytes of its own result), ties broken by engine order. Uses the same
  storage model as the memory plan (views free nothing until their buffer's last reader runs).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from rich.table import Table

from gradir.errors import GradirError, VerifyError
from gradir.ir import Graph, Value
from gradir.passes.aliasing import owners as storage_owners
from gradir.passes.report import Report, human_bytes, value_name

POLICIES = ("engine", "memory")
QUEUE_SHOWN = 16  # ready-queue entries kept per step in the report


@dataclass
class Step:
    index: int
    node: Value
    decremented: list[tuple[Value, int]]  # (user, its count after this step)
    queue: list[Value]                    # ready queue after this step (first QUEUE_SHOWN entries)
    queue_size: int
    freed_bytes: int

    def to_dict(self, graph: Graph) -> dict:
        return {
            "step": self.index, "node": value_name(self.node, graph), "op": self.node.op,
            "source": self.node.source,
            "decremented": [{"node": value_name(u, graph), "count": c} for u, c in self.decremented],
            "queue": [value_name(q, graph) for q in self.queue], "queue_size": self.queue_size,
            "freed_bytes": self.freed_bytes,
        }


@dataclass
class Schedule(Report):
    graph: Graph
    policy: str
    order: list[Value]
    steps: list[Step] = field(repr=False)
    initial_counts: dict[Value, int] = field(repr=False)

    def to_dict(self) -> dict:
        return {"policy": self.policy, "graph": self.graph.name, "num_steps": len(self.steps),
                "initial_counts": {value_name(v, self.graph): c for v, c in self.initial_counts.items()},
                "steps": [s.to_dict(self.graph) for s in self.steps]}

    def table(self) -> Table:
        t = Table(title=f"schedule of {self.graph.name} ({self.policy} policy, {len(self.steps)} steps)")
        for col in ("step", "runs", "op", "counts decremented", "ready queue after", "frees", "source"):
            t.add_column(col, overflow="fold")
        for s in self.steps:
            dec = ", ".join(f"{value_name(u, self.graph)}->{c}" for u, c in s.decremented)
            queue = ", ".join(value_name(q, self.graph) for q in s.queue)
            if s.queue_size > len(s.queue):
                queue += f", ... (+{s.queue_size - len(s.queue)})"
            t.add_row(str(s.index), value_name(s.node, self.graph), s.node.op, dec, queue or "-",
                      human_bytes(s.freed_bytes) if s.freed_bytes else "", s.node.source or "")
        return t


def schedule(graph: Graph, policy: str = "engine", owned_inputs=()) -> Schedule:
    """A dependency-counted order of `graph`'s nodes under `policy` (see the module docstring).
    `owned_inputs`: graph inputs whose memory this program may free after their last use (the
    saved activations a backward program receives)."""
    if policy not in POLICIES:
        raise GradirError(f"unknown scheduling policy {policy!r} (have: {', '.join(POLICIES)})", op="schedule")
    position = {v: i for i, v in enumerate(graph.nodes)}
    users: dict[Value, list[Value]] = {v: [] for v in graph.all_values()}
    count: dict[Value, int] = {}
    for n in graph.nodes:
        count[n] = sum(1 for i in n.inputs if i in position)  # operands still owed (inputs are given)
        for i in n.inputs:
            users[i].append(n)
    initial = dict(count)
    buffers = _Buffers(graph, owned_inputs)

    memory = policy == "memory"
    heap: list = []
    stamp: dict[Value, int] = {}
    ready: set[Value] = set()

    def push(n: Value):
        stamp[n] = stamp.get(n, 0) + 1
        heapq.heappush(heap, (-buffers.net_freed(n) if memory else 0, position[n], stamp[n], n))

    for n in graph.nodes:
        if count[n] == 0:
            ready.add(n)
            push(n)
    steps, order = [], []
    while heap:
        n = heapq.heappop(heap)[3]
        if n not in ready:
            continue  # a stale entry, re-pushed since with a newer score
        ready.discard(n)
        order.append(n)
        freed, now_last = buffers.run(n)
        decremented = []
        for u in users[n]:
            count[u] -= 1
            decremented.append((u, count[u]))
            if count[u] == 0:
                ready.add(u)
                push(u)
        if memory:
            for u in now_last & ready:  # u now reads some buffer for the last time: a better score
                push(u)
        live = [e for e in heap if e[3] in ready and e[2] == stamp[e[3]]]
        queue = [e[3] for e in heapq.nsmallest(QUEUE_SHOWN, live)]
        steps.append(Step(len(steps), n, decremented, queue, len(ready), freed))
    if len(order) != len(graph.nodes):
        raise VerifyError("not every node became ready (a cycle?)", op="schedule")
    return Schedule(graph, policy, order, steps, initial)


class _Buffers:
    """Which buffers each node frees, under the storage model of passes.aliasing: a buffer (with
    all views of it) is freed after its last reader runs; inputs, constants and outputs never are."""

    def __init__(self, graph: Graph, owned_inputs=()):
        owner = storage_owners(graph)
        keep = {owner[o] for o in graph.outputs}
        self.reads = {n: {owner[i] for i in n.inputs} for n in graph.nodes}
        candidates = [v for v in graph.nodes if v.op != "const"] + list(owned_inputs)
        self.counted = {v for v in candidates if owner[v] is v and v not in keep and v.ndim}  # as passes.memory
        self.readers: dict[Value, set[Value]] = {}
        for n, bufs in self.reads.items():
            for b in bufs:
                self.readers.setdefault(b, set()).add(n)
        self.left = {b: len(r) for b, r in self.readers.items()}
        self.owns = {n: owner[n] is n and n in self.counted for n in graph.nodes}

    def net_freed(self, n: Value) -> int:
        """Bytes running `n` would free, minus the bytes of the buffer it allocates."""
        gone = sum(b.nbytes for b in self.reads[n] if b in self.counted and self.left[b] == 1)
        return gone - (n.nbytes if self.owns[n] else 0)

    def run(self, n: Value) -> tuple[int, set[Value]]:
        """Account for `n` running: (bytes freed, nodes that became some buffer's last reader)."""
        freed, now_last = 0, set()
        for b in self.reads[n]:
            self.left[b] -= 1
            if self.left[b] == 0 and b in self.counted:
                freed += b.nbytes
            elif self.left[b] == 1:
                now_last |= self.readers[b]
        return freed, now_last
