"""Rich display in Jupyter: graphs draw themselves, traces and reports render as HTML.

The core (gradir.core.ir) and the passes never import gradir.viz (it sits above them and only reads
their objects), so the API layer attaches the notebook hooks here, once, at import.
"""

from __future__ import annotations

from gradir.api.grad_trace import GradTrace
from gradir.core.ir import Graph
from gradir.passes.report import Report
from gradir.viz import html_of, svg_of


def _svg(self):
    return svg_of(self)


def _html(self):
    return html_of(self)


def install() -> None:
    Graph._repr_svg_ = _svg
    GradTrace._repr_svg_ = _svg
    GradTrace._repr_html_ = _html
    Report._repr_html_ = _html
