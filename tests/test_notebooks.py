"""The course as notebooks (notebooks/*.py, jupytext percent scripts: Jupyter opens them as notebooks with
jupytext installed): each one runs top to bottom in a fresh kernel, as a learner would run it, with no error,
its example's printed figures in its output and its diagrams, schedule player and plots inline."""

from __future__ import annotations

import pathlib

import jupytext
import pytest
from nbclient import NotebookClient

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[1] / "notebooks"
SECTIONS = sorted(p for p in NOTEBOOKS.glob("[a-j]_*.py"))
RICH = ("image/svg+xml", "image/png", "text/html")


def test_one_notebook_per_section_a_to_j():
    assert [p.name[0] for p in SECTIONS] == list("abcdefghij")


@pytest.mark.parametrize("path", SECTIONS, ids=[p.stem for p in SECTIONS])
def test_notebook_runs_top_to_bottom_with_its_figures_inline(path):
    nb = jupytext.read(path)
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert len(printed.splitlines()) >= 5  # the example's own printout
    rich = [k for o in outputs if o.output_type == "display_data" for k in o.get("data", {}) if k in RICH]
    assert rich, "no diagram or plot displayed"
    # every notebook calls code of the example it is named after (one source of truth)
    source = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "code")
    example = path.stem.split("_")[0]
    assert any(line.startswith(f"import {example}_") for line in source.splitlines())


def test_examples_run_without_out_name_notebooks_that_exist():
    """An example run without --out says where its pictures go: the notebook it names is there."""
    import re

    named = {m for p in (NOTEBOOKS.parent / "examples").glob("*.py")
             for m in re.findall(r"(notebooks/\w+\.py) shows", p.read_text())}
    assert all((NOTEBOOKS.parent / m).is_file() for m in named)
    # every section whose notebook draws something is named by one of its examples
    drawing = {f"notebooks/{p.name}" for p in NOTEBOOKS.glob("[a-j]_*.py")
               if re.search(r"display\(|show_files\(", p.read_text())}
    assert drawing and drawing <= named
