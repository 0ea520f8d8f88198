"""Batching (gr.vmap) as a graph transform.

`batch_graph(graph, in_dims, size, out_axes)` takes a graph traced for one example and returns the graph that
runs it on `size` examples at once: input i takes the example's shape with an axis of `size` inserted at
`in_dims[i]` (None: input i is shared by every example and keeps its shape). Node by node, each value carries
its batch axis (None: the same for every example, computed once); an op on unbatched operands is copied as it
is, an op on batched ones goes through its primitive's batching rule (gradir.ops.batching):
``rule(operands, bdims, **attrs) -> (out, out_bdim)``. A composite without a rule is batched through its
decomposition. Outputs get their batch axis at `out_axes` (unbatched ones are broadcast along it; with None an
output must be unbatched and keeps its shape).

Since a gradient or a JVP is a graph like any other, vmap(grad(f)) batches the backward nodes too: the
per-example gradients come from one batched backward pass.
"""

from __future__ import annotations

from collections.abc import Sequence

from gradir.core import dtypes
from gradir.core.errors import GradirError, ShapeError, UnsupportedOpError
from gradir.core.ir import Graph, Value
from gradir.core.primitive import get_primitive
from gradir.core.trace import bind, building, constant, source_of
from gradir.ops import batching  # noqa: F401 - attaches the batching rules to the primitives
from gradir.ops.batching import moveaxis
from gradir.util.gcpause import gc_paused


def batched_shape(shape, d: int | None, size: int) -> tuple[int, ...]:
    """`shape` with an axis of `size` inserted at `d` (None: `shape` itself)."""
    return tuple(shape) if d is None else tuple(shape[:d]) + (size,) + tuple(shape[d:])


@gc_paused
def batch_graph(graph: Graph, in_dims: Sequence[int | None], size: int,
                out_axes: Sequence[int | None] | int | None = 0) -> Graph:
    """The graph running `graph` over a batch of `size` examples (module docstring). `in_dims` has one entry per
    input of `graph` (captures included: pass None for them); `out_axes` one non-negative axis per output, or
    one for all; None: the output is the same for every example and keeps its shape (an error if it is not)."""
    out = Graph(f"{graph.name}_vmap")
    args = []
    for x, d in zip(graph.inputs, in_dims):
        args.append(out.add_input(batched_shape(x.shape, d, size), x.dtype, x.attrs.get("name"), x.source))
    axes = [out_axes] * len(graph.outputs) if out_axes is None or isinstance(out_axes, int) else list(out_axes)
    with building(out):
        values, bdims = batch_into(graph, args, list(in_dims), size)
        outs = []
        for k, (o, v, d, axis) in enumerate(zip(graph.outputs, values, bdims, axes)):
            if axis is None and d is not None:
                raise GradirError(f"out_axes is None for output {k}, but it differs between examples (it depends on a "
                                  "mapped argument): give the axis to stack it along", op="vmap", source=o.source)
            with source_of(o.source, o.scope):
                outs.append(v if axis is None else to_axis(v, d, axis, size))
    out.outputs = outs
    out.copy_bookkeeping(graph)
    return out


def to_axis(v, d: int | None, axis: int, size: int):
    """v with its batch axis at `axis`; an unbatched v broadcast along a new one there."""
    if d is None:
        v = bind("broadcast_to", v, shape=(size,) + tuple(v.shape))
        d = 0
    return moveaxis(v, d, axis)


def batch_into(graph: Graph, args: list, in_dims: list, size: int) -> tuple[list, list]:
    """Record `graph`'s nodes, batched, into the graph being built, on `args` (batched at `in_dims`): the
    outputs' values and their batch axes."""
    env: dict[Value, Value] = dict(zip(graph.inputs, args))
    bdim: dict[Value, int | None] = dict(zip(graph.inputs, in_dims))
    for n in graph.nodes:
        with source_of(n.source, n.scope):
            if n.op == "const":
                env[n], bdim[n] = constant(n.attrs["value"]), None
                continue
            operands = [env[i] for i in n.inputs]
            dims = [bdim[i] for i in n.inputs]
            if all(d is None for d in dims):
                env[n], bdim[n] = bind(n.op, *operands, **n.attrs), None
                continue
            env[n], bdim[n] = _batch_node(n, operands, dims, size)
    return [env[o] for o in graph.outputs], [bdim[o] for o in graph.outputs]


def _batch_node(n: Value, operands: list, dims: list, size: int):
    prim = get_primitive(n.op, n.source)
    if prim.batch is None:
        if prim.decompose is None:
            raise UnsupportedOpError(f"has no batching rule, so gr.vmap cannot batch it (a {n.type_str} result of "
                                     f"batched operands); attach one to its primitive (gradir.ops.batching; "
                                     "`loop_rule` is the generic, one-application-per-example rule)",
                                     op=n.op, source=n.source)
        return _batch_decomposition(n, prim, operands, dims, size)
    value, d = prim.batch(operands, dims, **n.attrs)
    want = batched_shape(n.shape, d, size) if d is not None else n.shape
    if d is None or not isinstance(value, Value) or tuple(value.shape) != want or value.dtype != n.dtype:
        got = value.type_str if isinstance(value, Value) else type(value).__name__
        raise GradirError(f"the batching rule gave {got} with batch axis {d}, expected "
                          f"{dtypes.short(n.dtype)}{list(want)} (a bug in the rule)", op=n.op, source=n.source)
    return value, d


def _batch_decomposition(n: Value, prim, operands: list, dims: list, size: int):
    """A composite without a rule: its decomposition, traced for one example, batched node by node."""
    scratch = Graph(f"{n.op}_decomposition")
    with building(scratch):
        xs = [scratch.add_input(i.shape, i.dtype, f"x{k}") for k, i in enumerate(n.inputs)]
        scratch.outputs = [prim.decompose(*xs, **n.attrs)]
    (value,), (d,) = batch_into(scratch, operands, dims, size)
    if d is None:  # (a decomposition that ignores its batched operands)
        value, d = bind("broadcast_to", value, shape=(size,) + tuple(value.shape)), 0
    return value, d


def check_sizes(sizes: dict[str, int], op: str = "vmap", source: str | None = None) -> int:
    """The one batch size of the batched arguments `sizes` (name -> length of its batch axis); a ShapeError
    naming them when they differ."""
    distinct = sorted(set(sizes.values()))
    if len(distinct) > 1:
        listed = ", ".join(f"{name}: {s}" for name, s in sizes.items())
        raise ShapeError(f"the batched arguments have different sizes along their mapped axes ({listed})", op=op,
                         source=source)
    return distinct[0]


__all__ = ["batch_graph", "batch_into", "batched_shape", "check_sizes", "to_axis"]
