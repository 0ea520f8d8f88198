"""What a public module offers to `dir()` and tab completion: its `__all__`, not what it imports.

    __dir__ = api_dir(globals())   # at the end of a namespace module such as gr.optim

A module's `__dir__` (PEP 562) is what `dir(module)` returns, and what IPython's completer (jedi), the
plain Python REPL (rlcompleter) and `help()` list; without one they offer every import too (`np`,
`math`, `dataclass`, `Any`, gradir's own helpers). The imported names stay reachable as attributes."""

from __future__ import annotations

from collections.abc import Callable


def api_dir(namespace: dict) -> Callable[[], list[str]]:
    """A `__dir__` for the module whose globals are `namespace`: its `__all__` and its dunder names
    (`__doc__`, `__name__`, ...), sorted; `__all__` is read at each call, so later additions show."""
    def __dir__() -> list[str]:
        return sorted({*namespace["__all__"], *(k for k in namespace if k.startswith("__") and k.endswith("__"))})
    return __dir__
