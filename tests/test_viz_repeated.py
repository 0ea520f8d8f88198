"""Repeated scopes drawn as one box each (issue 23, item 4: "a 12-block model fits a screen").

The model is example E's: twelve residual MLP blocks x + relu(x @ W1 + b1) @ W2 + b2, each in gr.scope(f"block{k}"),
width 256, batch 32, float32. The oracle is the IR, never the drawing code: a box's value count, bytes, op counts and
saved values are counted from the values whose scope names the block; the edges between boxes and nodes are the
operand uses of the graph, mapped to the element each value is drawn as. The HTML report holds each block drawn
alone (its values, by number), and in headless Chromium a click on a box opens that drawing.
"""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from test_viz import SVG, blocks_args, blocks_model, groups_of, render, texts, title

import gradir as gr
from gradir import viz
from gradir.passes.report import human_bytes

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="the Graphviz `dot` program is not installed")
SCREEN_PT = 2000  # a diagram this many points wide and high reads on a screen at its own size, or scaled once
WIDTH, BATCH, BLOCKS = 256, 32, 12  # example E's


def residual_blocks(params, x):
    for k, p in enumerate(params):
        with gr.scope(f"block{k}"):
            x = x + gr.relu(x @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"]
    return gr.mean(x * x)


def params_of(blocks=BLOCKS, width=WIDTH, widths=None, seed=0):
    rng = np.random.default_rng(seed)
    widths = widths or [width] * blocks
    f = np.float32
    params = [{"W1": rng.standard_normal((w, w)).astype(f), "b1": np.zeros(w, f), "W2": rng.standard_normal((w, w)).astype(f),
               "b2": np.zeros(w, f)} for w in widths]
    return params, rng.standard_normal((BATCH, widths[0])).astype(f)


@pytest.fixture(scope="module")
def twelve():
    return gr.trace_grad(residual_blocks, *params_of())


def size_pt(svg: str) -> tuple[float, float]:
    root = ET.fromstring(svg)
    return float(root.get("width").removesuffix("pt")), float(root.get("height").removesuffix("pt"))


def boxes_of(svg: str) -> dict[str, ET.Element]:
    """The boxes of a diagram by their first text line (the scope's name)."""
    return {texts(g)[0]: g for g in ET.fromstring(svg).iter(SVG + "g") if "gradir-scope" in (g.get("class") or "").split()}


def block_values(graph, k: int) -> list:
    return [v for v in graph.all_values() if v.scope[:1] == (f"block{k}",)]


# -- the diagram ---------------------------------------------------------------------------------------------


@needs_dot
def test_twelve_blocks_are_twelve_boxes_and_fit_a_screen(twelve):
    fwd = twelve.forward
    k = fwd.num_forward_outputs
    detailed = render(viz.graph_diagram(fwd, saved_from=k, collapse_repeats=False))
    svg = render(viz.graph_diagram(fwd, saved_from=k))
    w, h = size_pt(svg)
    assert w < SCREEN_PT and h < SCREEN_PT, (w, h)
    assert max(size_pt(detailed)) > 2 * SCREEN_PT  # (node by node: about 4600 x 6500 pt)
    boxes = boxes_of(svg)
    assert list(boxes) == [f"block{b}" for b in range(BLOCKS)]
    saved = set(fwd.outputs[k:]) - set(fwd.outputs[:k])
    for b in range(BLOCKS):
        vs = block_values(fwd, b)
        shown = " ".join(texts(boxes[f"block{b}"]))
        assert f"{len(vs)} values · {human_bytes(sum(int(np.prod(v.shape)) * v.dtype.itemsize for v in vs))}" in shown
        for op, count in Counter(v.op for v in vs).items():  # four ops: all shown
            assert f"{op}×{count}" in shown
        n_saved = sum(v in saved for v in vs)
        assert (f"{n_saved} saved" in shown) == (n_saved > 0)
    # every other value is its own node; one edge per pair of drawn elements that an operand use connects
    box_id = {name: title(g) for name, g in boxes.items()}
    element = {v: box_id.get(v.scope[0] if v.scope else "", f"v{fwd.number(v)}") for v in fwd.all_values()}
    nodes = {title(n) for n in ET.fromstring(svg).iter(SVG + "g") if (n.get("class") or "").split()[:1] == ["node"]}
    assert nodes - {n for n in nodes if n.startswith("legend_")} == set(element.values())
    edges = Counter(tuple(title(e).split("->")) for e in groups_of(svg, "edge"))
    uses = {(element[i], element[n]) for n in fwd.nodes for i in n.inputs if element[i] != element[n]}
    assert set(edges) == uses and max(edges.values()) == 1
    assert all((box_id[f"block{b}"], box_id[f"block{b + 1}"]) in uses for b in range(BLOCKS - 1))


@needs_dot
@pytest.mark.parametrize("case", ["two blocks", "three different activations", "three different widths"])
def test_fewer_than_three_alike_scopes_stay_clusters(case):
    if case == "two blocks":
        gt = gr.trace_grad(residual_blocks, *params_of(blocks=2, width=8))
    elif case == "three different widths":  # (each block square at its own width; the data narrowed into it)
        params, x = params_of(widths=[8, 6, 4])

        def narrowing(params, x):
            for k, p in enumerate(params):
                with gr.scope(f"block{k}"):
                    w = p["b1"].shape[0]
                    x = x[:, :w] + gr.relu(x[:, :w] @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"]
            return gr.mean(x * x)
        gt = gr.trace_grad(narrowing, params, x)
    else:
        acts = [gr.relu, gr.tanh, gr.sigmoid]

        def mixed(params, x):
            for k, p in enumerate(params):
                with gr.scope(f"block{k}"):
                    x = x + acts[k](x @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"]
            return gr.mean(x * x)
        gt = gr.trace_grad(mixed, *params_of(blocks=3, width=8))
    for graph in (gt.forward, gt.backward):
        svg = render(viz.graph_diagram(graph))
        assert boxes_of(svg) == {}
        scopes = {v.scope[0] for v in graph.all_values() if v.scope}
        assert {f"cluster_v{s}" for s in scopes} <= {title(c) for c in groups_of(svg, "cluster")}
        values = {title(n) for n in groups_of(svg, "node") if not title(n).startswith("legend_")}
        assert values == {f"v{n}" for n in range(len(graph.all_values()))}


@needs_dot
def test_only_the_alike_scopes_become_boxes_and_the_switch_turns_it_off():
    acts = [gr.relu, gr.relu, gr.tanh, gr.relu]

    def model(params, x):
        for k, p in enumerate(params):
            with gr.scope(f"block{k}"):
                x = x + acts[k](x @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"]
        return gr.mean(x * x)
    graph = gr.trace(model, *params_of(blocks=4, width=8))
    svg = render(viz.graph_diagram(graph))
    assert sorted(boxes_of(svg)) == ["block0", "block1", "block3"]
    assert "cluster_vblock2" in {title(c) for c in groups_of(svg, "cluster")}
    off = render(viz.graph_diagram(graph, collapse_repeats=False))
    assert boxes_of(off) == {} and {f"cluster_vblock{b}" for b in range(4)} <= {title(c) for c in groups_of(off, "cluster")}


@needs_dot
def test_joint_saved_edges_leave_the_box_of_the_block_that_made_them():
    gt = gr.trace_grad(blocks_model, *blocks_args(), argnums=1)  # 4 alike blocks; the joint drawn node by node
    svg = render(viz.joint_diagram(gt))
    part = gt.partition
    fwd, k = part.forward, part.forward.num_forward_outputs
    forward_boxes = {texts(g)[0]: title(g) for g in ET.fromstring(svg).iter(SVG + "g")
                     if "gradir-scope" in (g.get("class") or "").split() and title(g).startswith("f")}
    assert sorted(forward_boxes) == ["block0", "block1", "block2", "block3"]
    edges = {int(e.get("id")[5:]): title(e).split("->")[0] for e in groups_of(svg, "edge")
             if re.fullmatch(r"saved\d+", e.get("id", ""))}
    assert len(edges) == gt.saved.count
    for i, src in edges.items():
        v = fwd.outputs[k + i]
        assert src == (forward_boxes[v.scope[0]] if v.scope else f"f{fwd.number(v)}")


# -- the report ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def report(twelve, tmp_path_factory):
    if shutil.which("dot") is None:
        pytest.skip("the Graphviz `dot` program is not installed")
    return viz.write_report(twelve, tmp_path_factory.mktemp("twelve"), "twelve")


def test_the_report_holds_each_blocks_expandable_detail(twelve, report):
    fwd = twelve.forward
    page = report["html"].read_text()
    assert max(size_pt(report["forward.svg"].read_text())) < SCREEN_PT
    figure = page.split('<figure id="fig-forward">', 1)[1].split("</figure>", 1)[0]
    details = dict(re.findall(r'<details data-expand="([^"]+)"><summary>(block\d+):', page))
    assert sorted(details.values()) == sorted(f"block{b}" for b in range(BLOCKS))
    for name, g in boxes_of(re.search(r"<svg.*</svg>", figure, re.S).group(0)).items():
        key = next(c[len("expand-"):] for c in g.get("class").split() if c.startswith("expand-"))
        assert details[key] == name
        # the detail: that block drawn node by node, every value of it a node (by its number in the forward)
        body = page.split(f'<details data-expand="{key}">', 1)[1].split("</details>", 1)[0]
        drawn = {title(n) for n in groups_of(re.search(r"<svg.*</svg>", body, re.S).group(0), "node")}
        assert {f"v{fwd.number(v)}" for v in block_values(fwd, int(name[5:]))} <= drawn
    assert "http" not in "".join(re.findall(r"<script>.*?</script>", page, re.S))  # (the scripts fetch nothing)


CHROMIUM = next((p for p in (shutil.which("chromium"), "/usr/bin/chromium") if p and Path(p).exists()), None)
DRIVER = next((p for p in (shutil.which("chromedriver"), "/usr/bin/chromedriver") if p and Path(p).exists()), None)


@pytest.mark.skipif(CHROMIUM is None or DRIVER is None, reason="headless Chromium and its driver not found")
def test_clicking_a_box_opens_its_block_in_chromium(report):
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,1600"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        driver.get(report["html"].resolve().as_uri())
        boxes = {g.find_element(By.TAG_NAME, "text").get_attribute("textContent").strip(): g
                 for g in driver.find_elements(By.CSS_SELECTOR, "#fig-forward g.gradir-scope")}
        assert sorted(boxes) == sorted(f"block{b}" for b in range(BLOCKS))
        for name in ("block3", "block11"):
            detail = next(d for d in driver.find_elements(By.CSS_SELECTOR, "details[data-expand]")
                          if d.find_element(By.TAG_NAME, "summary").get_attribute("textContent").startswith(name + ":"))
            svg = detail.find_element(By.TAG_NAME, "svg")
            assert detail.get_attribute("open") is None and not svg.is_displayed()
            driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", boxes[name])
            boxes[name].click()
            assert detail.get_attribute("open") is not None and svg.is_displayed()
            assert svg.size["height"] > 50
        assert [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")] == []
    finally:
        driver.quit()
