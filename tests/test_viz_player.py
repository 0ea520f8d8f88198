"""The schedule player in a real browser: headless Chromium driven by Selenium (Debian's chromium-driver) opens
the HTML report from disk, steps through the backward schedule with the arrow keys, the buttons and the slider,
and reads what the page shows at every step. The oracle is the printed plan: each step's node, the counts it
decremented and the ready queue as the schedule report gives them, the live bytes and the peak as the memory
plan gives them, and the running node outlined in the backward diagram (or, for a node of a repeated scope drawn as
one box, that box: the scope its IR node carries names the box); the page logs nothing to its console."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from test_viz import blocks_args, blocks_model

import gradir as gr
from gradir import viz
from gradir.passes.report import human_bytes, value_names

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

CHROMIUM = next((p for p in (shutil.which("chromium"), "/usr/bin/chromium") if p and Path(p).exists()), None)
DRIVER = next((p for p in (shutil.which("chromedriver"), "/usr/bin/chromedriver") if p and Path(p).exists()), None)
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None or DRIVER is None,
                       reason="headless Chromium and its driver not found (Debian: apt-get install chromium-driver)"),
    pytest.mark.skipif(shutil.which("dot") is None, reason="the Graphviz `dot` program is not installed"),
]


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,1600"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)  # (a local driver: nothing downloaded)
    yield driver
    driver.quit()


def scalar(a, b):
    return gr.sum(gr.tanh(a * b + a))


def shown(player) -> dict[str, str]:
    return {k: player.find_element(By.CLASS_NAME, k).text for k in ("now", "counts", "queue", "alive", "live")}


def expected(gt, t: int) -> dict[str, str]:
    """What step t must show, from the schedule and memory reports."""
    sched, mem = gt.schedule, gt.memory
    name = value_names(gt.backward)
    s = sched.steps[t]
    queue = list(sched.queues())[t]
    first = mem.phases.count("forward")
    return {"now": f"backward step {t} of {len(sched.steps) - 1}: {name[s.node]} = {s.node.op}",
            "counts": ", ".join(f"{name[u]} → {c}" + (" (ready)" if c == 0 else "") for u, c in s.decremented[:8]),
            "queue": f"{s.queue_size} waiting: " + (", ".join(name[q] for q in queue) if queue else "none"),
            "live": f"{human_bytes(mem.live_bytes[first + t])} live of the {human_bytes(mem.peak_bytes)} peak",
            "node id": f"v{gt.backward.number(s.node)}"}


def drawn_as(browser, gt) -> dict:
    """Each backward node's diagram element (its SVG title): `v<number>`, or for a node of a scope drawn as one box
    (the box's first text line names the scope) that box's. A node's scope is the one its IR node carries; a
    constant's, the one all its readers share (a constant several scopes read is none of them's)."""
    boxes = {}
    for g in browser.find_elements(By.CSS_SELECTOR, "#fig-backward g.gradir-scope"):
        name = g.find_element(By.TAG_NAME, "text").get_attribute("textContent").strip()
        boxes[name] = g.find_element(By.TAG_NAME, "title").get_attribute("textContent").strip()
    graph, users = gt.backward, gt.backward.users()
    top = lambda v: next((s for s in v.scope if s != "recompute"), None)
    out = {}
    for v in graph.nodes:
        tops = {top(u) for u in users[v]} if v.op == "const" and users[v] else {top(v)}
        out[v] = boxes.get(tops.pop(), f"v{graph.number(v)}") if len(tops) == 1 else f"v{graph.number(v)}"
    return out


def check_step(browser, gt, t: int, drawn: dict | None = None) -> None:
    player = browser.find_element(By.ID, "player")
    got, want = shown(player), expected(gt, t)
    assert got["now"].startswith(want["now"])
    assert got["counts"] == (want["counts"] or "none")
    assert got["queue"].startswith(want["queue"])
    assert got["live"].startswith(want["live"])
    drawn = drawn or {s.node: f"v{gt.backward.number(s.node)}" for s in gt.schedule.steps}
    running = browser.find_elements(By.CSS_SELECTOR, "#fig-backward g.node.running title")
    assert [r.get_attribute("textContent").strip() for r in running] == [drawn[gt.schedule.steps[t].node]]
    # faded: the elements all of whose nodes ran before step t (a box is several steps)
    last = {}
    for s in gt.schedule.steps:
        last[drawn[s.node]] = max(last.get(drawn[s.node], -1), s.index)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#fig-backward g.node.ran")) == sum(k < t for k in last.values())
    assert player.find_element(By.CSS_SELECTOR, "input[type=range]").get_attribute("value") == str(t)


@pytest.mark.parametrize("case", ["scalar", "blocks"])
def test_the_player_steps_through_the_printed_schedule(browser, tmp_path, case):
    if case == "scalar":  # TEACHING.md E's expression: 10 backward steps, dL/da waits for two contributions
        gt = gr.trace_grad(scalar, np.array([1.5, 0.5, -1.0]), np.array([-2.0, 1.0, 0.5]), argnums=(0, 1))
    else:
        gt = gr.trace_grad(blocks_model, *blocks_args(), argnums=1)
    written = viz.write_report(gt, tmp_path, "loss")
    browser.get(written["html"].resolve().as_uri())
    drawn = drawn_as(browser, gt)
    boxed = {drawn[v] for v in drawn if drawn[v] != f"v{gt.backward.number(v)}"}
    assert len(boxed) == (3 if case == "blocks" else 0)  # blocks 1-3 of four share one backward structure: a box each
    last = len(gt.schedule.steps) - 1
    body = browser.find_element(By.TAG_NAME, "body")
    check_step(browser, gt, 0, drawn)
    for t in range(1, last + 1):  # the right arrow, every step
        body.send_keys(Keys.ARROW_RIGHT)
        check_step(browser, gt, t, drawn)
    body.send_keys(Keys.ARROW_RIGHT)  # past the end: stays
    check_step(browser, gt, last, drawn)
    body.send_keys(Keys.ARROW_LEFT)
    check_step(browser, gt, last - 1, drawn)
    player = browser.find_element(By.ID, "player")
    player.find_element(By.CLASS_NAME, "first").click()
    check_step(browser, gt, 0, drawn)
    player.find_element(By.CLASS_NAME, "next").click()
    check_step(browser, gt, 1, drawn)
    player.find_element(By.CLASS_NAME, "prev").click()
    check_step(browser, gt, 0, drawn)
    player.find_element(By.CLASS_NAME, "last").click()
    check_step(browser, gt, last, drawn)
    slider = player.find_element(By.CSS_SELECTOR, "input[type=range]")
    slider.send_keys(Keys.HOME)  # a focused slider moves by the keys itself, once per press
    check_step(browser, gt, 0, drawn)
    slider.send_keys(Keys.ARROW_RIGHT)
    check_step(browser, gt, 1, drawn)
    # the peak is where the memory plan says it is, in the same step numbering
    mem = gt.memory
    peak = mem.peak_step - mem.phases.count("forward")
    if peak >= 0:
        assert mem.where(mem.peak_step) == f"backward step {peak}"
        browser.execute_script(f"arguments[0].value = {peak}; arguments[0].dispatchEvent(new Event('input'))", slider)
        check_step(browser, gt, peak, drawn)
        assert shown(player)["live"].endswith("(the peak)")
    assert [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")] == []


def test_two_reports_on_one_page_keep_their_own_players(browser, tmp_path):
    """A notebook page holds several reports (viz.html_of, what a GradTrace displays): each player steps its own
    steps and outlines nodes in its own backward diagram."""
    a = gr.trace_grad(scalar, np.array([1.5, 0.5]), np.array([-2.0, 1.0]), argnums=(0, 1))
    b = gr.trace_grad(blocks_model, *blocks_args(), argnums=1)
    page = tmp_path / "notebook.html"
    page.write_text(f"<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>{viz.html_of(a)}{viz.html_of(b)}"
                    "</body></html>")
    browser.get(page.resolve().as_uri())
    first, second = browser.find_elements(By.CLASS_NAME, "player")
    second.find_element(By.CLASS_NAME, "next").click()
    second.find_element(By.CLASS_NAME, "next").click()
    assert first.find_element(By.CLASS_NAME, "now").text.startswith("backward step 0 ")
    assert second.find_element(By.CLASS_NAME, "now").text.startswith(expected(b, 2)["now"])
    reports = browser.find_elements(By.CLASS_NAME, "gradir-report")
    running = [[t.get_attribute("textContent").strip() for t in r.find_elements(By.CSS_SELECTOR, "g.node.running title")]
               for r in reports]
    assert running == [[expected(a, 0)["node id"]], [expected(b, 2)["node id"]]]
    body = browser.find_element(By.TAG_NAME, "body")
    body.send_keys(Keys.ARROW_RIGHT)  # the keys go to the player used last
    assert second.find_element(By.CLASS_NAME, "now").text.startswith(expected(b, 3)["now"])
    assert first.find_element(By.CLASS_NAME, "now").text.startswith("backward step 0 ")
