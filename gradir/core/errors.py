"""gradir's exceptions. Every error names the op and the user's source line."""

from __future__ import annotations

from gradir.util.public import api_dir


class GradirError(Exception):
    """Base class of every error gradir raises on bad input."""

    def __init__(self, message: str, op: str | None = None, source: str | None = None):
        self.op = op
        self.source = source
        self.detail = message
        prefix = f"{op}: " if op else ""
        suffix = f"  (at {source})" if source else ""
        super().__init__(f"{prefix}{message}{suffix}")


class ShapeError(GradirError, ValueError):
    """Operand shapes do not fit the op (broadcasting, matmul, reshape, ...)."""


class DTypeError(GradirError, TypeError):
    """An operand's dtype is not allowed for the op."""


class AxisError(GradirError, ValueError):
    """An axis argument is out of range or repeated."""


class UnsupportedOpError(GradirError, NotImplementedError):
    """The op (or this use of it) is not in gradir's op library."""


class TracedControlFlowError(GradirError):
    """Python control flow (`if`, `while`, `bool()`, `int()`) on a traced value."""


class NonDifferentiableError(GradirError):
    """A gradient was asked of an input that has none (integer indices, bool masks)."""


class IRParseError(GradirError, ValueError):
    """The text form of a graph could not be parsed."""


class VerifyError(GradirError):
    """A graph broke an IR invariant (SSA, shapes, dtypes, ordering)."""


class TraceError(GradirError):
    """A traced value was used outside its trace, or a function returned something untraceable."""


class ExecutionError(GradirError, RuntimeError):
    """An op failed while running (e.g. an index out of range that was only known at run time)."""


class LoweringError(GradirError, RuntimeError):
    """A compiled backend failed to lower (or to build) a kernel: a gradir bug to report, named by the kernel's op
    and the user's source line rather than left as the backend's own traceback."""


class ModelFileError(GradirError):
    """A model file given to the CLI is missing or does not follow the convention."""


class VersionError(GradirError, RuntimeError):
    """A value saved for backward was modified in place before backward read it."""


class FreedGraphError(GradirError, RuntimeError):
    """backward() through a graph whose saved values an earlier backward() already freed."""


class InPlaceError(GradirError, RuntimeError):
    """While tracing, an in-place write to a value a VJP rule already saved for backward."""


class BudgetError(GradirError, ValueError):
    """A memory budget below the smallest activation peak the recompute planner can reach."""


class CheckpointError(GradirError):
    """A training checkpoint that cannot be read, or does not fit the parameters / optimizer it is resumed with."""


class NonFiniteError(GradirError, RuntimeError):
    """Under `gr.debug_nans()`: an op, forward or backward, produced a NaN (`op`, `source` name it), or a NaN came
    in through an input (`input` names it; `op` is then None: the op reading it is not to blame)."""

    def __init__(self, message: str, op: str | None = None, source: str | None = None, input: str | None = None):
        super().__init__(message, op=op, source=source)
        self.input = input


# every exception class above, one added later included
__all__ = sorted(n for n, v in dict(globals()).items()
                 if isinstance(v, type) and issubclass(v, Exception) and v.__module__ == __name__)
__dir__ = api_dir(globals())  # dir() and tab completion offer __all__, not the imports (gradir.util.public)
