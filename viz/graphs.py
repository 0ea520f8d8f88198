"""Graphviz diagrams of graphs: one box per value, one edge per operand use.

- `graph_diagram(graph)`: any Graph. Inputs, constants, outputs and recomputed nodes are drawn
  distinctly (a legend says how); `gr.scope` regions become clusters; tooltips hold the node's IR
  line and source line. With a `schedule`, each node shows its step and initial dependency count.
  Top-level scopes of one structure repeated MIN_REPEATED_SCOPES or more times (twelve residual
  blocks) are drawn as one box each instead (`repeated_scopes`; `collapse_repeats=False` turns it
  off): the HTML report expands a box into its scope's own node-by-node diagram.
- `kernel_diagram(program)`: a fused program's values, each kernel's nodes as one cluster.
- `value_diagram(fn, *args)`: micrograd's draw_dot for scalar programs: every value with its data
  and its gradient (the cotangent of the output with respect to it).

The drawing helpers here are shared: forward and backward together (gradir.viz.joint) and large
graphs (gradir.viz.regions: an overview by scope, regions, run-length collapsed boxes) build on them.

Diagrams are `graphviz.Digraph` objects (their `.source` is the dot text); `render_svg` runs the
`dot` program on one, and says why when it cannot.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import graphviz
import numpy as np

from gradir.backends import run
from gradir.core import dtypes
from gradir.core.errors import ShapeError
from gradir.core.ir import Graph, Value
from gradir.core.trace import trace_flat
from gradir.passes import joint_graph
from gradir.passes.fusion import kernel_header
from gradir.passes.partition import RECOMPUTE
from gradir.passes.report import human_bytes, value_name
from gradir.util.pytree import tree_flatten, tree_flatten_with_path, tree_unflatten

DOT_TIMEOUT_S = 30  # per diagram (GRADIR_DOT_TIMEOUT overrides); on timeout the report draws a smaller one
INSTALL_HINT = ("install Graphviz to draw diagrams: `apt-get install graphviz` "
                "(or `brew install graphviz`, `conda install graphviz`)")

FONT = "Helvetica"
STYLES: dict[str, dict[str, str]] = {  # node attributes per kind of value
    "input": {"shape": "Mrecord", "style": "filled", "fillcolor": "#dbeafe", "color": "#1d4ed8"},
    "const": {"shape": "Mrecord", "style": "filled", "fillcolor": "#f3f4f6", "color": "#9ca3af", "fontcolor": "#4b5563"},
    "op": {"shape": "Mrecord", "style": "filled", "fillcolor": "#ffffff", "color": "#374151"},
    "output": {"shape": "Mrecord", "style": "filled,bold", "fillcolor": "#dcfce7", "color": "#15803d", "penwidth": "2"},
    "saved": {"shape": "Mrecord", "style": "filled,bold", "fillcolor": "#fef3c7", "color": "#b45309", "penwidth": "2"},
    "recompute": {"shape": "Mrecord", "style": "filled,dashed", "fillcolor": "#ffedd5", "color": "#ea580c",
                  "penwidth": "2"},
    "scope": {"shape": "Mrecord", "style": "filled,bold", "fillcolor": "#ede9fe", "color": "#6d28d9", "penwidth": "2"},
}
LEGEND_TEXT = {
    "input": "input (argument, parameter, cotangent)",
    "const": "constant",
    "op": "operation",
    "output": "output",
    "saved": "saved for backward",
    "recompute": "recomputed in backward",
    "scope": "a repeated scope as one box (the HTML report expands it on a click)",
}
LEGEND_PREFIX = "legend_"
MIN_REPEATED_SCOPES = 3  # top-level scopes of one structure that are drawn as one box each
SCOPE_CLASS = "gradir-scope"  # SVG class of a repeated scope's box; "expand-<key>" names its detail, "m-<id>" its members


# -- the dot program ---------------------------------------------------------------------------------


def dot_available() -> bool:
    """Whether the `dot` program can be run (GRADIR_NO_DOT=1 pretends it cannot, for tests)."""
    return os.environ.get("GRADIR_NO_DOT", "") in ("", "0") and shutil.which("dot") is not None


@dataclass
class Rendered:
    """The outcome of running `dot`: the SVG text, or None and the reason."""

    svg: str | None
    error: str = ""
    timed_out: bool = False


def dot_timeout() -> float:
    """Seconds `dot` may take on one diagram: GRADIR_DOT_TIMEOUT, else DOT_TIMEOUT_S."""
    try:
        return float(os.environ.get("GRADIR_DOT_TIMEOUT", DOT_TIMEOUT_S))
    except ValueError:
        return DOT_TIMEOUT_S


def render_svg(diagram: graphviz.Digraph, timeout: float | None = None) -> Rendered:
    """Run `dot -Tsvg` on the diagram's source, for at most `timeout` seconds (default
    `dot_timeout()`). Never raises: a missing program, a timeout or a dot error come back as
    `Rendered(None, reason)` (`timed_out` set for a timeout)."""
    timeout = dot_timeout() if timeout is None else timeout
    if not dot_available():
        return Rendered(None, f"the `dot` program was not found; {INSTALL_HINT}")
    try:
        done = subprocess.run([shutil.which("dot") or "dot", "-Tsvg"], input=diagram.source.encode(),
                              capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return Rendered(None, f"`dot` took longer than {timeout:g} s", timed_out=True)
    except OSError as e:
        return Rendered(None, f"`dot` could not run: {e}")
    if done.returncode != 0:
        return Rendered(None, f"`dot` failed: {done.stderr.decode(errors='replace').strip()[:500]}")
    return Rendered(done.stdout.decode())


# -- labels and kinds --------------------------------------------------------------------------------


def _esc(text: str) -> str:
    """Escape text for a record label (braces, bars and angle brackets are its syntax)."""
    out = str(text).replace("\\", "\\\\")
    for ch in '{}|<>"':
        out = out.replace(ch, "\\" + ch)
    return out.replace("\n", "\\n")


def ir_lines(graph: Graph) -> dict[Value, str]:
    """Each value's line of the graph's text form (`%2 = tanh %1 : f64[]  # model.py:4`)."""
    lines = graph.to_text().splitlines()[1:-2]  # drop `graph NAME {`, `return ...`, `}`
    return {v: line.strip() for v, line in zip(graph.all_values(), lines)}


def is_recomputed(v: Value) -> bool:
    return RECOMPUTE in v.scope


def kind_of(v: Value, outputs: set[Value], saved: set[Value] = frozenset()) -> str:
    """The legend kind a value is drawn as."""
    if v in saved:
        return "saved"
    if v in outputs:
        return "output"
    if v.op == "input":
        return "input"
    if v.op == "const":
        return "const"
    return "recompute" if is_recomputed(v) else "op"


def _short(x: np.ndarray) -> str:
    x = np.asarray(x)
    if x.ndim == 0:
        return f"{x.item():.4g}" if np.issubdtype(x.dtype, np.number) and not np.iscomplexobj(x) else str(x.item())
    return np.array2string(x, precision=3, threshold=6, edgeitems=2, max_line_width=60).replace("\n", " ")


def node_label(v: Value, graph: Graph, extra: list[str] = ()) -> str:
    """A record label: `%k op` (or the input's name), the type, then `extra` rows."""
    head = value_name(v, graph)
    if v.op == "input":
        head = f"%{graph.number(v)} {head}"
    elif v.op == "const":
        head += " const " + (_short(v.attrs["value"]) if v.size <= 4 else f"({v.size} values)")
    else:
        head += f" {v.op}"
    rows = [head, v.type_str, *extra]
    return "{" + "|".join(_esc(r) for r in rows) + "}"


def tooltip(v: Value, line: str) -> str:
    where = v.source or "(no source line)"
    scope = f"\nscope: {'/'.join(v.scope)}" if v.scope else ""
    return f"{line}\nsource: {where}{scope}"


# -- one graph ---------------------------------------------------------------------------------------


def _scope_path(v: Value) -> tuple[str, ...]:
    return tuple(s for s in v.scope if s != RECOMPUTE)


def home_path(v: Value, users: dict[Value, list[Value]]) -> tuple[str, ...]:
    """The scope path a value is drawn in: its own, but a constant's is the longest common prefix of
    its readers' (CSE shares one constant among many scopes: it is none of them's own)."""
    if v.op != "const" or not users.get(v):
        return _scope_path(v)
    paths = [_scope_path(u) for u in users[v]]
    common = paths[0]
    for p in paths[1:]:
        k = 0
        while k < min(len(common), len(p)) and common[k] == p[k]:
            k += 1
        common = common[:k]
    return common


def op_histogram(values: list[Value], top: int = 4) -> str:
    """`add×3, matmul×2, ...`: the `top` most frequent ops of `values`, and how many other ops."""
    counts = Counter(v.op for v in values).most_common()
    text = ", ".join(f"{op}×{c:,}" for op, c in counts[:top])
    return text + (f", +{len(counts) - top} ops" if len(counts) > top else "")


# -- repeated scopes ---------------------------------------------------------------------------------


def _attrs_key(v: Value) -> tuple:
    # a constant's value and an input's name are data, not structure
    return () if v.op in ("input", "const") else tuple(sorted((k, repr(a)) for k, a in v.attrs.items()))


def scope_signature(values: list[Value]) -> tuple:
    """The structure of one scope's values (graph order), names and numbers left out: per value its op,
    type, attributes, scope path below the top one, whether it is recomputed, and where each operand
    comes from (its position among `values`, or the type of a value from outside)."""
    pos = {v: k for k, v in enumerate(values)}
    return tuple((v.op, v.type_str, _attrs_key(v), _scope_path(v)[1:], is_recomputed(v),
                  tuple(pos[i] if i in pos else ("outside", i.type_str) for i in v.inputs)) for v in values)


def top_scopes(graph: Graph, users: dict[Value, list[Value]] | None = None) -> dict[str, list[Value]]:
    """Each top-level scope's values (as `home_path` places them), scopes in order of first appearance."""
    users = graph.users() if users is None else users
    out: dict[str, list[Value]] = {}
    for v in graph.all_values():
        path = home_path(v, users)
        if path:
            out.setdefault(path[0], []).append(v)
    return out


def repeated_scopes(graph: Graph, users: dict[Value, list[Value]] | None = None,
                    min_repeats: int = MIN_REPEATED_SCOPES) -> dict[str, list[Value]]:
    """The top-level scopes drawn as one box each: those whose `scope_signature` at least
    `min_repeats` top-level scopes share (block1..block10 of twelve residual blocks; the first and
    last blocks of a backward program often differ, and stay clusters). {name: values}, in order.
    (A scope name entered several times is one scope here: its values cannot be told apart.)"""
    tops = top_scopes(graph, users)
    alike: dict[tuple, list[str]] = {}
    for name, vs in tops.items():
        alike.setdefault(scope_signature(vs), []).append(name)
    keep = {name for names in alike.values() if len(names) >= min_repeats for name in names}
    return {name: vs for name, vs in tops.items() if name in keep}


def scope_keys(graph: Graph, scopes) -> dict[str, str]:
    """A key per repeated scope, the same in every diagram of `graph` (the box's SVG class
    `expand-<key>`; the HTML report's detail of that scope carries `data-expand="<key>"`)."""
    base = re.sub(r"[^A-Za-z0-9_-]+", "_", graph.name) or "graph"
    return {name: f"{base}-{k}" for k, name in enumerate(scopes)}


def _scope_box(dg: graphviz.Digraph, node_id: str, name: str, values: list[Value], *, key: str, member_ids: list[str],
               alike: int, roles: Counter, steps: list[int]):
    """One repeated scope as one box: its name, value count and bytes, op histogram, the outputs and
    saved values among them, its schedule steps. SVG classes name its detail and its members."""
    rows = [name, f"{len(values):,} values · {human_bytes(sum(v.nbytes for v in values))}", op_histogram(values)]
    if roles:
        rows.append(" · ".join(f"{c} {kind}" for kind, c in sorted(roles.items())))
    if steps:
        rows.append(f"steps {min(steps):,}–{max(steps):,}")
    sources = ", ".join(list(dict.fromkeys(v.source for v in values if v.source))[:4])
    dg.node(node_id, **dict(STYLES["scope"], group="repeated_scopes", label="{" + "|".join(_esc(r) for r in rows) + "}",
                            tooltip=f"scope {name}: {len(values):,} values as one box ({alike} top-level scopes "
                                    f"share its structure)\n{op_histogram(values, 20)}\nsource: {sources or '-'}",
                            **{"class": " ".join([SCOPE_CLASS, f"expand-{key}", *(f"m-{i}" for i in member_ids)])}))


def _new_digraph(name: str, title: str | None, rankdir: str = "TB") -> graphviz.Digraph:
    dg = graphviz.Digraph(name=name)
    dg.attr(rankdir=rankdir, fontname=FONT, labelloc="t", fontsize="16", newrank="true")
    if title:
        dg.attr(label=title)
    dg.attr("node", fontname=FONT, fontsize="11")
    dg.attr("edge", fontname=FONT, fontsize="9", color="#6b7280", arrowsize="0.7")
    return dg


def _emit_clustered(dg: graphviz.Digraph, items: list[tuple[tuple[str, ...], Callable]], prefix: str):
    """Call each item's `draw(subgraph)` inside nested clusters following its scope path."""
    top = [draw for path, draw in items if not path]
    for draw in top:
        draw(dg)
    groups: dict[str, list] = {}
    for path, draw in items:
        if path:
            groups.setdefault(path[0], []).append((path[1:], draw))
    for name, sub in groups.items():
        cluster = f"cluster_{prefix}{name}"
        with dg.subgraph(name=cluster) as c:
            c.attr(label=name, style="rounded,filled", fillcolor="#f8fafc", color="#94a3b8", fontname=FONT,
                   fontsize="12", tooltip=f"scope {name}")
            _emit_clustered(c, sub, f"{prefix}{name}/")


def _add_graph(dg: graphviz.Digraph, graph: Graph, prefix: str, schedule=None, saved: set[Value] = frozenset(),
               output_role: Callable[[int], str] | None = None, collapse_repeats: bool | None = None,
               boxes: dict[str, list[Value]] | None = None) -> tuple[dict[Value, str], set[str]]:
    """Draw `graph`'s values (clustered by scope) and operand edges into `dg`. Repeated top-level
    scopes (see `repeated_scopes`; unless `collapse_repeats` is False) are one box each (node id
    `<prefix>scope<k>`, all in one dot `group`: a chain of blocks stays one straight column), with
    one edge per pair of nodes values flow between. Returns each value's node id (a box's members:
    the box's) and the legend kinds used. `boxes`: `repeated_scopes(graph)` when the caller has it already."""
    ids = {v: f"{prefix}{graph.number(v)}" for v in graph.all_values()}
    lines = ir_lines(graph)
    outputs = set(graph.outputs)
    out_roles: dict[Value, list[str]] = {}
    for k, o in enumerate(graph.outputs):
        out_roles.setdefault(o, []).append(output_role(k) if output_role else f"output {k}")
    step, deps = {}, {}
    if schedule is not None:
        step = {s.node: s.index for s in schedule.steps}
        deps = dict(schedule.initial_counts)
    users = graph.users()
    if boxes is None:
        boxes = {} if collapse_repeats is False else repeated_scopes(graph, users)
    keys = scope_keys(graph, boxes)
    in_box = {v: name for name, vs in boxes.items() for v in vs}
    kinds: set[str] = set()
    items = []
    for v in graph.all_values():
        if v in in_box:
            continue
        kind = kind_of(v, outputs, saved)
        kinds.add(kind)
        extra = []
        if v in step:
            extra.append(f"step {step[v]} · deps {deps.get(v, 0)}")
        if v in out_roles:
            extra.append(", ".join(out_roles[v]))
        attrs = dict(STYLES[kind], label=node_label(v, graph, extra), tooltip=tooltip(v, lines[v]))
        if kind in ("output", "saved") and is_recomputed(v):
            attrs["style"] += ",dashed"
        items.append((home_path(v, users), lambda g, v=v, attrs=attrs: g.node(ids[v], **attrs)))
    _emit_clustered(dg, items, prefix)
    alike = Counter(scope_signature(vs) for vs in boxes.values())
    for k, (name, vs) in enumerate(boxes.items()):
        box = f"{prefix}scope{k}"
        roles = Counter(kind for v in vs if (kind := kind_of(v, outputs, saved)) in ("output", "saved"))
        _scope_box(dg, box, name, vs, key=keys[name], member_ids=[ids[v] for v in vs],
                   alike=alike[scope_signature(vs)], roles=roles, steps=[step[v] for v in vs if v in step])
        ids.update((v, box) for v in vs)
        kinds.add("scope")
    flows: dict[tuple[str, str], list[Value]] = {}
    for n in graph.nodes:
        for pos, i in enumerate(n.inputs):
            a, b = ids[i], ids[n]
            if i in in_box or n in in_box:
                if a != b:
                    flows.setdefault((a, b), []).append(i)
                continue
            dg.edge(a, b, tooltip=f"{value_name(i, graph)} -> {value_name(n, graph)} (operand {pos})")
    for (a, b), uses in flows.items():  # into, out of or between boxes: one edge per pair
        vals = list(dict.fromkeys(uses))
        text = f"{len(vals)} values · {human_bytes(sum(v.nbytes for v in vals))}"
        names = ", ".join(value_name(v, graph) for v in vals[:20]) + (" ..." if len(vals) > 20 else "")
        dg.edge(a, b, tooltip=f"{text} ({len(uses)} operand uses): {names}",
                **({"label": f"{len(vals)} values"} if len(vals) > 1 else {}))
    return ids, kinds


def _legend(dg: graphviz.Digraph, kinds: set[str], schedule: bool = False):
    """A cluster with one sample node per kind drawn (node ids start with LEGEND_PREFIX)."""
    with dg.subgraph(name="cluster_legend") as c:
        c.attr(label="legend", style="rounded", color="#cbd5e1", fontname=FONT, fontsize="11")
        for kind in STYLES:
            if kind in kinds:
                text = LEGEND_TEXT[kind] + ("\\nstep · deps: schedule step, initial dependency count"
                                            if schedule and kind == "op" else "")
                c.node(LEGEND_PREFIX + kind, **dict(STYLES[kind], shape="box", label=text,
                                                      style=STYLES[kind]["style"] + ",rounded"))


def graph_diagram(graph: Graph, *, schedule=None, title: str | None = None, legend: bool = True,
                  saved_from: int | None = None, output_names: list[str] | None = None,
                  collapse_repeats: bool | None = None) -> graphviz.Digraph:
    """A diagram of `graph`: one node per value (op, shape, dtype; the IR and source line as tooltip),
    one edge per operand use, scopes as clusters. With a `schedule` (passes.schedule.Schedule of
    this graph), each scheduled node shows its step and initial dependency count. `saved_from`:
    outputs from this position on are residuals (a partitioned forward program's saved values).
    `output_names`: what each output is (a backward program's gradients: `d w1`, ...).
    `collapse_repeats` (default: on; False: off) draws each top-level scope whose structure
    MIN_REPEATED_SCOPES or more scopes share as one box (see `repeated_scopes`, `_add_graph`)."""
    boxes = {} if collapse_repeats is False else repeated_scopes(graph)
    dg = _new_digraph(graph.name, title or f"graph {graph.name}: {len(graph.inputs)} inputs, {len(graph.nodes)} nodes"
                      + (f"; {len(boxes)} repeated scopes as one box each" if boxes else ""))
    saved, role = set(), (output_names.__getitem__ if output_names else None)
    if saved_from is not None:
        saved = set(graph.outputs[saved_from:]) - set(graph.outputs[:saved_from])
        role = lambda i: f"output {i}" if i < saved_from else f"saved #{i - saved_from}"
    _, kinds = _add_graph(dg, graph, "v", schedule, saved=saved, output_role=role, boxes=boxes)
    if legend:
        _legend(dg, kinds, schedule is not None)
    return dg


def kernel_diagram(program, *, title: str | None = None, legend: bool = True) -> graphviz.Digraph:
    """The fused program (gradir.passes.fusion.FusedProgram) of a graph: its values, with the nodes of
    each kernel drawn inside one cluster labelled with the kernel's loop nest and bytes moved. Views,
    inputs and constants stay outside: they are memory the kernels read, not work."""
    graph = program.graph
    dg = _new_digraph(f"{graph.name}_kernels", title or f"{graph.name}: {len(program.kernels)} fused kernels")
    ids = {v: f"v{graph.number(v)}" for v in graph.all_values()}
    lines = ir_lines(graph)
    outputs = set(graph.outputs)
    kinds: set[str] = set()

    def draw(g, v, node_id):
        kind = kind_of(v, outputs)
        kinds.add(kind)
        label = node_label(v, graph) if v in lines else f"copy of {value_name(v.inputs[0], graph)}"
        g.node(node_id, **dict(STYLES[kind], label=label, tooltip=tooltip(v, lines.get(v, "copy"))))

    drawn = set()
    for k in program.kernels:
        with dg.subgraph(name=f"cluster_kernel{k.index}") as c:
            c.attr(label=kernel_header(k, program), style="rounded,filled", fillcolor="#fefce8" if k.kind != "numpy"
                   else "#fee2e2", color="#ca8a04", fontname=FONT, fontsize="11", tooltip=k.name)
            for n in k.nodes:
                ids.setdefault(n, f"k{k.index}c{len(drawn)}")
                draw(c, n, ids[n])
                drawn.add(n)
    for v in graph.all_values():
        if v not in drawn:
            draw(dg, v, ids[v])
    for n in [*graph.nodes, *(n for k in program.kernels for n in k.nodes if n not in lines)]:
        for i in n.inputs:
            dg.edge(ids[i], ids[n])
    if legend:
        _legend(dg, kinds)
    return dg


# -- scalar programs: data and grad per value (micrograd's draw_dot) ----------------------------------


def values_and_grads(graph: Graph, args: list) -> tuple[dict[Value, np.ndarray], dict[Value, np.ndarray]]:
    """Every value of `graph` (a scalar-valued program) at `args`, and the output's gradient with
    respect to each real floating value. The gradient of an intermediate n is found by adding a
    zero input to n (n + e) and differentiating with respect to e, through passes.joint_graph."""
    if len(graph.outputs) != 1 or graph.outputs[0].shape != ():
        raise ShapeError(f"a value diagram needs one scalar output; {graph.name} returns ("
                         + ", ".join(o.type_str for o in graph.outputs) + ")", op="value_diagram",
                         source=graph.outputs[0].source if graph.outputs else None)
    everything = Graph(graph.name)
    everything.inputs, everything.nodes, everything.outputs = graph.inputs, graph.nodes, graph.all_values()
    data = dict(zip(graph.all_values(), run(everything, list(args))))

    probe = Graph(f"{graph.name}_probe")
    env: dict[Value, Value] = {x: probe.add_input(x.shape, x.dtype, x.attrs.get("name"), x.source) for x in graph.inputs}
    probed: list[Value] = []
    for n in graph.nodes:
        v = probe.append(n.op, [env[i] for i in n.inputs], n.attrs, n.shape, n.dtype, n.source, n.scope)
        if n.op != "const" and dtypes.is_float(n.dtype):
            e = probe.add_input(n.shape, n.dtype, f"probe{len(probed)}")
            v = probe.append("add", [v, e], {}, n.shape, n.dtype, n.source, n.scope)
            probed.append(n)
        env[n] = v
    probe.outputs = [env[graph.outputs[0]]]
    wrt_inputs = [x for x in graph.inputs if dtypes.is_float(x.dtype)]
    wrt = [i for i, x in enumerate(graph.inputs) if dtypes.is_float(x.dtype)]
    wrt += list(range(len(graph.inputs), len(probe.inputs)))
    joint = joint_graph(probe, wrt)
    zeros = [np.zeros(n.shape, n.dtype) for n in probed]
    out = run(joint, list(args) + zeros + [np.ones((), graph.outputs[0].dtype)])
    grads = dict(zip(wrt_inputs + probed, out[1:]))
    return data, grads


def trace_function(fn: Callable, *args) -> Graph:
    """`fn` traced at `args` (pytrees of numbers and arrays) by the core tracer, as `gr.trace` does it:
    inputs named after `fn`'s parameters (``a``, ``params['W1']``), the graph after `fn`."""
    flat, in_tree = tree_flatten(tuple(args))
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    names = [path for pos, a in enumerate(args)
             for path, _ in tree_flatten_with_path(a, params[pos] if pos < len(params) else f"arg{pos}")[0]]
    base = fn.func if isinstance(fn, functools.partial) else fn
    graph = trace_flat(fn, [np.asarray(x) for x in flat], names, lambda ps: tree_unflatten(in_tree, ps),
                       getattr(base, "__name__", "f").replace("<lambda>", "f"))
    graph.in_tree = in_tree
    graph.verify()
    return graph


def value_diagram(fn: Callable | Graph, *args, title: str | None = None) -> graphviz.Digraph:
    """micrograd's draw_dot for a scalar-valued function: one node per value showing its op, its
    data and its grad (d output / d value), left to right. `fn` may also be a Graph already traced
    (`gr.trace(fn, *args)`), evaluated at `args`."""
    graph = fn if isinstance(fn, Graph) else trace_function(fn, *args)
    flat, _ = tree_flatten(tuple(args))
    data, grads = values_and_grads(graph, [np.asarray(a) for a in flat])
    dg = _new_digraph(f"{graph.name}_values", title or f"{graph.name}: data and grad of every value", rankdir="LR")
    lines = ir_lines(graph)
    outputs = set(graph.outputs)
    for v in graph.all_values():
        kind = kind_of(v, outputs)
        grad = f"grad {_short(grads[v])}" if v in grads else "grad -"
        label = "{" + "|".join(_esc(r) for r in (
            value_name(v, graph) + ("" if v.op == "input" else f" {v.op}"), f"data {_short(data[v])}", grad)) + "}"
        dg.node(f"v{graph.number(v)}", **dict(STYLES[kind], label=label, tooltip=tooltip(v, lines[v])))
    for n in graph.nodes:
        for i in n.inputs:
            dg.edge(f"v{graph.number(i)}", f"v{graph.number(n)}")
    return dg
