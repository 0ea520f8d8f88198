"""Recompute planning (activation checkpointing): which forward values the backward keeps, and
which it computes again from them. A plan is a choice of the forward/backward partition: the set
of forward values saved. Everything here returns a `RematPlan`; `partition(joint, saved=plan.saved)`
turns it into the forward and backward programs that run.

Policies:
- ``none``: save every forward value the backward reads.
- ``uniform``: cut the forward into segments of consecutive blocks (a block is a top-level
  `gr.scope`, else an equal share of the forward nodes), `segments` of them (default sqrt(#blocks)),
  keep only what crosses into each segment, recompute the inside. The last segment is not
  recomputed (its values are needed first), as in torch.utils.checkpoint.checkpoint_sequential.
- ``selective``: keep the results of costly ops (matmul by default), recompute the cheap rest.
- ``mincut`` and ``optimal``: see gradir.passes.mincut and gradir.passes.milp.

Regions marked with `gr.checkpoint` are recomputed under every policy: only values leaving the
region can be kept.

Peaks and budgets here are *activation* peaks: the memory plan of forward then backward without
the program's results (the loss and the gradients), which every plan holds alike, as it holds the
inputs and parameters.
"""

from __future__ import annotations

import inspect
import math
import numbers
from dataclasses import dataclass, field

from gradir.ir import Graph, Value
from gradir.passes.partition import Partition, const_only, forward_values, partition
from gradir.passes.report import Report, human_bytes
from gradir.passes.text_table import Column
from gradir.primitive import get_primitive

CHECKPOINT = "checkpoint"  # scope names starting with this mark gr.checkpoint regions
POLICIES = ("none", "uniform", "selective", "mincut", "optimal")


@dataclass
class RematPlan:
    policy: str
    saved: frozenset[Value] | None      # forward values kept (None: all the backward reads)
    options: dict = field(default_factory=dict)
    optimal: bool | None = None         # proven optimal (the MILP)
    note: str = ""


def block_of(v: Value) -> str | None:
    """The top-level block a node belongs to: its outermost gr.scope that is not a gr.checkpoint
    region (a checkpoint around named blocks does not merge them), else its checkpoint, else None."""
    return next((s for s in v.scope if not s.startswith(CHECKPOINT)), v.scope[0] if v.scope else None)


def in_checkpoint(v: Value) -> str | None:
    return next((s for s in v.scope if s.startswith(CHECKPOINT)), None)


def _users(graph: Graph) -> dict[Value, list[Value]]:
    users: dict[Value, list[Value]] = {v: [] for v in graph.all_values()}
    for n in graph.nodes:
        for i in n.inputs:
            users[i].append(n)
    return users


def candidates(joint: Graph) -> list[Value]:
    """Forward values a plan may keep: not constants or constant-only, not inside a gr.checkpoint
    region unless read outside it."""
    constish = const_only(joint)
    users = _users(joint)
    out = []
    for v in forward_values(joint):
        if v in constish:
            continue
        region = in_checkpoint(v)
        if region and all(in_checkpoint(u) == region for u in users[v]):
            continue
        out.append(v)
    return out


def blocks(joint: Graph) -> list[list[Value]]:
    """The forward nodes grouped into blocks, in order: top-level scopes if the program has any
    (nodes outside every scope join no block), else about sqrt(n) equal shares of the nodes."""
    constish = const_only(joint)
    fwd = [v for v in forward_values(joint) if v not in constish]
    named: dict[str, list[Value]] = {}
    for v in fwd:
        if block_of(v) is not None:
            named.setdefault(block_of(v), []).append(v)
    if named:
        return list(named.values())
    size = max(1, math.ceil(len(fwd) / max(1, round(math.sqrt(len(fwd))))))
    return [fwd[i:i + size] for i in range(0, len(fwd), size)]


def plan_none(joint: Graph) -> RematPlan:
    cands = candidates(joint)
    return RematPlan("none", frozenset(cands) if len(cands) < len(forward_values(joint)) else None)


def plan_uniform(joint: Graph, segments: int | None = None) -> RematPlan:
    if segments is not None and (isinstance(segments, bool) or not isinstance(segments, numbers.Integral) or segments < 1):
        from gradir.errors import GradirError
        from gradir.trace import user_source

        raise GradirError(f"segments={segments!r} must be a positive integer", op="remat uniform", source=user_source())
    bl = blocks(joint)
    n = len(bl)
    segments = max(1, min(n, round(math.sqrt(n)) if segments is None else int(segments)))
    per = max(1, math.ceil(n / segments))
    segment_of: dict[Value, int] = {}
    for b, nodes in enumerate(bl):
        for v in nodes:
            segment_of[v] = b // per
    last = (n - 1) // per
    users = _users(joint)
    forward = set(forward_values(joint))
    keep = set()
    for v in candidates(joint):
        s = segment_of.get(v)
        if s is None or s == last:
            keep.add(v)  # outside every block, or in the last segment: not recomputed
        elif any(segment_of.get(u, -1) != s for u in users[v] if u in forward):
            keep.add(v)  # read by a later forward segment: a checkpoint
    return RematPlan("uniform", frozenset(keep), {"segments": segments, "blocks": n, "blocks_per_segment": per})


def plan_selective(joint: Graph, keep_ops=("matmul",)) -> RematPlan:
    keep = {v for v in candidates(joint) if v.op in keep_ops}
    return RematPlan("selective", frozenset(keep), {"keep_ops": tuple(keep_ops)})


def plan_remat(joint: Graph, policy: str | None = "none", memory_budget: int | None = None, **options) -> RematPlan:
    """A recompute plan for `joint` under `policy` (see the module docstring)."""
    policy = policy or "none"
    if policy not in POLICIES:
        from gradir.errors import GradirError
        from gradir.trace import user_source

        raise GradirError(f"unknown recompute policy {policy!r} (have: {', '.join(POLICIES)})", op="remat",
                          source=user_source())
    from gradir.passes.milp import plan_optimal
    from gradir.passes.mincut import plan_mincut

    planner = {"none": plan_none, "uniform": plan_uniform, "selective": plan_selective, "mincut": plan_mincut,
               "optimal": plan_optimal}[policy]
    accepted = [p for p in list(inspect.signature(planner).parameters)[1:] if p != "memory_budget"]
    unknown = sorted(set(options) - set(accepted))
    if unknown:  # a clear error instead of the planner's bare TypeError
        from gradir.errors import GradirError
        from gradir.trace import user_source

        raise GradirError(f"unknown option(s) {', '.join(unknown)} for recompute policy {policy!r} "
                          f"(accepted: {', '.join(accepted) or 'none'})", op="remat", source=user_source())
    if policy == "optimal":
        return plan_optimal(joint, memory_budget=memory_budget, **options)
    return planner(joint, **options)


# -- what a plan costs --------------------------------------------------------------------------


@dataclass
class RematReport(Report):
    """Per plan: what is saved, what is recomputed and what it costs, and the planned peak."""

    plan: RematPlan
    saved_count: int         # activations kept (not inputs/parameters)
    saved_bytes: int
    recomputed_ops: int
    recompute_flops: int
    blocks: int              # blocks the forward has
    blocks_recomputed: int   # blocks with at least one node computed again
    peak_bytes: int          # activation peak: forward + backward, the program's results not counted

    @property
    def block_calls(self) -> int:
        """Block forward calls: each block once in forward, plus once more if recomputed."""
        return self.blocks + self.blocks_recomputed

    def to_dict(self) -> dict:
        return {"policy": self.plan.policy, "options": self.plan.options, "optimal": self.plan.optimal,
                "note": self.plan.note, "saved_count": self.saved_count, "saved_bytes": self.saved_bytes,
                "recomputed_ops": self.recomputed_ops, "recompute_flops": self.recompute_flops,
                "blocks": self.blocks, "blocks_recomputed": self.blocks_recomputed, "block_calls": self.block_calls,
                "peak_bytes": self.peak_bytes}

    def _title(self) -> str:
        return "recompute plans"

    def _columns(self) -> list[Column]:
        return [Column("policy", wrap=True, least=8), Column("saved", right=True), Column("saved bytes", right=True),
                Column("recomputed ops", right=True), Column("recompute flops", right=True),
                Column("block calls", right=True), Column("activation peak", right=True),
                Column("note", wrap=True, least=12)]

    def _rows(self) -> list[tuple[str, ...]]:
        name = self.plan.policy + (" (proven optimal)" if self.plan.optimal else "")
        return [(name, str(self.saved_count), human_bytes(self.saved_bytes), str(self.recomputed_ops),
                 f"{self.recompute_flops:,}", str(self.block_calls), human_bytes(self.peak_bytes), self.plan.note)]

    def _notes(self) -> list[str]:
        return [ACTIVATION_PEAK]


ACTIVATION_PEAK = ("activation peak: forward + backward without the program's results (the loss, the gradients), "
                   "which every plan holds alike; the memory plan's peak counts them")


def evaluate(joint: Graph, plan: RematPlan, part: Partition | None = None) -> RematReport:
    """Apply `plan` and measure it: saved activations, recomputation, and the planned peak of
    forward then backward (engine order, passes.memory's accounting)."""
    from gradir.passes.aliasing import owners
    from gradir.passes.memory import plan_memory

    part = part or partition(joint, saved=plan.saved)
    owner = owners(joint)
    acts = {owner[r] for r in part.residuals if owner[r].op != "input"}
    flops = sum(get_primitive(v.op).cost(v, v.inputs, v.attrs) for v in part.recomputed)
    bl = blocks(joint)
    recomputed = set(part.recomputed)
    blocks_recomputed = sum(1 for b in bl if any(v in recomputed for v in b))
    graph, order, phases = part.stitch()
    peak = plan_memory(graph, order, phases, count_outputs=False).peak_bytes
    return RematReport(plan, len(acts), sum(v.nbytes for v in acts), len(part.recomputed), flops, len(bl),
                       blocks_recomputed, peak)
