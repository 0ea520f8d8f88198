"""The forward and backward programs of a `GradTrace` in one diagram, the saved tensors between them.

`joint_diagram(grad_trace)` draws each program as a cluster (node by node with gradir.viz.graphs, or
for large graphs as overviews with gradir.viz.regions); each saved tensor is one highlighted edge
from the forward value that is kept to the backward input that receives it.
"""

from __future__ import annotations

import graphviz

from gradir.passes.report import human_bytes, value_name
from gradir.viz.graphs import FONT, _add_graph, _legend, _new_digraph
from gradir.viz.regions import LARGE_GRAPH, MAX_BOXES, _add_overview, is_large, reader_group

SAVED_EDGE = {"color": "#d97706", "penwidth": "3", "fontcolor": "#b45309", "style": "bold"}
SAVED_INPUT_EDGE = {"color": "#f59e0b", "penwidth": "1.5", "fontcolor": "#b45309", "style": "dashed"}  # no new memory
SAVED_EDGE_ID = "saved"  # SVG id prefix of the saved-tensor edges: saved0, saved1, ...
SAVED_BUNDLE_ID = "savedgroup"  # collapsed joint diagrams: one edge per pair of groups, labelled "k saved · bytes"


def joint_diagram(grad_trace, *, title: str | None = None, legend: bool = True, schedule: bool = True,
                  collapse: bool | None = None, max_boxes: int | None = None,
                  collapse_repeats: bool | None = None) -> graphviz.Digraph:
    """Forward and backward programs as two clusters; each saved tensor (a partition residual) is a
    highlighted edge (SVG id `saved<i>`, labelled with its size) from the forward value that is kept
    to the backward input receiving it. Backward nodes show their schedule step and dependency count.
    `collapse` (default: when the two programs hold more than LARGE_GRAPH values) draws each side
    as its overview (groups); the saved tensors going from one forward group to the backward group
    that first reads them are then one edge (SVG id `savedgroup<j>`, labelled "k saved · bytes"),
    and each side has at most `max_boxes` groups (consecutive groups merge beyond). Otherwise each
    side's repeated scopes are one box each (`collapse_repeats`, as in graphs.graph_diagram); a saved
    tensor made inside one leaves from its box."""
    part = grad_trace.partition
    fwd, bwd = part.forward, part.backward
    k = fwd.num_forward_outputs or 0
    nres = len(part.residuals)
    kept = fwd.outputs[k:k + nres]
    entries = list(grad_trace.saved.entries)
    dg = _new_digraph(f"{grad_trace.graph.name}_joint", title or (
        f"{grad_trace.graph.name}: forward and backward, {len(entries)} saved tensors "
        f"({human_bytes(grad_trace.saved.bytes)} new memory)"), rankdir="TB")
    if collapse is None:
        collapse = is_large(fwd) or is_large(bwd) or len(fwd.all_values()) + len(bwd.all_values()) > LARGE_GRAPH
    kinds: set[str] = set()
    with dg.subgraph(name="cluster_forward") as c:
        c.attr(label=f"forward ({len(fwd.nodes)} nodes)", style="rounded", color="#1d4ed8", fontname=FONT,
               fontsize="14")
        if collapse:
            fids = _add_overview(c, fwd, "fg", edge_labels=False, max_boxes=max_boxes or MAX_BOXES)
        else:
            fids, kf = _add_graph(c, fwd, "f", saved=set(kept) - set(fwd.outputs[:k]),
                                  output_role=lambda i: f"output {i}" if i < k else f"saved #{i - k}",
                                  collapse_repeats=collapse_repeats)
            kinds |= kf
    with dg.subgraph(name="cluster_backward") as c:
        c.attr(label=f"backward ({len(bwd.nodes)} nodes, {grad_trace.schedule.policy} schedule)", style="rounded",
               color="#b91c1c", fontname=FONT, fontsize="14")
        if collapse:
            bids = _add_overview(c, bwd, "bg", reader_group(bwd, nres), upward=True, edge_labels=False,
                                 max_boxes=max_boxes or MAX_BOXES)
        else:
            names = grad_trace.gradient_names  # `d w1`, or by position where outputs are not one per input
            bids, kb = _add_graph(c, bwd, "b", grad_trace.schedule if schedule else None,
                                  output_role=names.__getitem__ if names else lambda i: f"gradient {i}",
                                  collapse_repeats=collapse_repeats)
            kinds |= kb
    pairs = list(zip(kept, bwd.inputs[:nres]))
    nbytes = [e.bytes for e in entries] if len(entries) == len(pairs) else [fv.nbytes for fv, _ in pairs]
    kinds_of = [e.kind for e in entries] if len(entries) == len(pairs) else [""] * len(pairs)
    if not collapse:
        for i, (fv, bv) in enumerate(pairs):
            size, kind = human_bytes(nbytes[i]), kinds_of[i]
            dg.edge(fids[fv], bids[bv], id=f"{SAVED_EDGE_ID}{i}", label=size + (f" ({kind})" if kind else ""),
                    tooltip=f"saved {value_name(fv, fwd)} -> backward {value_name(bv, bwd)}: {size} {kind}",
                    **(SAVED_INPUT_EDGE if kind == "input" else SAVED_EDGE))
    else:  # one edge per pair of groups, labelled with how many saved tensors it stands for
        bundles: dict[tuple[str, str], list[int]] = {}
        for i, (fv, bv) in enumerate(pairs):
            bundles.setdefault((fids[fv], bids[bv]), []).append(i)
        for j, ((a, b), members) in enumerate(bundles.items()):
            names = ", ".join(value_name(pairs[i][0], fwd) for i in members[:50]) + (" ..." if len(members) > 50 else "")
            inputs_only = all(kinds_of[i] == "input" for i in members)
            dg.edge(a, b, id=f"{SAVED_BUNDLE_ID}{j}", tooltip=f"saved: {names}",
                    label=f"{len(members)} saved · {human_bytes(sum(nbytes[i] for i in members))}",
                    **(SAVED_INPUT_EDGE if inputs_only else SAVED_EDGE))
    if legend and not collapse:
        _legend(dg, kinds, schedule)
    return dg
