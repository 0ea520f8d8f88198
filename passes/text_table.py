"""Plain-text tables for reports, in one pass over the rows.

Printing is linear in the number of rows (20,000 rows in a fraction of a second; rich's Table
measures every cell several times and took minutes). A table can fit a width (an 80-column
terminal): columns that allow it shrink, wrapping or cutting their cells with "…", and optional
columns are dropped when shrinking is not enough. A long table can be summarized: its first and
last rows, rows to keep wherever they are (a peak), and a line saying how many rows were left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

CUT = "…"
GAP = "  "  # between columns
WIDEST = 120  # a column's width when the table has no width to fit (one huge cell must not pad every row)


@dataclass(frozen=True)
class Column:
    """A column of a text table.

    right: right-aligned (numbers). wrap: a cell wider than the column continues on the next lines
    (else it is cut with "…"). least: the narrowest the column shrinks to when the table must fit a
    width (0: never narrower than its widest cell). drop: when shrinking is not enough, columns are
    dropped from the highest `drop` down (0: always kept)."""

    name: str
    right: bool = False
    wrap: bool = False
    least: int = 0
    drop: int = 0


def shown(n: int, limit: int | None, keep: Iterable[int] = ()) -> list[int | None]:
    """The row indices a table of `n` rows shows with at most `limit` rows (None: all), in order:
    the first and last rows plus those in `keep`; None marks each run of rows left out."""
    if limit is None or n <= limit:
        return list(range(n))
    limit = max(limit, 2)
    head = (limit + 1) // 2
    picked = sorted(set(range(head)) | set(range(n - (limit - head), n)) | {k for k in keep if 0 <= k < n})
    out: list[int | None] = []
    prev = None
    for k in picked:
        if prev is not None and k - prev == 2:  # one row between: it takes no more room than a line saying so
            out.append(prev + 1)
        elif prev is not None and k - prev > 2:
            out.append(None)
        out.append(k)
        prev = k
    return out


def _widths(columns: Sequence[Column], natural: list[int], width: int | None) -> list[int | None]:
    """Each column's width (None: dropped) so the row fits in `width` where it can: shrinkable columns
    narrow down to their header's width, then optional columns go, then shrinkable ones narrow to `least`."""
    if width is None:
        return list(natural)
    active = list(range(len(columns)))

    def shrink(floor) -> tuple[dict[int, int], int]:
        ws = {i: natural[i] for i in active}
        excess = sum(ws.values()) + len(GAP) * (len(active) - 1) - width
        while excess > 0:  # narrow the column with the most room to give, one character at a time
            i = max(active, key=lambda i: ws[i] - floor(i))
            if ws[i] <= floor(i):
                break
            ws[i] -= 1
            excess -= 1
        return ws, excess

    def soft(i: int) -> int:
        return max(columns[i].least, len(columns[i].name)) if columns[i].least else natural[i]

    ws, excess = shrink(soft)
    dropped = []
    while excess > 0 and any(columns[i].drop for i in active):
        dropped.append(max((i for i in active if columns[i].drop), key=lambda i: (columns[i].drop, i)))
        active.remove(dropped[-1])
        ws, excess = shrink(soft)
    for i in reversed(dropped[:-1]):  # a column dropped early may fit again once a later one went
        active.append(i)
        active.sort()
        trial, over = shrink(soft)
        if over > 0:
            active.remove(i)
        else:
            ws, excess = trial, over
    if excess > 0:
        ws, excess = shrink(lambda i: columns[i].least or natural[i])
    return [ws.get(i) for i in range(len(columns))]


def _wrap(line: str, width: int) -> list[str]:
    """Greedy word wrap (textwrap.wrap without its regular expressions: reports wrap many cells)."""
    out, cur, width = [], "", max(width, 1)
    for word in line.split(" "):
        while len(word) > width:  # a word longer than the line is split
            if cur:
                out.append(cur)
                cur = ""
            out.append(word[:width])
            word = word[width:]
        if not cur:
            cur = word
        elif len(cur) + 1 + len(word) <= width:
            cur += " " + word
        else:
            out.append(cur)
            cur = word
    out.append(cur)
    return out


def _cell_lines(text: str, width: int, wrap: bool) -> list[str]:
    lines = []
    for line in text.split("\n"):
        if len(line) <= width:
            lines.append(line)
        elif wrap:
            lines.extend(_wrap(line, width))
        else:
            lines.append(line[:max(width - 1, 0)] + CUT)
    return lines


def render(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None = None,
           limit: int | None = None, keep: Iterable[int] = (), gap_line=None) -> list[str]:
    """The table's lines: a header, a rule, then the rows `shown(len(rows), limit, keep)` picks, fitted
    to `width` (None: each column as wide as its widest cell, up to WIDEST characters).
    `gap_line(first, last)` is the line standing for rows first..last left out (indices)."""
    picked = shown(len(rows), limit, keep)
    natural = [len(c.name) for c in columns]
    multiline = [False] * len(columns)
    for k in picked:
        if k is not None:
            for i, cell in enumerate(rows[k]):
                if "\n" in cell:
                    multiline[i] = True
                    n = max(map(len, cell.split("\n")))
                else:
                    n = len(cell)
                if n > natural[i]:
                    natural[i] = n
    ws = _widths(columns, natural if width else [min(n, WIDEST) for n in natural], width)
    kept = [i for i, w in enumerate(ws) if w is not None]
    live = [(columns[i], ws[i]) for i in kept]
    # the fast path: one format string for rows whose cells all fit on one line (most of them)
    line = GAP.join(f"{{:{'>' if c.right else '<'}{w}}}" for c, w in live)
    dirty = [j for j, i in enumerate(kept) if multiline[i] or natural[i] > ws[i]]
    out = _join([_wrap(c.name, w) for c, w in live], live)
    out.append(GAP.join(("-" if c.name else " ") * w for c, w in live).rstrip())  # no rule under an unnamed column
    for pos, k in enumerate(picked):
        if k is None:
            first, last = picked[pos - 1] + 1, picked[pos + 1] - 1
            out += wrap_text(gap_line(first, last) if gap_line else f"{CUT} {last - first + 1:,} rows not shown", width)
            continue
        cells = [rows[k][i] for i in kept]
        tall = {}  # column -> lines, for cells that wrap or hold several lines
        for j in dirty:
            c, w = live[j]
            if len(cells[j]) > w or "\n" in cells[j]:
                lines = _cell_lines(cells[j], w, c.wrap)
                if len(lines) > 1:
                    tall[j] = lines
                else:
                    cells[j] = lines[0]
        if tall:
            out.extend(_join([tall.get(j) or [cell] for j, cell in enumerate(cells)], live))
        else:
            out.append(line.format(*cells).rstrip())
    return out


def _join(parts: list[list[str]], live: list[tuple[Column, int]]) -> list[str]:
    """Side by side: each column's lines padded to its width (a cell shorter than the row stays blank)."""
    lines = []
    for j in range(max(map(len, parts), default=1)):
        cells = [p[j] if j < len(p) else "" for p in parts]
        lines.append(GAP.join(t.rjust(w) if c.right else t.ljust(w) for t, (c, w) in zip(cells, live)).rstrip())
    return lines


def wrap_text(text: str, width: int | None) -> list[str]:
    """`text`'s lines, each wrapped to `width` (None: as they are)."""
    if width is None:
        return text.split("\n")
    return [w for line in text.split("\n") for w in _wrap(line, width)]
