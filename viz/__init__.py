"""Diagrams, plots and HTML reports of graphs and plans (reads graphs and reports only).

Layer rule: imports gradir.util, gradir.core, gradir.ops, gradir.passes, gradir.backends and itself (never
gradir.api or above: a function to draw is traced by the core tracer, a GradTrace is read as given).

    from gradir import viz
    viz.graph_diagram(graph)                  # graphviz.Digraph: .source is the dot text; 3+ alike top-level
                                              # scopes (12 blocks) one box each (collapse_repeats=False: not)
    viz.joint_diagram(gr.trace_grad(f, x))    # saved tensors as the edges from forward to backward
    viz.kernel_diagram(j.kernels["backward"]) # the fused kernels a compiled backend runs, as clusters
    viz.overview_diagram(graph)               # large graphs: one box per scope or source line
    viz.collapsed_diagram(graph)              # repeated op sequences as one box ("tanh × 20,000")
    viz.value_diagram(f, 1.5, -2.0)           # micrograd-style: data and grad of every value
    viz.memory_timeline({"engine": j.memory}, "mem.svg")
    viz.write_report(j, "out", "loss")        # .dot/.svg diagrams, memory plot, one HTML file
"""

from gradir.viz.graphs import (
    dot_available,
    graph_diagram,
    kernel_diagram,
    render_svg,
    value_diagram,
    values_and_grads,
)
from gradir.viz.joint import joint_diagram
from gradir.viz.notebook import diagram_of, html_of, svg_of
from gradir.viz.plots import memory_timeline, memory_timeline_bytes, tradeoff_curve
from gradir.viz.regions import LARGE_GRAPH, collapsed_diagram, is_large, overview_diagram, scope_diagrams
from gradir.viz.report import Written, memory_plans, write_report

__all__ = ["LARGE_GRAPH", "Written", "collapsed_diagram", "diagram_of", "dot_available", "graph_diagram", "html_of", "is_large",
           "joint_diagram", "kernel_diagram", "memory_plans", "memory_timeline", "memory_timeline_bytes", "overview_diagram",
           "render_svg", "scope_diagrams", "svg_of", "tradeoff_curve", "value_diagram", "values_and_grads", "write_report"]
