"""In-place writes on traced values, functionalized: `x += y`, `x.mul_(y)`, `x[idx] = v`.

The IR is pure SSA, so an in-place op records an ordinary op that makes a *new* value, and then the
Python object `x` is made to denote that new value: the new node's and the old node's slot contents
are exchanged, and every graph reference to the old object is re-pointed at the object now holding
the old definition. Ops recorded before the write keep reading the old value; every later use of
`x` (and of any Python alias `z = x`) sees the new one, as with a NumPy array.

Views do not share storage here: a slice taken before the write keeps the old contents (write
through `x[idx] = ...`, which Python also uses for `x[idx] += y`).

Version check: writing over a value that a VJP rule already read (`gradir.core.rules`) would make the
backward read the wrong value, so it raises `InPlaceError` naming the op that saved it and both
source lines. Writing over a value no rule keeps (an add's input) is allowed.

Primitives for `x[idx] = v`:
- `update_slice(x, v, starts, stops, steps)`: x with a strided box replaced by v;
  VJP dx = g with the box zeroed, dv = g[box].
- `index_update(x, idx, v, axis)`: x with the slices at integer positions idx along `axis` replaced
  by v (repeated indices: the last write wins, as NumPy); VJP dx = g with those slices zeroed,
  dv = take(g, idx) zeroed at every occurrence of a repeated index but the last (the overwritten
  slices of v reach no output).
"""

from __future__ import annotations

import bisect

import numpy as np

from gradir.core import dtypes
from gradir.core.errors import DTypeError, InPlaceError, ShapeError, TraceError, UnsupportedOpError
from gradir.core.ir import Value
from gradir.core.primitive import Primitive, register
from gradir.core.rules import OUTPUT, explain_node, node_reads
from gradir.core.trace import bind, current_graph, user_source
from gradir.ops.creation import zeros
from gradir.ops.elementwise import add, divide, equal, logical_and, multiply, remainder, subtract, where
from gradir.ops.indexing import _check_bounds, _check_index, _expand_ellipsis, _is_int, _is_int_array, basic_box, take
from gradir.ops.lifting import astype, concrete, lift, type_str
from gradir.ops.reductions import sum as sum_
from gradir.ops.shapes import broadcast_to, reshape

__all__ = ["check_not_saved", "inplace", "inplace_setitem", "position", "rebind", "saved_by", "setitem"]

# -- primitives ------------------------------------------------------------------------------------


def _box_shape(shape, starts, stops, steps):
    return tuple(len(range(a, b, c)) for a, b, c in zip(starts, stops, steps))


def _update_slice_infer(x, v, starts, stops, steps):
    if not len(starts) == len(stops) == len(steps) == len(x.shape):
        raise ShapeError("update_slice needs a start, stop and step per axis", op="update_slice")
    for n, a, b, c in zip(x.shape, starts, stops, steps):
        if c < 1 or not 0 <= a <= n or not 0 <= b <= n:
            raise ShapeError(f"slice {a}:{b}:{c} is out of range for an axis of size {n}", op="update_slice")
    box = _box_shape(x.shape, starts, stops, steps)
    if tuple(v.shape) != box:
        raise ShapeError(f"value shape {tuple(v.shape)} differs from the slice shape {box}", op="update_slice")
    if v.dtype != x.dtype:
        raise DTypeError(f"value dtype {dtypes.short(v.dtype)} differs from {dtypes.short(x.dtype)}", op="update_slice")
    return tuple(x.shape), x.dtype


def _update_slice_vjp(g, o, x, v, starts, stops, steps):
    box = dict(starts=starts, stops=stops, steps=steps)
    return [bind("update_slice", g, zeros(v.shape, g.dtype), **box), bind("slice", g, **box)]


def _update_slice_jvp(ts, o, x, v, starts, stops, steps):
    if ts[0] is None and ts[1] is None:
        return None
    tx = ts[0] if ts[0] is not None else zeros(x.shape, x.dtype)
    tv = ts[1] if ts[1] is not None else zeros(v.shape, v.dtype)
    return bind("update_slice", tx, tv, starts=starts, stops=stops, steps=steps)


# NumPy templates are single expressions: copy, assign, return the copy (everything the lambda
# uses is passed in: names bound by `eval`'s locals are not visible inside a nested function)
register(Primitive(
    "update_slice", ("x", "v"), _update_slice_infer,
    "(lambda _buf, _at, _val: _buf.__setitem__(_at, _val) or _buf)"
    "(np.array(x, copy=True), tuple(map(slice, starts, stops, steps)), v)",
    vjp=_update_slice_vjp, jvp=_update_slice_jvp, kind="index",
    doc="x with x[starts:stops:steps] (per axis) replaced by v; the functional form of a slice assignment."))


def _index_update_infer(x, idx, v, axis):
    _check_index(idx, "index_update")
    if not 0 <= axis < len(x.shape):
        raise ShapeError(f"axis {axis} out of range for {len(x.shape)}-d operand", op="index_update")
    want = tuple(x.shape[:axis]) + tuple(idx.shape) + tuple(x.shape[axis + 1:])
    if tuple(v.shape) != want:
        raise ShapeError(f"value shape {tuple(v.shape)} differs from the indexed shape {want}", op="index_update")
    if v.dtype != x.dtype:
        raise DTypeError(f"value dtype {dtypes.short(v.dtype)} differs from {dtypes.short(x.dtype)}", op="index_update")
    return tuple(x.shape), x.dtype


def _index_update_vjp(g, o, x, idx, v, axis):
    dv = bind("take", g, idx, axis=axis)
    keep = _last_writes(idx, x.shape[axis])
    if keep is not None:  # an overwritten slice of v reaches no output: zero cotangent
        keep = reshape(keep, (1,) * axis + tuple(idx.shape) + (1,) * (len(x.shape) - axis - 1))
        dv = where(broadcast_to(keep, dv.shape), dv, zeros(dv.shape, dv.dtype))
    return [bind("index_update", g, idx, zeros(v.shape, g.dtype), axis=axis), None, dv]


def _last_writes(idx, size: int):
    """Boolean mask of idx's shape: True at the last occurrence of each position (the write that
    wins); None when idx has no repeats. Built with NumPy for a constant idx, with ops (an m x m
    comparison of the m indices) for a traced one."""
    c = concrete(idx)
    if c is not None:
        flat = np.mod(c.reshape(-1), size) if size else c.reshape(-1)
        _, first_from_end = np.unique(flat[::-1], return_index=True)
        keep = np.zeros(flat.shape, bool)
        keep[flat.size - 1 - first_from_end] = True
        return None if keep.all() else keep.reshape(c.shape)
    m = int(np.prod(idx.shape))
    if m < 2 or not size:
        return None
    flat = remainder(reshape(idx, (m,)), size)
    same = equal(broadcast_to(reshape(flat, (m, 1)), (m, m)), broadcast_to(reshape(flat, (1, m)), (m, m)))
    later = np.triu(np.ones((m, m), bool), 1)  # later[k, j]: j is written after k
    overwritten = sum_(astype(logical_and(same, later), dtypes.int64), axis=1)
    return reshape(equal(overwritten, 0), tuple(idx.shape))


def _index_update_jvp(ts, o, x, idx, v, axis):
    if ts[0] is None and ts[2] is None:
        return None
    tx = ts[0] if ts[0] is not None else zeros(x.shape, x.dtype)
    tv = ts[2] if ts[2] is not None else zeros(v.shape, v.dtype)
    return bind("index_update", tx, idx, tv, axis=axis)


register(Primitive(
    "index_update", ("x", "idx", "v"), _index_update_infer,
    "(lambda _buf, _at, _val: _buf.__setitem__(_at, _val) or _buf)"
    "(np.array(x, copy=True), (slice(None),) * axis + (idx,), v)",
    vjp=_index_update_vjp, jvp=_index_update_jvp, kind="index", vjp_inspects=(1,),  # _last_writes
    doc="x with the slices at integer positions idx along `axis` replaced by v (the last repeated index wins)."))


# -- the functional form of x[index] = value ------------------------------------------------------


def setitem(x, index, value):
    """x with x[index] replaced by value, as a new value (JAX's ``x.at[index].set(value)``).

    index: ints, slices (any step), None and Ellipsis; or one integer array on one axis with full
    slices elsewhere; or a boolean mask of x's shape with a scalar value. value broadcasts to
    x[index]'s shape and is cast to x's dtype, as NumPy does."""
    x = lift(x)
    index = index if isinstance(index, tuple) else (index,)
    if any(_is_bool_index(i) for i in index):
        return _mask_write(x, index, value)
    for i in index:
        if not (i is None or i is Ellipsis or isinstance(i, slice) or _is_int(i) or _is_int_array(i)):
            raise UnsupportedOpError(f"cannot index with a {type(i).__name__}", op="setitem", source=user_source())
    index = _expand_ellipsis(index, x.ndim)
    if any(_is_int_array(i) for i in index):
        return _index_write(x, index, value)
    return _basic_write(x, index, value)


def _is_bool_index(i) -> bool:
    return isinstance(i, bool) or (isinstance(i, (Value, np.ndarray)) and i.dtype == dtypes.bool_)


def _value_for(x, value, shape):
    """`value` as an operand of x's dtype broadcast to `shape` (NumPy drops extra leading 1s)."""
    v = lift(value, x.dtype)
    v = v if v.dtype == x.dtype else astype(v, x.dtype)
    while v.ndim > len(shape) and v.shape[0] == 1:
        v = reshape(v, v.shape[1:])
    try:
        ok = np.broadcast_shapes(v.shape, tuple(shape)) == tuple(shape)
    except ValueError:
        ok = False
    if not ok:
        raise ShapeError(f"could not broadcast a value of shape {tuple(v.shape)} into the indexed shape {tuple(shape)}",
                         op="setitem", source=user_source())
    return broadcast_to(v, shape)


def _basic_write(x, index, value):
    # a negative step writes the covered range forward, with the value reversed along that axis
    starts, stops, steps, target, flips = basic_box(x.shape, index, "setitem")
    v = _value_for(x, value, target)
    for ax in flips:
        v = take(v, np.arange(v.shape[ax] - 1, -1, -1), axis=ax)
    v = reshape(v, _box_shape(x.shape, starts, stops, steps))
    return bind("update_slice", x, v, starts=tuple(starts), stops=tuple(stops), steps=tuple(steps))


def _index_write(x, index, value):
    arrays = [k for k, i in enumerate(index) if _is_int_array(i)]
    full = all(k in arrays or (isinstance(i, slice) and i.indices(x.shape[k]) == (0, x.shape[k], 1))
               for k, i in enumerate(index))
    if len(arrays) != 1 or not full or len(index) != x.ndim:
        raise UnsupportedOpError("in-place writes with integer arrays take one integer array on one axis and full "
                                 "slices (:) on the others", op="setitem", source=user_source())
    (axis,) = arrays
    i = index[axis]
    idx = lift(np.asarray(i) if isinstance(i, (list, range)) else i)
    _check_index(idx, "setitem", user_source())
    _check_bounds(idx, x.shape[axis], "setitem")
    idx = astype(idx, dtypes.int64)
    v = _value_for(x, value, tuple(x.shape[:axis]) + tuple(idx.shape) + tuple(x.shape[axis + 1:]))
    return bind("index_update", x, idx, v, axis=axis)


def _mask_write(x, index, value):
    mask = index[0] if len(index) == 1 else None
    if mask is None or isinstance(mask, bool) or tuple(mask.shape) != tuple(x.shape):
        raise UnsupportedOpError("boolean-mask writes take one mask of the value's own shape", op="setitem",
                                 source=user_source())
    v = lift(value, x.dtype)
    if v.ndim != 0:
        raise UnsupportedOpError("boolean-mask writes take a scalar value (the count of true entries is only known "
                                 "at run time); use gr.where(mask, values, x)", op="setitem", source=user_source())
    v = v if v.dtype == x.dtype else astype(v, x.dtype)
    return bind("where", lift(mask), broadcast_to(v, x.shape), x)


# -- in-place writes on traced values -------------------------------------------------------------

_BINARY = {"add_": add, "sub_": subtract, "mul_": multiply, "div_": divide,
           "+=": add, "-=": subtract, "*=": multiply, "/=": divide}
_SLOTS = ("op", "inputs", "attrs", "shape", "dtype", "source", "scope", "graph_ref", "uid")


def inplace(x: Value, name: str, y, alpha=1) -> Value:
    """`x.add_(y)`, `x += y`, ...: record the out-of-place op and make the object `x` denote its result
    (`alpha` scales y, as torch's add_/sub_)."""
    _target(x, name)
    source = user_source()
    check_not_saved(x, name, source)
    r = _BINARY[name](x, y if alpha == 1 else multiply(y, alpha))
    if r.shape != x.shape:
        raise ShapeError(f"the result {r.type_str} does not fit the {x.type_str} written in place (an in-place "
                         "op cannot broadcast its target)", op=name, source=source)
    if r.dtype != x.dtype:
        if _kind_rank(r.dtype) > _kind_rank(x.dtype):
            raise DTypeError(f"the result dtype {dtypes.short(r.dtype)} cannot be written into a {x.type_str} in "
                             "place (NumPy's same_kind casting rule)", op=name, source=source)
        r = astype(r, x.dtype)
    rebind(x, r)
    return x


def inplace_setitem(x: Value, index, value) -> None:
    """`x[index] = value` on a traced value: `setitem`, then `x` denotes the result."""
    _target(x, "setitem")
    check_not_saved(x, "setitem", user_source())
    rebind(x, setitem(x, index, value))


def _kind_rank(d) -> int:
    d = np.dtype(d)
    return 2 if dtypes.is_float(d) else {"b": 0, "i": 1, "u": 1, "c": 3}.get(d.kind, 2)


def _target(x: Value, name: str):
    graph = current_graph()
    if graph is None or x.graph is not graph:
        where = "outside its trace" if graph is None else "of an enclosing trace (it is read-only here)"
        raise TraceError(f"in-place write to a traced value {x.type_str} {where}", op=name, source=user_source())
    return graph


def rebind(old: Value, new: Value) -> None:
    """Make the Python object `old` denote `new` (a node just recorded in old's graph), and the
    object that was `new` hold old's definition, with every graph reference updated to match."""
    graph = old.graph
    if new is old or new.graph is not graph or not graph.nodes or graph.nodes[-1] is not new:
        new = bind("reshape", new, shape=new.shape)  # a fresh node nothing else refers to yet
    p = position(old)
    for s in _SLOTS:
        a, b = getattr(old, s), getattr(new, s)
        setattr(old, s, b)
        setattr(new, s, a)

    def swap(v):
        return new if v is old else old if v is new else v

    for v in [old, *graph.nodes[p + 1:]]:  # only nodes after old's definition can read it
        if any(i is old or i is new for i in v.inputs):
            v.inputs = tuple(swap(i) for i in v.inputs)
    if p < 0:
        graph.inputs[:] = [swap(v) for v in graph.inputs]
    else:
        graph.nodes[p] = new
    graph.nodes[-1] = old
    graph.outputs[:] = [swap(v) for v in graph.outputs]
    for k, v in graph.captures.items():
        graph.captures[k] = swap(v)
    graph.__dict__.pop("_numbered", None)  # the %k numbering cache is keyed by object


def position(v: Value) -> int:
    """v's index in its graph's node list (-1 for an input). Nodes are recorded in creation order,
    so uids increase along the list (rebind keeps that); bisect, and check by identity."""
    if v.op == "input":
        return -1
    nodes = v.graph.nodes
    i = bisect.bisect_left(nodes, v.uid, key=lambda u: u.uid)
    if i < len(nodes) and nodes[i] is v:
        return i
    return next(k for k, u in enumerate(nodes) if u is v)


# -- the version check ------------------------------------------------------------------------------


def saved_by(x: Value) -> Value | None:
    """The first node whose VJP rule keeps `x` and may run: x's producer if its rule reads its own
    output, or a reader of x whose rule reads x to differentiate an operand that may need a gradient
    (inexact and not computed from constants alone). None if no rule keeps x."""
    later = x.graph.nodes[position(x) + 1:]  # readers come after the definition
    candidates = [(x, {OUTPUT})] if x.op not in ("input", "const") else []
    candidates += [(n, {j for j, i in enumerate(n.inputs) if i is x}) for n in later if any(i is x for i in n.inputs)]
    memo: dict[Value, bool] = {}
    for n, positions in candidates:
        if not dtypes.is_inexact(n.dtype):
            continue
        for i, reads in enumerate(node_reads(n)):
            if reads and reads & positions and _may_need_grad(n.inputs[i], memo):
                return n
    return None


def _may_need_grad(v: Value, memo: dict) -> bool:
    return dtypes.is_inexact(v.dtype) and not _const_only(v, memo)


def _const_only(v: Value, memo: dict) -> bool:
    stack = [v]
    while stack:
        u = stack[-1]
        if u in memo:
            stack.pop()
            continue
        if u.op == "const":
            memo[u] = True
        elif u.op == "input" or not u.inputs:
            memo[u] = False
        else:
            pending = [i for i in u.inputs if i not in memo]
            if pending:
                stack.extend(pending)
                continue
            memo[u] = all(memo[i] for i in u.inputs)
        stack.pop()
    return memo[v]


def check_not_saved(x: Value, name: str, source: str | None) -> None:
    """Raise InPlaceError if a VJP rule already saved `x` (see `saved_by`)."""
    n = saved_by(x)
    if n is None:
        return
    label = str(x.attrs.get("name")) if x.op == "input" else f"%{x.graph.number(x)}"
    role = "as its output" if n is x else "as an operand"
    raise InPlaceError(
        f"{label} ({type_str(x)}) was saved for backward by {n.op} at {n.source or 'an unknown line'} ({role}: "
        f"{explain_node(n)}) and modified in place at {source or 'an unknown line'}; the backward pass would read "
        "the modified value. Use an out-of-place op (y = x + 1) or write to a copy", op=name, source=source)
