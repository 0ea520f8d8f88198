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

The pieces: timeline.py (units, the fixed timeline, the exact reductions), model.py (the MILP and its
solve), this module (the policy: incumbent, LP bound, local search, the solve loop, and the budget sweep).
"""

from __future__ import annotations

import itertools
import math
import time
import warnings
from dataclasses import dataclass

from gradir.core.errors import BudgetError
from gradir.core.ir import Graph
from gradir.core.primitive import get_primitive
from gradir.core.trace import user_source
from gradir.passes.memory import plan_memory
from gradir.passes.partition import partition
from gradir.passes.remat.base import RematPlan, blocks, plan_none, plan_selective, plan_uniform
from gradir.passes.remat.mincut import plan_mincut
from gradir.passes.remat.model import Model
from gradir.passes.remat.report import RematReport, evaluate
from gradir.passes.remat.timeline import Timeline, analyse, keep_of_saved, plan_from_keep, prune
from gradir.passes.report import human_bytes

EPS = 1e-6        # relative: plans this close in flops are one to HiGHS's tolerances (a gap this small is optimal)
MAX_VARS = 60_000  # recompute variables x[u, g] above which the MILP is not attempted
_prune = prune     # the name benchmarks/bench_remat.py uses


# -- the policy -----------------------------------------------------------------------------------------


def measure(joint: Graph, saved) -> tuple[int, int]:
    """(activation peak, recompute flops) of the plan keeping `saved`: what `remat.evaluate` reports,
    computed the same way (partition, stitch, plan_memory without the program's results) without its
    block statistics, to screen many plans quickly."""
    part = partition(joint, saved=saved)
    graph, order, phases = part.stitch()
    peak = plan_memory(graph, order, phases, count_outputs=False, layout=False).peak_bytes
    return peak, sum(get_primitive(v.op).cost(v, v.inputs, v.attrs) for v in part.recomputed)


def heuristic_plans(joint: Graph) -> list[RematPlan]:
    """The heuristics the optimal plan is compared with and falls back to: none, uniform with a range
    of segment counts (every count up to 16 blocks, else 2, 3, 4, 6, ~sqrt(n), ~2 sqrt(n), n),
    selective, mincut (without and with matmuls forbidden)."""
    n = len(blocks(joint))
    root = max(1, round(math.sqrt(n)))
    counts = range(1, n + 1) if n <= 16 else sorted({s for s in (2, 3, 4, 6, root, 2 * root, n) if s <= n})
    out = [plan_none(joint)]
    out += [plan_uniform(joint, segments=s) for s in counts]
    out += [plan_selective(joint), plan_mincut(joint), plan_mincut(joint, forbid=("matmul",))]
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
        return RematPlan("optimal", plan_none(joint).saved,
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
    prune(tl, best.flops if best is not None else math.inf, budget)
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


def least_peak_plan(joint: Graph, time_limit: float = 20.0, max_vars: int = MAX_VARS, model: Model | None = None,
                    pool: list[Candidate] | None = None) -> Candidate:
    """The plan of least verified activation peak among the MILP's least-peak plan (proven least when
    HiGHS finishes in time) and the heuristics: its peak is the least budget `plan_optimal` accepts."""
    pool = pool if pool is not None else screen(joint, heuristic_plans(joint))
    found = list(pool)
    if model is None:
        tl = analyse(joint)
        prune(tl, budget=min(c.peak for c in pool))  # the least peak is no more than the heuristics'
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
