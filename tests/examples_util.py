"""Loading the example programs (examples/*.py) in tests, and running their main()."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import pathlib

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def load(name: str):
    """Import examples/<name>.py as a module."""
    spec = importlib.util.spec_from_file_location(f"example_{name.replace('/', '_')}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(module, *args):
    """main()'s returned figures and its printed text."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        figures = module.main(*args)
    return figures, buf.getvalue()
