"""Repeated scopes in the HTML report: each box expands into its scope drawn node by node.

A diagram drawn by `graphs._add_graph` shows each repeated top-level scope (twelve residual blocks) as
one box whose SVG group carries the classes `gradir-scope` and `expand-<key>` (`graphs.scope_keys`).
After the figure, `details_html` writes one closed <details data-expand="<key>"> per scope holding that
scope's own diagram (inline SVG: nothing fetched); `SCRIPT` makes a click on a box open its <details>
and scroll to it. The joint diagram's boxes open the forward and backward figures' details (the same
keys). Without the script the details still open from their summaries.
"""

from __future__ import annotations

import html

CSS = """
g.gradir-scope { cursor: pointer; }
.scope-details { font-size: 12px; margin: .3rem 0; }
.scope-details details { margin: .1rem 0; }
.scope-details details[open] { border-left: 3px solid #6d28d9; padding-left: .4rem; }
.scope-details summary { cursor: pointer; color: #5b21b6; }
"""

SCRIPT = """
(function () {
  // this report's boxes and details: a notebook page may hold several reports
  const here = document.currentScript && document.currentScript.closest(".gradir-report");
  const scope = here || document;
  scope.querySelectorAll("g.gradir-scope").forEach((g) => {
    const cls = Array.from(g.classList).find((c) => c.startsWith("expand-"));
    const detail = cls && scope.querySelector(`details[data-expand="${cls.slice(7)}"]`);
    if (!detail) return;
    g.addEventListener("click", (e) => {
      e.preventDefault();
      detail.open = true;
      detail.scrollIntoView({block: "nearest"});
    });
  });
})();
"""


def details_html(details: list[tuple[str, str, str | None, str]]) -> str:
    """The expandable details under a figure: one closed <details> per (key, name, inlined SVG or None,
    why not drawn) scope."""
    if not details:
        return ""
    items = []
    for key, name, svg, error in details:
        body = (f'<div class="diagram">{svg}</div>' if svg is not None
                else f'<p class="note">Not drawn: {html.escape(error)}.</p>')
        items.append(f'<details data-expand="{html.escape(key)}"><summary>{html.escape(name)}</summary>{body}</details>')
    return (f'<div class="scope-details"><p>{len(details)} repeated scopes are drawn as one box each: click a box '
            "(or a name below) to see that scope node by node.</p>" + "".join(items) + "</div>")


__all__ = ["CSS", "SCRIPT", "details_html"]
