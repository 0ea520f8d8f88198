"""gr.vmap: a function of one example, run over a batch of them, as one batched graph.

    per_example_grads = gr.vmap(gr.grad(loss), in_axes=(None, 0, 0))(params, xs, ys)

`vmap(f, in_axes, out_axes)` traces f on one example's shapes (each mapped argument with its mapped axis
removed), batches the graph (gradir.passes.batching: every value carries its batch axis, each primitive has
a batching rule) and runs it as the other transformations do: on the NumPy backend now, or inlined into the
enclosing trace, so vmap composes with grad, jvp, vjp, compile and itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from gradir.api.args import Args, captures, finish, prepare, trace_args
from gradir.api.transforms import _cached, _execute
from gradir.core.errors import GradirError, ShapeError
from gradir.core.trace import abstract_dtype, user_source
from gradir.passes import run_pipeline
from gradir.passes.batching import batch_graph, check_sizes
from gradir.util.pytree import TreeDef, tree_unflatten


def _is_axis(spec) -> bool:
    return spec is None or (isinstance(spec, (int, np.integer)) and not isinstance(spec, bool))


def spec_leaves(spec, tree: TreeDef, what: str, where: str) -> list:
    """One axis (or None) per leaf of `tree`: an int/None covers a whole subtree, a container matches the
    tree's container of the same kind (a pytree prefix, as JAX's in_axes; a dict names the same keys, in any order)."""
    if _is_axis(spec):
        return [None if spec is None else int(spec)] * tree.num_leaves
    kind = "tuple" if isinstance(spec, tuple) else "list" if isinstance(spec, list) else "dict" if isinstance(spec, dict) \
        else None
    if kind is None:
        raise GradirError(f"{what} entries must be ints, None or containers of them, got {spec!r} for {where}",
                          op="vmap", source=user_source())
    if tree.kind != kind or len(spec) != len(tree.children) or (kind == "dict" and set(spec) != set(tree.keys)):
        raise GradirError(f"{what} {spec!r} does not match the structure of {where} (give an int or None for the "
                          "whole of it, or a container like it)", op="vmap", source=user_source())
    children = [spec[k] for k in tree.keys] if kind == "dict" else spec  # a dict's keys in any order, as JAX's
    keys = tree.keys if kind == "dict" else range(len(spec))
    return [d for s, c, k in zip(children, tree.children, keys) for d in spec_leaves(s, c, what, f"{where}[{k!r}]")]


def _in_dims(in_axes, a: Args) -> list:
    """One normalized axis (or None) per flat argument leaf."""
    nargs = len(a.args)
    if _is_axis(in_axes):
        per_arg = [in_axes] * nargs
    elif isinstance(in_axes, (tuple, list)):
        if len(in_axes) != nargs:
            raise GradirError(f"in_axes has {len(in_axes)} entries for {nargs} positional arguments (one per "
                              "argument: an int, None, or a container matching it)", op="vmap", source=user_source())
        per_arg = list(in_axes)
    else:
        raise GradirError(f"in_axes must be an int, None or a tuple with one entry per argument, got {in_axes!r}",
                          op="vmap", source=user_source())
    dims = []
    for pos, spec in enumerate(per_arg):
        sub = a.in_tree.children[pos]
        names = [a.names[i] for i in a.leaf_ranges[pos]]
        leaves = [a.flat[i] for i in a.leaf_ranges[pos]]
        for d, name, leaf in zip(spec_leaves(spec, sub, "in_axes", f"argument {pos}"), names, leaves):
            ndim = len(np.shape(leaf))
            if d is not None and not -ndim <= d < ndim:
                raise ShapeError(f"in_axes {d} is out of range for argument {name} of shape {tuple(np.shape(leaf))}",
                                 op="vmap", source=user_source())
            dims.append(None if d is None else d % ndim)
    return dims


def _example(leaf, d):
    """A placeholder with one example's shape and the leaf's dtype."""
    shape = tuple(np.shape(leaf))
    if d is not None:
        shape = shape[:d] + shape[d + 1:]
    return np.broadcast_to(np.zeros((), abstract_dtype(leaf)), shape)


def _out_dims(out_axes, graph) -> list[int | None]:
    leaves = spec_leaves(out_axes, graph.out_tree, "out_axes", "the output")
    axes = []
    for d, o in zip(leaves, graph.outputs):
        if d is None:  # the same for every example: kept as one value (batch_graph checks that it is)
            axes.append(None)
            continue
        if not -(o.ndim + 1) <= d <= o.ndim:
            raise ShapeError(f"out_axes {d} is out of range for an output of {o.ndim + 1} dimensions ({o.type_str} "
                             "per example)", op="vmap", source=user_source())
        axes.append(d % (o.ndim + 1))
    return axes


def vmap(fn: Callable, in_axes=0, out_axes=0, axis_size: int | None = None) -> Callable:
    """`fn` mapped over an axis of its arguments (jax.vmap, torch.func.vmap), as one batched graph.

    `in_axes`: the mapped axis of every argument (an int), None for arguments every example shares, or a tuple
    with one entry per positional argument, each an int, None or a container matching that argument (a pytree
    prefix). `out_axes`: where the batch axis goes in the outputs (an int, None for an output every example
    shares, or a pytree prefix of the output). `axis_size`: the batch size, needed only when no argument is
    mapped. Keyword arguments are passed through unmapped. Composes with grad, jvp, vjp, compile and vmap itself:
    ``gr.vmap(gr.grad(loss), in_axes=(None, 0, 0))`` gives per-example gradients."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        f = functools.partial(fn, **kwargs) if kwargs else fn
        a = prepare(f, args)
        dims = _in_dims(in_axes, a)
        sizes = {a.names[i]: int(np.shape(x)[d]) for i, (x, d) in enumerate(zip(a.flat, dims)) if d is not None}
        if axis_size is not None:
            sizes["axis_size"] = int(axis_size)
        if not sizes:
            raise GradirError("no argument is mapped (in_axes is None for all of them): give the axis to map over, "
                              "or axis_size", op="vmap", source=user_source())
        size = check_sizes(sizes, source=user_source())

        def build():
            example = prepare(f, tree_unflatten(a.in_tree, [_example(x, d) for x, d in zip(a.flat, dims)]))
            graph = trace_args(f, example)
            batched = batch_graph(run_pipeline(graph), dims + [None] * len(graph.captures), size,
                                  _out_dims(out_axes, graph))
            return graph, run_pipeline(batched)

        graph, batched = _cached(wrapper, ("vmap", size), a, build)  # size: axis_size is not in the signature
        values = finish(_execute(batched, a.flat + captures(graph)), a)
        return tree_unflatten(graph.out_tree, values)
    return wrapper


__all__ = ["vmap"]
