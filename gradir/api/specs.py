"""Shape annotations for model files, and the example inputs they stand for.

A model file tells gradir what to call its function with in one of two ways:

    def example_inputs():                     # 1. a function returning the arguments
        return (1.5, -2.0)

    def loss(x: gr.f32[32, 16], y: gr.i64[32](high=4), w: gr.f32[16, 4]):   # 2. annotations
        ...

`gr.f32[32, 16]` is a `TensorSpec`; `spec.example(rng)` draws a random array of that shape
(standard normal floats; integers uniform in [low, high), so integer specs need `high=`).
`gr.f32[32, 16](grad=False)` marks data that the CLI should not differentiate by default.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from gradir.core import dtypes
from gradir.core.errors import ModelFileError
from gradir.util.pytree import tree_flatten

SEED = 0  # example inputs built from annotations are the same on every run


@dataclass(frozen=True)
class TensorSpec:
    """A static shape and dtype (what a graph input needs), plus how to draw an example of it."""

    shape: tuple[int, ...]
    dtype: np.dtype
    low: int = 0
    high: int | None = None
    grad: bool = True  # differentiate this argument by default (float specs only)

    def __post_init__(self):
        object.__setattr__(self, "dtype", dtypes.as_dtype(self.dtype))
        shape = self.shape if isinstance(self.shape, tuple) else (self.shape,)
        if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise ModelFileError(f"shape {shape!r} must be non-negative integers, e.g. gr.f32[32, 256]", op="TensorSpec")
        object.__setattr__(self, "shape", tuple(int(d) for d in shape))
        if self.high is not None and not dtypes.is_integer(self.dtype):
            raise ModelFileError(f"low=/high= apply to integer specs; {self!r} draws normal floats", op="TensorSpec")

    def __call__(self, *, low: int | None = None, high: int | None = None, grad: bool | None = None) -> TensorSpec:
        """The same spec with options: `gr.i64[32](high=27)`, `gr.f32[32, 16](grad=False)`."""
        changes = {k: v for k, v in (("low", low), ("high", high), ("grad", grad)) if v is not None}
        return dataclasses.replace(self, **changes)

    @property
    def differentiable(self) -> bool:
        return self.grad and dtypes.is_float(self.dtype)

    def example(self, rng: np.random.Generator) -> np.ndarray:
        """A random array of this shape and dtype: standard normal floats, integers in [low, high)."""
        if dtypes.is_integer(self.dtype):
            if self.high is None:
                raise ModelFileError(f"{self!r} needs a range to draw indices from, e.g. {self!r}(high=27)",
                                     op="TensorSpec")
            return rng.integers(self.low, self.high, size=self.shape).astype(self.dtype)
        if not dtypes.is_float(self.dtype):
            raise ModelFileError(f"cannot draw examples of dtype {dtypes.short(self.dtype)}", op="TensorSpec")
        return rng.standard_normal(self.shape).astype(self.dtype)

    def __repr__(self) -> str:
        opts = [f"{k}={getattr(self, k)!r}" for k, default in (("low", 0), ("high", None), ("grad", True))
                if getattr(self, k) != default]
        call = f"({', '.join(opts)})" if opts else ""
        dims = ", ".join(map(str, self.shape)) if self.shape else "()"
        return f"gr.{dtypes.short(self.dtype)}[{dims}]{call}"


class SpecDType:
    """`gr.f32` and friends: index with a shape to get a TensorSpec (`gr.f32[32, 256]`, `gr.f64[()]`)."""

    def __init__(self, dtype):
        self.dtype = dtypes.as_dtype(dtype)

    def __getitem__(self, shape) -> TensorSpec:
        return TensorSpec(shape if isinstance(shape, tuple) else (shape,), self.dtype)

    def __repr__(self) -> str:
        return f"gr.{dtypes.short(self.dtype)}"


f16, f32, f64, bf16 = (SpecDType(d) for d in (dtypes.float16, dtypes.float32, dtypes.float64, dtypes.bfloat16))
i32, i64 = SpecDType(dtypes.int32), SpecDType(dtypes.int64)

CONVENTION = ("define example_inputs() returning a tuple of arguments, or annotate every parameter "
              "with its shape, e.g. `x: gr.f32[32, 256]`")


# -- example inputs of a model-file function ------------------------------------------------------


@dataclass
class Example:
    """Example arguments for a function and, when the model file says, which ones to differentiate."""

    args: tuple
    argnums: tuple[int, ...] | None  # None: default_argnums decides
    origin: str                      # "example_inputs()" or "annotations"


def _where(fn) -> str | None:
    code = getattr(fn, "__code__", None)
    return f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}" if code else None


def _signature(fn) -> inspect.Signature:
    try:
        return inspect.signature(fn, eval_str=True)  # model files may use `from __future__ import annotations`
    except Exception as e:  # noqa: BLE001 - a bad annotation is the user's error, reported in one line
        raise ModelFileError(f"cannot read the signature of {fn.__name__}: {type(e).__name__}: {e}",
                             source=_where(fn)) from None


def _from_example_inputs(fn, module: ModuleType) -> Example:
    got = module.example_inputs()
    argnums = None
    if isinstance(got, dict):
        if "args" not in got:
            raise ModelFileError(f"example_inputs() returned a dict without 'args' (keys: {', '.join(map(str, got))})",
                                 source=_where(module.example_inputs))
        argnums = got.get("argnums")
        argnums = None if argnums is None else (argnums,) if isinstance(argnums, int) else tuple(argnums)
        got = got["args"]
    if not isinstance(got, tuple):
        raise ModelFileError(f"example_inputs() must return a tuple of arguments (or a dict with 'args'), "
                             f"got {type(got).__name__}", source=_where(module.example_inputs))
    try:
        _signature(fn).bind(*got)
    except TypeError as e:
        raise ModelFileError(f"example_inputs() gives {len(got)} arguments that do not fit {fn.__name__}: {e}",
                             source=_where(fn)) from None
    return Example(got, argnums, "example_inputs()")


def _from_annotations(fn) -> Example:
    rng = np.random.default_rng(SEED)
    args, argnums = [], []
    for p in _signature(fn).parameters.values():
        spec = p.annotation
        if isinstance(spec, SpecDType):
            spec = spec[()]  # a bare `gr.f64` annotates a scalar
        if not isinstance(spec, TensorSpec):
            if p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            raise ModelFileError(f"no example inputs for {fn.__name__} (parameter {p.name!r} has no gr.<dtype>[shape] "
                                 f"annotation): {CONVENTION}", source=_where(fn))
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            raise ModelFileError(f"parameter {p.name!r} of {fn.__name__} must be positional to get an example input",
                                 source=_where(fn))
        if spec.differentiable:
            argnums.append(len(args))
        args.append(spec.example(rng))
    return Example(tuple(args), tuple(argnums), "annotations")


def resolve_example(fn, module: ModuleType | None = None) -> Example:
    """The example arguments for `fn`: `module.example_inputs()` if defined, else `fn`'s annotations."""
    if module is not None and hasattr(module, "example_inputs"):
        if not callable(module.example_inputs):
            raise ModelFileError("example_inputs must be a function returning a tuple of arguments")
        return _from_example_inputs(fn, module)
    return _from_annotations(fn)


def example_args(fn, module: ModuleType | None = None) -> tuple:
    """The example arguments for `fn` (see `resolve_example`); raises ModelFileError if there are none."""
    return resolve_example(fn, module).args


def default_argnums(args: tuple) -> tuple[int, ...]:
    """Positional arguments whose every leaf is a floating-point array or Python float."""
    def is_float_leaf(x) -> bool:
        if type(x).__module__.startswith("torch"):
            return bool(x.dtype.is_floating_point)
        if isinstance(x, (bool, int, complex)) or x is None:
            return False
        return isinstance(x, float) or dtypes.is_float(np.asarray(x).dtype)

    out = []
    for i, a in enumerate(args):
        leaves, _ = tree_flatten(a)
        if leaves and all(is_float_leaf(x) for x in leaves):
            out.append(i)
    return tuple(out)
