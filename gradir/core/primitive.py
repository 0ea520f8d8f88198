"""The rule table of a primitive: everything gradir knows about one op, defined in one place.

Each primitive carries
- `infer(*operands, **attrs) -> (shape, dtype)`: its shape/dtype rule (raises gradir errors);
- `numpy`: its NumPy reference, a Python expression over the operand names in `args` and the
  attribute names (the NumPy backend both evaluates it and pastes it into generated source);
- `vjp(g, out, *operands, **attrs) -> [cotangent or None per operand]`, written with gradir ops so
  the backward is a graph that can be differentiated again (None means a zero cotangent);
- `jvp(tangents, out, *operands, **attrs) -> tangent`, tangents being None where zero;
- `kind` (elementwise / reduction / shape / matmul / index / composite / other) for fusion and
  scheduling, and `flops(out, operands, attrs)` for cost models;
- optionally `decompose(*operands, **attrs)`: for composites that keep a hand-derived VJP, the same
  computation in primitives, used by `lower_composites` before execution;
- `vjp_inspects`: operand positions whose values the VJP rule looks at (`concrete`) when they are
  constants (the eager tape then traces such a node's rule with its values, not placeholders);
- `batch(operands, bdims, **attrs) -> (out, out_bdim)`: its batching rule for gr.vmap (gradir.passes.batching),
  `bdims` giving each operand's batch axis or None; attached by gradir.ops.batching (None: vmap refuses the op).
"""

from __future__ import annotations

import ast
import builtins
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.special

from gradir.core import kernels
from gradir.core.errors import UnsupportedOpError
from gradir.core.source import user_source

REGISTRY: dict[str, Primitive] = {}


@dataclass
class Primitive:
    name: str
    args: tuple[str, ...]
    infer: Callable[..., tuple[tuple[int, ...], np.dtype]]
    numpy: str | None = None
    vjp: Callable | None = None
    jvp: Callable | None = None
    kind: str = "other"
    flops: Callable[[Any, tuple, dict], int] | None = None
    decompose: Callable | None = None
    differentiable: bool = True
    doc: str = ""
    vjp_inspects: tuple[int, ...] = ()  # operands whose values the VJP specializes on when constant
    batch: Callable | None = None  # gr.vmap's batching rule (gradir.ops.batching)
    _impl: Callable | None = field(default=None, repr=False)

    @property
    def variadic(self) -> bool:
        return len(self.args) == 1 and self.args[0].startswith("*")

    def impl(self, *operands, **attrs):
        """Run the NumPy reference on concrete arrays."""
        if self._impl is None:
            if self.numpy is None:
                raise UnsupportedOpError("has no NumPy reference (decompose it first)", op=self.name)
            self._impl = _template_function(self.name, self.numpy, self.args)
        return self._impl(*operands, **attrs)

    def cost(self, out, operands, attrs) -> int:
        """Floating-point operations of one application (elementwise default: one per output)."""
        if self.flops is not None:
            return int(self.flops(out, operands, attrs))
        return math.prod(out.shape) if self.kind in ("elementwise", "reduction") else 0


_MISSING = object()


def _template_function(name: str, template: str, args: tuple[str, ...]) -> Callable:
    """The NumPy template as a Python function of the operands (positional) and the attributes it
    names (keywords; other attributes are ignored). A name that is neither an operand nor in the
    namespace is an attribute, falling back to the builtin of that name as `eval` would."""
    namespace = numpy_namespace()
    params = [a.lstrip("*") for a in args]
    used = {n.id for n in ast.walk(ast.parse(template, mode="eval")) if isinstance(n, ast.Name)}
    keywords = sorted(used - set(params) - set(namespace))
    defaults = {f"_d_{k}": getattr(builtins, k, _MISSING) for k in keywords}
    signature = ", ".join(args + tuple(["*"] if keywords and not args[-1].startswith("*") else [])
                          + tuple(f"{k}=_d_{k}" for k in keywords) + ("**_unused",))
    scope = namespace | defaults
    exec(compile(f"def _impl({signature}):\n    return {template}\n", f"<{name}>", "exec"), scope)
    return scope["_impl"]


def numpy_namespace() -> dict[str, Any]:
    """Names the NumPy templates may use: np, scipy.special as `sc`, and gradir's kernels as `_k`."""
    return {"np": np, "sc": scipy.special, "_k": kernels}


def register(prim: Primitive) -> Primitive:
    if prim.name in REGISTRY:
        raise ValueError(f"primitive {prim.name} defined twice")
    REGISTRY[prim.name] = prim
    return prim


def get_primitive(name: str, source: str | None = None) -> Primitive:
    """The primitive named `name`. The op library (gradir.ops) registers every primitive when it is imported,
    which `import gradir` (or any import of a gradir module, through the package) does first."""
    try:
        return REGISTRY[name]
    except KeyError:
        if source is None:
            source = user_source()
        raise UnsupportedOpError(f"unknown op (gradir has no primitive named {name!r})", op=name,
                                 source=source) from None
