"""The VJP rule of an eager tape node as a small compiled program, built once per signature.

`Tensor.backward()` walks the tape in reverse, as PyTorch's engine does, and needs each node's VJP
rule on concrete arrays. The rules are written with gradir ops (`gradir.core.primitive`), so a rule is
traced on placeholders (the operands, the op's output, the cotangent `g`) into a `Graph` whose
outputs are the cotangents of the operands that need one; the default cleanup pipeline runs on it
(lowering composites, as for `gr.grad`) and the NumPy backend compiles it. That happens once per
signature (op, operand shapes and dtypes, attributes, which operands need a gradient); every later
node with that signature calls the compiled function. With `create_graph=True` the same graph runs
through `bind` on Tensors (`inline`), so the gradients get a history of their own.

A rule that cannot be traced on placeholders, or that specializes on the value of a constant operand
(`Primitive.vjp_inspects`: index_update's last-write mask), is traced again for each node with the
node's values as constants (`TapeRule.specialized`) and interpreted.
"""

from __future__ import annotations

from gradir.backends import compile_numpy
from gradir.core.errors import GradirError
from gradir.core.ir import Graph, Value, attrs_key
from gradir.core.primitive import get_primitive
from gradir.core.rules import vjp_reads_by_operand
from gradir.core.trace import building, constant
from gradir.passes import run_pipeline

_RULES: dict[tuple, TapeRule] = {}
MAX_RULES = 4096  # signatures kept; a program whose shapes keep changing starts over rather than grow


def tape_rule(op: str, arrays, attrs: dict, out, need: tuple[bool, ...]) -> TapeRule:
    """The rule of `op` applied to `arrays` with `attrs` (giving `out`; anything with shape and
    dtype) for cotangents of the operands flagged in `need`. Cached by signature."""
    key = (op, tuple([(a.shape, a.dtype) for a in arrays]), attrs_key(attrs) if attrs else (), need)
    rule = _RULES.get(key)
    if rule is None:
        if len(_RULES) >= MAX_RULES:
            _RULES.clear()
        rule = _RULES[key] = TapeRule(op, arrays, attrs, out, need)
    return rule


class TapeRule:
    """What one signature's VJP reads (`reads`: operand positions, -1 the output) and, built on first
    use, the traced and cleaned rule (`graph`, outputs: the cotangents of the operands in `targets`)
    and its compiled NumPy function (`fn(*operands, out, g)`; operands it does not read may be None)."""

    __slots__ = ("op", "attrs", "types", "out_type", "need", "reads", "inspects", "targets", "_graph", "_fn")

    def __init__(self, op, arrays, attrs, out, need):
        self.op, self.attrs, self.need = op, dict(attrs), need
        self.types = [(tuple(a.shape), a.dtype) for a in arrays]
        self.out_type = (tuple(out.shape), out.dtype)
        parts = vjp_reads_by_operand(op, arrays, attrs, *self.out_type)
        self.reads = frozenset().union(*[p for p, n in zip(parts, need) if n and p is not None])
        self.inspects = get_primitive(op).vjp_inspects
        self.targets: tuple[int, ...] = ()
        self._graph = self._fn = None

    @property
    def graph(self) -> Graph | None:
        """The rule traced on placeholders and cleaned; None when it needs the operands' values."""
        if self._graph is None:
            g = Graph(f"vjp_of_{self.op}")
            with building(g):
                xs = [g.add_input(s, d, f"x{i}") for i, (s, d) in enumerate(self.types)]
                out, ct = g.add_input(*self.out_type, "out"), g.add_input(*self.out_type, "g")
                try:
                    cts = get_primitive(self.op).vjp(ct, out, *xs, **self.attrs)
                except GradirError:
                    cts = None
            self._graph = False if cts is None else self._finish(g, list(cts))
        return None if self._graph is False else self._graph

    @property
    def fn(self):
        """The compiled rule (None when it needs the operands' values: see `specialized`)."""
        if self._fn is None:
            graph = self.graph
            self._fn = compile_numpy(graph).fn if graph is not None else False
        return None if self._fn is False else self._fn

    def specialized(self, operands, out, g, bake) -> Graph:
        """The rule traced with the values at positions `bake` (operand indices, -1 the output, -2
        the cotangent) as constants, for rules that look at values; inputs as in `graph`."""
        graph = Graph(f"vjp_of_{self.op}")
        values = list(operands) + [out, g]
        with building(graph):
            ins = [graph.add_input(s, d, f"x{i}") for i, (s, d) in enumerate(self.types)]
            ins += [graph.add_input(*self.out_type, "out"), graph.add_input(*self.out_type, "g")]
            keys = [*range(len(self.types)), -1, -2]
            args = [constant(v) if k in bake else x for k, v, x in zip(keys, values, ins)]
            cts = get_primitive(self.op).vjp(args[-1], args[-2], *args[:-2], **self.attrs)
        return self._finish(graph, list(cts))

    def _finish(self, graph: Graph, cts: list) -> Graph:
        """Outputs: the needed operands' cotangents; cleaned as `gr.grad` cleans its joint graph."""
        self.targets = tuple(i for i, c in enumerate(cts[:len(self.need)]) if self.need[i] and isinstance(c, Value))
        graph.outputs = [cts[i] for i in self.targets]
        return run_pipeline(graph, verify=False)
