"""Lifetimes and the memory plan of a program run in a given order.

Accounting rule (the one the NumPy backend's measured run follows too): a value owns a buffer of
its `nbytes` from the step that produces it through the last step that reads it or any view of it
(views, per passes.aliasing, own nothing); graph inputs and constants belong to the caller and are
not counted, nor are 0-d values (NumPy keeps them as scalar objects, and broadcasting one makes a
small temporary of its own); graph outputs stay live to the end. `live_bytes[t]` counts every buffer alive at step
t, including the one step t produces and those it reads for the last time (no op works in place).

The arena layout replays the timeline with a best-fit allocator: at each step the new buffer takes
the smallest free gap that fits (or grows the arena), then buffers read for the last time are freed
and neighbouring gaps merge. Its size over the peak is the fragmentation.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from functools import cached_property
from itertools import accumulate

from gradir.core.ir import Graph, Value
from gradir.passes.aliasing import owners as storage_owners
from gradir.passes.report import Report, human_bytes, value_name
from gradir.passes.text_table import Column
from gradir.util.gcpause import gc_paused


@dataclass(slots=True)
class Buffer:
    value: Value
    nbytes: int
    start: int          # step that allocates it
    end: int            # last step that needs it
    offset: int = -1    # in the arena
    phase: str = ""     # e.g. forward / backward

    def overlaps(self, other: Buffer) -> bool:
        return self.start <= other.end and other.start <= self.end


@dataclass
class MemoryPlan(Report):
    """Lifetimes, live bytes and peak of a timeline. The lower bound and the arena layout (what the
    reports show, not what a planner weighing peaks needs) are worked out when first read."""
    graph: Graph
    order: list[Value]
    lifetimes: list[Buffer] = field(repr=False)  # the buffers, in (start, end) order; see `buffers`
    live_bytes: list[int]
    peak_bytes: int
    peak_step: int
    phases: list[str] = field(default_factory=list)
    owner: dict[Value, Value] | None = field(default=None, repr=False)  # each value's storage owner
    layout: bool = True  # False: no arena (offsets stay -1, arena_bytes 0)

    @property
    def buffers(self) -> list[Buffer]:
        """The buffers, placed in the arena (offsets set)."""
        _ = self.arena_bytes
        return self.lifetimes

    @cached_property
    def arena_bytes(self) -> int:
        """The arena the best-fit layout needs (buffer offsets are set as a side effect)."""
        return best_fit(self.lifetimes, len(self.order)) if self.layout else 0

    @cached_property
    def lower_bound_bytes(self) -> int:
        """The most one step needs at once (its result and its operands' buffers, each once), or the
        results, all alive at the end: no order of these steps peaks below it."""
        owner = self.owner if self.owner is not None else storage_owners(self.graph)
        size = {b.value: b.nbytes for b in self.lifetimes}
        lower = sum(size.get(o, 0) for o in {owner[o] for o in self.graph.outputs})
        for n in self.order:
            touched = {owner[i] for i in n.inputs}
            touched.add(owner[n])
            lower = max(lower, sum([size.get(b, 0) for b in touched]))
        return lower

    @property
    def fragmentation(self) -> float:
        return self.arena_bytes / self.peak_bytes - 1 if self.peak_bytes else 0.0

    noun = "steps"

    def _phase_steps(self) -> list[int]:
        """Each step of the timeline counted within its phase (backward steps as the schedule numbers them)."""
        out, prev = [], None
        for p in self.phases or [None] * len(self.order):
            out.append(out[-1] + 1 if out and p == prev else 0)
            prev = p
        return out

    def where(self, t: int) -> str:
        """Step `t` as the reports name it: "backward step 18" (or "step 18" without phases)."""
        return f"{self.phases[t]} step {self._phase_steps()[t]}" if self.phases else f"step {t}"

    def _name(self, n: Value) -> str:
        """`%k` as in the forward or backward program's IR (the phase is a column of its own)."""
        return value_name(n, self.graph).rpartition(" ")[2]

    def to_dict(self) -> dict:
        g = self.graph
        phase_steps = self._phase_steps()
        return {
            "graph": g.name, "peak_bytes": self.peak_bytes, "peak_step": self.peak_step,
            "peak_at": self.where(self.peak_step) if self.order else None,
            "lower_bound_bytes": self.lower_bound_bytes, "arena_bytes": self.arena_bytes,
            "fragmentation": self.fragmentation,
            "steps": [{"step": t, "phase": self.phases[t] if self.phases else "", "phase_step": phase_steps[t],
                       "node": value_name(n, g), "op": n.op, "live_bytes": b}
                      for t, (n, b) in enumerate(zip(self.order, self.live_bytes))],
            "buffers": [{"value": value_name(b.value, g), "op": b.value.op, "bytes": b.nbytes, "start": b.start,
                         "end": b.end, "offset": b.offset, "phase": b.phase} for b in self.buffers],
        }

    def _flows(self) -> tuple[list[int], list[int]]:
        """Bytes each step allocates and frees (buffers alive to the end are never freed)."""
        alloc, freed = [0] * len(self.order), [0] * len(self.order)
        for b in self.lifetimes:
            if 0 <= b.start < len(alloc):
                alloc[b.start] += b.nbytes
            if b.end < len(self.order) - 1:
                freed[b.end] += b.nbytes
        return alloc, freed

    def describe_step(self, t: int) -> str:
        """Step `t` and what runs there: "backward step 18 (%25 multiply)"."""
        n = self.order[t]
        return f"{self.where(t)} ({self._name(n)} {n.op})"

    def _title(self) -> str:
        peak = f" at {self.describe_step(self.peak_step)}" if self.order else ""
        return (f"memory plan of {self.graph.name}: peak {human_bytes(self.peak_bytes)}{peak}, lower bound "
                f"{human_bytes(self.lower_bound_bytes)}, arena {human_bytes(self.arena_bytes)} "
                f"({self.fragmentation:.1%} fragmentation)")

    def _columns(self) -> list[Column]:
        cols = [Column("phase")] if self.phases else []
        return cols + [Column("step", right=True), Column("runs"), Column("op"), Column("allocates", right=True),
                       Column("frees", right=True), Column("live", right=True), Column("")]

    def _rows(self) -> list[tuple[str, ...]]:
        alloc, freed = self._flows()
        rows = []
        for t, (n, k, live) in enumerate(zip(self.order, self._phase_steps(), self.live_bytes)):
            row = (str(k), self._name(n), n.op, human_bytes(alloc[t]) if alloc[t] else "",
                   human_bytes(freed[t]) if freed[t] else "", human_bytes(live), "<- peak" if t == self.peak_step else "")
            rows.append((self.phases[t],) + row if self.phases else row)
        return rows

    def _keep(self) -> set[int]:
        return {self.peak_step - 1, self.peak_step, self.peak_step + 1}

    def _label(self, k: int) -> str:
        return self.where(k)

    def _notes(self) -> list[str]:
        steps = "steps count each program's nodes in the order they run, from 0 (backward steps are the " \
                "schedule's)" if self.phases else "steps count the nodes in the order they run, from 0"
        return [f"{steps}. live: bytes of every buffer alive during the step, the one it writes and those it "
                "reads for the last time included; the peak is the most live, the program's results included "
                "(a recompute plan's activation peak leaves them out)."]

    def _records(self) -> tuple[list[str], list[list]]:
        alloc, freed = self._flows()
        return (["step", "phase", "phase_step", "node", "op", "allocated_bytes", "freed_bytes", "live_bytes"],
                [[t, self.phases[t] if self.phases else "", k, self._name(n), n.op, alloc[t], freed[t], live]
                 for t, (n, k, live) in enumerate(zip(self.order, self._phase_steps(), self.live_bytes))])


@gc_paused
def plan_memory(graph: Graph, order: list[Value] | None = None, phases: list[str] | None = None,
                owned_inputs=(), owner: dict[Value, Value] | None = None, layout: bool = True,
                count_outputs: bool = True) -> MemoryPlan:
    """Lifetimes, live bytes per step, peak, a lower bound and an arena layout for running
    `graph`'s nodes in `order` (default: graph order). `owned_inputs` are inputs the program frees
    after their last use (saved activations handed to a backward program). `owner` may pass in
    passes.aliasing.owners(graph); `layout=False` skips the arena (offsets stay -1);
    `count_outputs=False` leaves the program's results out, like its inputs (an activation peak)."""
    order = list(graph.nodes) if order is None else list(order)
    step = {n: t for t, n in enumerate(order)}
    owner = storage_owners(graph) if owner is None else owner
    keep = {owner[o] for o in graph.outputs}
    if not count_outputs:
        order_set = set(order)
        owned_inputs = [x for x in owned_inputs if x not in keep]
        skip = keep & order_set
    else:
        skip = set()
    last = len(order) - 1
    owned = set(owned_inputs)
    buffers: dict[Value, Buffer] = {}
    for x in owned:
        if owner[x] is x and x.ndim:
            buffers[x] = Buffer(x, x.nbytes, 0, 0, phase=phases[0] if phases else "")
    get = buffers.get
    for n in order:
        t = step[n]
        if owner[n] is n and n.op != "const" and n.ndim and n not in skip:
            buffers[n] = Buffer(n, n.nbytes, t, t, phase=phases[t] if phases else "")
        for i in n.inputs:
            b = get(owner[i])
            if b is not None and b.end < t:
                b.end = t
    for o in keep:
        if o in buffers:
            buffers[o].end = last
    bufs = sorted(buffers.values(), key=lambda b: (b.start, b.end))

    delta = [0] * (len(order) + 1)
    for b in bufs:
        delta[b.start] += b.nbytes
        delta[b.end + 1] -= b.nbytes
    live = list(accumulate(delta[:-1]))
    peak = max(live, default=0)
    peak_step = live.index(peak) if live else 0
    return MemoryPlan(graph, order, bufs, live, peak, peak_step, list(phases or []), owner, layout)


def best_fit(bufs: list[Buffer], steps: int) -> int:
    """Place buffers in time order: each takes the smallest free gap that fits, else the arena grows.
    At each step the new buffers are placed (largest first), then those read for the last time freed."""
    placing = sorted(bufs, key=lambda b: (b.start, -b.nbytes))
    freeing = sorted([b for b in bufs if b.end < steps - 1], key=lambda b: b.end)  # the rest live to the end
    free = _Gaps()
    by_size, by_offset = free.by_size, free.by_offset
    top = j = 0
    for b in placing:
        if b.start >= steps:
            break
        while j < len(freeing) and freeing[j].end < b.start:  # freed at an earlier step than b is placed
            free.release(freeing[j].offset, freeing[j].nbytes)
            j += 1
        i = bisect.bisect_left(by_size, (b.nbytes, -1))
        if i < len(by_size):  # the smallest gap that fits (the lowest, among equal sizes)
            size, off = by_size[i]
            free.remove(off, size)
            if size > b.nbytes:
                free.insert(off + b.nbytes, size - b.nbytes)
            b.offset = off
        elif by_offset and sum(by_offset[-1]) == top:  # extend the gap at the top
            off, size = by_offset[-1]
            free.remove(off, size)
            b.offset, top = off, off + b.nbytes
        else:
            b.offset, top = top, top + b.nbytes
    return top


class _Gaps:
    """best_fit's free gaps, sorted by offset (to merge neighbours) and by size (to find the best fit)."""

    def __init__(self):
        self.by_offset: list[tuple[int, int]] = []  # (offset, size)
        self.by_size: list[tuple[int, int]] = []    # (size, offset)

    def insert(self, off: int, size: int) -> None:
        bisect.insort(self.by_offset, (off, size))
        bisect.insort(self.by_size, (size, off))

    def remove(self, off: int, size: int) -> None:
        del self.by_offset[bisect.bisect_left(self.by_offset, (off, size))]
        del self.by_size[bisect.bisect_left(self.by_size, (size, off))]

    def release(self, off: int, size: int) -> None:
        """Free [off, off + size), merged with the gaps on either side."""
        if size == 0:
            return
        gaps = self.by_offset
        i = bisect.bisect(gaps, (off, size))
        if i < len(gaps) and off + size == gaps[i][0]:  # merge with the gap after
            after = gaps[i]
            self.remove(*after)
            size += after[1]
        if i > 0 and sum(gaps[i - 1]) == off:  # and the gap before
            before = gaps[i - 1]
            self.remove(*before)
            off, size = before[0], size + before[1]
        self.insert(off, size)


GREEDY_ORDERS = {  # the orders greedy placement tries (ties between equal sizes decide a lot)
    "size, then start": lambda b: (-b.nbytes, b.start),
    "size, then longest life": lambda b: (-b.nbytes, b.start - b.end, b.start),
    "bytes x life": lambda b: (-b.nbytes * (b.end - b.start + 1), b.start),
}


def overlapping_pairs(bufs: list[Buffer]) -> int:
    """How many pairs of buffers are alive at the same time (greedy_by_size's work), in O(n log n)."""
    ends = sorted(b.end for b in bufs)
    # the buffers that started earlier, less those that ended before this one starts
    return sum(i - bisect.bisect_left(ends, b.start) for i, b in enumerate(sorted(bufs, key=lambda b: b.start)))


def overlaps(bufs: list[Buffer]) -> list[list[int]]:
    """For each buffer, the positions of the others alive at the same time: a sweep in O(n log n + pairs)."""
    near: list[list[int]] = [[] for _ in bufs]
    active: list[int] = []
    for i in sorted(range(len(bufs)), key=lambda i: bufs[i].start):
        start = bufs[i].start
        active = [j for j in active if bufs[j].end >= start]  # each dropped once, each kept one is a pair
        for j in active:
            near[i].append(j)
            near[j].append(i)
        active.append(i)
    return near


def greedy_by_size(bufs: list[Buffer], order=GREEDY_ORDERS["size, then start"], near: list[list[int]] | None = None) -> int:
    """Place buffers in `order` (largest first), each at the lowest offset that clears every placed
    buffer alive at the same time (TFLite's greedy-by-size). Often reaches the peak where best fit
    fragments; sets offsets and returns the arena size. `near` is `overlaps(bufs)` (computed if not
    given); the work is O(pairs log pairs) in the overlapping pairs (`overlapping_pairs`)."""
    near = overlaps(bufs) if near is None else near
    placed = [False] * len(bufs)
    top = 0
    for i in sorted(range(len(bufs)), key=lambda i: order(bufs[i])):
        b = bufs[i]
        offset = 0
        # equal offsets in any order give the same result: the gap search takes the furthest end among them
        for other in sorted((bufs[j] for j in near[i] if placed[j]), key=lambda o: o.offset):
            if offset + b.nbytes <= other.offset:
                break
            offset = max(offset, other.offset + other.nbytes)
        b.offset = offset
        top = max(top, offset + b.nbytes)
        placed[i] = True
    return top
