"""The NumPy backend: the reference every other backend is tested against.

`compile_graph(graph)` turns a graph into readable Python/NumPy source (one line per node, from the
op library's NumPy templates) and compiles it; the source is kept on the result so a learner can
read the code their backward runs. `run(graph, args)` interprets a graph directly, with no code
generation, for one-off evaluation.

Both take graphs of primitives: composite ops (gr.nn's fused-VJP ops, which have no NumPy template)
are lowered once, before any backend sees the graph, by the entry points gradir.backends.compile_graph
and gradir.backends.run. A composite that slips through is a GradirError naming it and its line.
"""

from __future__ import annotations

import ast
import functools
import itertools
import keyword
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradir.core import dtypes
from gradir.core.errors import ExecutionError, GradirError
from gradir.core.ir import Graph, Value
from gradir.core.nan_check import NAN_CHECKS, check_outputs, holds_nan, nan_at_node
from gradir.core.primitive import get_primitive, numpy_namespace

_DTYPE_NAMES = {d: f"np.{d.name}" for d in dtypes.SHORT_NAMES if d != dtypes.bfloat16}
_DTYPE_NAMES[dtypes.bfloat16] = "bfloat16"


def _literal(value: Any) -> str:
    if isinstance(value, np.dtype):
        return _DTYPE_NAMES[value]
    if isinstance(value, float) and not np.isfinite(value):
        return f"float('{value}')"
    return repr(value)


def _const_expr(v: Value, name: str, consts: dict[str, np.ndarray], inline: bool = True) -> str:
    a = v.attrs["value"]
    if inline and a.ndim == 0 and a.dtype in _DTYPE_NAMES and a.dtype.kind in "fib" and np.isfinite(a):
        return f"{_DTYPE_NAMES[a.dtype]}({a.item()!r})"
    consts[name] = a
    return name


def _input_names(graph: Graph) -> list[str]:
    names, used = [], set()
    for i, x in enumerate(graph.inputs):
        n = str(x.attrs.get("name") or "")
        if not n.isidentifier() or keyword.iskeyword(n) or n in used or n in ("np", "sc", "_k", "bfloat16") or n.startswith("v"):
            n = f"in{i}"
        used.add(n)
        names.append(n)
    return names


def implicit_broadcasts(graph: Graph) -> dict[Value, list[Value]]:
    """The operands each node reads in generated code. An elementwise node reads the source of a
    `broadcast_to` operand directly when NumPy's implicit broadcasting gives the same result shape:
    NumPy runs scalar and row operands through fast loops, but not stride-0 broadcast views."""
    reads: dict[Value, list[Value]] = {}
    for n in graph.nodes:
        ops = list(n.inputs)
        if n.op != "const" and get_primitive(n.op).kind == "elementwise":
            for k, o in enumerate(ops):
                src = o
                while src.op == "broadcast_to":
                    src = src.inputs[0]
                trial = ops[:k] + [src] + ops[k + 1:]
                if src is not o and np.broadcast_shapes(*[t.shape for t in trial]) == n.shape:
                    ops = trial
        reads[n] = ops
    return reads


def generate_source(graph: Graph, fn_name: str | None = None, check: bool = False, order: list[Value] | None = None,
                    meter: bool = False):
    """Python source for `graph` (its nodes run in `order`, default graph order) and the constants
    it refers to. Each intermediate is deleted after its last use, so NumPy can reuse its memory.
    With `check`, every line is followed by an assertion that the value has the shape and dtype
    the IR says. With `meter`, every line reports the live locals to `_meter` (see `measure_memory`)
    and scalar constants are named arrays, so broadcasting them allocates nothing."""
    fn_name = fn_name if (fn_name or "").isidentifier() else (graph.name if graph.name.isidentifier() else "f")
    order = graph.nodes if order is None else order
    position = {v: i for i, v in enumerate(graph.all_values())}
    names: dict[Value, str] = dict(zip(graph.inputs, _input_names(graph)))
    reads = implicit_broadcasts(graph)
    outputs = set(graph.outputs)
    remaining: dict[Value, int] = {}
    for n in order:
        for i in reads[n]:
            remaining[i] = remaining.get(i, 0) + 1
    for n in reversed(order):  # broadcasts nobody reads any more are not emitted, nor are their reads
        if not remaining.get(n) and n not in outputs:
            for i in reads[n]:
                remaining[i] -= 1
    consts: dict[str, np.ndarray] = {}
    body = []
    for n in order:
        if not remaining.get(n) and n not in outputs:
            continue  # only read through implicit broadcasting
        var = f"v{position[n]}"
        if n.op == "const":
            expr = _const_expr(n, f"C{position[n]}", consts, inline=not meter)
        else:
            expr = _node_expr(n, [names[i] for i in reads[n]])
        comment = f"  # {n.source}" if n.source else ""
        body.append(f"    {var} = {expr}{comment}")
        if check:
            body.append(f"    _check({var}, {n.shape!r}, {_DTYPE_NAMES[n.dtype]}, {n.op!r}, {n.source!r})")
        if meter:
            body.append(f"    _meter({position[n]}, locals())")
        names[n] = var
        dead = []
        for i in reads[n]:
            remaining[i] -= 1
            if not remaining[i] and i not in outputs and i.op not in ("input", "const"):
                dead.append(names[i])
        if dead:
            body.append(f"    del {', '.join(sorted(set(dead)))}")
    outs = ", ".join(names[o] for o in graph.outputs)
    args = ", ".join(names[x] for x in graph.inputs)
    if meter:
        body.insert(0, "    _meter.begin(locals())")
    ret = f"    return ({outs}{',' if len(graph.outputs) == 1 else ''})"
    return f"def {fn_name}({args}):\n" + "\n".join(body + [ret]) + "\n", consts


def _node_expr(n: Value, operand_names: list[str]) -> str:
    """The op's NumPy template with operand names and attribute literals filled in."""
    prim = get_primitive(n.op, source=n.source)
    if prim.numpy is None:
        _composite(n)
    pieces = _template(prim.numpy)
    arg_names = [a.lstrip("*") for a in prim.args]
    if prim.variadic:
        fill = {arg_names[0]: "(" + ", ".join(operand_names) + ",)"}
    else:
        fill = dict(zip(arg_names, operand_names))
    for k, a in n.attrs.items():
        text = _literal(a)
        fill[k] = f"({text})" if text.startswith("-") else text  # `x ** -1.0` must not become `-1.0 ** ...`
    return "".join(text if name is None else fill.get(name, name) for text, name in pieces)


@functools.cache
def _template(template: str) -> tuple[tuple[str | None, str | None], ...]:
    """`template` split once into literal text and the names filled in per node: every variable it reads
    (operands and attributes; not keyword-argument or attribute names, which are not loads)."""
    tree = ast.parse(template, mode="eval")
    offsets = [0] + [len(line) + 1 for line in template.splitlines(keepends=False)]
    starts = list(itertools.accumulate(offsets))
    names = sorted((starts[v.lineno - 1] + v.col_offset, starts[v.end_lineno - 1] + v.end_col_offset, v.id)
                   for v in ast.walk(tree) if isinstance(v, ast.Name) and isinstance(v.ctx, ast.Load))
    pieces, at = [], 0
    for begin, end, name in names:
        pieces += [(template[at:begin], None), (None, name)]
        at = end
    pieces.append((template[at:], None))
    return tuple(pieces)


def _composite(n: Value):
    """The error for a node without a NumPy template: a composite the graph still holds."""
    raise GradirError("is a composite op with no NumPy template; backends run graphs of primitives "
                      "(passes.lower_composites decomposes it: gradir.backends.compile_graph and run do that first)",
                      op=n.op, source=n.source)


def _check(value, shape, dtype, op, source):
    arr = np.asarray(value)
    if arr.shape != shape or arr.dtype != dtype:
        raise GradirError(f"NumPy backend produced {arr.dtype}{list(arr.shape)}, IR says {dtype}{list(shape)}",
                          op=op, source=source)


class CompiledGraph:
    """A graph compiled to a Python function; call it with the graph's inputs (flat list)."""

    def __init__(self, graph: Graph, check: bool = False, order: list[Value] | None = None, meter=None):
        self.graph = graph
        self.source, consts = generate_source(graph, check=check, order=order, meter=meter is not None)
        namespace = numpy_namespace() | {"bfloat16": dtypes.bfloat16, "_check": _check, "_meter": meter} | consts
        exec(compile(self.source, f"<gradir:{graph.name}>", "exec"), namespace)
        self.fn = namespace[self.source.split("(", 1)[0][4:]]

    def __call__(self, *args):
        try:
            with np.errstate(all="ignore"):
                outs = self.fn(*args)
        except _RUNTIME_ERRORS as e:
            raise self._located(e) from e
        if NAN_CHECKS.get():  # gr.debug_nans: a NaN result is traced to its op by the interpreter
            check_outputs(self.graph, args, outs, run)
        return outs

    def _located(self, e: Exception) -> ExecutionError:
        """Name the node whose generated line raised (found from the traceback's line number)."""
        tb, lineno = e.__traceback__, None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename.startswith("<gradir:"):
                lineno = tb.tb_lineno
            tb = tb.tb_next
        line = self.source.splitlines()[lineno - 1].strip() if lineno else ""
        var = line.split(" = ", 1)[0]
        node = next((v for i, v in enumerate(self.graph.all_values()) if f"v{i}" == var), None)
        return ExecutionError(f"{type(e).__name__}: {e} (in `{line.split('  #')[0]}`)",
                              op=node.op if node is not None else None, source=node.source if node is not None else None)


_RUNTIME_ERRORS = (ValueError, IndexError, TypeError, ArithmeticError)


def compile_graph(graph: Graph, check: bool = False, order: list[Value] | None = None) -> CompiledGraph:
    """Compile `graph` to Python/NumPy; its nodes run in `order` (a schedule; default graph order)."""
    return CompiledGraph(graph, check=check, order=order)


class _Meter:
    """The counting allocator of a measured run: after every line, the bytes of the distinct NumPy
    buffers the live locals hold (following views to the array owning the memory), leaving out the
    caller's inputs, the program's constants and 0-d values (passes.memory's accounting rule)."""

    def __init__(self, constants):
        self.constants = constants
        self.live: dict[int, int] = {}

    def begin(self, names):
        self.excluded = {id(_root(x)) for x in list(names.values()) + list(self.constants)}

    def __call__(self, position, names):
        seen, total = set(), 0
        for x in names.values():
            if isinstance(x, (np.ndarray, np.generic)):
                r = _root(x)
                if r.ndim and id(r) not in seen and id(r) not in self.excluded:  # 0-d: not counted
                    seen.add(id(r))
                    total += r.nbytes
        self.live[position] = total


def _root(x):
    while isinstance(x, np.ndarray) and isinstance(x.base, np.ndarray):
        x = x.base
    return x


@dataclass
class MeasuredRun:
    outputs: list
    live_bytes: dict[Value, int]  # after each executed node (nodes NumPy broadcasts implicitly are not lines)
    peak_bytes: int


def measure_memory(graph: Graph, args: list, order: list[Value] | None = None) -> MeasuredRun:
    """Run `graph` in `order` and measure the memory its live values hold after every step."""
    _, consts = generate_source(graph, order=order, meter=True)
    meter = _Meter(consts.values())
    compiled = CompiledGraph(graph, order=order, meter=meter)
    outputs = compiled(*args)
    values = graph.all_values()
    live = {values[p]: b for p, b in meter.live.items()}
    return MeasuredRun(list(outputs), live, max(live.values(), default=0))


def run(graph: Graph, args: list) -> list:
    """Interpret `graph` (of primitives) on NumPy arrays, node by node (no code generation)."""
    env: dict[Value, Any] = dict(zip(graph.inputs, args))
    checking = NAN_CHECKS.get()  # gr.debug_nans: each node's output
    with np.errstate(all="ignore"):
        for n in graph.nodes:
            if n.op == "const":
                env[n] = n.attrs["value"]
            else:
                prim = get_primitive(n.op, source=n.source)
                if prim.numpy is None:
                    _composite(n)
                try:
                    out = prim.impl(*[env[i] for i in n.inputs], **n.attrs)
                except _RUNTIME_ERRORS as e:
                    raise ExecutionError(f"{type(e).__name__}: {e}", op=n.op, source=n.source) from e
                env[n] = out if getattr(out, "dtype", None) == n.dtype else np.asarray(out).astype(n.dtype)
                if checking and holds_nan(env[n]):
                    raise nan_at_node(n, env)
    return [env[o] for o in graph.outputs]
