"""One HTML report per run, and the diagram and plot files beside it, bounded at any graph size.

`write_report(grad_trace, "out", "loss")` writes, each file atomically:

    loss.forward.dot / .svg    the forward program node by node (repeated scopes one box each, each
                               expandable in the HTML into its own diagram); over LARGE_GRAPH values, an
                               overview by scope or source line instead, plus one
                               loss.forward.<region>.dot/.svg per region (at most MAX_REGIONS;
                               regions over REGION_DETAIL values run-length collapsed)
    loss.forward.kernels.*     (programs drawn node by node) the fused kernels the LLVM backend runs
    loss.backward.*            the same for the backward program, with schedule steps
    loss.joint.dot / .svg      both, with the saved tensors as the edges between them
    loss.memory.svg            live bytes per step: engine vs memory policy (and no remat vs the
                               trace's recompute plan, if it has one)
    loss.forward.ir, ...       (programs over IR_LINES lines) the whole IR text
    loss.html                  the report: diagrams inline (nothing fetched) up to INLINE_BYTES of
                               SVG, further region diagrams linked; the schedule player (player.py)
                               and the repeated scopes' expanding boxes (expand.py), the page's two
                               small inline scripts; the IR and the schedule, saved-tensor, memory
                               and recompute tables, long ones shown by their first and last rows
                               with a line saying what is left out
    loss.manifest.json         the files this run wrote (gradir.util.outfolder: a rerun replaces them)

A diagram `dot` cannot draw within `graphs.dot_timeout()` seconds is replaced by a smaller,
collapsed one; the report's notes and the figure's caption say which and why. Without the `dot`
program the `.dot` sources and the HTML are still written; the HTML says how to install Graphviz.
"""

from __future__ import annotations

import dataclasses
import html
import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import graphviz

from gradir.passes import partition
from gradir.passes.report import human_bytes
from gradir.passes.text_table import shown
from gradir.util.outfolder import OutputFolder
from gradir.viz import expand, graphs, joint, player, plots, regions

Progress = Callable[[str, int, int], None]  # (what is being done, steps done, steps in all)

INLINE_BYTES = 2_000_000  # diagram SVG inlined in the HTML at most; further region diagrams are linked
IR_LINES = 300            # IR lines shown per program; a longer program's text goes to NAME.<side>.ir
TABLE_ROWS = 400          # rows shown per table: the first and last ones (and the memory peak's)
SMALLER_BOXES = 30        # boxes in the collapsed diagram that replaces one `dot` could not draw

CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif; margin: 1.5rem; color: #111827; }
h1 { font-size: 1.5rem; } h2 { border-bottom: 1px solid #e5e7eb; padding-bottom: .2rem; margin-top: 2rem; }
nav a { margin-right: 1rem; }
pre { background: #f9fafb; border: 1px solid #e5e7eb; padding: .6rem; overflow-x: auto; font-size: 12px; }
table { border-collapse: collapse; font-size: 12px; margin: .5rem 0 1rem; }
th, td { border: 1px solid #e5e7eb; padding: 2px 6px; text-align: left; vertical-align: top; }
th { background: #f3f4f6; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.peak td { font-weight: bold; background: #fef2f2; } tr.gap td { color: #6b7280; font-style: italic; }
figure { margin: 0 0 1.5rem; } figcaption { font-size: 12px; color: #4b5563; }
.plot svg { max-width: 100%; height: auto; }
.diagram { overflow: auto; max-height: 90vh; border: 1px solid #e5e7eb; padding: .3rem; }
.diagram svg { max-width: 100%; height: auto; }
.zoom { margin-left: 1rem; } .zoom:checked ~ .diagram svg { max-width: none; }
.note { background: #fffbeb; border: 1px solid #f59e0b; padding: .5rem .8rem; }
.summary td:first-child { font-weight: bold; }
"""


class Written(dict):
    """What `write_report` wrote: {key: Path} (keys such as "forward.svg", "html"), plus `notes`
    (messages for the user: why a diagram was not drawn or was drawn collapsed), `diagrams_drawn`
    and `manifest` (the run's manifest file)."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.notes: list[str] = []
        self.diagrams_drawn = True
        self.manifest: Path | None = None


# -- HTML pieces -------------------------------------------------------------------------------------


_STRIP = [re.compile(p, re.S) for p in (r"<\?xml.*?\?>", r"<!DOCTYPE.*?>", r"<!--.*?-->", r"<metadata>.*?</metadata>")]


def inline_svg(svg: str, prefix: str) -> str:
    """An SVG document made fit to inline in HTML: no XML declaration, doctype (it names a URL),
    comments or metadata, and every id prefixed so several SVGs on one page do not collide."""
    for pat in _STRIP:
        svg = pat.sub("", svg)
    svg = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{prefix}{m.group(1)}"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{prefix}{m.group(1)})", svg)
    svg = re.sub(r'href="#([^"]+)"', lambda m: f'href="#{prefix}{m.group(1)}"', svg)
    return svg.strip()


class LazyRows:
    """`n` table rows, each made by `make(k)` only if the table shows it."""

    def __init__(self, n: int, make: Callable[[int], list]):
        self.n, self.make = n, make

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, k: int) -> list:
        return self.make(k)


def html_table(columns: list[str], rows, numeric: set[str] = frozenset(), highlight: int | None = None,
               caption: str | None = None, limit: int | None = None, keep=(), more: str = "") -> str:
    """A plain HTML table of `rows` (a list, or LazyRows; cells escaped; columns named in `numeric`
    right-aligned; row `highlight` in bold). With `limit`, the first and last rows (and those in `keep`) and a line per gap saying
    how many rows are not shown and `more`."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    num, peak = ' class="num"', ' class="peak"'
    body = []
    picked = shown(len(rows), limit, keep)
    for pos, k in enumerate(picked):
        if k is None:
            left_out = picked[pos + 1] - picked[pos - 1] - 1
            body.append(f'<tr class="gap"><td colspan="{len(columns)}">… {left_out:,} rows not shown'
                        f"{html.escape(more)}</td></tr>")
            continue
        cells = "".join(f"<td{num if c in numeric else ''}>{html.escape('' if x is None else str(x))}</td>"
                        for c, x in zip(columns, rows[k]))
        body.append(f"<tr{peak if k == highlight else ''}>{cells}</tr>")
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def schedule_table(schedule, limit: int | None = TABLE_ROWS) -> str:
    d = schedule.to_dict()
    rows = [[s["step"], s["node"], s["op"], ", ".join(f"{x['node']}->{x['count']}" for x in s["decremented"]),
             ", ".join(s["queue"]) + (f", ... (+{s['queue_size'] - len(s['queue'])})" if s["queue_size"] > len(s["queue"])
                                      else ""),
             human_bytes(s["freed_bytes"]) if s["freed_bytes"] else "", s["source"] or ""] for s in d["steps"]]
    cap = f"{d['graph']}: {d['policy']} policy, {d['num_steps']} steps" + (f" ({d['note']})" if d["note"] else "")
    return html_table(["step", "runs", "op", "counts decremented", "ready queue after", "frees", "source"], rows,
                      {"step", "frees"}, caption=cap, limit=limit, more=" (gradir schedule FILE lists every step)")


def saved_table(saved, limit: int | None = TABLE_ROWS) -> str:
    entries = saved.entries

    def row(k: int) -> list:
        if k == len(entries):
            return ["total", "", "", human_bytes(saved.total_bytes), human_bytes(saved.bytes), "", "", "", ""]
        e = entries[k].to_dict()
        kind = f"view of {e['view_of']}" if e["kind"] == "view" else e["kind"]
        shape = ",".join(map(str, e["shape"]))
        producer = e["producer"]["op"] + (f" ({e['producer']['source']})" if e["producer"].get("source") else "")
        needed = "; ".join(n["text"] for n in e["needed_by"]) or "read by backward directly"
        readers = ", ".join(f"{r['value']} {r['op']}" for r in e["readers"]) or "(returned)"
        return [e["name"], f"{e['dtype']}[{shape}]", kind, human_bytes(e["bytes"]), human_bytes(e["new_bytes"]),
                producer, needed, readers, "-" if e["last_use"] is None else e["last_use"]]
    return html_table(["value", "type", "kind", "bytes", "new", "producer", "needed by", "backward readers", "last use"],
                      LazyRows(len(entries) + 1, row), {"bytes", "new", "last use"}, limit=limit,
                      more=" (saved.to_dict() lists them all)",
                      caption=f"{saved.count} saved values, {human_bytes(saved.bytes)} new memory")


def memory_tables(plans: dict, limit: int | None = TABLE_ROWS) -> str:
    summary = [[name, human_bytes(p.peak_bytes), p.where(p.peak_step) if p.order else "", human_bytes(p.lower_bound_bytes),
                human_bytes(p.arena_bytes), f"{p.fragmentation:.1%}", len(p.order)] for name, p in plans.items()]
    out = [html_table(["plan", "peak", "peak at", "lower bound", "arena", "fragmentation", "steps"], summary,
                      {"peak", "lower bound", "arena", "fragmentation", "steps"}, caption="memory plans")]
    name, plan = next(iter(plans.items()))
    d = plan.to_dict()
    rows = [[s["phase_step"], s["phase"], s["node"], s["op"], human_bytes(s["live_bytes"])] for s in d["steps"]]
    around = range(plan.peak_step - 10, plan.peak_step + 11)
    out.append(html_table(["step", "phase", "runs", "op", "live"], rows, {"step", "live"}, highlight=plan.peak_step,
                          caption=f"timeline of {d['graph']} ({name}); peak row in bold", limit=limit, keep=around,
                          more=" (gradir memory FILE lists every step)"))
    return "\n".join(out)


def remat_table(remat) -> str:
    d = remat.to_dict()
    opts = ", ".join(f"{k}={v}" for k, v in d["options"].items())
    rows = [[d["policy"] + (f" ({opts})" if opts else ""), d["saved_count"], human_bytes(d["saved_bytes"]),
             d["recomputed_ops"], f"{d['recompute_flops']:,}", d["block_calls"], human_bytes(d["peak_bytes"]), d["note"]]]
    return html_table(["policy", "saved", "saved bytes", "recomputed ops", "recompute flops", "block calls",
                       "activation peak", "note"], rows,
                      {"saved", "saved bytes", "recomputed ops", "recompute flops", "block calls", "activation peak"},
                      caption="recompute plan")


def _pre(text: str) -> str:
    return f"<pre>{html.escape(text)}</pre>"


def ir_html(graph, full_text: str | None = None, limit: int = IR_LINES) -> str:
    """The program's IR in a <pre>; a longer one by its first and last lines, saying where the rest
    is (`full_text`: the HTML naming the file that holds it)."""
    text = graph.to_text()
    lines = text.splitlines()
    if len(lines) <= limit:
        return _pre(text)
    head, tail = lines[:limit * 2 // 3], lines[-(limit // 3):]
    where = full_text or f"<code>print(j.{'backward' if 'backward' in graph.name else 'forward'})</code> prints it"
    return (_pre("\n".join(head)) + f'<p class="note">… {len(lines) - len(head) - len(tail):,} lines not shown; '
            f"the whole program: {where}.</p>" + _pre("\n".join(tail)))


# -- memory plans to compare -------------------------------------------------------------------------


def memory_plans(grad_trace) -> dict:
    """The memory plans the report plots: the trace under the engine and memory policies, and, if
    the trace follows a recompute plan, the same without recomputation (engine policy)."""
    policy = grad_trace.remat.plan.policy
    remat = policy != "none"
    tag = f"{policy} remat, " if remat else ""
    plans = {}
    if remat:
        plain = dataclasses.replace(grad_trace, partition=partition(grad_trace.joint), plan=None, policy="engine")
        plans["no remat, engine"] = plain.memory
    for p in ("engine", "memory"):
        plans[f"{tag}{p} policy"] = grad_trace.memory if grad_trace.policy == p else grad_trace.with_policy(p).memory
    return plans


# -- diagrams: what is drawn, and drawing it in bounded time -----------------------------------------


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "group"


@dataclasses.dataclass
class Figure:
    """One diagram of the report: its file key, caption, diagram, the smaller collapsed diagram that
    replaces it when `dot` cannot draw it in time, whether it is a region (linked, not inlined,
    once the report's inline budget is spent), and the details its repeated-scope boxes expand
    into: (key, name, the scope's own diagram) each (gradir.viz.expand)."""

    key: str
    caption: str
    diagram: graphviz.Digraph
    smaller: Callable[[], graphviz.Digraph] | None = None
    region: bool = False
    details: list[tuple[str, str, graphviz.Digraph]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Drawn:
    figure: Figure
    rendered: graphs.Rendered
    replaced: str = ""  # why the smaller diagram was drawn instead of the figure's own
    details: list[tuple[str, str, graphs.Rendered]] = dataclasses.field(default_factory=list)


def scope_details(info: regions.Info) -> list[tuple[str, str, graphviz.Digraph]]:
    """Each repeated scope of `info.graph` (the boxes of its node-by-node diagrams) drawn alone, node
    by node, with the values it reads from elsewhere: (key, name, diagram) each."""
    graph = info.graph
    boxes = graphs.repeated_scopes(graph, info.users)
    keys = graphs.scope_keys(graph, boxes)
    return [(keys[name], f"{name}: {len(vs):,} values, node by node",
             regions.region_diagram(info, name, vs, collapse=False, title=f"{graph.name}: scope {name}, node by node"))
            for name, vs in boxes.items()]


def _program_figures(side: str, graph, sched, kernels, output_names=None) -> list[Figure]:
    info = regions.Info(graph, sched)
    if not regions.is_large(graph):
        steps = " (schedule step · initial dependency count)" if sched else ""
        out = [Figure(side, f"{side} program{steps}", graphs.graph_diagram(
            graph, schedule=sched, saved_from=None if sched else graph.num_forward_outputs, output_names=output_names),
            lambda: regions.collapsed_diagram(graph, schedule=sched, max_boxes=SMALLER_BOXES),
            details=scope_details(info))]
        return out + [Figure(f"{side}.kernels", f"{side} program as the {len(kernels.kernels)} fused kernels the "
                             "LLVM backend runs", graphs.kernel_diagram(kernels))]
    parts = regions.regions(graph, info=info)
    out = [Figure(side, f"{side} program (overview: {len(graph.nodes):,} nodes by scope or source line; "
                        f"{len(parts)} regions drawn below)", regions.overview_diagram(graph, info=info),
                  lambda: regions.overview_diagram(graph, max_boxes=SMALLER_BOXES, info=info))]
    keys: set[str] = set()
    for name, vs in parts.items():
        key = f"{side}.{_safe(name)}"
        while key in keys:
            key += "_"
        keys.add(key)
        how = "run-length collapsed" if len(vs) > regions.REGION_DETAIL else "node by node"
        out.append(Figure(key, f"{side} region {name}: {len(vs):,} values, {how}", regions.region_diagram(info, name, vs),
                          lambda vs=vs, name=name: regions.region_diagram(info, name, vs, collapse=True,
                                                                          max_boxes=SMALLER_BOXES), region=True))
    return out


def _diagrams(grad_trace) -> list[Figure]:
    """Everything drawn: per program a detailed diagram (and its kernels), or for a large one its
    overview and one diagram per region; then the joint diagram."""
    out = []
    for side, graph, sched, names in (("forward", grad_trace.forward, None, None),
                                      ("backward", grad_trace.backward, grad_trace.schedule, grad_trace.gradient_names)):
        out += _program_figures(side, graph, sched, None if regions.is_large(graph) else grad_trace.kernels[side], names)
    out.append(Figure("joint", f"forward and backward: {grad_trace.saved.count} saved tensors as the orange edges",
                      joint.joint_diagram(grad_trace),
                      lambda: joint.joint_diagram(grad_trace, collapse=True, max_boxes=SMALLER_BOXES)))
    return out


def draw(fig: Figure) -> Drawn:
    """Run `dot` on the figure's diagram; if it fails or runs out of time, on its smaller one."""
    first = graphs.render_svg(fig.diagram)
    if first.svg is not None or fig.smaller is None or not graphs.dot_available():
        return Drawn(fig, first, details=[(key, name, graphs.render_svg(dg)) for key, name, dg in fig.details]
                     if first.svg is not None else [])
    small = fig.smaller()
    why = f"{first.error} on the detailed diagram ({regions.dot_nodes(fig.diagram):,} nodes)"
    second = graphs.render_svg(small)
    if second.svg is None:
        return Drawn(fig, graphs.Rendered(None, f"{why}, and {second.error} on a collapsed one"))
    return Drawn(fig, second, f"{why}; drawn collapsed instead ({regions.dot_nodes(small):,} nodes)")


def draw_all(figures: list[Figure], each: Callable[[Drawn], None] | None = None) -> list[Drawn]:
    """Draw the figures, several `dot` processes at once; `each` is called on each in order. An
    interrupt cancels the diagrams not started."""
    pool = ThreadPoolExecutor(max(1, min(8, os.cpu_count() or 1, len(figures))))
    out = []
    try:
        for drawn in pool.map(draw, figures):
            out.append(drawn)
            if each is not None:
                each(drawn)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return out


def _inlined(drawn: list[Drawn], budget: int = INLINE_BYTES) -> set[int]:
    """Which drawn figures the page holds inline: every overview, program and joint diagram (their
    size is bounded), then regions in order while the SVG inlined stays within `budget` bytes."""
    keep, used = set(), 0
    for k in sorted(range(len(drawn)), key=lambda k: drawn[k].figure.region):
        svg = drawn[k].rendered.svg
        if svg is not None and (not drawn[k].figure.region or used + len(svg) <= budget):
            keep.add(k)
            used += len(svg)
    return keep


def figure_html(d: Drawn, inline: bool, file: str | None = None) -> str:
    """A <figure>: the SVG inline (scaled to the page, with an "actual size" switch), a link to
    its file, or a note saying why it was not drawn; after it, inline, the details its
    repeated-scope boxes expand into (gradir.viz.expand)."""
    key = html.escape(_safe(d.figure.key))
    caption = html.escape(d.figure.caption)
    if d.replaced:
        caption += f' <b>(drawn collapsed: {html.escape(d.replaced)})</b>'
    svg = d.rendered.svg
    if svg is not None and inline:
        body = (f'<input type="checkbox" class="zoom" id="zoom-{key}"><label for="zoom-{key}">actual size</label>'
                f'<div class="diagram">{inline_svg(svg, key + "-")}</div>')

    elif svg is not None:
        link = (f'<a href="{html.escape(file)}">{html.escape(file)}</a>' if file
                else "<code>j.render(path)</code> writes it")
        body = (f'<p>Not inlined: this page holds at most {human_bytes(INLINE_BYTES)} of diagrams. '
                f"Opened at full size: {link} ({human_bytes(len(svg))}).</p>")
    else:
        src = html.escape(file.removesuffix(".svg")) if file else "its source"
        body = (f'<p class="note">Diagram not drawn: {html.escape(d.rendered.error)}. Its Graphviz source is '
                f"<code>{src}.dot</code> (render it with <code>dot -Tsvg {src}.dot -o {src}.svg</code>).</p>")
    # the scopes its boxes expand into: beside the figure, which holds its one diagram
    details = expand.details_html([(k, name, None if r.svg is None else inline_svg(r.svg, f"{key}-detail{i}-"), r.error)
                                   for i, (k, name, r) in enumerate(d.details)]) if svg is not None and inline else ""
    return f'<figure id="fig-{key}"><figcaption>{caption}</figcaption>{body}</figure>{details}'


def _note(d: Drawn, file: str) -> str | None:
    """What the user is told about one figure: why it was drawn collapsed, or not at all."""
    if d.replaced:
        return f"{file}: {d.replaced}"
    if d.rendered.svg is None:
        return d.rendered.error if not graphs.dot_available() else f"{file} not drawn: {d.rendered.error}"
    return None


# -- the report --------------------------------------------------------------------------------------


def write_report(grad_trace, out_dir: str | os.PathLike, name: str, *, progress: Progress | None = None,
                 files: OutputFolder | None = None) -> Written:
    """Write the diagrams (`.dot` always, `.svg` when the `dot` program runs), the memory plot and
    one HTML report for `grad_trace` (a GradTrace) into `out_dir`, each atomically, through `files`
    (default: a gradir.util.outfolder.OutputFolder of `name`, whose manifest lists them and whose next
    run replaces them). Returns {key: path} ("forward.dot", "forward.svg", ..., "memory.svg",
    "html") with `notes`. `progress(description, done, total)` is called before each step. Never
    raises for a missing or failing `dot`; the HTML then says how to install Graphviz."""
    own = files is None
    if own:
        files = OutputFolder(out_dir, name, {"function": grad_trace.graph.name})
    try:
        written = _write(grad_trace, name, files, progress)
    except BaseException:
        if own:
            files.finish("interrupted")
        raise
    if own:
        files.finish()
    return written


def _write(grad_trace, name: str, files: OutputFolder, progress: Progress | None) -> Written:
    written = Written()
    written.manifest = files.manifest
    if progress is not None:
        progress("laying out diagrams", 0, 1)
    figures = _diagrams(grad_trace)
    files.expect([f"{name}.{f.key}.{ext}" for ext in ("dot", "svg") for f in figures]
                 + [f"{name}.memory.svg", f"{name}.html"])
    total, done = len(figures) + 2, 0

    def tick(what: str):
        nonlocal done
        if progress is not None:
            progress(what, done, total)
        done += 1

    for f in figures:
        written[f"{f.key}.dot"] = files.write(f"{name}.{f.key}.dot", f.diagram.source)

    def record(d: Drawn):
        tick(f"drawing {d.figure.key}")
        file = f"{name}.{d.figure.key}.svg"
        if d.rendered.svg is not None:
            written[f"{d.figure.key}.svg"] = files.write(file, d.rendered.svg)
        else:
            written.diagrams_drawn = False
        note = _note(d, file)
        if note and note not in written.notes:
            written.notes.append(note)
    drawn = draw_all(figures, record)

    tick("plotting memory")
    plans = memory_plans(grad_trace)
    plot_svg = plots.memory_timeline_bytes(plans, "svg", title=f"{grad_trace.graph.name}: live bytes per step").decode()
    written["memory.svg"] = files.write(f"{name}.memory.svg", plot_svg)

    tick("writing the HTML report")
    inline = _inlined(drawn)
    figs = [figure_html(d, k in inline, f"{name}.{d.figure.key}.svg") for k, d in enumerate(drawn)]
    ir = {}
    for side, graph in (("forward", grad_trace.forward), ("backward", grad_trace.backward)):
        file = f"{name}.{side}.ir"
        if len(graph.inputs) + len(graph.nodes) + 3 > IR_LINES:
            written[f"{side}.ir"] = files.write(file, graph.to_text(full=True) + "\n")
        ir[side] = ir_html(graph, f'<a href="{html.escape(file)}">{html.escape(file)}</a>')
    page = report_html(grad_trace, name, figs, plot_svg, plans, written.notes, ir)
    written["html"] = files.write(f"{name}.html", page)
    if progress is not None:
        progress("done", total, total)
    return written


def _summary(gt) -> str:
    saved, mem = gt.saved, gt.memory
    rows = [["function", gt.graph.name],
            ["forward", f"{len(gt.forward.inputs)} inputs, {len(gt.forward.nodes)} nodes"],
            ["backward", f"{len(gt.backward.inputs)} inputs, {len(gt.backward.nodes)} nodes, {gt.schedule.policy} schedule"],
            ["saved for backward", f"{saved.count} values, {human_bytes(saved.bytes)} new memory "
                                   f"({human_bytes(saved.total_bytes)} read)"],
            ["peak", f"{human_bytes(mem.peak_bytes)} at {mem.where(mem.peak_step)}" if mem.order else "nothing runs"],
            ["recompute", gt.remat.plan.policy]]
    return "<table class=\"summary\"><tbody>" + "".join(
        f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td></tr>" for a, b in rows) + "</tbody></table>"


def report_body(gt, figures: list[str], plot_svg: str | None, plans: dict, notes: list[str] = (),
                ir: dict[str, str] | None = None) -> str:
    """The report's content (no <html>/<head>): usable inline in a notebook too. `figures` are
    `figure_html` pieces; `ir` the IR sections by side (default: `ir_html` of each program)."""
    parts = [_summary(gt)]
    if notes:
        items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
        parts.append(f'<div class="note"><b>Diagram notes.</b><ul>{items}</ul>'
                     "Every diagram's <code>.dot</code> source is written beside this report; render one with "
                     "<code>dot -Tsvg FILE.dot -o FILE.svg</code> (Graphviz: <code>apt-get install graphviz</code>)."
                     "</div>")
    parts.append('<nav><a href="#diagrams">diagrams</a><a href="#player">step through the backward</a>'
                 '<a href="#memory">memory</a><a href="#ir">IR</a><a href="#schedule">schedule</a>'
                 '<a href="#saved">saved tensors</a></nav>')
    parts.append('<h2 id="diagrams">Diagrams</h2>')
    # the player right under the backward diagram it highlights in (after the figures if there is none)
    under = next((i + 1 for i, f in enumerate(figures) if f.startswith('<figure id="fig-backward">')), len(figures))
    parts += figures[:under]
    parts.append('<h3 id="player-section">Step through the backward</h3>' + player.player_html(gt))
    parts += figures[under:]
    parts.append(f"<script>{expand.SCRIPT}</script>")  # (after the figures: it finds their boxes and details)
    parts.append('<h2 id="memory">Memory</h2>')
    if plot_svg:
        parts.append(f'<figure id="fig-memory"><div class="plot">{inline_svg(plot_svg, "memory-")}</div>'
                     "<figcaption>live bytes per step, forward then backward (shaded); the saved tensors as spans "
                     "below</figcaption></figure>")
    parts.append(memory_tables(plans))
    parts.append(remat_table(gt.remat))
    ir = ir or {side: ir_html(g) for side, g in (("forward", gt.forward), ("backward", gt.backward))}
    parts.append('<h2 id="ir">IR</h2><h3>forward</h3>' + ir["forward"] + "<h3>backward</h3>" + ir["backward"])
    parts.append('<h2 id="schedule">Backward schedule</h2>' + schedule_table(gt.schedule))
    parts.append('<h2 id="saved">Saved tensors</h2>' + saved_table(gt.saved))
    return "\n".join(parts)


def report_html(gt, name: str, figures: list[str], plot_svg: str | None, plans: dict, notes: list[str] = (),
                ir: dict[str, str] | None = None) -> str:
    """The whole HTML document: inline CSS, SVG and the player's script, nothing fetched (links to the
    region diagrams and IR files beside it are followed only when clicked)."""
    title = f"gradir report: {name}"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{CSS}{player.CSS}{expand.CSS}</style></head><body>"
            f"<h1>{html.escape(title)}</h1>\n{report_body(gt, figures, plot_svg, plans, notes, ir)}\n</body></html>\n")
