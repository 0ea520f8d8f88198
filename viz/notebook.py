"""Notebook display: what `_repr_svg_` / `_repr_html_` of graphs, traces and reports return.

Jupyter calls these on the object a cell ends with. A `_repr_*_` returning None makes Jupyter fall
back to the next representation, so `svg_of` returns None when the `dot` program is missing.
"""

from __future__ import annotations

import html
import io

import graphviz
from rich.console import Console

from gradir.viz import expand, graphs, joint, player, plots, regions, report


def diagram_of(obj) -> graphviz.Digraph:
    """The diagram that stands for `obj`: a Graph (its overview when large), a GradTrace (the joint
    diagram), or a Digraph as is."""
    if isinstance(obj, graphviz.Digraph):
        return obj
    if hasattr(obj, "partition") and hasattr(obj, "saved"):
        return joint.joint_diagram(obj)
    return regions.overview_diagram(obj) if regions.is_large(obj) else graphs.graph_diagram(obj)


def svg_of(obj) -> str | None:
    """SVG text of `obj`'s diagram (see `diagram_of`), ready to inline; None without `dot`."""
    rendered = graphs.render_svg(diagram_of(obj))
    return None if rendered.svg is None else report.inline_svg(rendered.svg, f"g{id(obj):x}-")


def _rich_html(renderable) -> str:
    console = Console(record=True, file=io.StringIO(), width=160, color_system="truecolor")
    console.print(renderable)
    return console.export_html(inline_styles=True, code_format='<pre style="font-size:12px;line-height:1.3">{code}</pre>')


def html_of(obj) -> str:
    """HTML for `obj`: a GradTrace gives the report's content (diagrams, memory plot, IR, tables);
    a report (anything with `table()`) its table; a Graph its diagram and text form."""
    if hasattr(obj, "partition") and hasattr(obj, "saved"):
        return _trace_html(obj)
    if hasattr(obj, "table") and hasattr(obj, "to_dict"):
        return _rich_html(obj.table())
    svg = svg_of(obj)
    text = f"<pre>{html.escape(obj.to_text())}</pre>"
    return (f"<div>{svg}</div>" if svg else f"<p>({html.escape(graphs.INSTALL_HINT)})</p>") + text


def _trace_html(gt) -> str:
    drawn = report.draw_all(report._diagrams(gt))
    inline = report._inlined(drawn)
    figures = [report.figure_html(d, k in inline) for k, d in enumerate(drawn)]
    plans = report.memory_plans(gt)
    plot = plots.memory_timeline_bytes(plans, "svg").decode()
    css = report.CSS.replace("body ", ".gradir-report ") + player.CSS + expand.CSS
    return f"<div><style>{css}</style><div class=\"gradir-report\">{report.report_body(gt, figures, plot, plans)}</div></div>"
