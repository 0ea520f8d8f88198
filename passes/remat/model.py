"""The recompute MILP of one timeline (gradir.passes.remat.timeline): its variables (keep K, recompute x,
liveness), the rows that make x follow partition's placement and bound the live bytes at every step, and
the solve by scipy.optimize.milp (HiGHS, imported when solving: scipy's solver loads slowly). The model
itself is described in gradir.passes.remat.milp's docstring; milp.py decides what to solve and verifies it.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from gradir.passes.remat.timeline import Timeline, follows

SHOW_LOG = False   # print HiGHS's log (debugging)


class Model:
    """Variables and constraints of the recompute MILP for one timeline (see gradir.passes.remat.milp's
    docstring).

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
            if follows(u) and u.domain == tl.units[u.consumers[0]].domain:
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
        right-hand side of 1, where HiGHS's tolerances (1e-7) are far below milp.EPS. At most 0 (the
        incumbent recomputes one cscale: only a plan recomputing nothing is cheaper): flops <= 0."""
        scale = at_most if at_most > 0 else 1.0
        row: dict[int, float] = {}
        for (i, _), v in self.X.items():
            row[v] = row.get(v, 0) + self.tl.units[i].cost / scale
        return row, -math.inf, 1.0 if at_most > 0 else 0.0

    def keep_of(self, val: np.ndarray) -> list[int]:
        """The units a solution keeps."""
        return [i for i, v in self.K.items() if val[v] > 0.5]
