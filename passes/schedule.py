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
  Greedy choices can back-fire; if the greedy order's planned peak is above engine order's, the
  engine order is returned (with a note), so this policy never peaks above engine order.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass, field
from functools import cached_property

from gradir.core.errors import GradirError, VerifyError
from gradir.core.ir import Graph, Value
from gradir.core.trace import user_source
from gradir.passes.aliasing import owners as storage_owners
from gradir.passes.memory import plan_memory
from gradir.passes.report import Report, human_bytes, value_names
from gradir.passes.text_table import Column
from gradir.util.gcpause import gc_paused

POLICIES = ("engine", "memory")
QUEUE_SHOWN = 8  # ready-queue entries and decremented counts listed per step in text (JSON has all)


@dataclass(slots=True)
class Step:
    index: int
    node: Value
    decremented: list[tuple[Value, int]]  # (user, its count after this step); count 0: it became ready
    queue_size: int                       # ready nodes waiting after this step
    freed_bytes: int


@dataclass
class Schedule(Report):
    """The order a policy chose; `steps` and `initial_counts` (what the reports print) are replayed
    from it on first use, so a compiler that only needs the order never builds them."""
    graph: Graph
    policy: str
    order: list[Value]
    owned_inputs: tuple = field(default=(), repr=False)
    note: str = ""

    noun = "steps"

    @cached_property
    def initial_counts(self) -> dict[Value, int]:
        """Each node's operand edges owed at the start (graph inputs are given; a constant is a node)."""
        nodes = set(self.graph.nodes)
        return {n: len([i for i in n.inputs if i in nodes]) for n in self.graph.nodes}

    @cached_property
    @gc_paused
    def steps(self) -> list[Step]:
        """The dependency counting replayed along the order: what each step decrements, how many
        nodes then wait in the ready queue, and the bytes it frees."""
        count = dict(self.initial_counts)
        users: dict[Value, list[Value]] = {n: [] for n in self.graph.nodes}
        for n in self.graph.nodes:
            for i in n.inputs:
                if i in count:
                    users[i].append(n)
        buffers = _Buffers(self.graph, storage_owners(self.graph), self.owned_inputs)
        waiting = sum(1 for c in count.values() if c == 0)
        steps = []
        for k, n in enumerate(self.order):
            waiting -= 1
            decremented = []
            for u in users[n]:
                c = count[u] = count[u] - 1
                decremented.append((u, c))
                if c == 0:
                    waiting += 1
            steps.append(Step(k, n, decremented, waiting, buffers.free(n)))
        return steps

    def queues(self):
        """The ready queue after each step (its first QUEUE_SHOWN nodes in engine order), replayed
        from the steps: what was ready at the start, plus what each step made ready, minus what ran.
        The queue is kept as a sorted list of graph positions, so the replay stays fast."""
        nodes = self.graph.nodes
        position = {v: i for i, v in enumerate(nodes)}
        ready = sorted(position[v] for v, c in self.initial_counts.items() if c == 0)
        for s in self.steps:
            k = bisect.bisect_left(ready, position[s.node])
            if k < len(ready) and ready[k] == position[s.node]:
                del ready[k]
            for u, c in s.decremented:
                if c == 0:
                    bisect.insort(ready, position[u])
            yield [nodes[k] for k in ready[:QUEUE_SHOWN]]

    def to_dict(self) -> dict:
        name = value_names(self.graph)
        steps = [{
            "step": s.index, "node": name[s.node], "op": s.node.op, "source": s.node.source,
            "decremented": [{"node": name[u], "count": c} for u, c in s.decremented],
            "queue": [name[q] for q in queue], "queue_size": s.queue_size, "freed_bytes": s.freed_bytes,
        } for s, queue in zip(self.steps, self.queues())]
        return {"policy": self.policy, "graph": self.graph.name, "num_steps": len(self.steps), "note": self.note,
                "initial_counts": {name[v]: c for v, c in self.initial_counts.items()}, "steps": steps}

    def _title(self) -> str:
        return f"schedule of {self.graph.name}: {self.policy} policy, {len(self.steps)} steps"

    def _columns(self) -> list[Column]:
        return [Column("step", right=True), Column("runs"), Column("op"), Column("counts decremented", least=10),
                Column("ready after", least=10), Column("frees", right=True), Column("source", drop=1)]

    def _cells(self):
        """Per step: the node, the counts it decremented (`%9->0`: %9's operands still owed after it;
        0: now ready) and the ready queue after it (first QUEUE_SHOWN of each), as text."""
        name = value_names(self.graph)
        for s, ready in zip(self.steps, self.queues()):
            dec = " ".join(f"{name[u]}->{c}" for u, c in s.decremented[:QUEUE_SHOWN])
            more = len(s.decremented) - QUEUE_SHOWN
            yield s, name[s.node], dec + (f" … (+{more})" if more > 0 else ""), " ".join(name[q] for q in ready)

    def _rows(self) -> list[tuple[str, ...]]:
        return [(str(s.index), node, s.node.op, dec or "-",
                 f"{s.queue_size}: {queue}{' …' if s.queue_size > QUEUE_SHOWN else ''}" if s.queue_size else "0",
                 human_bytes(s.freed_bytes) if s.freed_bytes else "", s.node.source or "")
                for s, node, dec, queue in self._cells()]

    def _notes(self) -> list[str]:
        notes = ["steps count the backward nodes in the order they run, from 0 (the memory plan's backward "
                 "steps and the saved report's last use count the same way). %u->n: u's operands still owed "
                 "after the step (0: u joins the ready queue). ready after: how many nodes wait, then the first "
                 "ones in engine order."]
        return notes + ([self.note] if self.note else [])

    def _records(self) -> tuple[list[str], list[list]]:
        return (["step", "node", "op", "decremented", "queue_size", "queue", "freed_bytes", "source"],
                [[s.index, node, s.node.op, dec, s.queue_size, queue, s.freed_bytes, s.node.source or ""]
                 for s, node, dec, queue in self._cells()])


@gc_paused
def schedule(graph: Graph, policy: str = "engine", owned_inputs=()) -> Schedule:
    """A dependency-counted order of `graph`'s nodes under `policy` (see the module docstring).
    `owned_inputs`: graph inputs whose memory this program may free after their last use (the
    saved activations a backward program receives). The node list must be in topological order, as
    every graph's is (a VerifyError says which node is not)."""
    if policy not in POLICIES:
        raise GradirError(f"unknown scheduling policy {policy!r} (have: {', '.join(POLICIES)})", op="schedule",
                          source=user_source())
    owned_inputs = tuple(owned_inputs)
    engine = _engine_order(graph)
    if policy == "engine":
        return Schedule(graph, policy, engine, owned_inputs)
    owner = storage_owners(graph)
    greedy = _memory_order(graph, _Buffers(graph, owner, owned_inputs))
    # greedy is myopic: where it ends up peaking above engine order, engine order is kept
    greedy_peak, engine_peak = (plan_memory(graph, order, owned_inputs=owned_inputs, owner=owner,
                                            layout=False).peak_bytes for order in (greedy, engine))
    if engine_peak < greedy_peak:
        return Schedule(graph, policy, engine, owned_inputs,
                        f"the greedy order peaked at {human_bytes(greedy_peak)}, above engine order's "
                        f"{human_bytes(engine_peak)}: engine order kept")
    return Schedule(graph, policy, greedy, owned_inputs)


def _engine_order(graph: Graph) -> list[Value]:
    """Engine order needs no queue: the graph's node list is topological, so the ready node recorded
    first is always the next unrun node of the list (its operands come before it, and all have run)."""
    done = set(graph.inputs)
    for n in graph.nodes:
        for i in n.inputs:
            if i not in done:
                raise VerifyError(f"{n.op} is listed before an operand it reads (not a topological order)",
                                  op="schedule")
        done.add(n)
    return list(graph.nodes)


def _memory_order(graph: Graph, buffers: _Buffers) -> list[Value]:
    """The memory policy's order: a heap of ready nodes by bytes freed, ties in engine order."""
    position = {v: i for i, v in enumerate(graph.nodes)}
    users: dict[Value, list[Value]] = {v: [] for v in graph.nodes}
    count: dict[Value, int] = {}
    for n in graph.nodes:
        owed = [i for i in n.inputs if i in position]  # operands still owed (inputs are given)
        count[n] = len(owed)
        for i in owed:
            users[i].append(n)
    heap: list = []
    stamp: dict[Value, int] = {}
    ready: set[Value] = set()

    def push(n: Value):
        stamp[n] = stamp.get(n, 0) + 1
        heapq.heappush(heap, (-buffers.net_freed(n), position[n], stamp[n], n))

    for n in graph.nodes:
        if count[n] == 0:
            ready.add(n)
            push(n)
    order = []
    while heap:
        _, _, st, n = heapq.heappop(heap)
        if n not in ready or st != stamp[n]:
            continue  # a stale entry, re-pushed since with a newer score
        ready.discard(n)
        order.append(n)
        _, now_last = buffers.run(n)
        for u in users[n]:
            count[u] -= 1
            if count[u] == 0:
                ready.add(u)
                push(u)
        for u in now_last & ready:  # u now reads some buffer for the last time: a better score
            push(u)
    if len(order) != len(graph.nodes):
        raise VerifyError("not every node became ready (a cycle?)", op="schedule")
    return order


class _Buffers:
    """Which buffers each node frees, under the storage model of passes.aliasing: a buffer (with
    all views of it) is freed after its last reader runs; inputs, constants and outputs never are."""

    def __init__(self, graph: Graph, owner: dict[Value, Value], owned_inputs=()):
        keep = {owner[o] for o in graph.outputs}
        # tuples and lists, not sets: a small set takes 216 bytes, and there is one per node
        self.reads = {n: tuple(dict.fromkeys(owner[i] for i in n.inputs)) for n in graph.nodes}
        candidates = [v for v in graph.nodes if v.op != "const"] + list(owned_inputs)
        # buffer -> bytes, for the buffers a run frees (the accounting rule of passes.memory)
        self.size = {v: v.nbytes for v in candidates if owner[v] is v and v not in keep and v.ndim}
        self.left: dict[Value, int] = {}  # buffer -> readers that have not run yet
        left = self.left
        for bufs in self.reads.values():
            for b in bufs:
                left[b] = left.get(b, 0) + 1

    @cached_property
    def readers(self) -> dict[Value, list[Value]]:
        """buffer -> the nodes that read it (the memory policy's rescoring)."""
        readers: dict[Value, list[Value]] = {}
        for n, bufs in self.reads.items():
            for b in bufs:
                readers.setdefault(b, []).append(n)
        return readers

    def net_freed(self, n: Value) -> int:
        """Bytes running `n` would free, minus the bytes of the buffer it allocates."""
        size = self.size
        return sum(size[b] for b in self.reads[n] if b in size and self.left[b] == 1) - size.get(n, 0)

    def free(self, n: Value) -> int:
        """Account for `n` running: the bytes it frees."""
        freed, left = 0, self.left
        for b in self.reads[n]:
            c = left[b] = left[b] - 1
            if c == 0:
                freed += self.size.get(b, 0)
        return freed

    def run(self, n: Value) -> tuple[int, set[Value]]:
        """Account for `n` running: (bytes freed, nodes that became some buffer's last reader)."""
        freed, now_last = 0, set()
        for b in self.reads[n]:
            self.left[b] -= 1
            if self.left[b] == 0:
                freed += self.size.get(b, 0)
            elif self.left[b] == 1:
                now_last.update(self.readers[b])
        return freed, now_last
