"""How the command line prints reports and IR listings: all of it to a pipe or a file, a summary on a
terminal.

On a terminal, tables fit its width and long ones show their first and last rows (and the rows
that matter, such as the memory peak) with a line saying how many were left out and how to see
them: `--full` (every row), `--limit N` (at most N rows per table, N lines per IR listing), or
`--format json|csv --output FILE` (everything, machine-readable, written atomically). Piped output
is never summarized. Printing is linear in the number of rows (see gradir.passes.text_table).
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from gradir.core.primitive import get_primitive
from gradir.passes.report import value_names
from gradir.passes.text_table import CUT
from gradir.util.fileio import write_atomic

TERMINAL_ROWS = 60  # rows per table (lines per IR listing) a terminal shows unless --full or --limit
MORE = "--full shows them, --format csv|json --output FILE writes them"
FORMATS = ("table", "json", "csv")


@dataclass
class View:
    """How much of each report to print: at most `limit` rows (None: all), fitted to `width` (None: natural)."""

    limit: int | None
    width: int | None

    @classmethod
    def of(cls, full: bool, limit: int | None, to_file: bool = False) -> View:
        """Terminal: its width, and TERMINAL_ROWS rows unless --full; a pipe or a file: every row, natural
        widths. An explicit --limit always applies."""
        width = None if to_file else terminal_width()
        if limit is None and width is not None and not full:
            limit = TERMINAL_ROWS
        return cls(limit, width)

    def report(self, report, title: bool = True) -> str:
        return report.text(width=self.width, limit=self.limit, more=MORE, title=title)

    def listing(self, text: str) -> str:
        """An IR listing: its first and last lines when it is longer than the limit."""
        if self.limit is None:
            return text
        lines = text.split("\n")
        if len(lines) <= self.limit:
            return text
        head = (self.limit + 1) // 2
        tail = self.limit - head
        gap = f"  {CUT} {len(lines) - head - tail:,} lines not shown: {MORE}"
        return "\n".join(lines[:head] + [gap] + lines[len(lines) - tail:])


def terminal_width() -> int | None:
    """The terminal's width in columns, None when stdout is not a terminal."""
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def check_format(fmt: str, allowed=FORMATS) -> str | None:
    """The error message for an unknown --format (None when it is fine)."""
    return None if fmt in allowed else f"unknown --format {fmt!r} (have: {', '.join(allowed)})"


def as_json(data) -> str:
    return json.dumps(data, indent=1, default=str)


def emit(text: str, output: Path | None, echo) -> Path | None:
    """`text` to `output` (written atomically; returns the path) or, without one, through `echo`."""
    if output is None:
        echo(text)
        return None
    return write_atomic(output, text if text.endswith("\n") else text + "\n")


def fold_composites(traced, program, text: str) -> str:
    """`program`'s text form (`text`) with each composite op of the traced function (cross_entropy,
    batch_norm: one line where it was traced) folded back into one line, where the lowered ops it
    became are consecutive lines of its source line and nothing else was traced on that line:
        %5..%29 = cross_entropy %4, %2 : f32[]  # ce.py:5 (25 ops lowered: --full lists them; %10 %11 used later)

    The lowered form is what runs; `--full` prints it (and IR that parses back), `--passes` every pass."""
    composites: dict[str, list] = {}
    others = set()
    for n in traced.nodes:
        if n.op != "const" and n.source:
            if get_primitive(n.op).kind == "composite":
                composites.setdefault(n.source, []).append(n)
            else:
                others.add(n.source)
    single = {s: ns[0] for s, ns in composites.items() if len(ns) == 1 and s not in others}
    if not single:
        return text
    lines = text.split("\n")
    name = value_names(program)
    first = len(program.inputs)
    users: dict = {}
    for n in program.nodes:
        for i in n.inputs:
            users.setdefault(i, []).append(n)
    returned = set(program.outputs)
    out, k, nodes = lines[:1 + first], 0, program.nodes
    while k < len(nodes):
        source = nodes[k].source
        end = k
        while source in single and end + 1 < len(nodes) and nodes[end + 1].source == source:
            end += 1
        run = nodes[k:end + 1]
        if len(run) < 2:
            out.append(lines[1 + first + k])
            k += 1
            continue
        inside = set(run)
        outside = list(dict.fromkeys(i for n in run for i in n.inputs if i not in inside))
        operands = []
        for x in single[source].inputs:  # in the composite's order, matched by type
            match = next((i for i in outside if i.type_str == x.type_str and all(i is not o for o in operands)), None)
            if match is not None:
                operands.append(match)
        operands += [i for i in outside if all(i is not o for o in operands)]
        later = [n for n in run[:-1] if n in returned or any(u not in inside for u in users.get(n, ()))]
        used = f"; {' '.join(name[n] for n in later)} used later" if later else ""
        out.append(f"  {name[run[0]]}..{name[run[-1]]} = {single[source].op} {', '.join(name[i] for i in operands)} : "
                   f"{run[-1].type_str}  # {source} ({len(run)} ops lowered: --full lists them{used})")
        k = end + 1
    return "\n".join(out + lines[1 + first + len(nodes):])
