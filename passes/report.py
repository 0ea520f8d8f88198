"""The common shape of analysis reports: a dataclass with `to_dict()` (plain JSON-able data, stable
top-level keys), a table (`text()` plain and linear-time, `table()` a rich Table for notebooks,
`to_csv()` machine-readable), and `str(report)`, the whole table fitted to 80 columns."""

from __future__ import annotations

import csv
import io

from rich.table import Table

from gradir.passes.text_table import CUT, Column, render, shown, wrap_text

WIDTH = 80  # str(report) fits an 80-column terminal


class Report:
    """Mixin for report dataclasses. Subclasses implement `to_dict` and the table's parts: `_title`,
    `_columns`, `_rows`, and where they help `_keep` (rows a summary always shows), `_notes` (lines
    under the table), `_label` (how a row is named) and `_records` (the CSV form)."""

    noun = "rows"  # what a row is, in the line saying how many a summary left out

    def to_dict(self) -> dict:
        raise NotImplementedError

    def _title(self) -> str:
        raise NotImplementedError

    def _columns(self) -> list[Column]:
        raise NotImplementedError

    def _rows(self) -> list[tuple[str, ...]]:
        raise NotImplementedError

    def _keep(self) -> set[int]:
        return set()

    def _notes(self) -> list[str]:
        return []

    def _label(self, k: int) -> str:
        return str(k)

    def _records(self) -> tuple[list[str], list[list]]:
        """(field names, rows) for CSV: by default the table's own cells."""
        return [c.name for c in self._columns()], [list(r) for r in self._rows()]

    def text(self, width: int | None = WIDTH, limit: int | None = None, more: str = "text() without a limit shows them",
             title: bool = True) -> str:
        """The report as plain text, fitted to `width` columns (None: cells are never cut). With `limit`,
        at most that many rows: the first and last ones plus those `_keep` names, and a line saying
        how many were left out and `more` (how to see them). Linear in the number of rows."""
        def gap(first: int, last: int) -> str:
            return (f"{CUT} {last - first + 1:,} {self.noun} not shown ({self._label(first)} to "
                    f"{self._label(last)}): {more}")

        lines = wrap_text(self._title(), width) if title else []
        lines += render(self._columns(), self._rows(), width, limit, self._keep(), gap)
        for note in self._notes():
            lines += wrap_text(note, width)
        return "\n".join(lines)

    def table(self, limit: int | None = None) -> Table:
        """A rich Table of the same rows (for notebooks; summarized as `text` does with `limit`)."""
        columns, rows = self._columns(), self._rows()
        t = Table(title=self._title(), caption="\n".join(self._notes()) or None)
        for c in columns:
            t.add_column(c.name, justify="right" if c.right else "left", overflow="fold")
        keep = self._keep()
        for k in shown(len(rows), limit, keep):
            if k is None:
                t.add_row(CUT, *[""] * (len(columns) - 1))
            else:
                t.add_row(*rows[k], style="bold" if k in keep else None)
        return t

    def to_csv(self) -> str:
        """The table as CSV (raw numbers, one line per row, a header line first)."""
        names, records = self._records()
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(names)
        writer.writerows(records)
        return buf.getvalue()

    def __str__(self) -> str:
        return self.text()


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


def value_names(graph) -> dict:
    """`value_name` of every value of `graph`, in one pass (for reports naming many values)."""
    names = {}
    for k, v in enumerate(graph.all_values()):
        names[v] = (str(v.attrs.get("name")) if v.op == "input" else graph.labels[v] if v in graph.labels
                    else f"%{k}")
    return names


def human_bytes(n: int, exact: bool = False) -> str:
    """Bytes in binary units ("1.21 KiB"); `exact` puts the byte count first ("1,234 B (1.21 KiB)")."""
    scaled = "B"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            scaled = f"{n / scale:.2f} {unit}"
            break
    if scaled == "B":
        return f"{n:,} B" if exact else f"{n:.0f} B"
    return f"{n:,} B ({scaled})" if exact else scaled
