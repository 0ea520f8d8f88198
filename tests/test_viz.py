"""gradir.viz: diagrams, memory plots, the HTML report and notebook display.

Every produced SVG and HTML file is parsed. Node and edge counts are checked against the graph
(one node per value, one edge per operand use, read from the graph's networkx view), saved-tensor
edges against the partition, clusters against `dot -Tjson`'s own subgraph membership, values and
grads in the value view against TEACHING.md A and PyTorch autograd.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections import Counter
from html.parser import HTMLParser

import numpy as np
import pytest

import gradir as gr
from gradir import viz
from gradir.passes.report import human_bytes

SVG = "{http://www.w3.org/2000/svg}"
XLINK_TITLE = "{http://www.w3.org/1999/xlink}title"

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="the Graphviz `dot` program is not installed")


# -- models -------------------------------------------------------------------------------------------


def tanh_loss(a, b):  # TEACHING.md A
    m = a * b
    z = m + a
    return gr.tanh(z)


def blocks_model(x, ws):
    h = x
    for i, w in enumerate(ws):
        with gr.scope(f"block{i}"):
            h = h + gr.tanh(h @ w)
    return gr.sum(h * h)


def blocks_args(n=4, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((4, 8)), [rng.standard_normal((8, 8)) * 0.3 for _ in range(n)]


@pytest.fixture(scope="module")
def scalar():
    return gr.trace_grad(tanh_loss, 1.5, -2.0, argnums=(0, 1))


@pytest.fixture(scope="module")
def remat():
    return gr.trace_grad(blocks_model, *blocks_args(), argnums=1, remat="uniform", segments=2)


@pytest.fixture(scope="module")
def plain():
    return gr.trace_grad(blocks_model, *blocks_args(), argnums=1)


# -- reading SVG ----------------------------------------------------------------------------------------


def groups_of(svg: str, cls: str) -> list[ET.Element]:
    root = ET.fromstring(svg)
    return [g for g in root.iter(SVG + "g") if g.get("class") == cls]


def title(g: ET.Element) -> str:
    return g.find(SVG + "title").text


def tooltip_of(g: ET.Element) -> str:
    a = next(iter(g.iter(SVG + "a")), None)
    return "" if a is None else a.get(XLINK_TITLE, "")


def texts(g: ET.Element) -> list[str]:
    return [t.text or "" for t in g.iter(SVG + "text")]


def render(dg) -> str:
    r = viz.render_svg(dg)
    assert r.svg is not None, r.error
    return r.svg


def legend_kinds(graph, saved=frozenset()) -> set[str]:
    """The legend entries a diagram must show, from the spec: how each value is drawn."""
    outs = set(graph.outputs)
    kinds = set()
    for v in graph.all_values():
        kinds.add("saved" if v in saved else "output" if v in outs else "input" if v.op == "input" else
                  "const" if v.op == "const" else "recompute" if "recompute" in v.scope else "op")
    return kinds


def operand_edges(graph, prefix) -> Counter:
    """(producer id, user id) per operand use, from the graph's networkx view."""
    nxg = graph.to_networkx()
    return Counter((f"{prefix}{u}", f"{prefix}{v}") for u, v, _ in nxg.edges(keys=True))


def dot_json(dg) -> dict:
    done = subprocess.run(["dot", "-Tjson"], input=dg.source.encode(), capture_output=True, check=True)
    return json.loads(done.stdout)


# -- one graph -----------------------------------------------------------------------------------------


@needs_dot
@pytest.mark.parametrize("which", ["forward", "backward", "graph"])
def test_graph_diagram_one_node_per_value_one_edge_per_operand_use(scalar, which):
    graph = getattr(scalar, which)
    svg = render(viz.graph_diagram(graph))
    nodes = groups_of(svg, "node")
    legend = {title(n) for n in nodes if title(n).startswith("legend_")}
    values = [title(n) for n in nodes if not title(n).startswith("legend_")]
    assert sorted(values) == sorted(f"v{k}" for k in range(len(graph.inputs) + len(graph.nodes)))
    assert legend == {f"legend_{k}" for k in legend_kinds(graph)}
    assert len(nodes) == len(graph.inputs) + len(graph.nodes) + len(legend)
    edges = Counter(tuple(title(e).split("->")) for e in groups_of(svg, "edge"))
    assert edges == operand_edges(graph, "v")
    assert sum(edges.values()) == sum(len(n.inputs) for n in graph.nodes)


@needs_dot
def test_tooltips_carry_the_ir_line_and_source_line(remat):
    graph = remat.graph
    lines = str(graph).splitlines()[1:-2]  # one per value, in %k order
    svg = render(viz.graph_diagram(graph, collapse_repeats=False))  # (node by node: four alike blocks would be boxes)
    by_id = {title(n): n for n in groups_of(svg, "node")}
    for k, v in enumerate(graph.all_values()):
        tip = " ".join(tooltip_of(by_id[f"v{k}"]).split())  # dot writes runs of spaces as no-break spaces
        assert " ".join(lines[k].split()) in tip
        if v.source:
            assert f"test_viz.py:{v.source.split(':')[-1]}" in tip and v.source in tip
    # the node text shows op, shape and dtype
    n = next(v for v in graph.nodes if v.op == "matmul")
    shown = " ".join(texts(by_id[f"v{graph.number(n)}"]))
    assert "matmul" in shown and "f64[4,8]" in shown


@needs_dot
def test_scopes_become_clusters_holding_their_nodes(remat):
    graph = remat.graph
    layout = dot_json(viz.graph_diagram(graph, collapse_repeats=False))  # (test_viz_repeated: boxes instead)
    names = {o["_gvid"]: o["name"] for o in layout["objects"]}
    clusters = {o["label"]: {names[i] for i in o.get("nodes", [])} for o in layout["objects"]
                if o["name"].startswith("cluster_") and o["label"] != "legend"}
    expected: dict[str, set[str]] = {}
    for k, v in enumerate(graph.all_values()):
        if v.scope:
            expected.setdefault(v.scope[0], set()).add(f"v{k}")
    assert set(expected) == {"block0", "block1", "block2", "block3"}
    assert clusters == expected
    svg = render(viz.graph_diagram(graph, collapse_repeats=False))
    assert {title(c) for c in groups_of(svg, "cluster")} >= {f"cluster_v{s}" for s in expected}


@needs_dot
def test_backward_nodes_show_schedule_step_and_dependency_count(plain):
    bwd, sched = plain.backward, plain.schedule
    svg = render(viz.graph_diagram(bwd, schedule=sched, collapse_repeats=False))
    by_id = {title(n): n for n in groups_of(svg, "node")}
    nodes = set(bwd.nodes)
    step = {}
    for k, v in enumerate(bwd.all_values()):
        shown = " ".join(texts(by_id[f"v{k}"]))
        m = re.search(r"step (\d+) · deps (\d+)", shown)
        if v.op == "input":
            assert m is None
            continue
        deps = sum(1 for i in v.inputs if i in nodes)  # operands made by other nodes, not given as inputs
        assert m and int(m.group(2)) == deps, shown
        step[v] = int(m.group(1))
    assert sorted(step.values()) == list(range(len(bwd.nodes)))
    for v in bwd.nodes:  # the shown steps are a valid execution order
        assert all(step[i] < step[v] for i in v.inputs if i in nodes)


@needs_dot
def test_recomputed_nodes_are_drawn_dashed_orange_with_a_legend(remat, plain):
    def dashed_orange(svg):
        out = set()
        for n in groups_of(svg, "node"):
            shapes = [e for e in n.iter() if e.tag in (SVG + "path", SVG + "polygon")]
            if any(s.get("stroke") == "#ea580c" and s.get("stroke-dasharray") for s in shapes):
                out.add(title(n))
        return out

    bwd = remat.backward
    svg = render(viz.graph_diagram(bwd))
    drawn = dashed_orange(svg)
    recomputed = {f"v{k}" for k, v in enumerate(bwd.all_values()) if "recompute" in v.scope}
    # uniform, 2 segments of 4 blocks (matmul, tanh, add each): the first segment's 6 nodes are
    # recomputed except block1's add, which enters block2 and is kept: 5 nodes
    assert len(recomputed) == 5
    assert drawn - {"legend_recompute"} == recomputed
    assert "legend_recompute" in drawn
    assert dashed_orange(render(viz.graph_diagram(plain.backward))) == set()


# -- forward and backward together --------------------------------------------------------------------


def saved_edges(svg):
    # ids saved<i>; inlined SVGs (svg_of, the HTML report) prefix every id
    return [e for e in groups_of(svg, "edge") if re.fullmatch(r"(.*-)?saved\d+", e.get("id", ""))]


@needs_dot
@pytest.mark.parametrize("fixture", ["scalar", "plain", "remat"])
def test_joint_diagram_saved_edges_match_the_saved_report(fixture, request):
    gt = request.getfixturevalue(fixture)
    part = gt.partition
    svg = render(viz.joint_diagram(gt, collapse_repeats=False))  # (node by node: one node per value)
    edges = saved_edges(svg)
    assert len(edges) == gt.saved.count == len(part.residuals)
    k = part.forward.num_forward_outputs
    for i, e in enumerate(sorted(edges, key=lambda e: int(e.get("id")[5:]))):
        src, dst = title(e).split("->")
        fv = part.forward.outputs[k + i]
        assert src == f"f{part.forward.number(fv)}" and dst == f"b{i}"  # the backward's i-th input receives it
        nbytes = math.prod(fv.shape) * fv.dtype.itemsize
        assert human_bytes(nbytes) in " ".join(texts(e))
    fwd_vals, bwd_vals = len(part.forward.all_values()), len(part.backward.all_values())
    nodes = [title(n) for n in groups_of(svg, "node") if not title(n).startswith("legend_")]
    assert len(nodes) == fwd_vals + bwd_vals
    plain_edges = [e for e in groups_of(svg, "edge") if not e.get("id", "").startswith("saved")]
    assert len(plain_edges) == sum(len(n.inputs) for g in (part.forward, part.backward) for n in g.nodes)
    clusters = {title(c) for c in groups_of(svg, "cluster")}
    assert {"cluster_forward", "cluster_backward"} <= clusters


@needs_dot
def test_recomputation_saves_fewer_tensors_in_the_joint_diagram(plain, remat):
    n_plain = len(saved_edges(render(viz.joint_diagram(plain))))
    n_remat = len(saved_edges(render(viz.joint_diagram(remat))))
    # no remat: x and ws[1..3] (ws[0] only multiplies x, whose gradient is not asked for), and per
    # block its tanh and add (8); uniform also keeps ws[0] (to recompute block0), and of the
    # activations only block1's add and blocks 2-3's tanh and add
    assert (n_plain, n_remat) == (4 + 8, 5 + 5)


# -- large graphs -------------------------------------------------------------------------------------


def big_model(x, ws):
    h = x
    for i, w in enumerate(ws):
        with gr.scope(f"layer{i}"):
            h = gr.tanh(h @ w) * 0.5 + h
    return gr.mean(h * h)


@pytest.fixture(scope="module")
def big():
    return gr.trace(big_model, *blocks_args(n=40, seed=1))


def overview_groups(graph):
    def key(v):
        if v.op == "input":
            return "inputs"
        return v.scope[0] if v.scope else f"line {v.source}"
    return {v: key(v) for v in graph.all_values()}


@needs_dot
def test_overview_collapses_a_large_graph_by_scope(big):
    assert len(big.all_values()) > viz.LARGE_GRAPH and viz.is_large(big)
    group = overview_groups(big)
    flows = {(group[i], group[n]) for n in big.nodes for i in n.inputs if group[i] != group[n]}
    svg = render(viz.overview_diagram(big))
    nodes = groups_of(svg, "node")
    assert len(nodes) == len(set(group.values())) == 40 + 2  # 40 layers, the inputs, the loss line
    assert len(groups_of(svg, "edge")) == len(flows)
    counts = Counter(group.values())
    for n in nodes:
        head, count = texts(n)[:2]
        assert count.split()[0] == str(counts[head])
    assert len(groups_of(viz.svg_of(big), "node")) == len(nodes)  # notebook display uses the overview


@needs_dot
def test_scope_diagrams_detail_each_group(big):
    group = overview_groups(big)
    subs = viz.scope_diagrams(big)
    assert set(subs) == set(group.values()) - {"inputs"}
    for name in ("layer0", "layer17"):
        members = [v for v in big.all_values() if group[v] == name]
        external = {i for v in members for i in v.inputs if group[i] != name}
        svg = render(subs[name])
        nodes = [title(n) for n in groups_of(svg, "node") if not title(n).startswith("legend_")]
        assert sorted(nodes) == sorted([f"v{big.number(v)}" for v in members] + [f"ext{big.number(v)}" for v in external])
        assert len(groups_of(svg, "edge")) == sum(len(v.inputs) for v in members)


@needs_dot
def test_collapsed_joint_diagram_bundles_the_saved_edges():
    gt = gr.trace_grad(big_model, *blocks_args(n=40, seed=1), argnums=1)
    svg = render(viz.joint_diagram(gt))
    assert saved_edges(svg) == []
    bundles = [e for e in groups_of(svg, "edge") if e.get("id", "").startswith("savedgroup")]
    counts = [int(re.match(r"(\d+) saved", " ".join(texts(e))).group(1)) for e in bundles]
    assert sum(counts) == gt.saved.count == len(gt.partition.residuals)
    assert len(groups_of(svg, "node")) < 2 * (40 + 3)


# -- value view ---------------------------------------------------------------------------------------


def test_values_and_grads_match_teaching_a():
    graph = gr.trace(tanh_loss, 1.5, -2.0)
    data, grads = viz.values_and_grads(graph, [np.float64(1.5), np.float64(-2.0)])
    a, b = graph.inputs
    m, z, L = graph.nodes
    assert (m.op, z.op, L.op) == ("multiply", "add", "tanh")
    assert data[m] == -3.0 and data[z] == -1.5 and data[L] == pytest.approx(-0.9051482536, abs=1e-10)
    assert grads[L] == 1.0
    assert grads[z] == pytest.approx(0.1807066389, abs=1e-10) and grads[m] == pytest.approx(0.1807066389, abs=1e-10)
    assert grads[a] == pytest.approx(-0.1807066389, abs=1e-10) and grads[b] == pytest.approx(0.2710599584, abs=1e-10)


def test_values_and_grads_match_torch_on_every_intermediate():
    torch = pytest.importorskip("torch")

    def f(a, b, c):
        return (a * b + c) * gr.tanh(a) / b

    args = (0.7, -1.3, 2.1)
    graph = gr.trace(f, *args)
    data, grads = viz.values_and_grads(graph, [np.float64(x) for x in args])
    ta, tb, tc = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in args)
    steps = [ta * tb]
    steps.append(steps[-1] + tc)
    steps.append(torch.tanh(ta))
    steps.append(steps[1] * steps[2])
    steps.append(steps[3] / tb)
    for s in steps:
        s.retain_grad()
    steps[-1].backward()
    assert [n.op for n in graph.nodes] == ["multiply", "add", "tanh", "multiply", "divide"]
    for n, t in zip(graph.nodes, steps):
        assert data[n] == pytest.approx(t.item(), rel=1e-14)
        assert grads[n] == pytest.approx(t.grad.item(), rel=1e-13)
    for x, t in zip(graph.inputs, (ta, tb, tc)):
        assert grads[x] == pytest.approx(t.grad.item(), rel=1e-13)


@needs_dot
def test_value_diagram_shows_data_and_grad(scalar):
    svg = render(viz.value_diagram(tanh_loss, 1.5, -2.0))
    shown = {title(n): " ".join(texts(n)) for n in groups_of(svg, "node")}
    assert len(shown) == 5 and len(groups_of(svg, "edge")) == 5
    assert "data 1.5" in shown["v0"] and "grad -0.1807" in shown["v0"]
    assert "data -2" in shown["v1"] and "grad 0.2711" in shown["v1"]
    assert "data -3" in shown["v2"] and "grad 0.1807" in shown["v2"]
    assert "data -1.5" in shown["v3"] and "grad 0.1807" in shown["v3"]
    assert "data -0.9051" in shown["v4"] and "grad 1" in shown["v4"]


def test_value_diagram_needs_a_scalar_output():
    with pytest.raises(gr.errors.ShapeError, match=r"one scalar output; f returns \(f64\[3\]\)") as e:
        viz.value_diagram(lambda x: x * 2.0, np.ones(3))
    assert e.value.op == "value_diagram" and "test_viz.py" in str(e.value)


# -- memory plot --------------------------------------------------------------------------------------


def test_memory_timeline_svg_and_png(remat, plain, tmp_path):
    plans = {"no remat": plain.memory, "uniform": remat.memory, "uniform, memory": remat.with_policy("memory").memory}
    path = viz.memory_timeline(plans, tmp_path / "mem.svg", title="blocks")
    assert path == tmp_path / "mem.svg"
    root = ET.parse(path).getroot()
    text = " ".join(t.text or "" for t in root.iter(SVG + "text"))
    for name, p in plans.items():
        assert f"{name} peak {human_bytes(p.peak_bytes)}" in text  # two lines: the name, then the figures
    # saved spans: activations the forward keeps (4x8 float64 = 256 B each); no remat keeps tanh
    # and add of each of 4 blocks, uniform keeps block1's add and blocks 2-3's tanh and add
    assert "saved for backward: 8 buffers, 2.00 KiB" in text
    assert text.count("saved for backward: 5 buffers, 1.25 KiB") == 2
    assert "backward" in text and "forward" in text
    png = viz.memory_timeline({"a": plain.memory}, tmp_path / "mem.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mem.png", "mem.svg"]  # no temporary files left


def test_memory_timeline_of_scalar_program_has_no_buffers(scalar, tmp_path):
    path = viz.memory_timeline({"engine": scalar.memory}, tmp_path / "m.svg")
    text = " ".join(t.text or "" for t in ET.parse(path).getroot().iter(SVG + "text"))
    assert "no buffers counted" in text


def test_memory_timeline_rejects_unknown_format(plain, tmp_path):
    with pytest.raises(gr.GradirError, match="unknown plot format 'jpeg'"):
        viz.memory_timeline({"a": plain.memory}, tmp_path / "m.jpeg")


# -- the HTML report ----------------------------------------------------------------------------------


class Page(HTMLParser):
    """Collects tags, attributes, text per <pre>, tables and inline <svg> roots."""

    def __init__(self):
        super().__init__()
        self.tags = Counter()
        self.attrs: list[tuple[str, str, str]] = []
        self.pres: list[str] = []
        self.tables: list[int] = []  # body rows per table
        self.svg_depth = 0
        self.top_svgs = 0
        self._pre: list[str] | None = None
        self._tbody = False
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags[tag] += 1
        self.attrs += [(tag, k, v or "") for k, v in attrs]
        if tag == "svg":
            self.top_svgs += self.svg_depth == 0
            self.svg_depth += 1
        elif tag == "pre":
            self._pre = []
        elif tag == "tbody":
            self.tables.append(0)
            self._tbody = True
        elif tag == "tr" and self._tbody:
            self.tables[-1] += 1

    def handle_endtag(self, tag):
        if tag == "svg":
            self.svg_depth -= 1
        elif tag == "tbody":
            self._tbody = False
        elif tag == "pre" and self._pre is not None:
            self.pres.append("".join(self._pre))
            self._pre = None

    def handle_data(self, data):
        self.text.append(data)
        if self._pre is not None:
            self._pre.append(data)


def parse_page(path) -> Page:
    page = Page()
    page.feed(path.read_text())
    page.close()
    return page


def assert_self_contained(page: Page, raw: str, folder=None):
    """Nothing is fetched: no scripts, frames, images or styles from elsewhere (the schedule player's script is
    inline, no `src`); links go to anchors in the page or (with `folder`) to files written beside it, opened only
    when clicked."""
    assert page.tags["link"] == 0 and page.tags["iframe"] == 0 and page.tags["img"] == 0
    for tag, k, v in page.attrs:
        if k in ("href", "src", "xlink:href", "action", "data"):
            beside = folder is not None and tag == "a" and k == "href" and "/" not in v and (folder / v).is_file()
            assert v.startswith("#") or beside, (tag, k, v)
    without_ns = re.sub(r'xmlns(:\w+)?="[^"]*"', "", raw)
    assert not re.search(r"(https?:|ftp:)?//[\w.-]+\.\w", without_ns), re.search(r"\S*//\S*", without_ns)
    assert "@import" not in raw and not re.search(r"url\((?!#)", raw)


@needs_dot
def test_write_report_writes_every_file_and_one_self_contained_html(remat, tmp_path):
    calls = []
    written = viz.write_report(remat, tmp_path, "blocks", progress=lambda *a: calls.append(a))
    keys = {"forward.dot", "forward.svg", "backward.dot", "backward.svg", "joint.dot", "joint.svg", "memory.svg", "html",
            "forward.kernels.dot", "forward.kernels.svg", "backward.kernels.dot", "backward.kernels.svg"}
    assert set(written) == keys and written.notes == [] and written.diagrams_drawn
    names = sorted(f"blocks.{k}" if k != "html" else "blocks.html" for k in keys)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*names, "blocks.manifest.json"])
    manifest = json.loads(written.manifest.read_text())
    assert manifest["status"] == "complete" and sorted(manifest["files"]) == names
    for k, p in written.items():
        assert p.exists() and p.stat().st_size > 0
        if k.endswith(".svg"):
            ET.parse(p)
        if k.endswith(".dot"):
            assert p.read_text().startswith("digraph")
    # the written joint diagram is the one checked above: saved edges = the saved-tensor report
    assert len(saved_edges(written["joint.svg"].read_text())) == remat.saved.count

    raw = written["html"].read_text()
    page = parse_page(written["html"])
    # forward, backward, their kernels, joint, memory plot; and each of the forward's four alike blocks drawn alone,
    # the detail its box expands into (the backward's blocks differ: segment ends and recomputation)
    assert raw.count("<details data-expand=") == 4
    assert page.top_svgs == 6 + 4
    assert_self_contained(page, raw)
    pres = page.pres
    assert remat.forward.to_text() in pres and remat.backward.to_text() in pres
    # tables: schedule (one row per backward node), saved tensors (+ total row), memory plans, timeline
    assert len(remat.backward.nodes) in page.tables
    assert remat.saved.count + 1 in page.tables
    assert len(viz.memory_plans(remat)) in page.tables
    assert "uniform" in "".join(page.text)
    # the inlined diagrams keep their node count, with ids made unique across the page
    ids = [v for t, k, v in page.attrs if k == "id"]
    assert len(ids) == len(set(ids))
    drawn = ("forward", "backward", "forward.kernels", "backward.kernels", "joint")
    figures = re.sub(r'<div class="scope-details">.*?</details></div>', "", raw, flags=re.S)  # (without the details)
    nodes = re.compile(r'class="node[ "]')  # (a box's classes follow "node")
    assert len(nodes.findall(figures)) == sum(len(nodes.findall(written[f"{k}.svg"].read_text())) for k in drawn)
    # progress: a call per step (each diagram, the plot, the page), steps done never decreasing, then done
    steps = [c[0] for c in calls]
    assert {"drawing forward", "drawing backward", "drawing joint", "plotting memory"} <= set(steps)
    done = [c[1] for c in calls]
    assert done == sorted(done) and calls[-1] == ("done", calls[-1][2], calls[-1][2])


@needs_dot
def test_write_report_of_a_large_graph_writes_overview_and_packed_regions(tmp_path):
    """41 groups (40 layers and the loss line) are packed into MAX_REGIONS region diagrams of
    consecutive layers; every forward value is drawn as its own node in exactly one of them, except
    constants several layers read, which are drawn beside each reader instead."""
    gt = gr.trace_grad(big_model, *blocks_args(n=40, seed=1), argnums=1)
    written = viz.write_report(gt, tmp_path, "big")
    fwd = gt.forward
    assert viz.is_large(fwd)
    group = overview_groups(fwd)
    users = fwd.users()
    shared = {v for v in fwd.nodes if v.op == "const" and len({group[u] for u in users[v]}) > 1}
    region_keys = sorted(k for k in written if k.startswith("forward.") and k.endswith(".svg") and k != "forward.svg")
    assert len(region_keys) == viz.regions.MAX_REGIONS < len(set(group.values()) - {"inputs"}) == 41
    owned = Counter()
    for k in region_keys:
        titles = [title(n) for n in groups_of(written[k].read_text(), "node")]
        owned.update(t for t in titles if t.startswith("v"))
    expected = {f"v{fwd.number(v)}" for v in fwd.nodes if v not in shared}
    assert set(owned) == expected and set(owned.values()) == {1}
    raw = written["html"].read_text()
    page = parse_page(written["html"])
    assert_self_contained(page, raw, tmp_path)
    assert all(f'id="fig-{k.removesuffix(".svg")}"' in raw for k in region_keys)


@pytest.mark.parametrize("how", ["env", "path"])
def test_without_dot_the_sources_and_html_are_still_written(scalar, tmp_path, monkeypatch, how):
    if how == "env":
        monkeypatch.setenv("GRADIR_NO_DOT", "1")
    else:
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert not viz.dot_available()
    written = viz.write_report(scalar, tmp_path / "out", "tanh")
    assert set(written) == {"forward.dot", "backward.dot", "forward.kernels.dot", "backward.kernels.dot", "joint.dot",
                            "memory.svg", "html"}
    assert not written.diagrams_drawn and written.notes and "apt-get install graphviz" in written.notes[0]
    for k in ("forward", "backward", "joint"):
        assert written[f"{k}.dot"].read_text().startswith("digraph")
    raw = written["html"].read_text()
    page = parse_page(written["html"])
    assert "apt-get install graphviz" in raw and "tanh.joint.dot" in raw
    assert page.top_svgs == 1  # the memory plot only (matplotlib needs no `dot`)
    assert scalar.forward.to_text() in page.pres and scalar.backward.to_text() in page.pres
    assert_self_contained(page, raw)
    assert viz.svg_of(scalar.forward) is None
    assert "apt-get install graphviz" in viz.html_of(scalar.forward)


def test_dot_failure_is_reported_not_raised(monkeypatch, tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "dot").write_text("#!/bin/sh\necho 'syntax error in line 1' >&2\nexit 1\n")
    (fake / "dot").chmod(0o755)
    monkeypatch.setenv("PATH", str(fake))
    r = viz.render_svg(viz.graph_diagram(gr.trace(tanh_loss, 1.5, -2.0)))
    assert r.svg is None and "syntax error" in r.error


# -- notebook display ---------------------------------------------------------------------------------


@needs_dot
def test_notebook_helpers(scalar):
    svg = viz.svg_of(scalar.forward)
    ET.fromstring(svg)
    assert not svg.startswith("<?xml") and "<!DOCTYPE" not in svg
    assert len(groups_of(svg, "node")) == len(scalar.forward.all_values()) + len(
        legend_kinds(scalar.forward))
    joint = viz.svg_of(scalar)  # a GradTrace: the joint diagram
    assert len(saved_edges(joint)) == scalar.saved.count
    saved_html = viz.html_of(scalar.saved)
    assert "saved for backward: 3 values" in saved_html and "<pre" in saved_html
    page = Page()
    page.feed(viz.html_of(scalar))
    assert page.top_svgs == 6 and scalar.backward.to_text() in page.pres  # 5 diagrams (2 of kernels) + the plot


def test_notebook_display_hooks_on_graphs_traces_and_reports():
    import xml.etree.ElementTree as ET

    j = gr.trace_grad(lambda a, b: gr.tanh(a * b + a), 1.5, -2.0, argnums=(0, 1))
    graph_svg = j.forward._repr_svg_()
    if graph_svg is None:
        pytest.skip("the `dot` program is not installed")
    root = ET.fromstring(graph_svg)
    svg = "{http://www.w3.org/2000/svg}"
    titles = [g.find(f"{svg}title").text for g in root.iter(f"{svg}g") if g.get("class") == "node"]
    assert len([t for t in titles if not t.startswith("legend")]) == len(j.forward.all_values())
    assert "<svg" in j._repr_svg_() and "saved" in j._repr_html_()
    assert "<table" in j.saved._repr_html_() or "<pre" in j.saved._repr_html_()


def test_tradeoff_curve_plots_heuristics_and_the_optimal_steps(tmp_path):
    import xml.etree.ElementTree as ET
    from types import SimpleNamespace as Row

    from gradir.viz import tradeoff_curve

    rows = [Row(policy="none", budget=800, peak_bytes=800, recompute_flops=0),
            Row(policy="uniform-2", budget=800, peak_bytes=480, recompute_flops=46),
            Row(policy="optimal", budget=480, peak_bytes=480, recompute_flops=46),
            Row(policy="optimal", budget=400, peak_bytes=400, recompute_flops=55),
            Row(policy="optimal", budget=100, peak_bytes=None, recompute_flops=None)]  # infeasible: skipped
    path = tradeoff_curve(rows, tmp_path / "curve.svg")
    text = path.read_text()
    ET.fromstring(text)
    assert "uniform-2" in text and "none" in text and "optimal (MILP)" in text


def test_the_player_plays_at_most_max_steps_and_says_so(monkeypatch):
    # (every step's figures in a real browser: tests/test_viz_player.py)
    from gradir.passes.report import value_names
    from gradir.viz import player

    gt = gr.trace_grad(blocks_model, *blocks_args(), argnums=1)
    monkeypatch.setattr(player, "MAX_STEPS", 3)
    page = player.player_html(gt)
    data = json.loads(re.search(r'<script type="application/json" id="player-data">(.*?)</script>', page).group(1))
    name = value_names(gt.backward)
    assert data["fields"][0] == "node" and len(data["fields"]) == len(data["steps"][0])
    assert [data["strings"][s[0]] for s in data["steps"]] == [name[s.node] for s in gt.schedule.steps[:3]]
    assert data["total_steps"] == len(gt.schedule.steps) > 3
    assert f"first 3 of {len(gt.schedule.steps)} steps" in page


def test_gradient_nodes_are_named_after_their_inputs():
    gt = gr.trace_grad(tanh_loss, 1.5, -2.0, argnums=(0, 1))
    names = [x.attrs.get("name") for x in gt.graph.inputs]
    assert gt.gradient_names == [f"d {n}" for n in names]
    backward = viz.graph_diagram(gt.backward, schedule=gt.schedule, output_names=gt.gradient_names).source
    joint = viz.joint_diagram(gt).source
    for src in (backward, joint):  # (the joint's forward side keeps "output 0", the loss)
        assert all(f"|d {n}" in src for n in names) and "gradient 0" not in src
    assert "output 0" not in backward
