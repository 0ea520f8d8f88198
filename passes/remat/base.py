"""What every recompute plan is made of: the plan (`RematPlan`), the forward values a plan may keep
(`candidates`), the forward's blocks and gr.checkpoint regions, and the three simple policies: ``none``,
``uniform`` and ``selective`` (see gradir.passes.remat.plan for what each does).

The planners above it (plan.py's dispatcher, mincut.py, milp.py) import this module; it imports none of them.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

from gradir.core.errors import GradirError
from gradir.core.ir import Graph, Value
from gradir.core.trace import user_source
from gradir.passes.partition import const_only, forward_values

CHECKPOINT = "checkpoint"  # scope names starting with this mark gr.checkpoint regions


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
