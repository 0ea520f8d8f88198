"""One self-contained HTML report per run, and the diagram and plot files beside it.

`write_report(grad_trace, "out", "loss")` writes, each file atomically:

    loss.forward.dot / .svg    the forward program (large graphs: an overview, plus
                               loss.forward.<group>.dot/.svg per scope or source line)
    loss.backward.dot / .svg   the backward program, with schedule steps and dependency counts
    loss.joint.dot / .svg      both, with the saved tensors as the edges between them
    loss.memory.svg            live bytes per step: engine vs memory policy (and no remat vs the
                               trace's recompute plan, if it has one)
    loss.html                  all of it inline (SVG, no scripts, no network), with the IR text and
                               the schedule, saved-tensor, memory and recompute tables

Without the `dot` program the `.dot` sources and the HTML are still written; the HTML says how to
install Graphviz where the diagrams would be, and the returned mapping's `notes` say so too.
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

from gradir.fileio import write_atomic
from gradir.passes.report import human_bytes
from gradir.viz import graphs, plots

Progress = Callable[[str, int, int], None]  # (what is being done, steps done, steps in all)

CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif; margin: 1.5rem; color: #111827; }
h1 { font-size: 1.5rem; } h2 { border-bottom: 1px solid #e5e7eb; padding-bottom: .2rem; margin-top: 2rem; }
nav a { margin-right: 1rem; }
pre { background: #f9fafb; border: 1px solid #e5e7eb; padding: .6rem; overflow-x: auto; font-size: 12px; }
table { border-collapse: collapse; font-size: 12px; margin: .5rem 0 1rem; }
th, td { border: 1px solid #e5e7eb; padding: 2px 6px; text-align: left; vertical-align: top; }
th { background: #f3f4f6; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.peak td { font-weight: bold; background: #fef2f2; }
figure { margin: 0 0 1.5rem; } figcaption { font-size: 12px; color: #4b5563; }
.plot { overflow: auto; }
.diagram { overflow: auto; max-height: 90vh; border: 1px solid #e5e7eb; padding: .3rem; }
.diagram svg { max-width: none; height: auto; }
.note { background: #fffbeb; border: 1px solid #f59e0b; padding: .5rem .8rem; }
.summary td:first-child { font-weight: bold; }
"""


class Written(dict):
    """What `write_report` wrote: {key: Path} (keys such as "forward.svg", "html"), plus `notes`
    (messages for the user, e.g. why no SVG was drawn) and `diagrams_drawn`."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.notes: list[str] = []
        self.diagrams_drawn = True


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


def html_table(columns: list[str], rows: list[list], numeric: set[str] = frozenset(), highlight: int | None = None,
               caption: str | None = None) -> str:
    """A plain HTML table (cells escaped; columns named in `numeric` right-aligned)."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    num, peak = ' class="num"', ' class="peak"'
    body = []
    for k, row in enumerate(rows):
        cells = "".join(f"<td{num if c in numeric else ''}>{html.escape('' if x is None else str(x))}</td>"
                        for c, x in zip(columns, row))
        body.append(f"<tr{peak if k == highlight else ''}>{cells}</tr>")
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def schedule_table(schedule) -> str:
    d = schedule.to_dict()
    rows = [[s["step"], s["node"], s["op"], ", ".join(f"{x['node']}->{x['count']}" for x in s["decremented"]),
             ", ".join(s["queue"]) + (f", ... (+{s['queue_size'] - len(s['queue'])})" if s["queue_size"] > len(s["queue"])
                                      else ""),
             human_bytes(s["freed_bytes"]) if s["freed_bytes"] else "", s["source"] or ""] for s in d["steps"]]
    cap = f"{d['graph']}: {d['policy']} policy, {d['num_steps']} steps" + (f" ({d['note']})" if d["note"] else "")
    return html_table(["step", "runs", "op", "counts decremented", "ready queue after", "frees", "source"], rows,
                      {"step", "frees"}, caption=cap)


def saved_table(saved) -> str:
    d = saved.to_dict()
    rows = []
    for e in d["entries"]:
        kind = f"view of {e['view_of']}" if e["kind"] == "view" else e["kind"]
        shape = ",".join(map(str, e["shape"]))
        producer = e["producer"]["op"] + (f" ({e['producer']['source']})" if e["producer"].get("source") else "")
        needed = "; ".join(n["text"] for n in e["needed_by"]) or "read by backward directly"
        readers = ", ".join(f"{r['value']} {r['op']}" for r in e["readers"]) or "(returned)"
        rows.append([e["name"], f"{e['dtype']}[{shape}]", kind, human_bytes(e["bytes"]), human_bytes(e["new_bytes"]),
                     producer, needed, readers, "-" if e["last_use"] is None else e["last_use"]])
    rows.append(["total", "", "", human_bytes(d["total_bytes"]), human_bytes(d["bytes"]), "", "", "", ""])
    return html_table(["value", "type", "kind", "bytes", "new", "producer", "needed by", "backward readers", "last use"],
                      rows, {"bytes", "new", "last use"},
                      caption=f"{d['count']} saved values, {human_bytes(d['bytes'])} new memory")


def memory_tables(plans: dict) -> str:
    summary = [[name, human_bytes(p.peak_bytes), p.peak_step, human_bytes(p.lower_bound_bytes),
                human_bytes(p.arena_bytes), f"{p.fragmentation:.1%}", len(p.order)] for name, p in plans.items()]
    out = [html_table(["plan", "peak", "peak step", "lower bound", "arena", "fragmentation", "steps"], summary,
                      {"peak", "peak step", "lower bound", "arena", "fragmentation", "steps"}, caption="memory plans")]
    name, plan = next(iter(plans.items()))
    d = plan.to_dict()
    rows = [[s["step"], s["phase"], s["node"], s["op"], human_bytes(s["live_bytes"])] for s in d["steps"]]
    out.append(html_table(["step", "phase", "runs", "op", "live"], rows, {"step", "live"}, highlight=plan.peak_step,
                          caption=f"timeline of {d['graph']} ({name}); peak row in bold"))
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


# -- memory plans to compare -------------------------------------------------------------------------


def memory_plans(grad_trace) -> dict:
    """The memory plans the report plots: the trace under the engine and memory policies, and, if
    the trace follows a recompute plan, the same without recomputation (engine policy)."""
    from gradir.passes import partition

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


# -- the report --------------------------------------------------------------------------------------


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "group"


def _diagrams(grad_trace) -> list[tuple[str, str, graphviz.Digraph]]:
    """(file key, caption, diagram) for everything drawn: per program a detailed diagram, or for
    a large one its overview and one diagram per group."""
    out = []
    for side, graph, sched in (("forward", grad_trace.forward, None), ("backward", grad_trace.backward,
                                                                       grad_trace.schedule)):
        if graphs.is_large(graph):
            out.append((side, f"{side} program (overview: {len(graph.nodes)} nodes by scope or source line)",
                        graphs.overview_diagram(graph)))
            for group, dg in graphs.scope_diagrams(graph, schedule=sched).items():
                out.append((f"{side}.{_safe(group)}", f"{side}: {group}", dg))
        else:
            out.append((side, f"{side} program" + (" (schedule step · initial dependency count)" if sched else ""),
                        graphs.graph_diagram(graph, schedule=sched, saved_from=None if sched else
                                             graph.num_forward_outputs)))
            program = grad_trace.kernels[side]
            out.append((f"{side}.kernels", f"{side} program as the {len(program.kernels)} fused kernels the LLVM "
                        "backend runs", graphs.kernel_diagram(program)))
    out.append(("joint", f"forward and backward: {grad_trace.saved.count} saved tensors as the orange edges",
                graphs.joint_diagram(grad_trace)))
    return out


def _figure(written: Written, out_dir: Path, name: str, key: str, rendered: graphs.Rendered) -> str:
    """Write one diagram's SVG (if drawn) and return its HTML: the inline SVG, or a note."""
    if rendered.svg is not None:
        written[f"{key}.svg"] = write_atomic(out_dir / f"{name}.{key}.svg", rendered.svg)
        return f'<div class="diagram">{inline_svg(rendered.svg, _safe(key) + "-")}</div>'
    written.diagrams_drawn = False
    if rendered.error not in written.notes:
        written.notes.append(rendered.error)
    src = html.escape(f"{name}.{key}")
    return (f'<p class="note">Diagram not drawn: {html.escape(rendered.error)}. Its Graphviz source is '
            f"<code>{src}.dot</code> (render it with <code>dot -Tsvg {src}.dot -o {src}.svg</code>).</p>")


def write_report(grad_trace, out_dir: str | os.PathLike, name: str, *, progress: Progress | None = None) -> Written:
    """Write the diagrams (`.dot` always, `.svg` when the `dot` program runs), the memory plot and
    one self-contained HTML report for `grad_trace` (a GradTrace) into `out_dir`, each atomically.
    Returns {key: path} ("forward.dot", "forward.svg", ..., "memory.svg", "html") with `notes`.
    `progress(description, done, total)` is called before each step. Never raises for a missing
    or failing `dot`; the HTML then says how to install Graphviz."""
    out_dir = Path(out_dir)
    written = Written()
    if progress is not None:
        progress("laying out diagrams", 0, 1)
    diagrams = _diagrams(grad_trace)
    total = len(diagrams) + 2
    done = 0

    def tick(what: str):
        nonlocal done
        if progress is not None:
            progress(what, done, total)
        done += 1

    figures = []  # (key, caption, inline html)
    for key, _, dg in diagrams:
        written[f"{key}.dot"] = write_atomic(out_dir / f"{name}.{key}.dot", dg.source)
    workers = max(1, min(8, os.cpu_count() or 1, len(diagrams)))
    with ThreadPoolExecutor(workers) as pool:  # `dot` runs as separate processes: draw several at once
        results = pool.map(lambda d: graphs.render_svg(d[2]), diagrams)
        for (key, caption, _), rendered in zip(diagrams, results):
            tick(f"drawing {key}")
            figures.append((key, caption, _figure(written, out_dir, name, key, rendered)))

    tick("plotting memory")
    plans = memory_plans(grad_trace)
    plot_svg = plots.memory_timeline_bytes(plans, "svg", title=f"{grad_trace.graph.name}: live bytes per step").decode()
    written["memory.svg"] = write_atomic(out_dir / f"{name}.memory.svg", plot_svg)

    tick("writing the HTML report")
    page = report_html(grad_trace, name, figures, plot_svg, plans, written.notes)
    written["html"] = write_atomic(out_dir / f"{name}.html", page)
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
            ["planned peak", f"{human_bytes(mem.peak_bytes)} at step {mem.peak_step} of {len(mem.order)}"],
            ["recompute", gt.remat.plan.policy]]
    return "<table class=\"summary\"><tbody>" + "".join(
        f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td></tr>" for a, b in rows) + "</tbody></table>"


def report_body(gt, figures: list[tuple[str, str, str]], plot_svg: str | None, plans: dict,
                notes: list[str] = ()) -> str:
    """The report's content (no <html>/<head>): usable inline in a notebook too."""
    parts = [_summary(gt)]
    if notes:
        items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
        parts.append(f'<div class="note"><b>Diagrams were not drawn.</b><ul>{items}</ul>'
                     "The <code>.dot</code> sources are written beside this report; with Graphviz installed "
                     "(<code>apt-get install graphviz</code>) rerun, or run <code>dot -Tsvg FILE.dot -o FILE.svg</code>.</div>")
    parts.append('<nav><a href="#diagrams">diagrams</a><a href="#memory">memory</a><a href="#ir">IR</a>'
                 '<a href="#schedule">schedule</a><a href="#saved">saved tensors</a></nav>')
    parts.append('<h2 id="diagrams">Diagrams</h2>')
    for key, caption, body in figures:
        parts.append(f'<figure id="fig-{html.escape(_safe(key))}"><figcaption>{html.escape(caption)}</figcaption>{body}</figure>')
    parts.append('<h2 id="memory">Memory</h2>')
    if plot_svg:
        parts.append(f'<figure id="fig-memory"><div class="plot">{inline_svg(plot_svg, "memory-")}</div>'
                     "<figcaption>live bytes per step, forward then backward (shaded); the saved tensors as spans "
                     "below</figcaption></figure>")
    parts.append(memory_tables(plans))
    parts.append(remat_table(gt.remat))
    parts.append('<h2 id="ir">IR</h2><h3>forward</h3>' + _pre(gt.forward.to_text()) + "<h3>backward</h3>"
                 + _pre(gt.backward.to_text()))
    parts.append('<h2 id="schedule">Backward schedule</h2>' + schedule_table(gt.schedule))
    parts.append('<h2 id="saved">Saved tensors</h2>' + saved_table(gt.saved))
    return "\n".join(parts)


def report_html(gt, name: str, figures, plot_svg: str | None, plans: dict, notes: list[str] = ()) -> str:
    """The whole HTML document: inline CSS and SVG, no scripts, nothing fetched."""
    title = f"gradir report: {name}"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>"
            f"<h1>{html.escape(title)}</h1>\n{report_body(gt, figures, plot_svg, plans, notes)}\n</body></html>\n")
