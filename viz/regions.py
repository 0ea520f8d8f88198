"""Large graphs in diagrams of bounded size: an overview, regions, and run-length collapsed boxes.

A graph over LARGE_GRAPH values is not drawn node by node (`dot` would take minutes and the SVG
would be hundreds of MB). Instead:

- groups: a value's top-level `gr.scope` (outside scopes: its source line); the graph's inputs
  form one group. A constant belongs to the group of the values that read it; one read by several
  groups (CSE shares constants) is no group's own: it is drawn beside each reader, marked shared.
- `overview_diagram(graph)`: one box per group (beyond MAX_BOXES groups, consecutive groups share
  a box), one edge per pair of groups that values flow between.
- `regions(graph)` / `region_diagram(...)`: one diagram per group, consecutive groups packed into
  at most MAX_REGIONS regions. A region of at most REGION_DETAIL values is drawn node by node; a
  bigger one run-length collapsed: an op sequence repeated in a row is one box ("tanh × 20,000"),
  and beyond MAX_BOXES boxes consecutive boxes merge into "k values" boxes.
- `collapsed_diagram(graph)`: a whole graph run-length collapsed (what replaces a detailed
  diagram that `dot` cannot lay out in time).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import graphviz

from gradir.core.ir import Graph, Value
from gradir.passes.report import human_bytes, value_name
from gradir.viz.graphs import (
    STYLES,
    _emit_clustered,
    _esc,
    _legend,
    _new_digraph,
    _scope_path,
    _short,
    home_path,
    ir_lines,
    is_recomputed,
    kind_of,
    node_label,
    op_histogram,
    tooltip,
)

LARGE_GRAPH = 150     # values above which a graph is drawn as an overview plus regions
REGION_DETAIL = 400   # values above which a region is drawn run-length collapsed
MAX_BOXES = 150       # boxes (and external-value nodes) at most in an overview or a collapsed diagram
MAX_REGIONS = 16      # region diagrams at most per program
MAX_PERIOD = 8        # longest op sequence whose repetition collapses into one box
MIN_REPEATS = 3       # repetitions in a row that make a box

INPUTS_GROUP = "inputs"
SHARED_GROUP = "shared constants"
NOT_REGIONS = (INPUTS_GROUP, SHARED_GROUP)


def is_large(graph: Graph) -> bool:
    return len(graph.inputs) + len(graph.nodes) > LARGE_GRAPH


# -- groups ------------------------------------------------------------------------------------------


def group_of(v: Value) -> str:
    """The overview group of a value by itself: its top-level scope, else its source line; inputs together."""
    if v.op == "input":
        return INPUTS_GROUP
    path = _scope_path(v)
    if path:
        return path[0]
    return f"line {v.source}" if v.source else "(no source line)"


def group_map(graph: Graph, key: Callable[[Value], str] = group_of, users=None) -> dict[Value, str]:
    """Each value's group (by `key`); a constant takes its readers' group, or SHARED_GROUP when
    several groups read it. `users`: graph.users(), if already at hand."""
    out = {v: key(v) for v in graph.all_values()}
    users = graph.users() if users is None else users
    for v in graph.nodes:
        if v.op == "const" and users[v]:
            readers = {out[u] for u in users[v]}
            out[v] = readers.pop() if len(readers) == 1 else SHARED_GROUP
    return out


def groups(graph: Graph, key: Callable[[Value], str] = group_of, where: dict[Value, str] | None = None
           ) -> dict[str, list[Value]]:
    """Values by group (see `group_map`; `where`: its result, if already at hand), groups in order
    of first appearance."""
    out: dict[str, list[Value]] = {}
    for v, g in (group_map(graph, key) if where is None else where).items():
        out.setdefault(g, []).append(v)
    return out


def pack(names: list[str], limit: int) -> list[list[str]]:
    """`names` cut into at most `limit` consecutive parts of nearly equal length."""
    n = len(names)
    parts = min(n, max(1, limit))
    return [names[k * n // parts:(k + 1) * n // parts] for k in range(parts)]


def packed_name(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]} … {names[-1]} ({len(names)} groups)"


def regions(graph: Graph, max_regions: int | None = MAX_REGIONS, info: Info | None = None) -> dict[str, list[Value]]:
    """The regions drawn one diagram each: every group but the inputs and shared constants, and
    beyond `max_regions` groups, consecutive groups packed together ("layer0 … layer2 (3 groups)")."""
    grp = {g: vs for g, vs in (info or Info(graph)).groups.items() if g not in NOT_REGIONS}
    if max_regions is None or len(grp) <= max_regions:
        return grp
    return {packed_name(part): [v for g in part for v in grp[g]] for part in pack(list(grp), max_regions)}


# -- runs: repeated op sequences ---------------------------------------------------------------------


@dataclass
class Box:
    """Consecutive values drawn as one box: `period` ops repeated (period 0: a merged mixture)."""

    values: list[Value]
    period: int

    @property
    def repeats(self) -> int:
        return len(self.values) // self.period if self.period else 1


def runs(values: list[Value], max_period: int = MAX_PERIOD) -> list[Box]:
    """`values` (graph order) as boxes: a sequence of at most `max_period` ops (with their types)
    repeated MIN_REPEATS or more times in a row is one box, any other value a box of its own.
    Linear in len(values) for a fixed max_period."""
    sig = [(v.op, v.type_str) for v in values]
    n, i, out = len(sig), 0, []
    while i < n:
        best_p, best_k = 1, 1
        for p in range(1, max_period + 1):
            if i + MIN_REPEATS * p > n:
                break
            head, k = sig[i:i + p], 1
            while i + (k + 1) * p <= n and sig[i + k * p:i + (k + 1) * p] == head:
                k += 1
            if k >= MIN_REPEATS and p * k > best_p * best_k:
                best_p, best_k = p, k
        out.append(Box(values[i:i + best_p * best_k], best_p))
        i += best_p * best_k
    return out


def merge(boxes: list[Box], limit: int) -> list[Box]:
    """At most `limit` boxes: beyond it, consecutive boxes merge into mixtures."""
    if len(boxes) <= limit:
        return boxes
    out = []
    for part in pack(list(range(len(boxes))), limit):
        out.append(boxes[part[0]] if len(part) == 1 else Box([v for k in part for v in boxes[k].values], 0))
    return out


# -- drawing -----------------------------------------------------------------------------------------


class Info:
    """What every diagram of one graph needs, computed once: readers, groups, IR lines, steps."""

    def __init__(self, graph: Graph, schedule=None):
        self.graph, self.schedule = graph, schedule

    @functools.cached_property
    def users(self) -> dict[Value, list[Value]]:
        return self.graph.users()

    @functools.cached_property
    def where(self) -> dict[Value, str]:
        return group_map(self.graph, users=self.users)

    @functools.cached_property
    def groups(self) -> dict[str, list[Value]]:
        return groups(self.graph, where=self.where)

    @functools.cached_property
    def lines(self) -> dict[Value, str]:
        return ir_lines(self.graph)

    @functools.cached_property
    def step(self) -> dict[Value, int]:
        return {s.node: s.index for s in self.schedule.steps} if self.schedule is not None else {}

    def name(self, v: Value) -> str:
        return value_name(v, self.graph)


def _box_kind(values: list[Value], outputs: set[Value]) -> str:
    if any(v in outputs for v in values):
        return "output"
    return "recompute" if all(is_recomputed(v) for v in values) else "op"


def _box_node(g, node_id: str, box: Box, info: Info, outputs: set[Value], kinds: set[str]):
    vs = box.values
    span = f"{info.name(vs[0])} … {info.name(vs[-1])}"
    if box.period:
        motif = vs[:box.period]
        rows = [f"{', '.join(v.op for v in motif)} × {box.repeats:,}", span,
                ", ".join(dict.fromkeys(v.type_str for v in motif))]
    else:
        rows = [f"{len(vs):,} values", op_histogram(vs), span]
    steps = [info.step[v] for v in vs if v in info.step]
    if steps:
        rows.append(f"steps {min(steps):,}–{max(steps):,}")
    sources = ", ".join(list(dict.fromkeys(v.source for v in vs if v.source))[:4])
    kind = _box_kind(vs, outputs)
    kinds.add(kind)
    g.node(node_id, **dict(STYLES[kind], label="{" + "|".join(_esc(r) for r in rows) + "}",
                           tooltip=f"{len(vs):,} values: {op_histogram(vs, 12)}\nsource: {sources or '-'}"))


def _value_node(g, node_id: str, v: Value, info: Info, outputs: set[Value], kinds: set[str]):
    kind = kind_of(v, outputs)
    kinds.add(kind)
    extra = [f"step {info.step[v]} · deps {info.schedule.initial_counts.get(v, 0)}"] if v in info.step else []
    g.node(node_id, **dict(STYLES[kind], label=node_label(v, info.graph, extra), tooltip=tooltip(v, info.lines[v])))


EXT_STYLE = {"shape": "ellipse", "style": "dashed", "color": "#9ca3af", "fontcolor": "#4b5563"}


def _external(dg, outside: list[Value], info: Info) -> dict[Value, str]:
    """Nodes for values a region reads from elsewhere: one each (a shared constant shows its value),
    or beyond MAX_BOXES one per group they come from. Returns each value's node id."""
    graph = info.graph
    if len(outside) <= MAX_BOXES:
        ids = {}
        for e in outside:
            ids[e] = f"ext{graph.number(e)}"
            if e.op == "const":
                label = f"{info.name(e)} const {_short(e.attrs['value']) if e.size <= 4 else f'({e.size} values)'}"
                label += " (shared)" if info.where[e] == SHARED_GROUP else f" ({info.where[e]})"
            else:
                label = f"{info.name(e)} ({info.where[e]})"
            dg.node(ids[e], label=f"{label}\n{e.type_str}", tooltip=tooltip(e, info.lines[e]), **EXT_STYLE)
        return ids
    by: dict[str, list[Value]] = {}
    for e in outside:
        by.setdefault(info.where[e], []).append(e)
    ids = {}
    for k, (g, vs) in enumerate(by.items()):
        dg.node(f"extg{k}", label=f"{len(vs):,} value{'s' * (len(vs) != 1)} from {g}\n{human_bytes(sum(v.nbytes for v in vs))}",
                tooltip=f"{g}: " + ", ".join(info.name(v) for v in vs[:50]) + (" ..." if len(vs) > 50 else ""),
                **EXT_STYLE)
        ids.update((v, f"extg{k}") for v in vs)
    return ids


def region_diagram(info: Info, name: str, values: list[Value], *, collapse: bool | None = None,
                   max_boxes: int = MAX_BOXES, title: str | None = None) -> graphviz.Digraph:
    """One region of `info.graph`: its `values` (graph order), drawn node by node (scopes below
    the top level as clusters) or, with `collapse` (default: above REGION_DETAIL values), as
    run-length boxes, at most `max_boxes`. Values it reads from elsewhere are grey dashed ellipses
    (node ids `ext<k>`, or `extg<k>` per group when there are many); constants are left out of
    collapsed drawings."""
    graph = info.graph
    if collapse is None:
        collapse = len(values) > REGION_DETAIL
    members = set(values)
    drawn = [v for v in values if not (collapse and v.op == "const")]
    tops = {info.where[v] for v in values}
    how = f"collapsed into at most {max_boxes} boxes" if collapse else "node by node"
    dg = _new_digraph(f"{graph.name}_{name}", title or f"{graph.name}: {name} ({len(values):,} values, {how})")
    outside = list(dict.fromkeys(i for v in drawn for i in v.inputs
                                 if i not in members and not (collapse and i.op == "const")))
    ext = _external(dg, outside, info)
    outputs = set(graph.outputs)
    ids: dict[Value, str] = {}
    kinds: set[str] = set()
    items = []
    if collapse:  # runs within each group, so that a box never spans two scopes
        by_group: dict[str, list[Value]] = {}
        for v in drawn:
            by_group.setdefault(info.where[v], []).append(v)
        per_group = {g: runs(vs) for g, vs in by_group.items()}
        total = sum(len(b) for b in per_group.values())
        for g, boxes in per_group.items():
            boxes = merge(boxes, max(1, max_boxes * len(boxes) // max(total, 1)))
            for box in boxes:
                node_id = f"r{graph.number(box.values[0])}"
                ids.update((v, node_id) for v in box.values)
                path = (g,) if len(tops) > 1 else ()
                draw = ((lambda c, i=node_id, v=box.values[0]: _value_node(c, i, v, info, outputs, kinds))
                        if len(box.values) == 1 else (lambda c, i=node_id, b=box: _box_node(c, i, b, info, outputs, kinds)))
                items.append((path, draw))
    else:
        for v in drawn:
            ids[v] = f"v{graph.number(v)}"
            path = home_path(v, info.users)
            path = path if len(tops) > 1 else path[1:]
            items.append((path, lambda c, i=ids[v], v=v: _value_node(c, i, v, info, outputs, kinds)))
    _emit_clustered(dg, items, "s")
    flows: Counter[tuple[str, str]] = Counter()
    for v in drawn:
        for i in v.inputs:
            src = ids.get(i) or ext.get(i)
            if src is not None and src != ids[v]:
                flows[(src, ids[v])] += 1
    for (a, b), count in flows.items():
        if collapse and count > 1:
            dg.edge(a, b, label=f"{count:,}", tooltip=f"{count:,} operand uses")
        else:
            for _ in range(count if not collapse else 1):  # node by node: one edge per operand use
                dg.edge(a, b)
    if kinds:
        _legend(dg, kinds, info.schedule is not None)
    return dg


def collapsed_diagram(graph: Graph, *, schedule=None, max_boxes: int = MAX_BOXES,
                      title: str | None = None) -> graphviz.Digraph:
    """`graph` run-length collapsed: repeated op sequences as one box each (its inputs as external
    values), at most `max_boxes` boxes."""
    info = Info(graph, schedule)
    return region_diagram(info, graph.name, list(graph.nodes), collapse=True, max_boxes=max_boxes,
                          title=title or f"graph {graph.name} (collapsed): {len(graph.inputs)} inputs, "
                                         f"{len(graph.nodes):,} nodes, at most {max_boxes} boxes")


def scope_diagrams(graph: Graph, *, schedule=None, max_regions: int | None = None) -> dict[str, graphviz.Digraph]:
    """One diagram per region (see `regions`; by default one per group): node by node up to
    REGION_DETAIL values, run-length collapsed above."""
    info = Info(graph, schedule)
    return {name: region_diagram(info, name, vs) for name, vs in regions(graph, max_regions).items()}


# -- the overview ------------------------------------------------------------------------------------


def _add_overview(dg: graphviz.Digraph, graph: Graph, prefix: str, group_fn: Callable[[Value], str] = group_of,
                  upward: bool = False, edge_labels: bool = True, max_boxes: int = MAX_BOXES,
                  grouped: dict[str, list[Value]] | None = None) -> dict[Value, str]:
    """Draw one node per group of `graph` (consecutive groups share a node beyond `max_boxes`) and
    one edge per pair of nodes values flow between (`upward`: ranked bottom to top, as a backward
    program beside its forward one). Shared constants get no node. Returns each drawn value's node id."""
    grouped = groups(graph, group_fn) if grouped is None else grouped
    grp = {g: vs for g, vs in grouped.items() if g != SHARED_GROUP}
    names = [g for g in grp if g != INPUTS_GROUP]
    boxes = {INPUTS_GROUP: grp[INPUTS_GROUP]} if INPUTS_GROUP in grp else {}
    for part in pack(names, max_boxes - len(boxes)) if names else []:
        boxes[packed_name(part)] = [v for g in part for v in grp[g]]
    ids = {g: f"{prefix}{i}" for i, g in enumerate(boxes)}
    of = {v: g for g, vs in boxes.items() for v in vs}
    outputs = set(graph.outputs)
    for g, vs in boxes.items():
        recomputed = sum(1 for v in vs if is_recomputed(v))
        has_out = any(v in outputs for v in vs)
        kind = "input" if g == INPUTS_GROUP else "output" if has_out else "recompute" if recomputed else "op"
        rows = [g, f"{len(vs):,} {'inputs' if g == INPUTS_GROUP else 'values'}", op_histogram(vs)]
        if recomputed:
            rows.append(f"{recomputed:,} recomputed")
        sources = ", ".join(list(dict.fromkeys(v.source for v in vs if v.source))[:8])
        dg.node(ids[g], **dict(STYLES[kind], label="{" + "|".join(_esc(r) for r in rows) + "}",
                               tooltip=f"{g}: {op_histogram(vs, 20)}\nsource: {sources or '-'}"))
    flows: dict[tuple[str, str], set[Value]] = {}
    for n in graph.nodes:
        for i in n.inputs:
            if i in of and n in of and of[i] != of[n]:
                flows.setdefault((of[i], of[n]), set()).add(i)
    for (a, b), vals in flows.items():
        text = f"{len(vals):,} · {human_bytes(sum(v.nbytes for v in vals))}"
        names_ = ", ".join(value_name(v, graph) for v in list(vals)[:50]) + (" ..." if len(vals) > 50 else "")
        attrs = dict(tooltip=f"{a} -> {b}: {text}: {names_}")
        if edge_labels:
            attrs["label"] = text
        if upward:  # drawn b <- a, so that b ranks above a
            dg.edge(ids[b], ids[a], dir="back", **attrs)
        else:
            dg.edge(ids[a], ids[b], **attrs)
    return {v: ids[g] for v, g in of.items()}


def overview_diagram(graph: Graph, *, title: str | None = None, max_boxes: int = MAX_BOXES,
                     info: Info | None = None) -> graphviz.Digraph:
    """One node per group (top-level scope, source line outside scopes, or the graph inputs) with
    its value count and op histogram; one edge per pair of groups values flow between, labelled
    with how many values cross and their bytes. Beyond `max_boxes` groups, consecutive groups
    share a node. Constants count in the group that reads them; shared ones draw nothing. `info`:
    the graph's Info, if already at hand."""
    grouped = (info or Info(graph)).groups
    count = len([g for g in grouped if g != SHARED_GROUP])
    dg = _new_digraph(f"{graph.name}_overview", title or f"graph {graph.name} (overview): {len(graph.nodes):,} nodes in "
                                                         f"{count:,} groups")
    _add_overview(dg, graph, "g", max_boxes=max_boxes, grouped=grouped)
    return dg


def reader_group(bwd: Graph, nres: int) -> Callable[[Value], str]:
    """Overview groups of a backward program in which each saved input joins its first reader's group."""
    users = bwd.users()
    saved = set(bwd.inputs[:nres])

    def group(v: Value) -> str:
        if v in saved and users[v]:
            return group_of(users[v][0])
        return group_of(v)
    return group


def dot_nodes(dg: graphviz.Digraph) -> int:
    """How many nodes a diagram's source declares (legend samples included)."""
    count = 0
    for line in dg.body:
        s = line.strip()
        if "->" not in s and not s.startswith(("graph", "node", "edge", "subgraph", "}")):
            count += " [" in s
    return count

