"""What a VJP rule reads: the facts behind "saved tensors".

A reverse-mode rule for `y = op(x0, x1, ...)` turns the output cotangent `g` into operand cotangents.
Whatever else it reads (operands, or the op's own output `y`) must be kept from the forward pass
until the backward runs. Rather than keep a hand-written table beside the op library, the rules are
asked directly: each one is built once on placeholders in a scratch graph, and the placeholders its
emitted nodes reach (not counting `g`) are what it keeps. Position -1 stands for the output.

    vjp_reads("multiply", [x, y], {}, (), f64)  -> frozenset({0, 1})
    vjp_reads("tanh", [x], {}, (), f64)         -> frozenset({-1})
    explain("tanh", frozenset({-1}), 1)         -> "tanh keeps its output"
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gradir.core.errors import GradirError
from gradir.core.ir import Graph, Value, topo_values
from gradir.core.primitive import get_primitive
from gradir.core.trace import building

OUTPUT = -1
_CACHE: dict[tuple, tuple[frozenset[int] | None, ...]] = {}

# nicer words for operand names the op library uses (primitive.args)
_NAMES = {"idx": "the indices", "c": "the condition", "mask": "the mask"}


def _key(op, operands, attrs, out_shape, out_dtype) -> tuple:
    types = tuple((tuple(o.shape), np.dtype(o.dtype).str) for o in operands)
    return (op, types, tuple(out_shape), np.dtype(out_dtype).str, repr(sorted(attrs.items())))


def vjp_reads_by_operand(op: str, operands: Sequence, attrs: dict, out_shape, out_dtype
                         ) -> tuple[frozenset[int] | None, ...]:
    """For each operand i, what the rule reads to produce i's cotangent (operand indices, -1 for the
    output), or None when the rule gives operand i no cotangent. Cached by op, types and attrs."""
    key = _key(op, operands, attrs, out_shape, out_dtype)
    if key not in _CACHE:
        _CACHE[key] = _build(op, operands, attrs, out_shape, out_dtype)
    return _CACHE[key]


def _build(op, operands, attrs, out_shape, out_dtype) -> tuple[frozenset[int] | None, ...]:
    n = len(operands)
    if op in ("input", "const"):
        return (None,) * n
    prim = get_primitive(op)
    if not prim.differentiable or prim.vjp is None:
        return (None,) * n
    scratch = Graph(f"vjp_of_{op}")
    with building(scratch):
        xs = [scratch.add_input(o.shape, o.dtype, f"x{i}") for i, o in enumerate(operands)]
        out = scratch.add_input(out_shape, out_dtype, "out")
        g = scratch.add_input(out_shape, out_dtype, "g")
        try:
            cts = list(prim.vjp(g, out, *xs, **attrs))
        except GradirError:
            # a rule that cannot be built on placeholders: assume it keeps everything (conservative)
            everything = frozenset(range(n)) | {OUTPUT}
            return (everything,) * n
    position = {x: i for i, x in enumerate(xs)}
    position[out] = OUTPUT
    result: list[frozenset[int] | None] = []
    for c in cts + [None] * (n - len(cts)):
        if not isinstance(c, Value):
            result.append(None)
            continue
        result.append(frozenset(position[v] for v in topo_values([c]) if v in position))
    return tuple(result)


def vjp_reads(op: str, operands: Sequence, attrs: dict, out_shape, out_dtype) -> frozenset[int]:
    """Indices of the operands `op`'s VJP rule reads, plus -1 if it reads the op's own output.

    `operands` are anything with `.shape` and `.dtype` (Values, arrays). Ops that are not
    differentiable, or have no VJP rule, read nothing."""
    parts = vjp_reads_by_operand(op, operands, attrs, out_shape, out_dtype)
    return frozenset().union(*[p for p in parts if p is not None])


def node_reads(v: Value) -> tuple[frozenset[int] | None, ...]:
    """`vjp_reads_by_operand` for a graph node."""
    return vjp_reads_by_operand(v.op, v.inputs, v.attrs, v.shape, v.dtype)


def _operand_label(op: str, j: int, n: int) -> str:
    if j == OUTPUT:
        return "its output"
    if n == 1:
        return "its input"
    try:
        name = get_primitive(op).args[j].lstrip("*") if not get_primitive(op).variadic else ""
    except (GradirError, IndexError):
        name = ""
    if name in _NAMES:
        return _NAMES[name]
    if n == 2:
        return ("its first operand", "its second operand")[j]
    return f"operand {j}" + (f" ({name})" if name else "")


def _is_other_operand(by_operand, n: int) -> bool:
    """True when each operand's cotangent reads exactly the other operand (multiply, matmul)."""
    if n != 2 or by_operand is None:
        return False
    parts = [(i, p) for i, p in enumerate(by_operand) if p is not None]
    return bool(parts) and all(p == frozenset({1 - i}) for i, p in parts)


def explain(op: str, reads: frozenset[int], n_operands: int, by_operand=None) -> str:
    """Human words for what `op`'s VJP rule keeps, generated from `reads`:
    "add keeps nothing", "tanh keeps its output", "matmul keeps both operands", "take keeps the
    indices". With the per-operand reads (`vjp_reads_by_operand`), a binary op whose every cotangent
    reads just the other operand is said to keep "the other operand" (multiply)."""
    reads = frozenset(reads)
    if not reads:
        return f"{op} keeps nothing"
    if _is_other_operand(by_operand, n_operands) and reads == frozenset({0, 1}):
        return f"{op} keeps the other operand"
    operands = sorted(j for j in reads if j != OUTPUT)
    if n_operands >= 2 and len(operands) == n_operands:
        parts = ["both operands" if n_operands == 2 else "all its operands"]
    else:
        parts = [_operand_label(op, j, n_operands) for j in operands]
    if OUTPUT in reads:
        parts.append("its output")
    return f"{op} keeps " + " and ".join(parts)


def explain_node(v: Value) -> str:
    """`explain` for a graph node, with per-operand phrasing."""
    parts = node_reads(v)
    reads = frozenset().union(*[p for p in parts if p is not None])
    return explain(v.op, reads, len(v.inputs), parts)
