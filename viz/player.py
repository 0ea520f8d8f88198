"""The schedule player: step through the backward schedule in the HTML report.

`player_html(grad_trace)` is one section of the report: buttons, a slider and the arrow keys move through the
backward schedule, and each step highlights the running node in the backward diagram (its nodes carry the ids
`graphs` gives them, `v<number>`, as SVG titles; a node inside a repeated scope's box highlights the box, whose
SVG classes `m-v<number>` name its members) and shows what the printed reports show for that step: the
dependency counts it decremented, the ready queue after it, the buffers alive, freed and made, and the live
bytes against the peak. Steps are numbered as the schedule table and the memory plan number backward steps,
from 0. The steps travel as JSON in the page with a small script: nothing is fetched.
"""

from __future__ import annotations

import bisect
import html
import json

from gradir.passes.report import human_bytes, value_name, value_names

SHOWN = 8           # names listed per step (decremented counts, queue, buffers); the rest are counted
MAX_STEPS = 5_000  # a longer schedule plays its first MAX_STEPS steps (the tables have every one; ~150 B a step)
FIELDS = ["node", "op", "source", "diagram id", "decremented (name, count)", "more decremented", "ready queue",
          "queue size", "buffers alive", "largest alive", "freed", "more freed", "made", "live bytes", "live"]

CSS = """
.player { border: 1px solid #e5e7eb; padding: .6rem; margin: .5rem 0 1rem; font-size: 13px; }
.player .controls button { font-size: 14px; min-width: 2.2rem; }
.player .controls input[type=range] { width: 50%; vertical-align: middle; }
.player .now { font-weight: bold; margin: .4rem 0; }
.player .panes { display: grid; grid-template-columns: repeat(auto-fit, minmax(15rem, 1fr)); gap: .6rem; }
.player .pane h4 { margin: .2rem 0; font-size: 12px; color: #4b5563; }
.player .bar { background: #f3f4f6; height: 14px; border: 1px solid #d1d5db; }
.player .bar div { background: #2563eb; height: 100%; }
#fig-backward g.node.running :is(path, polygon, ellipse) { stroke: #dc2626; stroke-width: 4; }
#fig-backward g.node.ran { opacity: .45; }
"""

SCRIPT = """
(function () {
  // this player's own elements: a notebook page may hold several reports
  const root = document.currentScript ? document.currentScript.closest(".player") : document.getElementById("player");
  const scope = root.closest(".gradir-report") || document;
  const $ = (sel) => root.querySelector(sel);
  const data = JSON.parse($("script[type='application/json']").textContent);
  const slider = $("input[type=range]");
  const nodes = {};  // diagram node id -> its <g>; a repeated scope's box stands for its members (classes m-<id>)
  const boxed = {};   // the ids drawn inside a box
  scope.querySelectorAll("#fig-backward g.node").forEach((g) => {
    const t = g.querySelector("title");
    if (t) nodes[t.textContent.trim()] = g;
    g.classList.forEach((c) => { if (c.startsWith("m-")) { nodes[c.slice(2)] = g; boxed[c.slice(2)] = true; } });
  });
  const list = (items, more) => (items.length ? items.join(", ") : "none") + (more > 0 ? ` … (+${more})` : "");
  let at = 0;
  const S = data.strings;
  const names = (xs) => xs.map((i) => S[i]);
  function show(t) {
    at = Math.max(0, Math.min(data.steps.length - 1, t));
    const [node, op, source, id, decremented, decMore, queue, queueSize, alive, largest, freed, freedMore, made,
           liveBytes, live] = data.steps[at];  // (data.fields names them)
    slider.value = at;
    $(".now").textContent = `backward step ${at} of ${data.steps.length - 1}: ${S[node]} = ${S[op]}` +
      (S[source] ? `  (${S[source]})` : "");
    $(".counts").textContent = list(decremented.map(([n, c]) => `${S[n]} → ${c}` + (c === 0 ? " (ready)" : "")),
                                    decMore);
    $(".queue").textContent = `${queueSize} waiting: ` + list(names(queue), queueSize - queue.length);
    $(".alive").textContent = `${alive} buffers: ` + list(names(largest), alive - largest.length);
    $(".freed").textContent = `freed: ${list(names(freed), freedMore)}; new: ${made.length ? names(made).join(", ") : "none"}`;
    $(".bar div").style.width = (data.peak_bytes ? 100 * liveBytes / data.peak_bytes : 0) + "%";
    $(".live").textContent = `${S[live]} live of the ${data.peak} peak` + (at === data.peak_step ? " (the peak)" : "");
    const state = new Map();  // <g> -> [runs now, all its steps ran]: a box is several steps
    data.steps.forEach((x, k) => {
      const g = nodes[S[x[3]]];
      if (!g) return;
      const [running, ran] = state.get(g) || [false, true];
      state.set(g, [running || k === at, ran && k < at]);
    });
    state.forEach(([running, ran], g) => { g.classList.toggle("running", running); g.classList.toggle("ran", ran); });
    $(".diagram-note").textContent = !nodes[S[id]] ? "(this node is not drawn one by one in the diagram above)" :
      boxed[S[id]] ? "(it runs inside the outlined box, a repeated scope: click the box to see its nodes)" : "";
  }
  $(".first").onclick = () => show(0);
  $(".prev").onclick = () => show(at - 1);
  $(".next").onclick = () => show(at + 1);
  $(".last").onclick = () => show(data.steps.length - 1);
  slider.oninput = () => show(Number(slider.value));
  root.addEventListener("pointerdown", () => { window.gradirPlayer = root; });  // the keys go to the last one used
  document.addEventListener("keydown", (e) => {
    if (e.target.tagName === "INPUT") return;  // (a focused slider moves itself: its input event shows the step)
    if (window.gradirPlayer && window.gradirPlayer !== root) return;
    if (e.key === "ArrowRight") { show(at + 1); e.preventDefault(); }
    if (e.key === "ArrowLeft") { show(at - 1); e.preventDefault(); }
  });
  show(0);
})();
"""


def player_steps(grad_trace) -> dict:
    """What the player shows, per backward step: the schedule's step and the memory plan's buffers. Compact, as a
    long schedule's steps are most of the page: each step is a list (`FIELDS` names its entries), every text in
    it an index into `strings`."""
    sched, mem = grad_trace.schedule, grad_trace.memory
    graph = grad_trace.backward
    name = value_names(graph)
    first = mem.phases.count("forward") if mem.phases else 0  # the memory plan's first backward step
    last = len(mem.order) - 1
    strings: dict[str, int] = {}
    text = lambda s: strings.setdefault(s, len(strings))
    starts: dict[int, list] = {}  # step -> the buffers it makes, as (-bytes, number): largest first when sorted
    ends: dict[int, list] = {}
    for k, b in enumerate(mem.lifetimes):
        starts.setdefault(b.start, []).append((-b.nbytes, k))
        ends.setdefault(b.end, []).append((-b.nbytes, k))
    alive = sorted(key for t in range(first) for key in starts.get(t, ()) if mem.lifetimes[key[1]].end >= first)

    def spell(key) -> int:
        b = mem.lifetimes[key[1]]
        where = "" if b.phase == "backward" else f" ({b.phase})"
        return text(f"{value_name(b.value, mem.graph).rpartition(' ')[2]}{where} {human_bytes(b.nbytes)}")
    steps = []
    for s, queue in zip(sched.steps[:MAX_STEPS], sched.queues()):
        t = first + s.index
        made = sorted(starts.get(t, ()))
        for key in made:
            bisect.insort(alive, key)
        freed = sorted(ends.get(t, ())) if t < last else []  # (alive to the end: never freed)
        live = mem.live_bytes[t] if t < len(mem.live_bytes) else 0
        steps.append([text(name[s.node]), text(s.node.op), text(s.node.source or ""), text(f"v{graph.number(s.node)}"),
                      [[text(name[u]), c] for u, c in s.decremented[:SHOWN]], max(0, len(s.decremented) - SHOWN),
                      [text(name[q]) for q in queue], s.queue_size,
                      len(alive), [spell(key) for key in alive[:SHOWN]],
                      [spell(key) for key in freed[:SHOWN]], max(0, len(freed) - SHOWN), [spell(key) for key in made],
                      live, text(human_bytes(live))])
        for key in freed:
            del alive[bisect.bisect_left(alive, key)]
    peak_step = mem.peak_step - first if mem.order and mem.peak_step >= first else -1
    return {"fields": FIELDS, "strings": list(strings), "steps": steps, "peak_bytes": mem.peak_bytes,
            "peak": human_bytes(mem.peak_bytes), "peak_step": peak_step, "total_steps": len(sched.steps)}


def player_html(grad_trace) -> str:
    """The player's section: its markup, the steps as JSON and the script (see the module docstring)."""
    data = player_steps(grad_trace)
    if not data["steps"]:
        return "<p>The backward program runs no nodes: nothing to step through.</p>"
    cut = (f" It plays the first {MAX_STEPS:,} of {data['total_steps']:,} steps; the schedule table has every one."
           if data["total_steps"] > MAX_STEPS else "")
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")  # (no "</script>" inside the JSON)
    n = len(data["steps"]) - 1
    return (f'<div class="player" id="player"><p>Step through the backward schedule: the buttons, the slider or '
            f'the arrow keys. The running node is outlined red in the backward diagram above, the nodes run '
            f'before it faded.{html.escape(cut)}</p>'
            '<div class="controls"><button class="first" title="first step">&laquo;</button>'
            '<button class="prev" title="previous step (left arrow)">&#x25C0;</button>'
            f'<input type="range" min="0" max="{n}" value="0" aria-label="backward step">'
            '<button class="next" title="next step (right arrow)">&#x25B6;</button>'
            '<button class="last" title="last step">&raquo;</button></div>'
            '<div class="now"></div><div class="diagram-note"></div><div class="panes">'
            '<div class="pane"><h4>dependency counts it decremented (operands still owed)</h4><div class="counts">'
            '</div></div>'
            '<div class="pane"><h4>ready queue after it</h4><div class="queue"></div></div>'
            '<div class="pane"><h4>buffers alive (largest first)</h4><div class="alive"></div><div class="freed">'
            '</div></div>'
            '<div class="pane"><h4>memory</h4><div class="bar"><div></div></div><div class="live"></div></div>'
            f'</div><script type="application/json" id="player-data">{payload}</script>'
            f'<script>{SCRIPT}</script></div>')


__all__ = ["CSS", "FIELDS", "player_html", "player_steps"]
