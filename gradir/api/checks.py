"""Gradient checks: is an analytic gradient right?

The oracles here never use autodiff. They evaluate the user's function directly on NumPy arrays
(gradir ops evaluate eagerly on arrays), so a wrong VJP rule cannot hide in both sides:

- `central_difference` / `forward_difference`: (f(x+h e_k) - f(x-h e_k)) / 2h per coordinate, O(h^2)
  truncation error (forward differences O(h)); round-off grows like eps/h, so h ~ 1e-6 is a good
  default in float64.
- `complex_step`: Im(f(x + i h e_k)) / h. No subtraction, so no cancellation: h can be 1e-20 or
  smaller. Needs f to be complex-analytic on the path (`abs`, branches on the real part and
  `real()` silently break it).
- `directional`: the same central difference along a few random unit directions v, compared with
  g . v: one function pair per direction instead of per coordinate, and a wrong coordinate anywhere
  shows up in almost every direction.
- `gradcheck`: every coordinate, analytic (reverse mode, optionally forward mode) against central
  differences; raises `GradcheckError` naming the worst coordinate.
- `cmp` / `CmpTable`: exact / approximate / maxdiff rows, as in Karpathy's makemore backprop exercise.
"""

from __future__ import annotations

import inspect
import io
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from rich.console import Console
from rich.table import Table

from gradir.api import transforms
from gradir.core.errors import DTypeError, GradirError, ShapeError
from gradir.core.interop import is_torch, torch_to_numpy
from gradir.util.public import api_dir
from gradir.util.pytree import tree_flatten, tree_flatten_with_path, tree_unflatten

__all__ = ["CmpRow", "CmpTable", "DirectionalReport", "DirectionalRow", "GradcheckError", "central_difference",
           "cmp", "complex_step", "directional", "forward_difference", "gradcheck", "order_of_accuracy"]


class GradcheckError(GradirError, AssertionError):
    """An analytic gradient disagrees with finite differences (the message names the worst coordinate)."""


# -- helpers --------------------------------------------------------------------------------------


def _as_numpy(x) -> np.ndarray:
    if is_torch(x):
        return torch_to_numpy(x)
    if hasattr(x, "numpy") and not isinstance(x, np.ndarray):  # gr.Tensor and similar
        return np.asarray(x.numpy())
    return np.asarray(x)


def _where(f: Callable) -> str | None:
    """`file.py:LINE` where `f` is defined, for error messages."""
    code = getattr(inspect.unwrap(f), "__code__", None)
    if code is None:
        return None
    return f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"


def _fname(f: Callable) -> str:
    return getattr(f, "__name__", type(f).__name__)


def _arg_name(f: Callable, argnum: int) -> str:
    try:
        params = list(inspect.signature(f).parameters)
    except (TypeError, ValueError):
        params = []
    return params[argnum] if argnum < len(params) else f"arg{argnum}"


class _Point:
    """The leaves of args[argnum] as float arrays, and a way to call f with them replaced."""

    def __init__(self, f: Callable, args: tuple, argnum: int, op: str):
        if not -len(args) <= argnum < len(args):
            raise GradirError(f"argnum {argnum} is out of range for {len(args)} positional arguments", op=op,
                              source=_where(f))
        self.f, self.args, self.argnum, self.op = f, args, argnum % len(args), op
        leaves, self.tree = tree_flatten(args[self.argnum])
        paths, _ = tree_flatten_with_path(args[self.argnum], _arg_name(f, self.argnum))
        self.paths = [p for p, _ in paths]
        self.python = [isinstance(x, (int, float)) and not isinstance(x, bool) for x in leaves]
        self.leaves = [_as_numpy(x) for x in leaves]
        for p, x, py in zip(self.paths, self.leaves, self.python):
            if x.dtype.kind not in "fc" and not py:  # a Python int is perturbed as a float; int arrays cannot be
                raise GradirError(f"argument {p} has dtype {x.dtype}; finite differences need float inputs", op=op,
                                  source=_where(f))
        self.sizes = [x.size for x in self.leaves]

    @property
    def size(self) -> int:
        return sum(self.sizes)

    def flat(self) -> np.ndarray:
        """All coordinates of the argument as one float64 vector."""
        return np.concatenate([x.astype(np.float64).ravel() for x in self.leaves]) if self.leaves else np.zeros(0)

    def call(self, flat: np.ndarray):
        """f evaluated with args[argnum] replaced by `flat` (same structure, dtype float64 or complex128)."""
        leaves, k = [], 0
        for x, n, py in zip(self.leaves, self.sizes, self.python):
            chunk = flat[k:k + n].reshape(x.shape)
            k += n
            if py:
                leaves.append(chunk.item())
            else:
                dt = np.result_type(x.dtype, chunk.dtype) if np.iscomplexobj(chunk) else x.dtype
                leaves.append(chunk.astype(dt))
        args = list(self.args)
        args[self.argnum] = tree_unflatten(self.tree, leaves)
        out = _as_numpy(self.f(*args))
        if out.size != 1:
            raise ShapeError(f"needs a scalar-valued function, {_fname(self.f)} returned shape {out.shape}", op=self.op,
                             source=_where(self.f))
        return out.reshape(()).item()

    def unflat(self, vec: np.ndarray):
        """A flat vector back in the structure and shapes of args[argnum]."""
        leaves, k = [], 0
        for x, n in zip(self.leaves, self.sizes):
            leaves.append(np.asarray(vec[k:k + n]).reshape(x.shape))
            k += n
        return tree_unflatten(self.tree, [v[()] if v.ndim == 0 else v for v in leaves])

    def locate(self, k: int) -> str:
        """The readable name of flat coordinate k: ``W[2, 1]`` or ``a``."""
        for p, x, n in zip(self.paths, self.leaves, self.sizes):
            if k < n:
                return p if x.ndim == 0 else f"{p}[{', '.join(map(str, np.unravel_index(k, x.shape)))}]"
            k -= n
        raise IndexError(k)


def _flat_grad(point: _Point, grad) -> np.ndarray:
    """A gradient (same structure as the argument) as one flat float vector."""
    leaves, _ = tree_flatten(grad)
    if len(leaves) != len(point.leaves):
        raise ShapeError(f"gradient has {len(leaves)} leaves, the argument {len(point.leaves)}", op="gradcheck")
    out = []
    for g, x, p in zip(leaves, point.leaves, point.paths):
        g = _as_numpy(g)
        if g.shape != x.shape:
            raise ShapeError(f"gradient of {p} has shape {g.shape}, the argument {x.shape}", op="gradcheck")
        out.append(g.astype(np.result_type(g.dtype, np.float64)).ravel())
    return np.concatenate(out) if out else np.zeros(0)


def _numeric(f, args, argnum, h, scheme: str, op: str):
    point = _Point(f, args, argnum, op)
    x = point.flat()
    grad = np.empty(x.size)
    f0 = point.call(x) if scheme == "forward" else None
    for k in range(x.size):
        if scheme == "complex":
            xc = x.astype(np.complex128)
            xc[k] += 1j * h
            grad[k] = np.imag(point.call(xc)) / h
            continue
        xp = x.copy()
        xp[k] += h
        if scheme == "forward":
            grad[k] = (point.call(xp) - f0) / h
        else:
            xm = x.copy()
            xm[k] -= h
            grad[k] = (point.call(xp) - point.call(xm)) / (2 * h)
    return point.unflat(grad)


# -- finite differences and complex step ----------------------------------------------------------


def central_difference(f: Callable, *args, argnum: int = 0, h: float = 1e-6):
    """Numeric gradient of scalar `f` with respect to `args[argnum]`: (f(x+h e_k) - f(x-h e_k)) / 2h
    for every coordinate k. `f` is evaluated directly (on NumPy arrays), never differentiated.
    The result has the structure and shapes of `args[argnum]`."""
    return _numeric(f, args, argnum, h, "central", "central_difference")


def forward_difference(f: Callable, *args, argnum: int = 0, h: float = 1e-6):
    """Numeric gradient by one-sided differences (f(x+h e_k) - f(x)) / h: error O(h), not O(h^2)."""
    return _numeric(f, args, argnum, h, "forward", "forward_difference")


def complex_step(f: Callable, *args, argnum: int = 0, h: float = 1e-20):
    """Numeric gradient by the complex step Im(f(x + i h e_k)) / h, with f evaluated on complex128.

    Exact to rounding for any small h when f is complex-analytic along the step; functions that
    look only at the real part (branches, `abs`, `real`) give silently wrong answers."""
    return _numeric(f, args, argnum, h, "complex", "complex_step")


# -- directional checks ---------------------------------------------------------------------------


@dataclass
class DirectionalRow:
    index: int
    numeric: float      # (f(x + h v) - f(x - h v)) / 2h
    analytic: float     # g . v
    error: float        # |numeric - analytic|
    direction: np.ndarray = field(repr=False)


@dataclass
class DirectionalReport:
    """Rows of a directional check; iterable and indexable like the list of rows it holds."""

    rows: list[DirectionalRow]
    h: float
    seed: int | None
    what: str = ""  # what is checked, for the table's title ("L's gradient", "a corrupted gradient", ...)

    @property
    def max_error(self) -> float:
        return max((r.error for r in self.rows), default=0.0)

    def __iter__(self):
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i) -> DirectionalRow:
        return self.rows[i]

    def to_dict(self) -> dict:
        return {"h": self.h, "seed": self.seed, "max_error": self.max_error,
                "rows": [{"index": r.index, "numeric": r.numeric, "analytic": r.analytic, "error": r.error}
                         for r in self.rows]}

    def table(self):
        t = Table(title=f"directional check{' of ' + self.what if self.what else ''} (h={self.h:g}, seed={self.seed})")
        for col in ("direction", "numeric (f(x+hv)-f(x-hv))/2h", "analytic g.v", "|error|"):
            t.add_column(col, justify="right")
        for r in self.rows:
            t.add_row(str(r.index), f"{r.numeric:.12f}", f"{r.analytic:.12f}", f"{r.error:.2e}")
        return t

    def __str__(self) -> str:
        return _render(self.table())


def directional(f: Callable, *args, argnum: int = 0, n: int = 5, h: float = 1e-5, seed: int | None = 0,
                grad=None, directions: Sequence | None = None) -> DirectionalReport:
    """Compare the directional derivative of scalar `f` along random unit directions v (drawn from
    `np.random.default_rng(seed)` over all coordinates of `args[argnum]`) by central differences with
    the analytic g . v. `grad` lets the caller supply the gradient to check (e.g. a hand-derived or
    deliberately broken one; default: `gr.grad`). `directions` replaces the random ones (each in the
    argument's structure or flat), e.g. a basis vector for a single-coordinate check."""
    point = _Point(f, args, argnum, "directional")
    if grad is None:
        grad = transforms.grad(f, argnums=point.argnum)(*args)
    g = _flat_grad(point, grad)
    x = point.flat()
    if directions is None:
        rng = np.random.default_rng(seed)
        vs = [rng.standard_normal(x.size) for _ in range(n)]
        vs = [v / np.linalg.norm(v) for v in vs]
    else:
        vs = [np.concatenate([_as_numpy(leaf).astype(np.float64).ravel() for leaf in tree_flatten(d)[0]])
              for d in directions]
        seed = None
    rows = []
    for i, v in enumerate(vs):
        if v.size != x.size:
            raise ShapeError(f"direction {i} has {v.size} coordinates, the argument {x.size}", op="directional")
        num = (point.call(x + h * v) - point.call(x - h * v)) / (2 * h)
        ana = float(np.real(g @ v))
        rows.append(DirectionalRow(i, float(num), ana, abs(float(num) - ana), v))
    return DirectionalReport(rows, h, seed)


# -- gradcheck ------------------------------------------------------------------------------------


def _forward_mode_grad(f, args, argnum):
    """The gradient by forward mode: one gr.jvp per coordinate (a one-hot tangent)."""
    point = _Point(f, args, argnum, "gradcheck")
    zeros = [tree_flatten(a)[1] for a in args]
    out = np.empty(point.size)
    for k in range(point.size):
        tangents = []
        for i, (a, td) in enumerate(zip(args, zeros)):
            if i == point.argnum:
                e = np.zeros(point.size)
                e[k] = 1.0
                tangents.append(point.unflat(e))
            else:
                tangents.append(tree_unflatten(td, [np.zeros_like(_as_numpy(leaf)) for leaf in tree_flatten(a)[0]]))
        _, t = transforms.jvp(f, tuple(args), tuple(tangents))
        out[k] = float(np.real(_as_numpy(t)))
    return point.unflat(out)


def gradcheck(f: Callable, *args, argnums: int | Sequence[int] = 0, atol: float = 1e-8, rtol: float = 1e-6,
              h: float = 1e-6, grad=None, modes: Sequence[str] = ("rev",)) -> bool:
    """Check the gradient of scalar `f` with respect to `args[argnums]` coordinate by coordinate
    against central differences (step `h`). Passes when |analytic - numeric| <= atol + rtol*|analytic|
    everywhere; otherwise raises `GradcheckError` naming the worst coordinate.

    `modes`: "rev" checks `gr.grad` (VJP rules), "fwd" checks forward mode (one `gr.jvp` per coordinate,
    JVP rules). `grad` replaces the analytic side by a gradient you supply (one per argnum).
    The checked arguments must be float64 (or complex128, or Python scalars): in float32 central
    differences are too coarse (round-off ~eps/h) to judge a gradient at these tolerances, so a
    lower-precision argument raises DTypeError instead of reporting a correct gradient as wrong.
    Cast it up (``x.astype(np.float64)``) to check the rules; `gradir check` does so itself."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    supplied = None if grad is None else ((grad,) if isinstance(argnums, int) else tuple(grad))
    for mode in modes:
        if mode not in ("rev", "fwd"):
            raise GradirError(f"unknown mode {mode!r} (use 'rev' or 'fwd')", op="gradcheck")
    for j, argnum in enumerate(nums):
        point = _Point(f, args, argnum, "gradcheck")
        for p, x, py in zip(point.paths, point.leaves, point.python):
            if not py and np.finfo(x.dtype).eps > np.finfo(np.float64).eps:
                raise DTypeError(f"argument {p} has dtype {x.dtype}; gradcheck needs float64 inputs (central "
                                 "differences in lower precision cannot judge a gradient): pass x.astype(np.float64)",
                                 op="gradcheck", source=_where(f))
        candidates = []  # traced before the differences run f on plain arrays: a bad model gets gradir's errors
        if supplied is not None:
            candidates.append(("supplied", supplied[j]))
        else:
            if "rev" in modes:
                candidates.append(("reverse mode", transforms.grad(f, argnums=argnum)(*args)))
            if "fwd" in modes:
                candidates.append(("forward mode", _forward_mode_grad(f, args, argnum)))
        numeric = _flat_grad(point, central_difference(f, *args, argnum=argnum, h=h))
        for label, cand in candidates:
            analytic = _flat_grad(point, cand)
            _compare(f, point, label, analytic, numeric, atol, rtol)
    return True


def _compare(f, point: _Point, label: str, analytic: np.ndarray, numeric: np.ndarray, atol: float, rtol: float):
    diff = np.abs(analytic - numeric)
    tol = atol + rtol * np.abs(analytic)
    excess = np.where(np.isnan(diff), np.inf, diff - tol)
    bad = excess > 0
    if not bad.any():
        return
    k = int(np.argmax(excess))
    raise GradcheckError(
        f"{label} gradient of {_fname(f)} is wrong at {point.locate(k)}: analytic {analytic[k]:.12g}, "
        f"numeric {numeric[k]:.12g}, |diff| {diff[k]:.3g} > atol + rtol*|analytic| = {tol[k]:.3g} "
        f"({int(bad.sum())} of {bad.size} coordinates fail)", op="gradcheck", source=_where(f))


# -- cmp tables -----------------------------------------------------------------------------------


@dataclass
class CmpRow:
    name: str
    exact: bool
    approximate: bool
    maxdiff: float

    def __str__(self) -> str:
        ex, ap = str(self.exact), str(self.approximate)
        return f"{self.name:15s} | exact: {ex:5s} | approximate: {ap:5s} | maxdiff: {self.maxdiff}"


def cmp(name: str, a, b, rtol: float = 1e-5, atol: float = 1e-8, verbose: bool = True) -> CmpRow:
    """Compare two arrays (say a hand-derived gradient `a` and autodiff's `b`): exact equality,
    `np.allclose` (default tolerances as torch.allclose) and the largest absolute difference.
    Prints the row (unless `verbose=False`) and returns it."""
    a, b = _as_numpy(a), _as_numpy(b)
    if a.shape != b.shape:
        raise ShapeError(f"{name}: shapes {a.shape} and {b.shape} differ", op="cmp")
    exact = bool(np.array_equal(a, b))
    approx = bool(np.allclose(a, b, rtol=rtol, atol=atol))
    maxdiff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
    row = CmpRow(name, exact, approx, maxdiff)
    if verbose:
        print(row)
    return row


@dataclass
class CmpTable:
    """Collects `cmp` rows and renders them as one rich table."""

    title: str = "hand-derived vs autodiff"
    rows: list[CmpRow] = field(default_factory=list)

    def cmp(self, name: str, a, b, rtol: float = 1e-5, atol: float = 1e-8) -> CmpRow:
        row = cmp(name, a, b, rtol=rtol, atol=atol, verbose=False)
        self.rows.append(row)
        return row

    @property
    def all_approximate(self) -> bool:
        return all(r.approximate for r in self.rows)

    @property
    def max_diff(self) -> float:
        return max((r.maxdiff for r in self.rows), default=0.0)

    def to_dict(self) -> dict:
        return {"title": self.title, "rows": [vars(r).copy() for r in self.rows]}

    def table(self):
        t = Table(title=self.title)
        t.add_column("name")
        t.add_column("exact")
        t.add_column("approximate")
        t.add_column("maxdiff", justify="right")
        for r in self.rows:
            t.add_row(r.name, str(r.exact), str(r.approximate), f"{r.maxdiff:.3e}")
        return t

    def __str__(self) -> str:
        return _render(self.table())


def _render(renderable) -> str:
    buf = io.StringIO()
    Console(file=buf, width=120, color_system=None).print(renderable)
    return buf.getvalue()


def order_of_accuracy(hs: Sequence[float], errors: Sequence[float]) -> float:
    """The log-log slope of error against step size (1 for forward, 2 for central differences)."""
    if len(hs) != len(errors) or len(hs) < 2 or any(not math.isfinite(e) or e <= 0 for e in errors):
        raise GradirError("needs two or more positive, finite errors, one per step size", op="order_of_accuracy")
    return float(np.polyfit(np.log10(np.asarray(hs, float)), np.log10(np.asarray(errors, float)), 1)[0])


__dir__ = api_dir(globals())  # dir() and tab completion offer __all__, not the imports (gradir.util.public)
