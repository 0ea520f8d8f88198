"""The arguments of a transformed function: flattened, traced, and given back.

Every transformation (gradir.api.transforms) starts the same way: `prepare` flattens the (pytree)
arguments into `Args` (torch tensors and gr.Tensors as NumPy arrays, Python scalars as arrays), `trace_args`
traces the function on placeholders shaped like them, and `finish` returns results as the user gave
arguments (NumPy scalars for 0-d results, torch tensors if torch came in, traced values inside a trace).
`signature` is what a trace depends on besides values: the key of the caches of gr.grad and gr.compile.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradir.api.options import NO_OPTIONS, CompileOptions, carry, options_of
from gradir.core.errors import DTypeError, TraceError
from gradir.core.interop import TORCH_DTYPES, is_torch, numpy_to_torch, torch_to_numpy
from gradir.core.ir import Graph, Value
from gradir.core.trace import EagerOperand, abstract_dtype, current_graph, is_traced, trace_flat, user_source
from gradir.util.pytree import TreeDef, tree_flatten, tree_flatten_with_path, tree_unflatten


@dataclass
class Args:
    """Flattened call arguments and how to rebuild them and return results."""

    fn: Callable
    args: tuple
    flat: list
    in_tree: Any
    leaf_ranges: list[range]  # leaves belonging to each positional argument
    torch_out: bool
    traced: bool  # called inside an enclosing trace (some leaf is a traced Value)
    device_flat: list | None = None  # `flat` with torch tensors left as they are (for the triton backend)

    @functools.cached_property
    def names(self) -> list[str]:
        """A readable path per leaf (``params['W1']``), from the function's parameter names."""
        try:
            params = list(inspect.signature(self.fn).parameters)
        except (TypeError, ValueError):
            params = []
        return [path for pos, a in enumerate(self.args)
                for path, _ in tree_flatten_with_path(a, params[pos] if pos < len(params) else f"arg{pos}")[0]]


def as_leaf(leaf):
    """One argument leaf as the array (or traced value) a trace takes."""
    if isinstance(leaf, (Value, np.ndarray)):
        return leaf
    if is_torch(leaf):
        return torch_to_numpy(leaf)
    if isinstance(leaf, EagerOperand):  # a gr.Tensor: its current data
        return leaf.data
    abstract_dtype(leaf)  # raises a clear error for unsupported leaves
    return np.asarray(leaf)


def _placeholder(t) -> np.ndarray:
    """A NumPy stand-in with torch tensor t's shape and dtype and no data (a broadcast 0-d zero): what a trace
    and a cache key need, without copying the tensor off its device."""
    try:
        dtype = TORCH_DTYPES[str(t.dtype)]
    except KeyError:
        raise DTypeError(f"cannot trace a torch tensor of dtype {t.dtype}", op="trace", source=user_source()) from None
    return np.broadcast_to(np.zeros((), dtype), tuple(t.shape))


def prepare(fn, args, keep_torch: bool = False) -> Args:
    """Flatten `args`; torch tensors become NumPy arrays, or with `keep_torch` stay as they are in
    `device_flat` (placeholders in `flat`)."""
    flat, ranges, trees = [], [], []
    for a in args:
        leaves, tree = tree_flatten(a)
        ranges.append(range(len(flat), len(flat) + len(leaves)))
        flat.extend(leaves)
        trees.append(tree)
    torch_out = traced = False
    device_flat = list(flat) if keep_torch else None
    for i, x in enumerate(flat):  # NumPy arrays, the common case, pass through untouched
        if type(x) is not np.ndarray:
            torch_out = torch_out or is_torch(x)
            traced = traced or isinstance(x, Value)
            flat[i] = _placeholder(x) if keep_torch and is_torch(x) else as_leaf(x)
            if device_flat is not None and not is_torch(x):
                device_flat[i] = flat[i]
    return Args(fn, tuple(args), flat, TreeDef("tuple", tuple(trees)), ranges, torch_out, traced, device_flat)


def finish(values, a: Args):
    """Return values to the user: NumPy scalars for 0-d results, torch tensors if torch came in."""
    if a.traced or is_traced(*values):  # inside an enclosing trace
        return values
    if a.torch_out:  # (a backend's own torch tensors, on its device, go back as they are)
        return [v if is_torch(v) else numpy_to_torch(np.asarray(v)) for v in values]
    return numpy_results(values)


def numpy_results(values) -> list:
    """Arrays as NumPy gives them back: 0-d results as NumPy scalars."""
    out = []
    for v in values:
        v = v if type(v) is np.ndarray else torch_to_numpy(v) if is_torch(v) else np.asarray(v)
        out.append(v[()] if v.ndim == 0 else v)
    return out


def trace_args(fn, a: Args, name: str | None = None, options: CompileOptions | None = None) -> Graph:
    """`fn` traced at `a`'s arguments into a Graph named after it. The graph carries `options` (default: those
    of the trace it is made in, gradir.api.options) to the traces `fn` makes: a gr.grad inside gr.compile."""
    try:
        inspect.signature(fn).bind(*a.args)
    except TypeError as e:  # the call itself is wrong: say so at the user's line, not from inside the trace
        raise TraceError(f"cannot call {getattr(fn, '__name__', fn)!s} with {len(a.args)} positional argument(s): {e}",
                         op="trace", source=user_source()) from None
    except ValueError:
        pass  # no signature to check (a builtin)
    options = options_of(current_graph()) if options is None else options

    def rebuild(placeholders):  # runs in the new graph's trace, before fn
        if options is not NO_OPTIONS:
            carry(current_graph(), options)
        return tree_unflatten(a.in_tree, placeholders)

    base = fn.func if isinstance(fn, functools.partial) else fn
    graph = trace_flat(fn, a.flat, a.names, rebuild, name or getattr(base, "__name__", "f").replace("<lambda>", "f"))
    graph.in_tree = a.in_tree
    return graph


def captures(graph: Graph) -> list:
    """The values of an enclosing trace `graph` reads (passed after its arguments)."""
    return list(graph.captures)


def signature(a: Args) -> tuple:
    """What a trace of `a.fn` depends on besides values: pytree structure, shapes, dtypes and static
    keyword arguments (unhashable ones make the key unhashable: the caller decides what that means)."""
    static = a.fn.keywords if isinstance(a.fn, functools.partial) else {}
    return (a.in_tree, tuple((x.shape, x.dtype) if type(x) is np.ndarray else (np.shape(x), abstract_dtype(x))
                             for x in a.flat), tuple(sorted((k, _static_key(v)) for k, v in static.items())))


def _static_key(v):
    """A static keyword value as a key: its type too, for Python's equality conflates values that trace
    differently (2 == 2.0 == True: `x ** p` with p=2 vs p=2.0; 0.0 == -0.0)."""
    t = type(v)
    if t is tuple:
        return t, tuple(map(_static_key, v))
    if t is float:
        return t, v.hex()
    return t, v
