"""The ``optimal`` recompute policy: the plan recomputing the fewest flops whose activation peak fits a
memory budget, by a mixed-integer program (scipy.optimize.milp, HiGHS).

The model follows what `partition(joint, saved=S)` builds and `remat.evaluate` measures:

- Units. Views own no memory (passes.aliasing): a forward value and its forward views are one unit,
  kept or recomputed together, costing its owner's buffer. Views of inputs and constants are free
  and always kept. Units that are not `remat.candidates` (inside gr.checkpoint regions,
  constant-only) cannot be kept.
- Variables: K[u] = 1 keeps unit u; x[u, g] = 1 recomputes it in the group of nodes partition places
  right before backward node g. The backward's own nodes keep their joint order; a recomputed unit
  lands before its first need, transitively: the earliest of its direct backward readers and the
  groups of the recomputed units that read it. Constraints make x follow that rule exactly, so K
  decides x.
- Memory: the stitched forward+backward timeline under `plan_memory(..., count_outputs=False)`'s
  rule (a buffer lives from its step through the last step reading it or a view of it; inputs,
  constants, 0-d values and results not counted), at every forward step, backward step and possible
  recompute step (recomputed nodes inside a group in forward order): live bytes <= budget. A unit
  the backward reads is alive, kept or recomputed, from its start through its last reader, K + the
  x started so far (linear, no variables of its own); a unit recomputed exactly with its one reader
  lives from its step to that reader's; any other unit's liveness is propagated backwards over its
  events (see `Model`). Live bytes are running sums, L[p] >= L[p-1] + what starts or ends at p:
  O(variables) nonzeros, where one dense row per step (the first formulation) had O(steps x units),
  4.2 million at 48 blocks, and presolve alone took longer than the solve.
- Objective: recompute flops (`Primitive.cost`, as `evaluate` reports), then as tie-breaks blocks
  recomputed (fewer block calls) and recomputed ops, folded into one integral objective.

Exact reductions keep it small: a unit no backward node reads, read by one keepable unit no larger
than itself, is never worth keeping (keeping its reader holds no more bytes at any step and
recomputes less); an unkeepable unit with one reader and no backward reader shares its reader's
variables (recomputed exactly with it); a recompute group is dropped for a unit when the chain of
readers it forces into that group costs more than the best heuristic plan within budget, or when
that chain's buffers still alive at the group's backward step do not fit the budget beside that
step's fixed bytes (this bounds chains by the budget: O(blocks x budget) variables, not O(blocks^2)).

Solving, within `time_limit` seconds: the cheapest heuristic plan within budget is the incumbent.
The LP relaxation (interior point) gives a lower bound on every plan's flops; if the incumbent is
within `mip_rel_gap` of it, done. Else a local search (LP rounding, then keep-one-more and swap
moves, each verified by `measure`) improves the incumbent, and the MILP looks only for plans
strictly cheaper than it; finding none proves the incumbent's bound. Every plan reports its time
limit, solve time, proven gap and lower bound (options and note); a plan without a proven gap (MILP
not attempted above `max_vars` recompute variables, or stopped before any bound) warns
(PlannerWarning). On TEACHING.md E's model: 48 blocks proven optimal in ~12-20 s, 120 in ~25-50 s
(benchmarks/remat.md). A budget below the least peak the planner reaches (a MILP minimising the
peak, and the heuristics) raises BudgetError stating it. memory_budget=None recomputes nothing.

Exactness: partition runs each recompute group in forward order, as the model assumes, so the
model's peak and flops are `evaluate`'s for any saved set. Each solution is still verified with
`evaluate`'s computation, as a guard: over budget, the model's budget would be lowered by the excess
and it solved again (the plan then has no proven gap).
"""

from __future__ import annotations

import itertools
import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from gradir.errors import BudgetError
from gradir.ir import Graph, Value
from gradir.passes.aliasing import owners
from gradir.passes.partition import const_only, forward_values
from gradir.passes.remat import RematPlan, RematReport, blocks, candidates, evaluate, plan_remat
from gradir.passes.report import human_bytes
from gradir.primitive import get_primitive
from gradir.trace import user_source

SHOW_LOG = False   # print HiGHS's log (debugging)
EPS = 1e-6        # relative: plans this close in flops are one to HiGHS's tolerances (a gap this small is optimal)
MAX_VARS = 60_000  # recompute variables x[u, g] above which the MILP is not attempted


# -- the timeline facts the model is built on ------------------------------------------------------


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
    """Units, backward steps and the fixed part of the memory timeline of `joint` (see the module
    docstring)."""
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


# -- the mixed-integer program ------------------------------------------------------------------------


class Model:
    """Variables and constraints of the recompute MILP for one timeline (see the module docstring).

    Liveness is propagated backwards in time, unit by unit, over the points where something happens
    to it (a step of the group that may recompute it, a reader): E[k] (alive at its k-th event) >=
    the event's demand (a reader running there, or its own recomputation), G[k] (alive in the gap
    after event k) >= E[k+1] - (recomputed at event k+1), E[k] >= G[k]; the gap before the first
    event, G0, is the forward buffer kept into the backward. This is the tight form of "alive from
    its start through its last reader"; indicators are continuous and only ever counted against the
    budget, so they take their least values where it binds.
    Live bytes are running sums (`_memory_rows`): L at a point >= L at the point before plus what
    changes there, so the model has O(events) nonzeros, not one dense row of every live unit per point.
    Memory rows are kept apart as {L variable (None: nothing variable): bytes fixed}, meaning
    fixed + L * scale <= budget."""

    def __init__(self, tl: Timeline):
        self.tl = tl
        self.n = 0
        self.binary: list[bool] = []
        self.ub: list[float] = []
        self.K: dict[int, int] = {}
        self.X: dict[tuple[int, int], int] = {}
        self.rows: list[tuple[dict[int, float], float, float]] = []
        self.lower: list[tuple[int, dict[int, float], float]] = []  # var >= const + sum: in order of evaluation
        self.mem: dict[int | None, int] = {}
        self.cscale = math.gcd(*[u.cost for u in tl.units if u.cost]) or 1  # flops per unit of objective
        sizes = [b for u in tl.units for b in (u.fbytes, u.rbytes)] + [*tl.fixed_f, *tl.fixed_b, *tl.fixed_gap]
        self.scale = math.gcd(*[int(b) for b in sizes if b]) or 1  # bytes per unit of L
        self.alias: dict[int, int] = {}  # unit -> the reader whose recompute variables it shares
        self.xs: list[list[tuple[int, int]]] = [[] for _ in tl.units]  # per unit: (group, var), by group
        for i, u in reversed(list(enumerate(tl.units))):
            if u.keepable:
                self.K[i] = self._var(True)
            if _follows(u) and u.domain == tl.units[u.consumers[0]].domain:
                # recomputed exactly when its one reader is, in the same group: share its variables
                self.alias[i] = u.consumers[0]
            for g in u.domain:
                self.X[i, g] = v = self.X[self.alias[i], g] if i in self.alias else self._var(True)
                self.xs[i].append((g, v))
        self._plan_rows()
        self._points()
        self._liveness()
        self._memory_rows()

    def _var(self, binary: bool, ub: float = 1) -> int:
        self.binary.append(binary)
        self.ub.append(ub)
        self.n += 1
        return self.n - 1

    def _x(self, i: int, lo=-math.inf, hi=math.inf) -> tuple[int, ...]:
        """Unit i's recompute variables for groups in [lo, hi]."""
        return tuple(v for g, v in self.xs[i] if lo <= g <= hi)

    def _plan_rows(self):
        """x follows partition's placement rule, given K."""
        units = self.tl.units
        for i, u in enumerate(units):
            k = {self.K[i]: 1} if i in self.K else {}
            if i in self.alias:
                continue  # its rows are its reader's
            self.rows.append((k | dict.fromkeys(self._x(i), 1), 0, 1))          # kept or recomputed, once
            if u.direct:
                self.rows.append((k | dict.fromkeys(self._x(i), 1), 1, 1))      # backward reads it
            for c in u.consumers:                                                # a recomputed reader needs it
                for g, xc in self.xs[c]:                                         # no later than itself
                    self.rows.append((k | dict.fromkeys(self._x(i, hi=g), 1) | {xc: -1}, 0, math.inf))
            direct = set(u.direct)
            for g, xu in self.xs[i]:                                             # and no earlier than the
                if g not in direct:                                              # first who needs it
                    row = {xu: 1}
                    for c in u.consumers:
                        row.update(dict.fromkeys(self._x(c, g, g), -1))
                    self.rows.append((row, -math.inf, 0))

    def _points(self):
        """The backward timeline's points: for each backward node j, the steps of the group that may
        run before it (one per unit that may be recomputed there, in forward order), then j itself."""
        units = self.tl.units
        group: dict[int, list[int]] = {}
        for i, u in enumerate(units):
            for g in u.domain:
                group.setdefault(g, []).append(i)
        self.points: list[tuple[int, int | None]] = []  # (backward node, unit recomputed or None)
        self.point_of: dict[tuple[int, int | None], int] = {}
        for j in range(self.tl.n_backward):
            for i in sorted(group.get(j, ()), key=lambda i: units[i].pos):
                self.point_of[j, i] = len(self.points)
                self.points.append((j, i))
            self.point_of[j, None] = len(self.points)
            self.points.append((j, None))

    def _last_read(self, i: int) -> int | None:
        """The point of unit i's last backward reader if its buffer, kept or recomputed, lives exactly
        up to it: the backward reads it (so it is kept or recomputed), no recomputed reader can come
        later, and the kept copy counts as much as a recomputed one. Else None."""
        u = self.tl.units[i]
        if not u.direct or u.fbytes != u.rbytes:
            return None
        last = self.point_of[max(u.readers), None]
        if any(self.point_of[g, c] > last for c in u.consumers for g, _ in self.xs[c]):
            return None
        return last

    def _liveness(self):
        """Per unit with a buffer: whether it is alive at each point. Most units need no variables of
        their own: one the backward reads (`_last_read`) is alive from its start (forward, or its
        recompute step) through its last reader, K + x started so far; one recomputed exactly with its
        only reader (`alias`) is alive from its step through that reader's. Any other gets events (its
        possible starts and reads) and E/G variables propagated backwards over them."""
        units = self.tl.units
        self.last: dict[int, int] = {}      # units alive through their last reader's point
        self.events: list[list[int]] = []   # per unit: points where it starts or is read, in order
        self.E: list[list[int]] = []
        self.G: list[list[int]] = []
        self.G0: list[int | None] = []      # alive before its first event (the kept forward copy)
        for i, u in enumerate(units):
            demand: dict[int, dict[int, float]] = {}
            start: dict[int, int] = {}
            last = self._last_read(i) if u.rbytes or u.fbytes else None
            if last is not None:
                self.last[i] = last
            elif (u.rbytes or u.fbytes) and i not in self.alias:
                for g, xv in self.xs[i]:
                    start[self.point_of[g, i]] = xv
                for j in u.readers:
                    demand[self.point_of[j, None]] = {}  # a backward node reads it: alive, kept or not
                for c in u.consumers:
                    for g, xc in self.xs[c]:
                        demand.setdefault(self.point_of[g, c], {xc: 1})
            ev = sorted(set(start) | set(demand))
            E, G = [0] * len(ev), [0] * len(ev)
            nxt_alive, nxt_start = None, None
            for k in reversed(range(len(ev))):
                p = ev[k]
                G[k] = g = self._var(False)
                if nxt_alive is not None:  # alive in the gap if alive at the next event and not started there
                    self.lower.append((g, {nxt_alive: 1} | ({nxt_start: -1} if nxt_start is not None else {}), 0))
                E[k] = e = self._var(False)
                self.lower.append((e, {g: 1}, 0))
                if p in start:
                    self.lower.append((e, {start[p]: 1}, 0))
                if p in demand:
                    self.lower.append((e, demand[p], 0 if demand[p] else 1))
                nxt_alive, nxt_start = e, start.get(p)
            g0 = None
            if ev:
                g0 = self._var(False, ub=1 if i in self.K else 0)
                self.lower.append((g0, {nxt_alive: 1} | ({nxt_start: -1} if nxt_start is not None else {}), 0))
            self.events.append(ev)
            self.E.append(E)
            self.G.append(G)
            self.G0.append(g0)

    def _memory_rows(self):
        """Running sums of live bytes, in units of `scale` bytes. Forward step s: kept buffers past
        their last forward reader (a G0 joins at last_fwd + 1 and stays). Backward point p: every unit's
        state variable changes only at its events and right after them, so L[p] >= L[p-1]
        plus, per unit changing there, bytes * (new state - old state). Telescoping, L[p] is at least
        the live bytes of the states whatever values they take, and equal at the least solution; a
        state only ever raises L, so the states still take their least values where memory binds."""
        tl, units, scale = self.tl, self.tl.units, self.scale
        joins: dict[int, dict[int, float]] = {}
        for i, u in enumerate(units):
            kept = self.K.get(i) if i in self.last else self.G0[i]
            if kept is not None and u.fbytes and u.last_fwd + 1 < tl.n_forward:
                joins.setdefault(u.last_fwd + 1, {})[kept] = u.fbytes / scale
        prev = None
        for s in range(tl.n_forward):
            if s in joins:
                prev = self._running_sum(prev, joins[s])
            self._add_mem(tl.fixed_f[s], prev)
        change: list[dict[int, float]] = [{} for _ in self.points]

        def moves(p: int, old: int | None, old_bytes: int, new: int, new_bytes: int):
            if p < len(change):
                row = change[p]
                if old is not None and old_bytes:
                    row[old] = row.get(old, 0) - old_bytes / scale
                if new_bytes:
                    row[new] = row.get(new, 0) + new_bytes / scale
        for i, last in self.last.items():  # alive = K + x started so far, through the last reader
            u, both = units[i], ([self.K[i]] if i in self.K else []) + [v for _, v in self.xs[i]]
            if i in self.K:
                moves(0, None, 0, self.K[i], u.rbytes)
            for g, v in self.xs[i]:
                moves(self.point_of[g, i], None, 0, v, u.rbytes)
            for v in both:
                moves(last + 1, v, u.rbytes, v, 0)
        for i, c in self.alias.items():  # alive from its step through its reader's, in the same group
            for g, v in self.xs[i]:
                moves(self.point_of[g, i], None, 0, v, units[i].rbytes)
                moves(self.point_of[g, c] + 1, v, units[i].rbytes, v, 0)
        for i, u in enumerate(units):
            ev = self.events[i]
            for k, p in enumerate(ev):
                if k == 0:
                    moves(0, None, 0, self.G0[i], u.fbytes)  # before the first event: the kept forward buffer
                    moves(p, self.G0[i], u.fbytes, self.E[i][0], u.rbytes)
                else:
                    moves(p, self.G[i][k - 1], u.rbytes, self.E[i][k], u.rbytes)
                if k + 1 == len(ev) or ev[k + 1] != p + 1:
                    moves(p + 1, self.E[i][k], u.rbytes, self.G[i][k], u.rbytes)
        prev = None
        for p, (j, i) in enumerate(self.points):
            if change[p]:
                prev = self._running_sum(prev, change[p])
            if i is None or units[i].rbytes:  # a step allocating nothing is never above the step before it
                self._add_mem(tl.fixed_b[j] if i is None else tl.fixed_gap[j], prev)

    def _running_sum(self, prev: int | None, delta: dict[int, float]) -> int:
        """A new running-sum variable: >= prev + delta."""
        total = self._var(False, ub=math.inf)
        self.lower.append((total, ({prev: 1} if prev is not None else {}) | delta, 0))
        return total

    def _add_mem(self, fixed: int, total: int | None):
        self.mem[total] = max(self.mem.get(total, 0), int(fixed))

    # -- evaluating an assignment ------------------------------------------------------------------

    def assignment(self, keep) -> np.ndarray:
        """The values of every variable for the plan keeping units `keep`: x by partition's rule,
        liveness at its least."""
        keep, units = set(keep), self.tl.units
        val = np.zeros(self.n)
        group: dict[int, int] = {}
        for i in reversed(range(len(units))):
            if i in keep:
                val[self.K[i]] = 1
                continue
            needs = list(units[i].direct) + [group[c] for c in units[i].consumers if c in group]
            if needs:
                group[i] = min(needs)
                val[self.X[i, group[i]]] = 1
        return self.fill(val)

    def fill(self, val: np.ndarray) -> np.ndarray:
        """Liveness variables at their least, given the binaries."""
        val = val.copy()
        low = np.zeros(self.n, dtype=bool)
        for v, _, _ in self.lower:
            if not low[v]:
                val[v], low[v] = 0.0, True
        for v, coefs, const in self.lower:
            val[v] = max(val[v], const + sum(c * val[w] for w, c in coefs.items()))
        return val

    def peak(self, val: np.ndarray) -> int:
        """The model's activation peak of an assignment."""
        return max(fixed + (0 if v is None else round(val[v] * self.scale)) for v, fixed in self.mem.items())

    # -- solving ---------------------------------------------------------------------------------------

    def solve(self, budget: int | None, time_limit: float, objective: str = "flops", extra_rows=(),
              mip_rel_gap: float = 0.0, relax: bool = False):
        """scipy.optimize.milp under `objective`: "flops" (recompute flops), "ties" (blocks recomputed,
        then recomputed ops: the tie-break among equally cheap plans, with a row fixing the flops in
        `extra_rows`) or "peak" (the least peak; `budget` unused). HiGHS stops at `time_limit`
        seconds or once its gap is at most `mip_rel_gap`; `relax`: the LP relaxation (no integers).
        Returns (scipy result, values or None: the values only of an integral solve)."""
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import coo_matrix

        units, scale, cscale = self.tl.units, self.scale, self.cscale
        minimize_peak = objective == "peak"
        nblocks = max((u.block + 1 for u in units if u.block is not None), default=0) if objective == "ties" else 0
        n = self.n + (1 if minimize_peak else nblocks)
        obj = np.zeros(n)
        if minimize_peak:
            obj[-1] = 1
        elif objective == "ties":  # a block recomputed outweighs every op
            mid = sum(u.ops for u in units) + 1
            for (i, _), v in self.X.items():
                obj[v] += units[i].ops
            obj[self.n:] = mid
        else:
            for (i, _), v in self.X.items():
                obj[v] += units[i].cost // cscale
        blocked = [(i, u.block) for i, u in enumerate(units) if u.block is not None] if nblocks else []
        rows, cols, data, lo, hi = [], [], [], [], []

        def add(coefs, a, b):
            r = len(lo)
            for v, c in coefs.items():
                rows.append(r)
                cols.append(v)
                data.append(c)
            lo.append(a)
            hi.append(b)

        for coefs, a, b in [*self.rows, *extra_rows]:
            add(coefs, a, b)
        for i, b in blocked:  # block b is recomputed if one of its units is
            if self._x(i):
                add({self.n + b: 1} | dict.fromkeys(self._x(i), -1), 0, math.inf)
        for v, coefs, const in self.lower:
            add({v: 1} | {w: -c for w, c in coefs.items()}, const, math.inf)
        for v, fixed in self.mem.items():
            coefs = {} if v is None else {v: 1}
            if minimize_peak:
                add(coefs | {n - 1: -1}, -math.inf, -fixed / scale)
            else:
                add(coefs, -math.inf, math.floor(budget / scale) - fixed / scale)
        A = coo_matrix((data, (rows, cols)), shape=(len(lo), n)).tocsr()
        integrality = np.array([1 if b else 0 for b in self.binary] + [1 if minimize_peak else 0] * (n - self.n))
        if relax:
            integrality[:] = 0
        ub = np.array(self.ub + [1.0] * (n - self.n))
        if minimize_peak:
            ub[-1] = np.inf  # the peak, in whole units of `scale` bytes
        options = {"time_limit": max(0.1, time_limit), "mip_rel_gap": mip_rel_gap, "presolve": True, "disp": SHOW_LOG,
                   "mip_detect_symmetry": False}  # symmetry detection: seconds on these models, no gain
        if relax:  # interior point without crossover: its optimum (to 1e-8) is all a bound needs, 5x faster
            options |= {"solver": "ipm", "run_crossover": "off"}
        with warnings.catch_warnings():  # scipy passes options it does not know on to HiGHS, with a warning
            warnings.simplefilter("ignore", RuntimeWarning)
            res = milp(obj, constraints=LinearConstraint(A, lo, hi), integrality=integrality, bounds=Bounds(0, ub),
                       options=options)
        if res.x is None or relax:
            return res, None
        binary = np.array(self.binary, dtype=bool)  # bool even when empty: a plan may have no binaries at all
        val = np.where(binary, np.round(res.x[:self.n]), res.x[:self.n])
        return res, self.fill(val)

    def lower_bound(self, res) -> float | None:
        """The least recompute flops HiGHS proved in a "flops" solve, MILP or LP relaxation (inf:
        infeasible; None: no bound, as scipy reports none for a MILP stopped before a solution)."""
        if res.status == 2:
            return math.inf
        bound = getattr(res, "mip_dual_bound", None)
        if bound is None and res.status == 0:
            bound = res.fun  # an LP: its optimum
        if bound is None or not math.isfinite(bound):
            return None
        return max(0.0, bound * self.cscale)

    def cost_row(self, at_most: float) -> tuple[dict[int, float], float, float]:
        """The row: recompute flops <= `at_most`, divided by it: coefficients of at most 1 and a
        right-hand side of 1, where HiGHS's tolerances (1e-7) are far below EPS. At most 0 (the
        incumbent recomputes one cscale: only a plan recomputing nothing is cheaper): flops <= 0."""
        scale = at_most if at_most > 0 else 1.0
        row: dict[int, float] = {}
        for (i, _), v in self.X.items():
            row[v] = row.get(v, 0) + self.tl.units[i].cost / scale
        return row, -math.inf, 1.0 if at_most > 0 else 0.0

    def keep_of(self, val: np.ndarray) -> list[int]:
        """The units a solution keeps."""
        return [i for i, v in self.K.items() if val[v] > 0.5]


# -- the policy -----------------------------------------------------------------------------------------


def measure(joint: Graph, saved) -> tuple[int, int]:
    """(activation peak, recompute flops) of the plan keeping `saved`: what `remat.evaluate` reports,
    computed the same way (partition, stitch, plan_memory without the program's results) without its
    block statistics, to screen many plans quickly."""
    from gradir.passes.memory import plan_memory
    from gradir.passes.partition import partition

    part = partition(joint, saved=saved)
    graph, order, phases = part.stitch()
    peak = plan_memory(graph, order, phases, count_outputs=False, layout=False).peak_bytes
    return peak, sum(get_primitive(v.op).cost(v, v.inputs, v.attrs) for v in part.recomputed)


def heuristic_plans(joint: Graph) -> list[RematPlan]:
    """The heuristics the optimal plan is compared with and falls back to: none, uniform with a range
    of segment counts (every count up to 16 blocks, else 2, 3, 4, 6, ~sqrt(n), ~2 sqrt(n), n),
    selective, mincut (without and with matmuls forbidden)."""
    from gradir.passes.mincut import plan_mincut

    n = len(blocks(joint))
    root = max(1, round(math.sqrt(n)))
    counts = range(1, n + 1) if n <= 16 else sorted({s for s in (2, 3, 4, 6, root, 2 * root, n) if s <= n})
    out = [plan_remat(joint, "none")]
    out += [plan_remat(joint, "uniform", segments=s) for s in counts]
    out += [plan_remat(joint, "selective"), plan_mincut(joint), plan_mincut(joint, forbid=("matmul",))]
    return out


def label(plan: RematPlan) -> str:
    """A short name for a plan: its policy and the option that sets it apart."""
    o = plan.options
    if plan.policy == "uniform":
        return f"uniform-{o['segments']}"
    if plan.policy == "mincut" and o.get("forbid"):
        return f"mincut(forbid {','.join(o['forbid'])})"
    return plan.policy


@dataclass
class Candidate:
    plan: RematPlan
    peak: int
    flops: int


def screen(joint: Graph, plans: list[RematPlan]) -> list[Candidate]:
    """Each plan with its measured peak and flops."""
    return [Candidate(p, *measure(joint, p.saved)) for p in plans]


class PlannerWarning(UserWarning):
    """The optimal recompute planner could not prove a gap: its plan is a heuristic's, or a plan no
    bound was proved for (the plan's note and options say which)."""


def plan_optimal(joint: Graph, memory_budget: int | None = None, time_limit: float = 20.0, max_vars: int = MAX_VARS,
                 heuristics: list[Candidate] | None = None, ties_limit: float = 5.0,
                 mip_rel_gap: float = 0.0) -> RematPlan:
    """The plan recomputing the fewest flops whose activation peak (`evaluate(...).peak_bytes`) is at
    most `memory_budget` bytes, by a MILP solved within `time_limit` seconds (see the module
    docstring), stopping early once the proved gap is at most `mip_rel_gap`.

    The cheapest heuristic plan within budget is the incumbent: the MILP looks for a strictly cheaper
    plan, so a run that ends at the time limit still returns a plan no worse than every heuristic.
    Every plan reports, in its options and note, the time limit, the solve time and the proven gap
    (flops over the proven lower bound, `lower_bound_flops`); `optimal` is True when the gap is 0.
    When no gap is proven (the MILP not attempted, or no bound within the time limit) a
    PlannerWarning says so. memory_budget=None: nothing is recomputed (the none plan, optimal).
    Raises BudgetError below the smallest peak the planner reaches. `heuristics`: screened
    heuristic plans, to reuse across budgets (default: `screen(joint, heuristic_plans(joint))`).
    Among plans of the least flops, a second solve of at most `ties_limit` seconds looks for the
    fewest blocks recomputed (block calls), then the fewest recomputed ops."""
    t0 = time.perf_counter()
    if memory_budget is None:
        return RematPlan("optimal", plan_remat(joint, "none").saved,
                         {"memory_budget": None, "time_limit": time_limit, "gap": 0.0, "lower_bound_flops": 0},
                         optimal=True, note="no budget: nothing recomputed (gap 0%)")
    budget = int(memory_budget)
    if budget < 0:
        raise BudgetError(f"memory budget must be a number of bytes >= 0, got {memory_budget!r}", op="remat",
                          source=user_source())
    pool = heuristics if heuristics is not None else screen(joint, heuristic_plans(joint))
    best = min((c for c in pool if c.peak <= budget), key=lambda c: (c.flops, c.peak), default=None)
    options = {"memory_budget": budget, "time_limit": time_limit, "mip_rel_gap": mip_rel_gap}

    def left() -> float:
        return time_limit - (time.perf_counter() - t0)

    def done(saved, flops: int, how: str, lower: float | None, status: str) -> RematPlan:
        """The plan, with its proven gap: (flops - lower bound) / flops, None when unproven."""
        lower = None if lower is None else min(lower, flops)
        gap = None if lower is None else (0.0 if flops - lower < 0.5 else (flops - lower) / flops)
        solve_s = round(time.perf_counter() - t0, 3)
        limits = f"{solve_s:.1f} s of a {time_limit:g} s time limit"
        if gap is None:
            note = f"{how}; no proven gap ({status}; {limits})"
            warnings.warn(f"remat='optimal': {note}", PlannerWarning, stacklevel=3)
        elif gap <= EPS:
            note = f"proven optimal, gap {'0%' if gap == 0 else f'{gap:.4%} (tolerance)'} ({how}; {limits})"
        else:
            note = f"gap {gap:.2%} proven ({how}; {status}; lower bound {lower:,.0f} flops; {limits})"
        return RematPlan("optimal", saved, options | {"solve_s": solve_s, "status": status, "gap": gap,
                                                       "lower_bound_flops": None if lower is None else round(lower)},
                         gap is not None and gap <= EPS, note)

    def no_plan(least: int | None = None):
        least = min([c.peak for c in pool] + ([least] if least is not None else []))
        raise BudgetError(f"memory budget {human_bytes(budget)} ({budget:,} bytes) is below the smallest "
                          f"activation peak this planner can reach, {human_bytes(least)} ({least:,} bytes)",
                          op="remat", source=user_source())

    if best is not None and best.flops == 0:
        return done(best.plan.saved, 0, "nothing recomputed within budget", 0, "no MILP needed")
    incumbent = f"the cheapest heuristic within budget, {label(best.plan)}" if best is not None else ""
    tl = analyse(joint)
    _prune(tl, best.flops if best is not None else math.inf, budget)
    size = sum(len(u.domain) for u in tl.units)
    if size > max_vars:
        if best is None:
            no_plan()
        return done(best.plan.saved, best.flops, incumbent, None, f"MILP not attempted: {size:,} recompute "
                    f"variables > max_vars={max_vars:,}")
    model = Model(tl)
    # the LP relaxation's optimum bounds every plan (scipy gives no bound for a MILP stopped before
    # its first solution); it may already prove the incumbent close enough
    relaxed = model.solve(budget, left(), relax=True)[0]
    lp = model.lower_bound(relaxed)
    lp = lp if lp is not None and math.isfinite(lp) else None
    if best is not None and relaxed.x is not None and (lp is None or best.flops - lp > max(mip_rel_gap, EPS) * best.flops):
        found = improve(joint, tl, model, budget, best, relaxed.x, time.perf_counter() + LOCAL_SHARE * left())
        if found.flops < best.flops:
            best, incumbent = found, "a local search from the LP relaxation and the heuristics"
    if best is not None and lp is not None and best.flops - lp <= max(mip_rel_gap, EPS) * best.flops:
        return _ties(model, joint, best.plan.saved, best.flops, budget, min(ties_limit, left()), done, incumbent,
                     lp, "LP relaxation")
    # the MILP looks only for plans strictly cheaper than the incumbent: by a whole cscale (flops are
    # multiples of it) or, where that is below the tolerances, by EPS; finding none proves as much
    step = max(model.cscale, EPS * best.flops) if best is not None else 0
    cutoff = [model.cost_row(best.flops - step)] if best is not None else []
    target = budget
    for _ in range(3):
        res, val = model.solve(target, left(), extra_rows=cutoff, mip_rel_gap=mip_rel_gap)
        lower = model.lower_bound(res) if target == budget else None  # a lowered budget bounds nothing
        if lower is not None and best is not None:
            lower = min(lower, best.flops - step + model.cscale)  # the incumbent is a plan too
        lower = lp if lower is None else max(lower, lp or 0)
        status = "solved" if res.status == 0 else "infeasible" if res.status == 2 else f"HiGHS: {res.message}"
        if val is None:
            if best is not None:  # no cheaper plan found: the incumbent, with the bound proved
                return _ties(model, joint, best.plan.saved, best.flops, budget, min(ties_limit, left()),
                             done, incumbent, lower, status)
            # the plan of least peak: within budget after all, or the minimum for the error
            least = least_peak_plan(joint, max(1.0, left()), pool=pool)
            if least.peak <= budget:
                return done(least.plan.saved, least.flops, "the MILP's least-peak plan", None, status)
            no_plan(least.peak)
        saved = plan_from_keep(tl, model.keep_of(val))
        peak, flops = measure(joint, saved)
        if peak <= budget:
            if best is not None and best.flops <= flops:  # (a guard: the cutoff row excludes it)
                saved, flops, how = best.plan.saved, best.flops, incumbent
            else:
                how = "the MILP's plan" + ("" if target == budget else ", its budget lowered after verification")
            return _ties(model, joint, saved, flops, target, min(ties_limit, left()), done, how, lower, status)
        target -= peak - target  # the model was optimistic here: ask for the excess back
    if best is None:
        no_plan()
    return done(best.plan.saved, best.flops, incumbent, None, "the model's plans did not verify within budget")


LOCAL_SHARE = 0.4  # of the time left after the LP relaxation, at most, for the local search


def improve(joint: Graph, tl: Timeline, model: Model, budget: int, start: Candidate, lp_values,
            deadline: float) -> Candidate:
    """A cheaper plan within `budget` than `start`, if a short local search over kept units finds
    one (until `deadline`, a perf_counter time): rounding the LP relaxation's keep values at a few
    thresholds, then first-improvement moves from the best plan so far, each verified by `measure`:
    keep one more unit, or keep one unit instead of another (the LP's likeliest and least likely).
    An incumbent this good lets the MILP prove more in its time; the MILP stays the judge."""
    weight = {i: float(lp_values[k]) for i, k in model.K.items()}
    order = sorted(weight, key=lambda i: -weight[i])
    best_keep, best = keep_of_saved(tl, start.plan.saved), start

    def attempt(keep) -> bool:
        nonlocal best_keep, best
        saved = plan_from_keep(tl, keep)
        peak, flops = measure(joint, saved)
        if peak <= budget and flops < best.flops:
            best_keep, best = set(keep), Candidate(RematPlan("optimal", saved), peak, flops)
            return True
        return False

    for theta in (0.9, 0.5, 0.1):
        if time.perf_counter() > deadline:
            return best
        attempt({i for i in order if weight[i] >= theta})
    improved = True
    while improved and time.perf_counter() < deadline:
        improved = False
        for i in order:  # keep one more
            if i not in best_keep and time.perf_counter() < deadline and attempt(best_keep | {i}):
                improved = True
        out = [i for i in order if i not in best_keep][:8]
        kept = sorted(best_keep & set(order), key=lambda i: weight[i])[:8]
        for a, b in itertools.product(kept, out):  # keep b instead of a
            if time.perf_counter() > deadline:
                break
            if a in best_keep and b not in best_keep and attempt((best_keep - {a}) | {b}):
                improved = True
    return best


def _ties(model: Model, joint: Graph, saved, flops: int, budget: int, time_limit: float, done, how: str,
          lower: float | None, status: str) -> RematPlan:
    """`done` with the plan of `flops`, or, when that is proven least, one as cheap with fewer blocks
    recomputed (then fewer recomputed ops) if a brief solve finds it."""
    if lower is not None and flops - lower <= EPS * flops and time_limit > 0.5:
        res, val = model.solve(budget, time_limit, "ties", extra_rows=[model.cost_row(flops)])
        if val is not None:
            tie_saved = plan_from_keep(model.tl, model.keep_of(val))
            tie_peak, tie_flops = measure(joint, tie_saved)
            if tie_peak <= budget and tie_flops <= flops:
                saved, how = tie_saved, how if how.startswith("the MILP") else f"as cheap as {how}"
    return done(saved, flops, how, lower, status)


def _prune(tl: Timeline, bound: float = math.inf, budget: float = math.inf):
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
        if _follows(u):
            c = units[u.consumers[0]]
            c.domain = [g for g in c.domain if g in set(u.domain)]


def _follows(u: Unit) -> bool:
    """u is recomputed exactly when its only reader is, in the same group: it cannot be kept and
    no backward node reads it."""
    return not u.keepable and not u.readers and len(u.consumers) == 1


def least_peak_plan(joint: Graph, time_limit: float = 20.0, max_vars: int = MAX_VARS, model: Model | None = None,
                    pool: list[Candidate] | None = None) -> Candidate:
    """The plan of least verified activation peak among the MILP's least-peak plan (proven least when
    HiGHS finishes in time) and the heuristics: its peak is the least budget `plan_optimal` accepts."""
    pool = pool if pool is not None else screen(joint, heuristic_plans(joint))
    found = list(pool)
    if model is None:
        tl = analyse(joint)
        _prune(tl, budget=min(c.peak for c in pool))  # the least peak is no more than the heuristics'
        if sum(len(u.domain) for u in tl.units) <= max_vars:
            model = Model(tl)
    if model is not None:
        res, val = model.solve(None, time_limit, "peak")
        if val is not None:
            saved = plan_from_keep(model.tl, model.keep_of(val))
            found.append(Candidate(RematPlan("optimal", saved, {"least_peak": True}, res.status == 0,
                                             "least activation peak"), *measure(joint, saved)))
    return min(found, key=lambda c: (c.peak, c.flops))


def min_peak(joint: Graph, time_limit: float = 20.0, max_vars: int = MAX_VARS) -> int:
    """The least budget `plan_optimal` accepts (see least_peak_plan)."""
    return least_peak_plan(joint, time_limit, max_vars).peak


# -- the budget sweep ------------------------------------------------------------------------------------


@dataclass
class SweepRow:
    """One plan at one budget: its verified figures, and whether it fits."""
    budget: int
    policy: str                  # e.g. uniform-6, mincut, optimal
    peak_bytes: int | None       # verified activation peak (None: no plan, see note)
    fits: bool
    saved_count: int | None = None
    saved_bytes: int | None = None
    recompute_flops: int | None = None
    recomputed_ops: int | None = None
    block_calls: int | None = None
    optimal: bool | None = None  # proven optimal (optimal rows)
    solve_s: float | None = None
    note: str = ""


def _row(budget: int, name: str, r: RematReport, **extra) -> SweepRow:
    return SweepRow(budget, name, r.peak_bytes, r.peak_bytes <= budget, r.saved_count, r.saved_bytes, r.recompute_flops,
                    r.recomputed_ops, r.block_calls, **extra)


def sweep(joint: Graph, budgets, plans: list[RematPlan] | None = None, time_limit: float = 20.0) -> list[SweepRow]:
    """The memory/recompute trade-off: for each budget, every heuristic plan (`plans`, default
    `heuristic_plans(joint)`: each evaluated once, flagged whether it fits) and the optimal plan."""
    plans = plans if plans is not None else heuristic_plans(joint)
    reports = [(label(p), evaluate(joint, p)) for p in plans]
    pool = [Candidate(p, r.peak_bytes, r.recompute_flops) for p, (_, r) in zip(plans, reports)]
    rows = []
    for b in budgets:
        b = int(b)
        rows += [_row(b, name, r) for name, r in reports]
        try:
            plan = plan_optimal(joint, b, time_limit, heuristics=pool)
        except BudgetError as e:
            rows.append(SweepRow(b, "optimal", None, False, note=e.detail))
            continue
        rows.append(_row(b, "optimal", evaluate(joint, plan), optimal=plan.optimal, solve_s=plan.options.get("solve_s"),
                         note=plan.note))
    return rows


def sweep_markdown(rows: list[SweepRow]) -> str:
    """The sweep as a Markdown table: per budget, the optimal plan and each heuristic that fits."""
    head = ("| budget | policy | activation peak | saved | saved bytes | recompute flops | recomputed ops | block calls "
            "| proven optimal | solve s |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if r.policy != "optimal" and not r.fits:
            continue
        if r.peak_bytes is None:
            lines.append(f"| {human_bytes(r.budget)} | {r.policy} | - | | | | | | | {r.note} |")
            continue
        opt = "" if r.optimal is None else ("yes" if r.optimal else "no")
        lines.append(f"| {human_bytes(r.budget)} | {r.policy} | {human_bytes(r.peak_bytes)} | {r.saved_count} | "
                     f"{human_bytes(r.saved_bytes)} | {r.recompute_flops:,} | {r.recomputed_ops} | {r.block_calls} | {opt} | "
                     f"{'' if r.solve_s is None else f'{r.solve_s:.2f}'} |")
    return "\n".join(lines) + "\n"


def curve_markdown(rows: list[SweepRow]) -> str:
    """The trade-off curve: per budget, the optimal plan's recompute flops against the cheapest
    heuristic within the budget."""
    lines = ["| budget | optimal: peak | optimal: recompute flops | proven | cheapest heuristic within budget | its flops |",
             "|---|---|---|---|---|---|"]
    for b in dict.fromkeys(r.budget for r in rows):
        at = [r for r in rows if r.budget == b]
        opt = next(r for r in at if r.policy == "optimal")
        fit = [r for r in at if r.policy != "optimal" and r.fits]
        h = min(fit, key=lambda r: (r.recompute_flops, r.peak_bytes), default=None)
        o = ("-", f"({opt.note})", "") if opt.peak_bytes is None else (
            human_bytes(opt.peak_bytes), f"{opt.recompute_flops:,}", "yes" if opt.optimal else "no")
        lines.append(f"| {human_bytes(b)} | {o[0]} | {o[1]} | {o[2]} | {h.policy if h else '(none fits)'} | "
                     f"{f'{h.recompute_flops:,}' if h else '-'} |")
    return "\n".join(lines) + "\n"
