"""The facts the recompute MILP is built on (see gradir.passes.remat.milp's docstring): units (a forward
buffer and its views, kept or recomputed together), the backward steps that read them, the fixed part of the
memory timeline, and the exact reductions that keep the model small: dominance (`analyse`) and the recompute
groups no plan within a flops bound and a byte budget uses (`prune`). `keep_of_saved` and `plan_from_keep`
translate between saved sets and kept units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from gradir.core.ir import Graph, Value
from gradir.core.primitive import get_primitive
from gradir.passes.aliasing import owners
from gradir.passes.partition import const_only, forward_values
from gradir.passes.remat.base import blocks, candidates


@dataclass
class Unit:
    owner: Value
    members: list[Value]     # the owner and its forward views
    saveable: list[Value]    # members that are candidates (what keeping the unit saves)
    pos: int                 # forward step producing the owner (also its order inside a group)
    fbytes: int              # bytes of the forward buffer (0: not counted)
    rbytes: int              # bytes of a recomputed copy
    cost: int                # flops to recompute it
    keepable: bool
    deps: list[int] = field(default_factory=list)       # units its owner reads
    consumers: list[int] = field(default_factory=list)  # units reading it
    direct: list[int] = field(default_factory=list)     # backward steps reading a member (needs)
    readers: list[int] = field(default_factory=list)    # backward steps reading its buffer
    last_fwd: int = 0        # last forward step reading its buffer
    block: int | None = None  # the block (remat.blocks) its owner belongs to
    ops: int = 0             # nodes recomputed with it (not constant-only)
    domain: list[int] = field(default_factory=list)     # groups it may be recomputed in
    dominated: bool = False  # a candidate never worth keeping (see analyse)


@dataclass
class Timeline:
    units: list[Unit]
    free: list[Value]        # candidates owning no counted memory (views of inputs): always kept
    n_forward: int
    n_backward: int
    fixed_f: list[int]       # bytes of forward buffers alive at each forward step, no unit extended
    fixed_b: list[int]       # bytes of backward-owned buffers alive at each backward step
    fixed_gap: list[int]     # ... alive across the gap before backward step g (born earlier, read later)


def analyse(joint: Graph) -> Timeline:
    """Units, backward steps and the fixed part of the memory timeline of `joint` (see
    gradir.passes.remat.milp's docstring)."""
    k = joint.num_forward_outputs
    fwd = forward_values(joint)
    fwd_set = set(fwd)
    primals = set(joint.inputs[:len(joint.inputs) - k])
    fwd_outs, grads = joint.outputs[:k], joint.outputs[k:]
    owner = owners(joint)
    constish = const_only(joint)
    cands = set(candidates(joint))

    # backward nodes: what the gradients need, short of forward values; in joint order
    needed, stack = set(), [g for g in grads if g not in fwd_set and g not in primals]
    while stack:
        v = stack.pop()
        if v not in needed and v.op != "input":
            needed.add(v)
            stack.extend(i for i in v.inputs if i not in fwd_set and i not in primals)
    bwd = [n for n in joint.nodes if n in needed]
    fstep = {v: s for s, v in enumerate(fwd)}
    bstep = {v: j for j, v in enumerate(bwd)}
    out_owner = {owner[o] for o in fwd_outs} | {owner[g] for g in grads}

    unit_of: dict[Value, int] = {}
    units: list[Unit] = []
    free = []
    for v in fwd:
        o = owner[v]
        if o.op in ("input", "const") or o not in fstep:
            if v in cands:
                free.append(v)
            continue
        if o is v:
            counted = v.ndim > 0
            unit_of[v] = len(units)
            units.append(Unit(v, [v], [v] if v in cands else [], fstep[v],
                              v.nbytes if counted and v not in out_owner else 0, v.nbytes if counted else 0, 0,
                              v in cands and v not in constish))
        else:
            unit_of[v] = unit_of[o]
            units[unit_of[o]].members.append(v)
            if v in cands:
                units[unit_of[o]].saveable.append(v)
    block_of = {v: b for b, vs in enumerate(blocks(joint)) for v in vs}
    for u in units:
        u.cost = sum(get_primitive(m.op).cost(m, m.inputs, m.attrs) for m in u.members if m not in constish)
        u.ops = sum(1 for m in u.members if m not in constish)
        u.block = block_of.get(u.owner)
        u.last_fwd = u.pos
        deps = {unit_of[owner[i]] for i in u.owner.inputs if owner[i] in unit_of}
        u.deps = sorted(deps)
    for c, u in enumerate(units):
        for d in u.deps:
            units[d].consumers.append(c)
    for n in fwd:
        for i in n.inputs:
            if owner[i] in unit_of:
                u = units[unit_of[owner[i]]]
                u.last_fwd = max(u.last_fwd, fstep[n])
    for n in bwd:
        for i in n.inputs:
            if owner[i] in unit_of:
                u = units[unit_of[owner[i]]]
                u.readers.append(bstep[n])
                if i in fwd_set:
                    u.direct.append(bstep[n])

    # dominance: a unit no backward node reads, whose buffer one keepable unit alone reads and that is
    # no larger, is never worth keeping: keeping that reader instead holds no more bytes at any step
    # (the reader's buffer replaces it from the step producing the reader on) and recomputes less
    for u in units:
        if u.keepable and not u.readers and len(u.consumers) == 1:
            c = units[u.consumers[0]]
            if c.keepable and 0 < c.fbytes <= u.fbytes and c.rbytes <= u.rbytes:
                u.keepable = False
                u.dominated = True

    # groups each unit may be recomputed in: its first direct need, or a group a consumer may be in,
    # never after its first direct need (consumers come later in forward order: walk backwards)
    for u in reversed(units):
        first = min(u.direct, default=math.inf)
        dom = set(u.direct) | {g for c in u.consumers for g in units[c].domain}
        u.domain = sorted(g for g in dom if g <= first)

    fixed_f = [0] * (len(fwd) + 1)
    for u in units:
        if u.fbytes:
            fixed_f[u.pos] += u.fbytes
            fixed_f[u.last_fwd + 1] -= u.fbytes
    fixed_f = list(np.cumsum(fixed_f)[:-1]) if fwd else []
    m = len(bwd)
    fixed_b, fixed_gap = [0] * (m + 1), [0] * (m + 1)
    ends = {}
    for n in bwd:
        if owner[n] is n and n.op != "const" and n.ndim and n not in out_owner:
            ends[n] = bstep[n]
    for n in bwd:
        for i in n.inputs:
            if owner[i] in ends:
                ends[owner[i]] = max(ends[owner[i]], bstep[n])
    for b, end in ends.items():
        fixed_b[bstep[b]] += b.nbytes
        fixed_b[end + 1] -= b.nbytes
        if end > bstep[b]:
            fixed_gap[bstep[b] + 1] += b.nbytes
            fixed_gap[end + 1] -= b.nbytes
    fixed_b = [int(x) for x in np.cumsum(fixed_b)[:-1]]
    fixed_gap = [int(x) for x in np.cumsum(fixed_gap)[:-1]]
    return Timeline(units, free, len(fwd), m, [int(x) for x in fixed_f], fixed_b, fixed_gap)


def keep_of_saved(tl: Timeline, saved) -> set[int]:
    """The units a saved set keeps (the inverse of plan_from_keep, for plans made elsewhere)."""
    saved = set(saved) if saved is not None else {m for u in tl.units for m in u.saveable}
    return {i for i, u in enumerate(tl.units) if u.keepable and any(m in saved for m in u.saveable)}


def plan_from_keep(tl: Timeline, keep) -> frozenset[Value]:
    """The saved set of a unit-level choice: every candidate member of each kept unit, and the free
    candidates (views of inputs)."""
    saved = set(tl.free)
    for i in keep:
        saved.update(tl.units[i].saveable)
    return frozenset(saved)


def prune(tl: Timeline, bound: float = math.inf, budget: float = math.inf):
    """Drop recompute groups no plan within `bound` flops and `budget` bytes uses. Recomputing u in
    group g means recomputing, in g, a chain of its readers down to one the backward reads at g: the
    chain alone may cost more than `bound`, or the members still read at or after backward step g
    (alive there, each its own buffer) may not fit beside that step's fixed bytes."""
    units = tl.units
    chain: list[dict[int, float]] = [{} for _ in units]
    held: list[dict[int, float]] = [{} for _ in units]
    for i in reversed(range(len(units))):
        u = units[i]
        direct, last = set(u.direct), max(u.readers, default=-1)
        for g in u.domain:
            rest = [c for c in u.consumers if g in chain[c]]
            chain[i][g] = u.cost + (0 if g in direct else min((chain[c][g] for c in rest), default=math.inf))
            held[i][g] = (u.rbytes if last >= g else 0) + (0 if g in direct else min((held[c][g] for c in rest),
                                                                                        default=math.inf))
        u.domain = [g for g in u.domain if chain[i][g] <= bound and tl.fixed_b[g] + held[i][g] <= budget]
        chain[i] = {g: chain[i][g] for g in u.domain}
        held[i] = {g: held[i][g] for g in u.domain}
    for u in units:  # a reader can only be recomputed where its unkeepable input can, at or before
        for d in u.deps:
            if not units[d].keepable:
                first = min(units[d].domain, default=math.inf)
                u.domain = [g for g in u.domain if g >= first]
        if follows(u):
            c = units[u.consumers[0]]
            c.domain = [g for g in c.domain if g in set(u.domain)]


def follows(u: Unit) -> bool:
    """u is recomputed exactly when its only reader is, in the same group: it cannot be kept and
    no backward node reads it."""
    return not u.keepable and not u.readers and len(u.consumers) == 1
