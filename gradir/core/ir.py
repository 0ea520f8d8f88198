"""The SSA graph IR: `Value`s defined once, in order, each with a static shape, dtype and source line.

A `Graph` is an ordered list of values. Graph inputs are values with op ``input``; constants are
values with op ``const``; every other value is the single result of one primitive applied to
earlier values. The text form is one line per value and round-trips through `Graph.parse`:

    graph loss {
      %0 = input name='a' : f64[]  # loss.py:3
      %1 = input name='b' : f64[]  # loss.py:3
      %2 = mul %0, %1 : f64[]  # loss.py:4
      ...
      return %4
    }
"""

from __future__ import annotations

import ast
import itertools
import math
import re
import weakref
from collections.abc import Iterable
from typing import Any

import networkx as nx
import numpy as np

from gradir.core import dtypes
from gradir.core.errors import GradirError, IRParseError, ShapeError, TracedControlFlowError, VerifyError
from gradir.core.primitive import get_primitive
from gradir.core.source import user_source

__all__ = ["Graph", "Value"]

_ids = itertools.count()
_SHAPES: dict[tuple[int, ...], tuple[int, ...]] = {}  # interned shapes: graphs repeat a few shapes many times
CONST_INLINE_LIMIT = 64  # constants with more elements are elided in the default text form


class Value:
    """One SSA value: the result of `op` applied to `inputs` with `attrs`.

    Inside a trace, Values are also the tracer objects: Python operators on them (``a * b``,
    ``x[1:]``, ``x @ w``) record new nodes in the graph being built.
    """

    __slots__ = ("op", "inputs", "attrs", "shape", "dtype", "source", "scope", "graph_ref", "uid", "__weakref__")
    __array_priority__ = 1000  # so `ndarray * Value` defers to Value.__rmul__

    def __init__(self, op, inputs, attrs, shape, dtype, source=None, graph=None, scope=()):
        self.op: str = op
        self.inputs: tuple[Value, ...] = inputs if type(inputs) is tuple else tuple(inputs)
        self.attrs: dict[str, Any] = attrs
        # one tuple of Python ints per distinct shape (a tuple of NumPy ints finds it too: equal hashes)
        interned = _SHAPES.get(shape) if type(shape) is tuple else None
        if interned is None:
            interned = tuple(map(int, shape))
            if len(_SHAPES) > 100_000:  # a long-running process meets many shapes: interning only saves memory
                _SHAPES.clear()
            interned = _SHAPES.setdefault(interned, interned)
        self.shape: tuple[int, ...] = interned
        self.dtype: np.dtype = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        self.source: str | None = source
        # enclosing gr.scope / gr.checkpoint regions, outermost first
        self.scope: tuple[str, ...] = scope if type(scope) is tuple else tuple(scope)
        # a weak reference: no Graph <-> Value cycle, so a pass's discarded graph is freed at once, not by the GC
        self.graph_ref = None if graph is None else graph.ref
        self.uid = next(_ids)

    @property
    def graph(self) -> Graph | None:
        """The graph this value belongs to (None once that graph is gone)."""
        return None if self.graph_ref is None else self.graph_ref()

    # -- static facts ----------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def type_str(self) -> str:
        return f"{dtypes.short(self.dtype)}[{','.join(map(str, self.shape))}]"

    def __repr__(self) -> str:
        return f"<Value {self.op} : {self.type_str}>"

    __hash__ = object.__hash__

    # -- Python control flow on traced values is an error -------------------------------------
    def _control_flow(self, what: str):

        raise TracedControlFlowError(
            f"Python {what} on a traced value {self.type_str}; its value is not known while tracing. "
            "Use gr.where(cond, a, b) to select between values",
            op=self.op, source=user_source())

    def __bool__(self):
        self._control_flow("`if`/`while`/`and`/`or` (bool())")

    def __int__(self):
        self._control_flow("int()")

    def __float__(self):
        self._control_flow("float()")

    def __index__(self):
        self._control_flow("use as an index (__index__)")

    def __len__(self):
        if not self.shape:
            raise ShapeError("len() of a 0-d value", op=self.op, source=user_source())
        return self.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __array__(self, *a, **k):

        raise TracedControlFlowError(
            f"conversion of a traced value {self.type_str} to a NumPy array; use gr ops on it instead "
            "of NumPy functions", op=self.op, source=user_source())

    # Operators (+, *, [], ...), in-place writes and NumPy-like methods are attached by the op library
    # (gradir/ops/methods.py): they record ops, which live above this module.


def attrs_key(attrs: dict) -> tuple:
    """Attributes as part of a node's key (by repr: attribute values are small Python values)."""
    if not attrs:
        return ()
    return tuple(sorted([(k, repr(a)) for k, a in attrs.items()]))


def node_key(op: str, inputs, attrs, scope: tuple) -> tuple:
    """What makes two nodes of one graph the same computation (passes.cleanup.cse merges them): op,
    operands, attributes (`attrs_key`) and scope, which keeps recomputed copies apart; a constant by its
    value (`attrs` is then the node's own). Operands by uid: a key holding Values could, on a hash
    collision, call Value.__eq__ (a traced op)."""
    if op == "const":
        value = attrs["value"]
        return op, value.dtype.str, value.shape, value.tobytes()
    return op, tuple([i.uid for i in inputs]), attrs, scope


class Graph:
    """An SSA program: `inputs` (op ``input``), `nodes` in execution order, and `outputs`.

    Bookkeeping kept beside the program (not part of the text form): `in_tree`/`out_tree`, the
    pytree structure of the traced function's arguments and results; `captures`, values of an
    enclosing trace this graph reads (each mapped to the extra input standing for it); and for a
    joint forward+backward graph, `num_forward_outputs`.
    """

    def __init__(self, name: str = "f"):
        self.name = name
        self.ref = weakref.ref(self)  # shared by the graph's values (Value.graph)
        self.inputs: list[Value] = []
        self.nodes: list[Value] = []
        self.outputs: list[Value] = []
        self.in_tree = None
        self.out_tree = None
        self.captures: dict[Value, Value] = {}
        self.num_forward_outputs: int | None = None
        self.labels: dict[Value, str] = {}  # names reports use instead of %k (e.g. "forward %3")
        self.interned: dict | None = None  # while not None, appending a node equal to an earlier one returns that one
        # set by a builder that appended every node with `interned` on: no two nodes are alike, but for
        # constants too large to intern by value (cse then only compares those)
        self.distinct = False
        # the options of the gr.compile this graph is traced under (gradir.api.options: a graph carries them to the
        # gr.grad traced inside it, so no module global does); None outside any gr.compile
        self.compile_options: Any = None

    def copy_bookkeeping(self, other: Graph) -> Graph:
        """Take `other`'s pytree structure and joint-graph split (for passes that rebuild a graph)."""
        self.in_tree, self.out_tree = other.in_tree, other.out_tree
        self.num_forward_outputs = other.num_forward_outputs
        return self

    # -- building ----------------------------------------------------------------------------------
    def add_input(self, shape, dtype, name: str | None = None, source: str | None = None) -> Value:
        v = Value("input", (), {"name": name or f"x{len(self.inputs)}"}, shape, dtype, source, self)
        self.inputs.append(v)
        return v

    def append(self, op, inputs, attrs, shape, dtype, source=None, scope=()) -> Value:
        if self.interned is not None:
            return self._append_interned(op, inputs, attrs, shape, dtype, source, scope)
        v = Value(op, inputs, attrs, shape, dtype, source, self, scope)
        self.nodes.append(v)
        return v

    def _append_interned(self, op, inputs, attrs, shape, dtype, source, scope) -> Value:
        """The node an earlier append recorded with the same op, operands and attributes (small constants
        by value): what passes.cleanup.cse would merge, never made (autodiff's rules make thousands)."""
        if op == "const":
            key = node_key(op, inputs, attrs, scope) if attrs["value"].size <= CONST_INLINE_LIMIT else None
        else:
            key = node_key(op, inputs, attrs_key(attrs), scope)
        v = self.interned.get(key) if key is not None else None
        if v is None:
            v = Value(op, inputs, attrs, shape, dtype, source, self, scope)
            self.nodes.append(v)
            if key is not None:
                self.interned[key] = v
        return v

    def copy_nodes(self, nodes, env: dict, source_scope: tuple | None = None) -> None:
        """Append a copy of each of `nodes` (another graph's), its operands mapped through `env`, which
        gains the copies; nothing is inferred again. `source_scope` replaces their source and scope."""
        if self.interned is not None or source_scope is not None:
            append = self.append
            for n in nodes:
                source, scope = (n.source, n.scope) if source_scope is None else source_scope
                env[n] = append(n.op, tuple([env[i] for i in n.inputs]), n.attrs, n.shape, n.dtype, source, scope)
            return
        # a plain copy: the fields are a Value's already (shape interned, dtype a np.dtype), so they are
        # set as they are, without Value.__init__'s normalizing (a third of a 100k-node copy's time)
        new, ref, out, ids = object.__new__, self.ref, self.nodes, _ids
        for n in nodes:
            v = new(Value)
            v.op, v.inputs, v.attrs, v.shape, v.dtype = n.op, tuple([env[i] for i in n.inputs]), n.attrs, n.shape, n.dtype
            v.source, v.scope, v.graph_ref, v.uid = n.source, n.scope, ref, next(ids)
            out.append(v)
            env[n] = v

    def all_values(self) -> list[Value]:
        return self.inputs + self.nodes

    def number(self, v: Value) -> int:
        """The value's k in the text form's `%k` (its position among inputs then nodes)."""
        if getattr(self, "_numbered", 0) != len(self.inputs) + len(self.nodes):
            self._numbers = {x: i for i, x in enumerate(self.all_values())}
            self._numbered = len(self._numbers)
        return self._numbers[v]

    def __len__(self) -> int:
        return len(self.nodes)

    def users(self) -> dict[Value, list[Value]]:
        """For each value, the nodes that read it (a node reading a value twice appears twice)."""
        users: dict[Value, list[Value]] = {v: [] for v in self.all_values()}
        for n in self.nodes:
            for i in n.inputs:
                users[i].append(n)
        return users

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op] = counts.get(n.op, 0) + 1
        return counts

    # -- text form ---------------------------------------------------------------------------------
    def to_text(self, full: bool = False) -> str:
        """The stable text form. Constants over CONST_INLINE_LIMIT elements are elided unless `full`."""
        names = {v: f"%{i}" for i, v in enumerate(self.all_values())}
        lines = [f"graph {self.name} {{"]
        for v in self.all_values():
            lines.append("  " + _format_value(v, names, full))
        lines.append("  return " + ", ".join(names.get(o, "?") for o in self.outputs))
        lines.append("}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return f"<Graph {self.name}: {len(self.inputs)} inputs, {len(self.nodes)} nodes, {len(self.outputs)} outputs>"

    @staticmethod
    def parse(text: str) -> Graph:
        """Parse the text form back into a Graph (inverse of `to_text`)."""
        return _parse(text)

    # -- checks and views --------------------------------------------------------------------------
    def verify(self) -> Graph:
        """Check SSA form, ordering and every node's shape/dtype against its op's rule. Returns self."""

        defined: set[Value] = set()
        for v in self.inputs:
            if v.op != "input" or v.inputs:
                raise VerifyError(f"graph input {v!r} is not an `input` value", op=v.op, source=v.source)
            if v in defined:
                raise VerifyError("input listed twice", op="input", source=v.source)
            defined.add(v)
        for n in self.nodes:
            if n in defined:
                raise VerifyError("value defined twice (not SSA)", op=n.op, source=n.source)
            if n.op == "input":
                raise VerifyError("`input` value inside the node list", op=n.op, source=n.source)
            for i in n.inputs:
                if i not in defined:
                    raise VerifyError(f"operand {i!r} used before its definition or from another graph",
                                      op=n.op, source=n.source)
            if n.op == "const":
                val = n.attrs.get("value")
                if not isinstance(val, np.ndarray) or val.shape != n.shape or val.dtype != n.dtype:
                    raise VerifyError(f"constant payload does not match its type {n.type_str}", op="const",
                                      source=n.source)
            else:
                prim = get_primitive(n.op, source=n.source)
                try:
                    shape, dtype = prim.infer(*n.inputs, **n.attrs)
                except GradirError as e:
                    raise VerifyError(f"op rule rejects its operands: {e.detail}", op=n.op, source=n.source) from e
                if tuple(shape) != n.shape or np.dtype(dtype) != n.dtype:
                    want = f"{dtypes.short(dtype)}[{','.join(map(str, shape))}]"
                    raise VerifyError(f"recorded type {n.type_str} but the op rule gives {want}",
                                      op=n.op, source=n.source)
            defined.add(n)
        for o in self.outputs:
            if o not in defined:
                raise VerifyError(f"output {o!r} is not defined in the graph", op="return")
        return self

    def to_networkx(self) -> nx.MultiDiGraph:
        """A networkx view: one node per value (keyed by position), one edge per operand use."""
        index = {v: i for i, v in enumerate(self.all_values())}
        g = nx.MultiDiGraph(name=self.name)
        outputs = set(self.outputs)  # not `in list`: == on Values is the elementwise op
        for v, i in index.items():
            g.add_node(i, op=v.op, shape=v.shape, dtype=str(v.dtype), source=v.source,
                       output=v in outputs, value=v)
        for n in self.nodes:
            for pos, inp in enumerate(n.inputs):
                g.add_edge(index[inp], index[n], operand=pos)
        return g


# -- printing ----------------------------------------------------------------------------------------

def _format_attr(value: Any, full: bool) -> str:
    if isinstance(value, np.ndarray):
        if value.size > CONST_INLINE_LIMIT and not full:
            return "..."
        return _format_literal(value.astype(_literal_dtype(value.dtype)).tolist())
    if isinstance(value, np.dtype):
        return repr(dtypes.short(value))
    return _format_literal(value)


def _literal_dtype(d: np.dtype) -> np.dtype:
    return np.dtype(np.float64) if d in (dtypes.bfloat16, dtypes.float16, dtypes.float32) else d


def _format_literal(x: Any) -> str:
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return repr(x)
    if isinstance(x, complex):
        return f"complex({_format_literal(x.real)}, {_format_literal(x.imag)})"
    if isinstance(x, list):
        return "[" + ", ".join(_format_literal(i) for i in x) + "]"
    if isinstance(x, tuple):
        inner = ", ".join(_format_literal(i) for i in x)
        return f"({inner},)" if len(x) == 1 else f"({inner})"
    return repr(x)


def _format_value(v: Value, names: dict[Value, str], full: bool) -> str:
    parts = [names.get(i, "?") for i in v.inputs]
    parts += [f"{k}={_format_attr(a, full)}" for k, a in v.attrs.items()]
    args = (" " + ", ".join(parts)) if parts else ""
    src = f"  # {v.source or ''}" + (f" @{'/'.join(v.scope)}" if v.scope else "") if v.source or v.scope else ""
    return f"{names[v]} = {v.op}{args} : {v.type_str}{src}"


# -- parsing -----------------------------------------------------------------------------------------

_LINE = re.compile(r"^%(\d+) = ([A-Za-z_][\w.]*)(.*?) : (\w+)\[([\d,]*)\]$")


class _Literals(ast.NodeTransformer):
    """Turn the printer's spellings of nan/inf/complex back into constants for literal_eval."""

    def visit_Name(self, node):
        if node.id in ("nan", "inf"):
            return ast.copy_location(ast.Constant(float(node.id)), node)
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "complex" and len(node.args) == 2:
            re_, im = (ast.literal_eval(a) for a in node.args)
            return ast.copy_location(ast.Constant(complex(re_, im)), node)
        return node


def _parse(text: str) -> Graph:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines or not lines[0].startswith("graph ") or not lines[0].endswith("{") or lines[-1] != "}":
        raise IRParseError("expected `graph NAME {` ... `}`", op="parse")
    g = Graph(lines[0][len("graph "):-1].strip())
    env: dict[str, Value] = {}
    for lineno, line in enumerate(lines[1:-1], start=2):
        where = f"line {lineno}"
        if line.startswith("return"):
            refs = [r.strip() for r in line[len("return"):].split(",") if r.strip()]
            try:
                g.outputs = [env[r] for r in refs]
            except KeyError as e:
                raise IRParseError(f"return of undefined value {e.args[0]}", op="return", source=where) from None
            continue
        body, _, source = line.partition("  # ")
        m = _LINE.match(body.strip())
        if not m:
            raise IRParseError(f"cannot read {line!r}", op="parse", source=where)
        vid, op, rest, dt, shp = m.groups()
        try:
            call = ast.parse(f"f({rest.strip().replace('%', '_v')})", mode="eval").body
        except SyntaxError as e:
            raise IRParseError(f"bad operands/attributes in {line!r}", op=op, source=where) from e
        operands = []
        for a in call.args:
            if not (isinstance(a, ast.Name) and a.id.startswith("_v") and "%" + a.id[2:] in env):
                raise IRParseError(f"operand {ast.unparse(a)!r} is not a defined value", op=op, source=where)
            operands.append(env["%" + a.id[2:]])
        attrs = {}
        for kw in call.keywords:
            try:
                attrs[kw.arg] = ast.literal_eval(_Literals().visit(kw.value))
            except (ValueError, SyntaxError) as e:
                raise IRParseError(f"attribute {kw.arg} is not a literal (elided constant? print with "
                                   "to_text(full=True))", op=op, source=where) from e
        dtype = dtypes.as_dtype(dt)
        shape = tuple(int(s) for s in shp.split(",") if s)
        source, _, scope = source.partition(" @")
        src = source.strip() or None
        scope = tuple(scope.strip().split("/")) if scope.strip() else ()
        if op == "input":
            v = g.add_input(shape, dtype, attrs.get("name"), src)
        else:
            if op == "const":
                if attrs.get("value", ...) is ...:
                    raise IRParseError("constant payload elided; print the graph with to_text(full=True)",
                                       op=op, source=where)
                attrs["value"] = np.asarray(attrs["value"]).astype(dtype).reshape(shape)
            attrs = {k: (dtypes.as_dtype(a) if k == "dtype" else a) for k, a in attrs.items()}
            v = g.append(op, operands, attrs, shape, dtype, src, scope)
        if f"%{vid}" in env:
            raise IRParseError(f"%{vid} defined twice", op=op, source=where)
        env[f"%{vid}"] = v
    return g


def topo_values(outputs: Iterable[Value]) -> list[Value]:
    """All values the given outputs depend on, in a valid definition order."""
    order, seen = [], set()
    stack = [(o, False) for o in outputs]
    while stack:
        v, expanded = stack.pop()
        if expanded:
            order.append(v)
            continue
        if v in seen:
            continue
        seen.add(v)
        stack.append((v, True))
        stack.extend((i, False) for i in reversed(v.inputs) if i not in seen)
    return order
