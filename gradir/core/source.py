"""Where an op comes from: the user's source line (`file.py:LINE`) and the scopes (`gr.scope` regions) it is
recorded in. Errors name the line, the IR prints it, diagrams group by scope.

Passes that re-record a node keep its origin with `source_of` (or `push_source`/`pop_source` in hot loops)."""

from __future__ import annotations

import contextlib
import os
import sys

_SOURCE_OVERRIDE: list[tuple[str | None, tuple | None]] = []  # set while a pass re-records a node
_SCOPES: list[str] = []  # gr.scope / gr.checkpoint regions the user's code is inside


_COMMAND_LINE = frozenset({"click", "typer"})  # what runs gradir's command line


def user_source(depth: int = 1) -> str | None:
    """`file.py:LINE` of the innermost frame outside gradir's own modules; None when gradir's command
    line called in with no user frame on the way (its launcher, `bin/gradir:8`, is not the user's line:
    the CLI names the model file instead)."""
    if _SOURCE_OVERRIDE:
        return _SOURCE_OVERRIDE[-1][0]
    try:
        f = sys._getframe(depth)
    except ValueError:  # no frame that deep (called from the outermost frame)
        return None
    kinds = _FILE_KIND
    while f is not None:
        filename = f.f_code.co_filename
        kind = kinds.get(filename)
        if kind is None:
            if len(kinds) > 10_000:  # a long session exec'ing many model files
                kinds.clear()
            top = f.f_globals.get("__name__", "").split(".")[0]
            kind = "cli" if top in _COMMAND_LINE else "gradir" if top == "gradir" else os.path.basename(filename)
            kind = kinds[filename] = _GRADIR if kind == _GRADIR else _CLI if kind == _CLI else kind
        if kind is not _GRADIR:
            return None if kind is _CLI else f"{kind}:{f.f_lineno}"
        f = f.f_back
    return None


_GRADIR, _CLI = "gradir", "cli"  # the two kinds that are not a file name (stored as these objects: compared by identity)


# source file -> "gradir", "cli" or the file's name (tracing asks once per node). Keyed by file name, whose
# hash a str keeps, not by code object, whose hash is worked out from its bytecode at every lookup
_FILE_KIND: dict = {}


def current_scope() -> tuple[str, ...]:
    if _SOURCE_OVERRIDE and _SOURCE_OVERRIDE[-1][1] is not None:
        return _SOURCE_OVERRIDE[-1][1]
    return tuple(_SCOPES)


class source_of:
    """Attribute every node recorded inside to `source` and, if given, `scope` (passes re-recording
    a node keep its origin; backward nodes point at the line of the forward op they differentiate).
    A class, not a generator context manager: passes enter one per node."""

    __slots__ = ("entry",)

    def __init__(self, source: str | None, scope: tuple | None = None):
        self.entry = (source, scope)

    def __enter__(self):
        _SOURCE_OVERRIDE.append(self.entry)

    def __exit__(self, *exc):
        _SOURCE_OVERRIDE.pop()


@contextlib.contextmanager
def scope(name: str):
    """Mark every op recorded inside as part of the region `name` (regions nest). Diagrams group by
    region, and recompute planning treats `gr.checkpoint` regions and named blocks as units."""
    _SCOPES.append(str(name))
    try:
        yield
    finally:
        _SCOPES.pop()


def origin(depth: int = 2) -> tuple[str | None, tuple]:
    """(source line, scope) of a node recorded now: a pass's `source_of` if one is active, else the user's
    line (found from `depth` frames up) and the current scopes."""
    if _SOURCE_OVERRIDE:
        source, scope = _SOURCE_OVERRIDE[-1]
        return source, tuple(_SCOPES) if scope is None else scope
    return user_source(depth), tuple(_SCOPES)


def push_source(source: str | None, scope: tuple | None = None) -> None:
    """`with source_of(source, scope)` without the context manager, for a pass's per-node loop; pair with
    `pop_source()` in a `finally`."""
    _SOURCE_OVERRIDE.append((source, scope))


def pop_source() -> None:
    _SOURCE_OVERRIDE.pop()
