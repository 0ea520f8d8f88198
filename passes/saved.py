"""The saved-tensor report: what the backward program keeps alive from the forward one, and why.

For a `Partition` every residual (a forward value the backward reads) gets one entry: its name in
the forward graph (`%k`, or the input's name), type, bytes; its kind (`input`: a parameter or data
argument, no new memory; `activation`: a buffer forward allocated and must now keep; `view`: shares
another value's storage, per `passes.aliasing`); its producer; the backward ops that read it; the
forward nodes whose VJP rules need it with the reason from `gradir.core.rules` ("%4 = tanh: tanh keeps
its output"); and its last use in the backward order.

Accounting rule for `bytes` (new memory): activations count their size; inputs count 0; a view
counts 0 when the buffer it shares is already kept (an input, or another saved value), otherwise the
first view of that buffer counts the whole buffer, which the view keeps alive.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from gradir.core import dtypes
from gradir.core.ir import Graph, Value
from gradir.core.rules import OUTPUT, explain, node_reads
from gradir.passes.aliasing import VIEW_OPS, owners
from gradir.passes.autodiff import needs_grad
from gradir.passes.partition import Partition
from gradir.passes.report import Report, human_bytes, value_name
from gradir.passes.text_table import Column

READERS_SHOWN = 8  # backward readers listed per saved value in text (to_dict has all)
NO_RULE = "read by backward directly (no single forward rule keeps it: a fused rule, or a value shared by both passes)"


@dataclass
class Reader:
    op: str
    value: str          # %k in the backward graph
    source: str | None


@dataclass
class NeededBy:
    value: str          # %k of the forward node whose VJP rule keeps the saved value
    op: str
    source: str | None
    reason: str         # e.g. "tanh keeps its output"

    def __str__(self) -> str:
        return f"{self.value} = {self.op}: {self.reason}"


@dataclass
class SavedEntry:
    name: str
    dtype: str
    shape: tuple[int, ...]
    bytes: int
    new_bytes: int
    kind: str                       # "input" | "activation" | "view"
    view_of: str | None
    producer: dict                  # {"op", "source"}
    readers: list[Reader] = field(default_factory=list)
    needed_by: list[NeededBy] = field(default_factory=list)
    last_use: int | None = None     # index in the backward order of the last reader (len(order): returned)

    @property
    def type_str(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["shape"] = list(self.shape)
        d["needed_by"] = [dict(asdict(n), text=str(n)) for n in self.needed_by]
        return d


@dataclass
class SavedReport(Report):
    entries: list[SavedEntry]
    backward_steps: int

    @property
    def count(self) -> int:
        return len(self.entries)

    @property
    def bytes(self) -> int:
        """New memory kept for backward (activations, not inputs/parameters; views of kept buffers 0)."""
        return sum(e.new_bytes for e in self.entries)

    @property
    def total_bytes(self) -> int:
        """Every saved value's size, inputs and views included (the sum of what backward reads)."""
        return sum(e.bytes for e in self.entries)

    def __getitem__(self, name: str) -> SavedEntry:
        for e in self.entries:
            if e.name == name:
                return e
        raise KeyError(name)

    def to_dict(self) -> dict:
        kinds = {k: sum(1 for e in self.entries if e.kind == k) for k in ("input", "activation", "view")}
        return {"count": self.count, "bytes": self.bytes, "total_bytes": self.total_bytes, "kinds": kinds,
                "backward_steps": self.backward_steps, "entries": [e.to_dict() for e in self.entries]}

    noun = "saved values"

    def _title(self) -> str:
        return (f"saved for backward: {self.count} values, {human_bytes(self.bytes)} new memory "
                f"({human_bytes(self.total_bytes)} read)")

    def _columns(self) -> list[Column]:
        return [Column("value"), Column("type"), Column("kind", drop=3), Column("bytes", right=True, drop=4),
                Column("new", right=True), Column("producer", drop=5), Column("needed by", wrap=True, least=24),
                Column("read by", wrap=True, least=10, drop=2), Column("last use", right=True)]

    def _last_use(self, e: SavedEntry) -> str:
        return "-" if e.last_use is None else "returned" if e.last_use >= self.backward_steps else str(e.last_use)

    def _rows(self) -> list[tuple[str, ...]]:
        rows = []
        for e in self.entries:
            kind = f"view of {e.view_of}" if e.kind == "view" else e.kind
            producer = e.producer["op"] + (f" ({e.producer['source']})" if e.producer.get("source") else "")
            needed = "\n".join(map(str, e.needed_by)) or NO_RULE
            readers = ", ".join(f"{r.value} {r.op}" for r in e.readers[:READERS_SHOWN]) or "(returned)"
            if len(e.readers) > READERS_SHOWN:
                readers += f", … (+{len(e.readers) - READERS_SHOWN})"
            rows.append((e.name, e.type_str, kind, human_bytes(e.bytes), human_bytes(e.new_bytes), producer, needed,
                         readers, self._last_use(e)))
        rows.append(("total", "", "", human_bytes(self.total_bytes), human_bytes(self.bytes), "", "", "", ""))
        return rows

    def _keep(self) -> set[int]:
        return {len(self.entries)}  # the total

    def _label(self, k: int) -> str:
        return self.entries[k].name

    def _notes(self) -> list[str]:
        return ["value: its name in the forward program (the backward receives %k as input saved_<op>k). new: "
                "memory kept for backward (inputs and views of kept buffers add none). last use: the backward "
                "step of its last reader, as the schedule numbers them."]

    def _records(self) -> tuple[list[str], list[list]]:
        return (["value", "dtype", "shape", "kind", "view_of", "bytes", "new_bytes", "producer_op", "producer_source",
                 "needed_by", "readers", "last_use"],
                [[e.name, e.dtype, "x".join(map(str, e.shape)), e.kind, e.view_of or "", e.bytes, e.new_bytes,
                  e.producer["op"], e.producer.get("source") or "", "; ".join(map(str, e.needed_by)),
                  " ".join(f"{r.value}:{r.op}" for r in e.readers), "" if e.last_use is None else e.last_use]
                 for e in self.entries])


def _needed_by(forward: Graph, live: set[Value]) -> dict[Value, list[NeededBy]]:
    """For each forward value, the forward nodes whose VJP rule reads it for an operand needing a gradient."""
    out: dict[Value, list[NeededBy]] = {}
    for n in forward.nodes:
        if n.op == "const" or n not in live:
            continue
        parts = node_reads(n)
        kept: set[int] = set()
        for i, reads in enumerate(parts):
            if reads is not None and n.inputs[i] in live:
                kept |= reads
        if not kept:
            continue
        reason = explain(n.op, frozenset(kept), len(n.inputs), parts)
        need = NeededBy(value_name(n, forward), n.op, n.source, reason)
        targets = [n] if OUTPUT in kept else []
        targets += [v for j, v in enumerate(n.inputs) if j in kept]
        for v in dict.fromkeys(targets):  # once per node, even if read twice (x * x)
            out.setdefault(v, []).append(need)
            # the buffer under a kept view is kept too (cleanup may make backward read it directly)
            u = v
            while u.op in VIEW_OPS and u.inputs:
                u = u.inputs[0]
                via = NeededBy(need.value, need.op, need.source, f"{need.reason} (through the {v.op} {value_name(v, forward)})")
                out.setdefault(u, []).append(via)
    return out


def saved_tensors(part: Partition, backward_order: Sequence | None = None, wrt: Sequence[int] | None = None
                  ) -> SavedReport:
    """The saved-tensor report of `part`.

    backward_order: the order the backward program's nodes run in (Values of `part.backward`, or
    their indices in `part.backward.nodes`), default the graph order; `last_use` indexes it.
    wrt: positions of the forward inputs gradients are taken for (default: every real float input),
    used to tell which rules actually run."""
    forward, backward = part.forward, part.backward
    k = forward.num_forward_outputs or 0
    fwd_saved = forward.outputs[k:k + len(part.residuals)]
    bwd_saved = backward.inputs[:len(part.residuals)]
    if wrt is None:
        wrt = [i for i, x in enumerate(forward.inputs) if dtypes.is_float(x.dtype)]
    needed = _needed_by(forward, needs_grad(forward, list(wrt)))
    owner = owners(forward)

    order = list(backward.nodes if backward_order is None else backward_order)
    order = [backward.nodes[o] if isinstance(o, int) else o for o in order]
    step = {v: i for i, v in enumerate(order)}
    users = backward.users()
    returned = set(backward.outputs)

    kept = set(fwd_saved)  # buffers the report accounts for by themselves
    counted_owners: set[Value] = set()
    entries = []
    for fv, bv in zip(fwd_saved, bwd_saved):
        own = owner[fv]
        if fv.op == "input":
            kind, view_of, new = "input", None, 0
        elif own is not fv:
            kind, view_of = "view", value_name(own, forward)
            # a view keeps its whole base buffer alive: count it once unless it is kept anyway
            new = 0 if own.op == "input" or own in kept or own in counted_owners else own.nbytes
            counted_owners.add(own)
        else:
            kind, view_of, new = "activation", None, fv.nbytes
        readers = [Reader(u.op, value_name(u, backward), u.source) for u in dict.fromkeys(users[bv])]
        steps = [step[u] for u in users[bv] if u in step]
        last = len(order) if bv in returned else (max(steps) if steps else None)
        entries.append(SavedEntry(
            name=value_name(fv, forward), dtype=dtypes.short(fv.dtype), shape=tuple(fv.shape), bytes=fv.nbytes,
            new_bytes=new, kind=kind, view_of=view_of, producer={"op": fv.op, "source": fv.source},
            readers=readers, needed_by=needed.get(fv, []), last_use=last))
    return SavedReport(entries, len(order))
