"""Which values share storage: NumPy's view rules, applied to the IR.

A *view* op returns an array that uses its operand's memory: `broadcast_to`, `transpose`, `slice`,
`stop_gradient`, `real`/`imag`, and `reshape` whenever NumPy can reshape without copying (decided
with NumPy's own no-copy algorithm on modelled strides). Every other op allocates a new buffer.
`storage(graph)` gives each value's layout and the value that owns the memory it lives in; the
memory plan, the saved-tensor report and the NumPy backend's measured peak all use this one model.
"""

from __future__ import annotations

import functools
import math
import weakref
from typing import NamedTuple

from gradir.core.ir import Graph, Value

VIEW_OPS = frozenset({"broadcast_to", "transpose", "slice", "stop_gradient", "real", "imag", "reshape"})


class Layout(NamedTuple):
    owner: Value                 # the value whose buffer this one lives in (itself if it owns one)
    strides: tuple[int, ...]     # byte strides


@functools.lru_cache(maxsize=4096)
def c_strides(shape, itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def is_c_contiguous(shape, strides, itemsize: int) -> bool:
    """NumPy's C-contiguity flag: strides of size-1 axes do not matter."""
    expected = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n == 0:
            return True
        if n != 1:
            if s != expected:
                return False
            expected *= n
    return True


def nocopy_reshape(shape, strides, new_shape, itemsize: int) -> tuple[int, ...] | None:
    """Strides for viewing (shape, strides) as new_shape without a copy, or None (NumPy's
    `_attempt_nocopy_reshape`)."""
    if is_c_contiguous(shape, strides, itemsize):
        return c_strides(new_shape, itemsize)
    if math.prod(shape) == 0:
        return None
    old = [(n, s) for n, s in zip(shape, strides) if n != 1]
    od, os_ = [n for n, _ in old], [s for _, s in old]
    nd = list(new_shape)
    ns = [0] * len(nd)
    oi, oj, ni, nj = 0, 1, 0, 1
    while ni < len(nd) and oi < len(od):
        np_, op = nd[ni], od[oi]
        while np_ != op:
            if np_ < op:
                np_ *= nd[nj]
                nj += 1
            else:
                op *= od[oj]
                oj += 1
        for ok in range(oi, oj - 1):
            if os_[ok] != od[ok + 1] * os_[ok + 1]:
                return None
        ns[nj - 1] = os_[oj - 1]
        for nk in range(nj - 1, ni, -1):
            ns[nk - 1] = ns[nk] * nd[nk]
        ni, nj = nj, nj + 1
        oi, oj = oj, oj + 1
    last = ns[ni - 1] if ni >= 1 else itemsize
    for nk in range(ni, len(nd)):
        ns[nk] = last
    return tuple(ns)


def view_strides(v: Value, src: Value, src_strides: tuple[int, ...], itemsize: int | None = None) -> tuple[int, ...] | None:
    """The strides of view `v` of `src` laid out with `src_strides` (in bytes, or in units of `itemsize`),
    or None if `v` is not a view of that layout."""
    op, a = v.op, v.attrs
    if op in ("stop_gradient",):
        return src_strides
    if op in ("real", "imag"):
        return src_strides if src.dtype.kind == "c" or op == "real" else None
    if op == "transpose":
        return tuple(src_strides[p] for p in a["perm"])
    if op == "slice":
        return tuple(s * c for s, c in zip(src_strides, a["steps"]))
    if op == "broadcast_to":
        lead = len(v.shape) - len(src.shape)
        return (0,) * lead + tuple(0 if n == 1 and m != 1 else s
                                  for n, m, s in zip(src.shape, v.shape[lead:], src_strides))
    if op == "reshape":
        return nocopy_reshape(src.shape, src_strides, v.shape, v.dtype.itemsize if itemsize is None else itemsize)
    return None


_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def storage(graph: Graph) -> dict[Value, Layout]:
    """Each value's layout: the value owning its memory, and its byte strides (cached per graph
    until it changes size)."""
    size = len(graph.inputs) + len(graph.nodes)
    cached = _CACHE.get(graph)
    if cached is not None and cached[0] == size:
        return cached[1]
    out: dict[Value, Layout] = {}
    contiguous: dict[tuple, tuple[int, ...]] = {}  # one strides tuple per (shape, itemsize): graphs repeat a few
    for v in graph.all_values():
        if v.op in VIEW_OPS:
            src = v.inputs[0]
            strides = view_strides(v, src, out[src].strides)
            if strides is not None:
                out[v] = Layout(out[src].owner, strides)
                continue
        key = (v.shape, v.dtype.itemsize)
        strides = contiguous.get(key)
        if strides is None:
            strides = contiguous[key] = c_strides(*key)
        out[v] = Layout(v, strides)
    _CACHE[graph] = (size, out)
    return out


def owners(graph: Graph) -> dict[Value, Value]:
    """Each value -> the value owning its storage (itself unless it is a view)."""
    return {v: lay.owner for v, lay in storage(graph).items()}
