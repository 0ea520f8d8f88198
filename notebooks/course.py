"""Shared by the notebooks: puts the examples folder on the import path, so each notebook runs its example's own
code (one source of truth: a notebook shows what `python examples/<name>.py` prints, and draws it)."""

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
NAMES = ROOT.parent / "shared" / "data" / "names.txt"  # the makemore dataset (outside the repository)
OUT = ROOT / "out" / "notebooks"  # where the examples write their files when a notebook runs them


def show_files(files) -> None:
    """Display inline every SVG or PNG an example wrote (its `figures["files"]`: paths in dicts, nested or not)."""
    from IPython.display import SVG, Image, display

    if isinstance(files, dict):
        for v in files.values():
            show_files(v)
    elif isinstance(files, str | pathlib.Path) and str(files).endswith((".svg", ".png")):
        display(SVG(filename=str(files)) if str(files).endswith(".svg") else Image(filename=str(files)))
