"""Plot titles are drawn whole: every title and suptitle of the memory timeline (panels side by side)
and of gr.train's loss plot lies inside its figure after matplotlib's own layout (the oracle is
matplotlib's measured text extent, not a character count)."""

from __future__ import annotations

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import gradir as gr  # noqa: E402
from gradir import viz  # noqa: E402
from gradir.viz.plots import RC, memory_timeline_figure  # noqa: E402


def titles_outside(fig: Figure) -> list[str]:
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    texts = [t for ax in fig.axes for t in (ax.title, ax._left_title, ax._right_title)]
    texts += [fig._suptitle] if fig._suptitle is not None else []
    box = fig.bbox
    return [t.get_text() for t in texts if t.get_text()
            and not (box.x0 - 1 <= t.get_window_extent(renderer).x0 and t.get_window_extent(renderer).x1 <= box.x1 + 1)]


def test_memory_timeline_panels_keep_their_titles_whole():
    def loss(w, x):
        return gr.sum(gr.tanh(x @ w) ** 2)

    j = gr.trace_grad(loss, np.ones((64, 64)), np.ones((32, 64)))
    plans = {f"a long policy name number {k}, engine order": j.memory for k in range(3)}
    with matplotlib.rc_context(RC):
        fig = memory_timeline_figure(plans, title="a figure title that is long enough to need the whole width " * 2)
        assert titles_outside(fig) == []
    assert viz.memory_plans(j)  # the plans the report draws side by side come through the same function


def test_loss_plot_wraps_a_long_title(tmp_path, monkeypatch):
    drawn = []
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (drawn.append(titles_outside(fig)), save(fig, *a, **k)))
    title = "makemore MLP on hand-derived gradients: batch loss per step, train/val after 200,000 steps of batch 32"
    gr.train.plot_losses(tmp_path / "loss.svg", [(0, 3.0), (1, 2.5)], evals=[(1, {"train": 2.4, "val": 2.5})],
                         title=title)
    assert drawn == [[]]
