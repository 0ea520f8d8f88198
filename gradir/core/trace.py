"""Tracing: running Python on `Value`s records primitives into the graph being built.

`bind(op, *operands, **attrs)` is the single entry point every op goes through. With concrete
NumPy operands it evaluates the op's NumPy reference at once (eager mode); with traced operands it
checks the op's shape/dtype rule and appends a node to the innermost graph under construction.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from gradir.core import dtypes
from gradir.core.errors import ExecutionError, GradirError, TraceError
from gradir.core.ir import Graph, Value
from gradir.core.nan_check import NAN_CHECKS, holds_nan, nan_in_result
from gradir.core.primitive import REGISTRY, get_primitive
from gradir.core.source import current_scope, origin, source_of, user_source
from gradir.util.gcpause import gc_paused
from gradir.util.pytree import tree_flatten

_BUILDERS: list[Graph] = []  # graphs under construction, innermost last


@contextlib.contextmanager
def building(graph: Graph):
    """Record ops into `graph` while inside."""
    _BUILDERS.append(graph)
    try:
        yield graph
    finally:
        _BUILDERS.pop()


def current_graph() -> Graph | None:
    return _BUILDERS[-1] if _BUILDERS else None


class EagerOperand:
    """Base class of eager tensors (`gradir.eager.tensor.Tensor`). `bind` hands an op on them to their
    `_eager_bind`, which evaluates it now and records it on the tape; inside a trace they enter as
    constants (their current value, no gradient)."""

    __slots__ = ()

    @classmethod
    def _eager_bind(cls, op: str, operands: tuple, attrs: dict):
        raise NotImplementedError


def is_traced(*xs) -> bool:
    return any(isinstance(x, Value) for x in xs)


def capture(v: Value, graph: Graph) -> Value:
    """A value of an enclosing trace used inside an inner one becomes an extra input of the inner
    graph (listed in `graph.captures`, the caller passes the outer value for it)."""
    caps = graph.captures
    if v not in caps:
        if v.graph not in _BUILDERS:
            raise TraceError(f"a traced value {v.type_str} escaped its trace and was used after it ended",
                             op=v.op, source=user_source())
        caps[v] = graph.add_input(v.shape, v.dtype, name=f"captured{len(caps)}", source=v.source)
    return caps[v]


def bind(op: str, *operands, **attrs) -> Any:
    """Apply primitive `op`: evaluate now on NumPy operands, or record a node on traced ones."""
    if _BUILDERS and operands:  # the common case inside a trace and every pass: all operands this graph's Values
        graph = _BUILDERS[-1]
        ref = graph.ref
        for o in operands:
            if type(o) is not Value or o.graph_ref is not ref:
                break
        else:
            prim = REGISTRY.get(op) or get_primitive(op)
            try:
                shape, dtype = prim.infer(*operands, **attrs)
            except GradirError as e:
                raise _located(e, op) from None
            source, scope = origin(3)  # (from bind's caller)
            return graph.append(op, operands, attrs, shape, dtype, source, scope)
    for o in operands:
        if isinstance(o, EagerOperand):
            if not is_traced(*operands):
                return o._eager_bind(op, operands, attrs)
            operands = tuple(constant(o.data) if isinstance(o, EagerOperand) else o for o in operands)
            break
    prim = get_primitive(op)
    graph = current_graph()
    if not is_traced(*operands):
        return evaluate(prim, operands, attrs)
    if graph is None:
        raise TraceError("a traced value was used after its trace ended", op=op, source=user_source())
    ops = []
    for o in operands:
        if not isinstance(o, Value):
            raise TraceError(f"operand {o!r} is not a traced value (ops lift constants before bind)",
                             op=op, source=user_source())
        ops.append(o if o.graph_ref is graph.ref else capture(o, graph))
    try:
        shape, dtype = prim.infer(*ops, **attrs)
    except GradirError as e:
        raise _located(e, op) from None
    return graph.append(op, ops, attrs, shape, dtype, user_source(), current_scope())


try:  # NumPy keeps its floating-point error state in a context variable; setting it directly costs a
    # tenth of entering np.errstate (a sixth of an eager op's time). Private names: np.errstate without them
    from numpy._core._ufunc_config import _extobj_contextvar as _FP_STATE
    from numpy._core._ufunc_config import _make_extobj

    _FP_IGNORE = _make_extobj(all="ignore")
except (ImportError, TypeError):  # pragma: no cover - another NumPy
    _FP_STATE = None


def quietly(fn, *args, **kwargs):
    """`fn(*args, **kwargs)` with NumPy's floating-point warnings off: NaN and inf come out as values,
    as in PyTorch (what np.errstate(all="ignore") does)."""
    if _FP_STATE is None:
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)
    token = _FP_STATE.set(_FP_IGNORE)
    try:
        return fn(*args, **kwargs)
    finally:
        _FP_STATE.reset(token)


def evaluate(prim, operands, attrs: dict) -> np.ndarray:
    """`prim` applied to NumPy operands now: its shape/dtype rule, then its NumPy reference."""
    try:
        shape, dtype = prim.infer(*operands, **attrs)
    except GradirError as e:
        raise _located(e, prim.name) from None
    try:
        out = quietly(prim.impl, *operands, **attrs)
    except (ValueError, IndexError, TypeError, ArithmeticError) as e:
        raise ExecutionError(str(e), op=prim.name, source=user_source()) from e
    if type(out) is not np.ndarray:
        out = np.asarray(out)
    if out.dtype != dtype:
        out = out.astype(dtype)
    if NAN_CHECKS.get() and holds_nan(out):  # gr.debug_nans
        raise nan_in_result(prim.name, operands, out, user_source())
    return out.reshape(shape) if out.shape != tuple(shape) else out


def _located(e: GradirError, op: str) -> GradirError:
    if e.source is not None:
        return e
    return type(e)(e.detail, op=e.op or op, source=user_source())


def constant(x, dtype=None) -> Any:
    """A constant: a `const` node inside a trace, a NumPy array outside."""
    if isinstance(dtype, np.dtype) and dtype in dtypes.SHORT_NAMES:  # (as_dtype's answer; the lifting helpers' case)
        arr = np.asarray(x, dtype=dtype)
    else:
        arr = np.asarray(x, dtype=None if dtype is None else dtypes.as_dtype(dtype))
        if arr.dtype not in dtypes.SHORT_NAMES:
            arr = arr.astype(dtypes.as_dtype(arr.dtype))
    graph = current_graph()
    if graph is None:
        return arr
    return graph.append("const", (), {"value": arr}, arr.shape, arr.dtype, user_source(), current_scope())


def abstract_dtype(x) -> np.dtype:
    """The dtype an argument traces as (Python float -> f64, int -> i64, bool -> bool)."""
    if isinstance(x, (Value, np.ndarray, np.generic)):
        try:
            return dtypes.as_dtype(x.dtype)
        except GradirError as e:
            raise _located(e, "trace") from None
    if isinstance(x, (bool, int, float, complex)):
        return dtypes.weak_dtype(x, None)
    raise TraceError(f"cannot trace an argument of type {type(x).__name__}; pass NumPy arrays, "
                     "Python scalars, torch tensors or dict/list/tuple of them", op="trace", source=user_source())


@gc_paused
def trace_flat(fn, flat_args: list, names: list[str], rebuild, name: str) -> Graph:
    """Trace `fn` on placeholders shaped like `flat_args`; `rebuild(placeholders)` makes fn's args."""
    graph = Graph(name)
    with building(graph):
        placeholders = [graph.add_input(np.shape(a), abstract_dtype(a), n) for a, n in zip(flat_args, names)]
        result = fn(*rebuild(placeholders))
        flat_out, out_tree = tree_flatten(result)
        outs = []
        for o in flat_out:
            if isinstance(o, Value):
                outs.append(o if o.graph is graph else capture(o, graph))
            else:
                outs.append(constant(o))
    graph.outputs = outs
    graph.out_tree = out_tree
    return graph


def inline(graph: Graph, args: list, keep_source: bool = True) -> list:
    """Run `graph` through `bind`: with NumPy args it evaluates, inside a trace it re-records every
    node into the graph being built (how grad-of-grad and nested transforms compose)."""
    if is_traced(*args):
        args = [a if isinstance(a, Value) else constant(a) for a in args]
        copied = _copy_into_trace(graph, args, keep_source)
        if copied is not None:
            return copied
    env: dict[Value, Any] = dict(zip(graph.inputs, args))
    for n in graph.nodes:
        with source_of(n.source, n.scope) if keep_source else contextlib.nullcontext():
            if n.op == "const":
                env[n] = constant(n.attrs["value"])
            else:
                env[n] = bind(n.op, *[env[i] for i in n.inputs], **n.attrs)
    return [env[o] for o in graph.outputs]


def _copy_into_trace(graph: Graph, args: list, keep_source: bool) -> list | None:
    """Inside a trace, `graph`'s nodes appended to the graph being built as they are: their types are
    known, so nothing is inferred again (a 100k-node graph inlines in a fraction of bind's time).
    None when an argument's type differs from its input's: only `bind` re-infers those."""
    g = current_graph()
    if g is None or any(a.shape != x.shape or a.dtype != x.dtype for a, x in zip(args, graph.inputs)):
        return None
    env: dict[Value, Value] = {x: a if a.graph_ref is g.ref else capture(a, g) for x, a in zip(graph.inputs, args)}
    g.copy_nodes(graph.nodes, env, None if keep_source else (user_source(), current_scope()))
    return [env[o] for o in graph.outputs]
