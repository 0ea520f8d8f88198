"""Memory timelines (matplotlib, no display needed): live bytes per step over forward and backward.

`memory_timeline({"engine": plan_a, "memory": plan_b}, "out/mem.svg")` draws one column per plan:
on top the live bytes at each step of the plan's timeline (the backward phase shaded, its start
marked, the peak marked and labelled); below, the saved tensors as spans, i.e. the buffers the
forward phase allocates that stay alive into the backward phase, from the step that makes each
one to the last step that reads it. The columns share their y axis so plans compare at a glance.
Timelines longer than MAX_POINTS steps are drawn as their maximum per bin of steps, so the file
stays small at any length and the peak is kept; labels stay inside the axes and apart.

matplotlib is imported by the functions that draw, so importing gradir (whose GradTrace renders
through gradir.viz) does not load it.
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gradir.core.errors import GradirError
from gradir.passes.report import human_bytes
from gradir.util.fileio import write_atomic

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FORMATS = ("svg", "png", "pdf")
MAX_SPANS = 40  # saved-tensor rows drawn per plan; the rest are summarised in the panel title
MAX_POINTS = 600  # steps drawn per plan; longer timelines are drawn as their per-bin maximum
HEADROOM = 1.4  # y axis top over the highest peak: room for the peak label below the phase labels
FORWARD, BACKWARD = "forward", "backward"


def backward_start(plan) -> int | None:
    """The first step of the backward phase of a stitched timeline (None: no phases recorded)."""
    return next((t for t, p in enumerate(plan.phases) if p == BACKWARD), None)


def saved_spans(plan) -> list:
    """Buffers allocated in the forward phase and alive into the backward one (what backward keeps)."""
    start = backward_start(plan)
    if start is None:
        return []
    return [b for b in plan.buffers if b.phase == FORWARD and b.end >= start]


def _bytes_axis(ax, top: int):
    """Ticks at round binary sizes (256 B, 1 KiB, 1.5 MiB...), at most about six of them."""
    from matplotlib.ticker import FuncFormatter, MultipleLocator

    unit = 1
    while top >= 1024 * unit and unit < 1024 ** 3:
        unit *= 1024
    step = next((s for s in (0.125, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) if top / (unit * s) <= 6), 1024)
    ax.yaxis.set_major_locator(MultipleLocator(max(1.0, unit * step)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: human_bytes(int(y)) if y >= 0 else ""))


def envelope(live: list[int], limit: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(steps, live bytes) to draw: every step up to `limit` steps, else the maximum over `limit`
    equal bins of consecutive steps (the peak survives; the SVG stays small at any length)."""
    y = np.asarray(live, dtype=np.float64)
    n = len(y)
    if n <= limit:
        return np.arange(n, dtype=np.float64), y
    width = math.ceil(n / limit)
    bins = math.ceil(n / width)
    padded = np.full(bins * width, -np.inf)
    padded[:n] = y
    xs = np.arange(bins) * width + (width - 1) / 2
    return np.minimum(xs, n - 1), padded.reshape(bins, width).max(axis=1)


def _span_label(b) -> str:
    # the timeline graph numbers values differently from the forward graph: name by op and place
    v = b.value
    where = "/".join(v.scope) if v.scope else (v.source or "")
    return f"{v.op} {where} {human_bytes(b.nbytes)}".replace("  ", " ")


def _draw(ax_live, ax_spans, name: str, plan, panel: int = 0, buckets=None):
    steps = list(range(len(plan.live_bytes)))
    start = backward_start(plan)
    if buckets is not None and start is not None:  # each bucket's all-reduce launch, at its backward step
        for b in buckets.buckets:
            x = start + b.launch_step
            ax_live.axvline(x, color="#15803d", lw=1, ls=":")
            ax_live.annotate(f"b{b.index}", (x, 0), xytext=(2, 2), textcoords="offset points", fontsize=7,
                             color="#15803d", gid=f"bucket{b.index}-{panel}")
    if start is not None:
        for ax in (ax_live, ax_spans):
            ax.axvspan(start - 0.5, len(steps) - 0.5, color="#fee2e2", alpha=0.6, lw=0)
            ax.axvline(start - 0.5, color="#b91c1c", lw=1, ls="--")
        # in the top corners, each phase's own side: they cannot meet however narrow a phase is
        ax_live.text(0.01, 0.98, "forward", transform=ax_live.transAxes, color="#1d4ed8", va="top", ha="left",
                     fontsize=8, gid=f"phase-forward{panel}")
        ax_live.text(0.99, 0.98, "backward (shaded)", transform=ax_live.transAxes, color="#b91c1c", va="top",
                     ha="right", fontsize=8, gid=f"phase-backward{panel}")
    xs, ys = envelope(plan.live_bytes)
    ax_live.step(xs, ys, where="mid", color="#1f2937", lw=1.5)
    ax_live.fill_between(xs, ys, step="mid", color="#93c5fd", alpha=0.5)
    if steps:
        ax_live.plot([plan.peak_step], [plan.peak_bytes], "v", color="#dc2626", ms=8, zorder=5)
        at = plan.peak_step / max(len(steps) - 1, 1)  # near an edge, the label extends inwards only
        ha, dx = ("left", 2) if at < 0.25 else ("right", -2) if at > 0.75 else ("center", 0)
        where = plan.where(plan.peak_step)  # "backward step 18": the step as the printed plans number it
        ax_live.annotate(f"peak {human_bytes(plan.peak_bytes)} ({where})", (plan.peak_step, plan.peak_bytes),
                         xytext=(dx, 8), textcoords="offset points", ha=ha, fontsize=8, color="#dc2626", gid=f"peak{panel}")
    # two lines: side by side panels leave each title half the figure's width
    ax_live.set_title(f"{name}\npeak {human_bytes(plan.peak_bytes)}, lower bound {human_bytes(plan.lower_bound_bytes)}",
                      fontsize=9)
    ax_live.set_ylabel("live bytes")
    if not plan.buffers:
        ax_live.text(0.5, 0.5, "no buffers counted\n(0-d values, inputs and constants are not)", ha="center",
                     va="center", transform=ax_live.transAxes, fontsize=8, color="#6b7280")

    spans = saved_spans(plan)
    shown = sorted(spans, key=lambda b: (b.start, b.end))[:MAX_SPANS]
    for row, b in enumerate(shown):
        ax_spans.broken_barh([(b.start - 0.4, b.end - b.start + 0.8)], (row - 0.4, 0.8), color="#f59e0b", alpha=0.85)
    ax_spans.set_yticks(range(len(shown)))
    ax_spans.set_yticklabels([_span_label(b) for b in shown], fontsize=6)
    ax_spans.set_ylim(len(shown) - 0.5 if shown else 0.5, -0.5)
    more = f", {len(spans) - len(shown)} more not drawn" if len(spans) > len(shown) else ""
    ax_spans.set_title(f"saved for backward: {len(spans)} buffers, {human_bytes(sum(b.nbytes for b in spans))}{more}",
                       fontsize=8)
    ax_spans.set_xlabel("step: forward, then backward (from 0 at the dashed line)" if start is not None else "step")
    ax_spans.set_xlim(-0.5, max(len(steps), 1) - 0.5)


RC = {"svg.hashsalt": "gradir", "svg.fonttype": "none", "font.size": 8}


def memory_timeline_figure(plans: dict, title: str | None = None, buckets=None) -> Figure:
    """The matplotlib Figure `memory_timeline` saves (call it under `rc_context(RC)`)."""
    from matplotlib.figure import Figure

    if not plans:
        raise GradirError("memory_timeline needs at least one memory plan", op="memory_timeline")
    n = len(plans)
    rows = max(max(len(saved_spans(p)) for p in plans.values()), 1)
    span_height = 0.6 + 0.13 * min(rows, MAX_SPANS)
    fig = Figure(figsize=(max(5.0, 4.6 * n), 3.0 + span_height), layout="constrained")
    grid = fig.add_gridspec(2, n, height_ratios=[3.0, span_height])
    first = None
    for k, (name, plan) in enumerate(plans.items()):
        ax_live = fig.add_subplot(grid[0, k], sharey=first)
        ax_spans = fig.add_subplot(grid[1, k], sharex=ax_live)
        first = first or ax_live
        _draw(ax_live, ax_spans, name, plan, k, buckets)
    top = max(1, *(p.peak_bytes for p in plans.values()))
    first.set_ylim(0, top * HEADROOM)
    _bytes_axis(first, top)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def memory_timeline_bytes(plans: dict, fmt: str = "svg", title: str | None = None, buckets=None) -> bytes:
    """The plot of `memory_timeline`, as bytes in format `fmt` (svg, png or pdf)."""
    from matplotlib import rc_context

    if fmt not in FORMATS:
        raise GradirError(f"unknown plot format {fmt!r} (have: {', '.join(FORMATS)})", op="memory_timeline")
    with rc_context(RC):
        fig = memory_timeline_figure(plans, title, buckets)
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, metadata={"Date": None} if fmt in ("svg", "pdf") else None, dpi=110)
    return buf.getvalue()


def memory_timeline(plans: dict, path: str | os.PathLike, title: str | None = None, buckets=None) -> Path:
    """Plot live bytes per step for each memory plan (`passes.memory.MemoryPlan`, e.g. a
    GradTrace's `.memory` under several policies), side by side, with the phase boundary, the peak
    and the saved tensors' spans; with `buckets` (a `passes.buckets.BucketPlan` of the backward), a
    dotted line where each bucket's all-reduce can launch. Writes SVG, PNG or PDF by `path`'s
    extension, atomically, and returns the path."""
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower() or "svg"
    return write_atomic(path, memory_timeline_bytes(plans, fmt, title, buckets))


def tradeoff_curve(rows, path: str | os.PathLike, title: str | None = None) -> Path:
    """The memory/recompute trade-off: each heuristic plan as a point (its activation peak, its
    recompute flops) and the optimal plan per budget as a step curve. `rows` are objects with
    `policy`, `budget`, `peak_bytes` and `recompute_flops` (gradir.passes.remat.milp.SweepRow). Writes
    SVG, PNG or PDF by the path's extension, atomically."""
    from matplotlib import rc_context
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    path = Path(path)
    fmt = path.suffix.lstrip(".").lower() or "svg"
    if fmt not in FORMATS:
        raise GradirError(f"unknown plot format {fmt!r} (have: {', '.join(FORMATS)})", op="tradeoff_curve")
    done = [r for r in rows if r.peak_bytes is not None and r.recompute_flops is not None]
    optimal = sorted({(r.budget, r.recompute_flops) for r in done if r.policy == "optimal"})
    points: dict[tuple, list[str]] = {}  # plans at the same point share one label
    for r in done:
        if r.policy != "optimal":
            names = points.setdefault((r.peak_bytes, r.recompute_flops), [])
            if r.policy not in names:
                names.append(r.policy)
    with rc_context(RC):
        fig = Figure(figsize=(6.5, 4.0), layout="constrained")
        ax = fig.add_subplot()
        if optimal:
            ax.step([b for b, _ in optimal], [f for _, f in optimal], where="post", color="#1f6feb",
                    label="optimal (MILP) within the budget")
        for (peak, flops), names in sorted(points.items()):
            ax.plot([peak], [flops], "o", color="#d97706")
            ax.annotate(", ".join(names), (peak, flops), textcoords="offset points", xytext=(4, 4), fontsize=7,
                        ha="right" if peak > 0.8 * max(p for p, _ in points) else "left")
        ax.plot([], [], "o", color="#d97706", label="heuristic plans (at their own peak)")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: human_bytes(int(v))))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1e6:.0f}M"))
        ax.set_xlabel("activation peak / memory budget")
        ax.set_ylabel("recompute flops")
        ax.legend(loc="center right")
        ax.set_title(title or "memory / recompute trade-off")
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, metadata={"Date": None} if fmt in ("svg", "pdf") else None, dpi=110)
    return write_atomic(path, buf.getvalue())
