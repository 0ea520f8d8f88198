"""The backward engine: the tape walked in reverse, each node's VJP rule compiled once per signature.

`run_backward(root, ...)` (what `Tensor.backward()` runs) checks the versions of everything the
reachable nodes saved, then walks them in reverse recording order, as PyTorch's engine does (no
recursion, so tapes of any depth): a node's cotangent is the sum of its users' contributions, and its
op's VJP rule (gradir.eager.tape_rules) turns it into its operands'. With `create_graph=True` the rules
run through `bind` on Tensors (`inline`), so the gradients are Tensors with history of their own.
`last_backward()` keeps what the latest backward differentiated (gradir.eager.record).

The engine reads Tensors through their tape state (`_node`, `_storage`, `_grad`, ...) and makes new ones
with the root's class, so it sits below gradir.eager.tensor, which calls it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gradir.backends import run
from gradir.core import dtypes
from gradir.core.errors import ExecutionError, FreedGraphError, GradirError, ShapeError, VersionError
from gradir.core.nan_check import NAN_CHECKS, debug_nans, holds_nan, nan_at_leaf, nan_in_backward
from gradir.core.seed import check_implied_seed
from gradir.core.trace import EagerOperand, inline, source_of, user_source
from gradir.eager.grad_mode import enable_grad, no_grad
from gradir.eager.record import BackwardRecord
from gradir.eager.tape import Node, Storage

if TYPE_CHECKING:
    from gradir.eager.tensor import Tensor


def run_backward(root: Tensor, gradient, retain_graph: bool, create_graph: bool) -> None:
    """`root.backward(gradient, retain_graph, create_graph)`: accumulate d(root)/d(leaf) into the leaves'
    `.grad` (and retained non-leaves'); free the saved values unless `retain_graph`. New Tensors (seeds,
    gradients) are of root's class."""
    src = user_source()
    if not root._requires_grad:
        raise GradirError("this tensor does not require grad and has no grad_fn: nothing to differentiate (set "
                          "requires_grad=True on a leaf; was it computed under gr.no_grad()?)", op="backward", source=src)
    seed = _seed(root, gradient, create_graph, src)
    if root._node is None:  # a leaf: its gradient is the seed itself
        _accumulate(root, seed, create_graph)
        return
    nodes = _reachable(root._node)
    _check_saved(nodes)
    tensor = type(root)
    if create_graph:  # the rules run through bind on Tensors: the gradients have history
        with enable_grad():
            grads, retained = _walk(nodes, root._node, seed, True, tensor)
    else:
        with np.errstate(all="ignore"):
            grads, retained = _walk(nodes, root._node, seed, False, tensor)
    _LAST[:] = [BackwardRecord(nodes, root._node, retained)]
    for t, g in grads:
        _accumulate(t, g, create_graph)
    if not retain_graph:
        for n in nodes:
            n.saved, n.freed = {}, True


def _walk(nodes: list[Node], root: Node, seed, create_graph: bool, tensor: type[Tensor]) -> tuple[list, set]:
    """Reverse-mode over the tape, last node first (PyTorch's engine order): each node's cotangent is
    the sum of its users' contributions, and its rule turns it into its operands'. Returns (tensor,
    gradient) for every leaf that requires grad and every retained non-leaf (zeros where no gradient
    arrived, as `gr.grad` gives), and the retained nodes. `tensor`: the class of saved values with create_graph."""
    pending: dict[Node, object] = {root: seed}
    leaves: dict[int, list] = {}  # id(leaf) -> [leaf, gradient or None(, its senders: debug_nans)], in order
    out, retained = [], set()
    checking = NAN_CHECKS.get() and not create_graph  # gr.debug_nans (with create_graph, the eager ops check)
    for n in reversed(nodes):
        g = pending.pop(n, None)
        t = n.retained() if n.retained is not None else None
        if t is not None and t._node is n:
            retained.add(n)
            out.append((t, g if g is not None else np.zeros(n.shape, n.dtype)))
        for h in n.inputs:
            if isinstance(h, EagerOperand) and id(h) not in leaves:
                leaves[id(h)] = [h, None]
        if g is None:
            continue
        rule = n.rule
        if checking:  # gr.debug_nans: the node's cotangents, checked here as a whole
            with debug_nans(False):  # this thread's setting, restored after
                cts = _node_vjp(n, rule, g, create_graph, tensor)
            nan_in_backward(n.op, n.source, g, cts, rule.targets, {i: s.array for i, (s, _) in n.saved.items()},
                            n is root)
        else:
            cts = _node_vjp(n, rule, g, create_graph, tensor)  # builds the rule on first use, and rule.targets
        for i, c in zip(rule.targets, cts):
            h = n.inputs[i]
            if isinstance(h, Node):
                prev = pending.get(h)
                pending[h] = c if prev is None else prev + c
            else:  # a leaf that requires grad
                entry = leaves[id(h)]
                if entry[1] is None:
                    entry[1] = c
                    if checking:
                        entry.append([n])  # the nodes whose gradients this leaf received, for nan_at_leaf
                else:
                    entry[1] = entry[1] + c
                    if checking:  # gr.debug_nans: each addend was checked; their sum can still be inf + -inf
                        entry[2].append(n)
                        if holds_nan(entry[1]):
                            raise nan_at_leaf(h, entry[1], entry[2])
    for leaf, g, *_ in leaves.values():
        out.append((leaf, g if g is not None else np.zeros(leaf.shape, leaf.dtype)))
    return out, retained


def _node_vjp(n: Node, rule, g, create_graph: bool, tensor: type[Tensor]) -> tuple:
    """The cotangents of `rule.targets` for node n with output cotangent g."""
    xs, out = [None] * len(n.inputs), None
    for i in rule.reads:
        if i < 0:
            out = _saved_value(n.saved[-1][0], n, create_graph, tensor)
        elif isinstance(n.inputs[i], np.ndarray):  # a constant the rule reads (kept on the tape)
            xs[i] = n.inputs[i]
        else:
            xs[i] = _saved_value(n.saved[i][0], n.inputs[i], create_graph, tensor)
    args = xs + [out, g]
    bake = [i for i in rule.inspects if isinstance(n.inputs[i], np.ndarray)] if rule.inspects else ()  # looked at
    graph = rule.graph if not bake else None
    if graph is None and not bake:  # a rule that needs every value
        bake = [*range(len(xs)), -1, -2]
    try:
        if create_graph:
            with source_of(n.source):
                return inline(graph if graph is not None else rule.specialized(xs, out, g, bake), args,
                              keep_source=False)
        if graph is not None:
            return rule.fn(*args)
        return run(rule.specialized(xs, out, g, bake), args)
    except GradirError:
        raise
    except (ValueError, IndexError, TypeError, ArithmeticError) as e:
        raise ExecutionError(f"in its backward: {type(e).__name__}: {e}", op=n.op, source=n.source) from e


_LAST: list[BackwardRecord] = []


def last_backward() -> BackwardRecord | None:
    """The record of the most recent `Tensor.backward()` (for inspection and teaching)."""
    return _LAST[-1] if _LAST else None


def _seed(root: Tensor, gradient, create_graph: bool, src):
    if gradient is None:  # gradir.core.seed's rule, the one gr.grad applies too
        check_implied_seed(root.shape, root.dtype, root.type_str, lead="a gradient can only be implied for a "
                           "scalar output", hint="pass backward(gradient=...) with the output's shape",
                           op="backward", source=src)
        return np.ones(root.shape, root.dtype)
    g = gradient if isinstance(gradient, EagerOperand) else type(root)(gradient, dtype=root.dtype)
    if g.shape != root.shape:
        raise ShapeError(f"gradient {g.type_str} does not match the output {root.type_str}", op="backward", source=src)
    if g.dtype != root.dtype:
        g = g.astype(root.dtype)
    return g if create_graph else g.data


def _accumulate(t: Tensor, g, create_graph: bool) -> None:
    """Add g into t.grad: in place normally (as PyTorch), out of place (recorded) with create_graph."""
    if create_graph:
        g = g if isinstance(g, EagerOperand) else type(t)._wrap(np.array(g, dtype=t.dtype).reshape(t.shape))
        t._grad = g if t._grad is None else t._grad + g
        return
    g = np.asarray(g.data if isinstance(g, EagerOperand) else g, dtype=t.dtype).reshape(t.shape)
    if t._grad is None:
        t._grad = type(t)._wrap(np.array(g))
    elif t._grad._requires_grad:  # a gradient with history from an earlier create_graph backward
        with no_grad():
            t._grad = t._grad + g
    else:
        t._grad._storage.array += g
        t._grad._bump()


def _reachable(root: Node) -> list[Node]:
    """Tape nodes the root depends on, in recording order."""
    seen, stack = {root}, [root]
    while stack:
        for h in stack.pop().inputs:
            if isinstance(h, Node) and h not in seen:
                seen.add(h)
                stack.append(h)
    return sorted(seen, key=lambda n: n.seq)


def _check_saved(nodes: list[Node]) -> None:
    """Freed graph and in-place modification checks, in backward order (as the engine meets them)."""
    for n in reversed(nodes):
        if n.freed and n.had_saved:
            raise FreedGraphError(
                "trying to backward through the graph a second time: the values this op saved for backward were "
                "freed by the first backward(). Pass retain_graph=True to the first backward() to keep them",
                op=n.op, source=n.source)
        for i, (storage, version) in n.saved.items():
            if storage.version != version:
                what = "its output" if i < 0 else f"its operand {i}"
                arr = storage.array
                where = f" (last modified at {storage.mutated_at})" if storage.mutated_at else ""
                raise VersionError(
                    f"a value saved for backward was modified in place: {what} "
                    f"({dtypes.short(arr.dtype)}[{','.join(map(str, arr.shape))}]) was saved at version {version}, now "
                    f"version {storage.version}{where}; backward expected version {version}. Modify a clone() "
                    "instead, or do the in-place op before it is used", op=n.op, source=n.source)


def _saved_value(storage: Storage, origin, create_graph: bool, tensor: type[Tensor]):
    """A saved array; with create_graph, a `tensor` linked to the node (or leaf) that produced it."""
    if not create_graph:
        return storage.array
    if isinstance(origin, EagerOperand):
        return origin
    return tensor._wrap(storage=storage, node=origin if isinstance(origin, Node) else None)
