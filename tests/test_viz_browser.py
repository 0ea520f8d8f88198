"""The HTML report in a real browser: headless Chromium opens it from disk, takes a screenshot
and dumps the DOM. Checks: the screenshot is a non-blank PNG showing the diagrams' colours, the
DOM holds the inline SVG diagrams, and the page logs nothing to the console (its one script, the schedule
player, runs without a message; a control page with a deliberate error shows the console scan does catch errors)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_viz import blocks_model

import gradir as gr
from gradir import viz

CHROMIUM = next((p for p in (shutil.which("chromium"), "/usr/bin/chromium", shutil.which("chromium-browser"),
                             shutil.which("google-chrome")) if p and Path(p).exists()), None)
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not found (Debian: apt-get install chromium)"),
    pytest.mark.skipif(shutil.which("dot") is None, reason="the Graphviz `dot` program is not installed"),
]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--enable-logging=stderr", "--v=0"]
CONSOLE = re.compile(r":CONSOLE[:(]\d*\)?\]\s*(.*)")  # how Chromium logs a page's console messages
TIMEOUT_S = 60
NODE = re.compile(r'class="node[ "]')  # a diagram node's group, whatever classes the page added


def chromium(tmp_path: Path, tag: str, url: str, *extra: str) -> subprocess.Popen:
    profile = tmp_path / f"profile-{tag}"
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *extra, url]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)


def finish(proc: subprocess.Popen) -> tuple[str, str]:
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"Chromium did not finish within {TIMEOUT_S} s")
    return out.decode(errors="replace"), err.decode(errors="replace")


def console_messages(stderr: str) -> list[str]:
    return [m.group(1) for line in stderr.splitlines() if (m := CONSOLE.search(line))]


def test_report_renders_in_headless_chromium(tmp_path):
    rng = np.random.default_rng(0)
    args = rng.standard_normal((4, 8)), [rng.standard_normal((8, 8)) * 0.3 for _ in range(4)]
    gt = gr.trace_grad(blocks_model, *args, argnums=1, remat="uniform", segments=2)
    written = viz.write_report(gt, tmp_path / "out", "blocks")
    url = written["html"].resolve().as_uri()
    control = tmp_path / "control.html"
    control.write_text('<html><body><p>control</p><script>throw new Error("deliberate")</script></body></html>')

    shot = tmp_path / "shot.png"
    runs = {  # in parallel: each takes about a second
        "shot": chromium(tmp_path, "shot", url, f"--screenshot={shot}", "--window-size=1200,2000"),
        "dom": chromium(tmp_path, "dom", url, "--dump-dom"),
        "control": chromium(tmp_path, "control", control.as_uri(), "--dump-dom"),
    }
    results = {k: finish(p) for k, p in runs.items()}

    # the console scan catches a page error (else a silent scan would pass anything)
    assert any("deliberate" in m for m in console_messages(results["control"][1])), results["control"][1][-2000:]

    # no console output at all from the report (the player's script runs quietly; nothing fails to load)
    for k in ("shot", "dom"):
        assert console_messages(results[k][1]) == []
        assert "Uncaught" not in results[k][1]

    # the DOM holds the diagrams inline: as many node groups as the SVG files, and the plot
    dom = results["dom"][0]
    assert dom.count("<svg") >= 4
    for key in ("forward", "backward", "joint"):
        svg = written[f"{key}.svg"].read_text()
        assert f'id="fig-{key}"' in dom
        section = dom.split(f'id="fig-{key}"', 1)[1].split("</figure>", 1)[0]
        assert len(NODE.findall(section)) == len(NODE.findall(svg)) > 0  # (the player marks its step's node "running")
    assert 'id="fig-memory"' in dom and gt.forward.to_text().splitlines()[1] in dom

    # a real, non-blank screenshot that shows the diagrams' fills
    from PIL import Image

    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = np.asarray(Image.open(shot).convert("RGB"))
    assert image.shape == (2000, 1200, 3)
    rgb = image.astype(np.uint32)
    colours = set(np.unique((rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]).tolist())
    assert image.std() > 10 and len(colours) > 50
    # the forward diagram is on screen: its saved values' and outputs' fills (STYLES in viz.graphs)
    assert 0xfef3c7 in colours and 0xdcfce7 in colours
