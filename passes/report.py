"""The common shape of analysis reports: a dataclass with `to_dict()` (plain JSON-able data, stable
top-level keys) and `table()` (a rich Table for terminals); `str(report)` renders the table."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table


class Report:
    """Mixin for report dataclasses. Subclasses implement `to_dict` and `table`."""

    def to_dict(self) -> dict:
        raise NotImplementedError

    def table(self) -> Table:
        raise NotImplementedError

    def __str__(self) -> str:
        buf = io.StringIO()
        Console(file=buf, width=140, color_system=None, legacy_windows=False).print(self.table())
        return buf.getvalue().rstrip()


def value_name(v, graph=None) -> str:
    """`%k` (the value's number in its graph's text form) or the input's name."""
    if v.op == "input":
        return str(v.attrs.get("name"))
    g = graph or v.graph
    if g is not None and v in g.labels:
        return g.labels[v]
    try:
        return f"%{g.number(v)}"
    except (AttributeError, KeyError):
        return f"<{v.op}>"


def human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n} B"
