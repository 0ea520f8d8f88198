"""Finding the first NaN: `with gr.debug_nans():` (or GRADIR_DEBUG_NANS=1), as JAX's jax_debug_nans and
PyTorch's detect_anomaly.

While it is on, the first op whose output holds a NaN raises `NonFiniteError` naming the op and the user's
source line: eager ops (NumPy arrays and gr.Tensors, `evaluate`) and Tensor.backward() (each tape node's VJP,
gradir.eager.engine) check every result; the NumPy interpreter (gr.grad / gr.value_and_grad / gr.vjp on the
reference) checks each node's output as it runs; a compiled program (the LLVM and Triton backends, or the NumPy backend's
generated code) checks its results and, when one holds a NaN, runs again on the NumPy reference node by node to
find the op that made it (as compiled runs that meet a bad index do). A NaN that came in through an input (an
argument, a constant, a Tensor made outside the checks) is named as that input, not blamed on the op reading it.

Off by default; off, each check is one ContextVar lookup per op or per program run. The setting is per thread
(and per asyncio task): a ContextVar, as JAX's context managers are thread-local, so entering or leaving
`debug_nans` in one thread leaves the others' alone; GRADIR_DEBUG_NANS (read at import) is the setting every
thread starts with. `debug_nans(False)` turns it off inside.
"""

from __future__ import annotations

import os
from contextvars import ContextVar

import numpy as np

from gradir.core import dtypes
from gradir.core.errors import NonFiniteError

NAN_CHECKS: ContextVar[bool] = ContextVar(
    "gradir_debug_nans", default=os.environ.get("GRADIR_DEBUG_NANS", "").lower() not in ("", "0", "false", "off", "no"))
"""Whether NaN checks are on in this thread / context (`NAN_CHECKS.get()`): the innermost `debug_nans` setting,
else GRADIR_DEBUG_NANS as read at import."""


class debug_nans:
    """``with gr.debug_nans():`` the first op, forward or backward, whose output holds a NaN raises
    `NonFiniteError` naming the op and the source line (a NaN that comes in through an input names the input).
    ``debug_nans(False)`` turns the checks off inside; leaving the block restores the setting around it.
    The setting is the current thread's (context's): other threads keep theirs. GRADIR_DEBUG_NANS=1 turns them
    on for every thread, outside any block."""

    __slots__ = ("enabled", "_tokens")

    def __init__(self, enabled: bool = True):
        self.enabled = bool(enabled)
        self._tokens: list = []  # one per entry not yet left (an instance may be re-entered, or shared by threads)

    def __enter__(self):
        self._tokens.append(NAN_CHECKS.set(self.enabled))
        return self

    def __exit__(self, *exc):
        for k in range(len(self._tokens) - 1, -1, -1):  # the latest entry made in this context (normally the last)
            try:
                NAN_CHECKS.reset(self._tokens[k])
            except ValueError:  # entered in another thread's context
                continue
            del self._tokens[k]
            return

    def __repr__(self) -> str:
        return f"debug_nans({self.enabled})"


def holds_nan(a) -> bool:
    """Whether array (or scalar) `a` of a floating or complex dtype holds a NaN."""
    dt = getattr(a, "dtype", None)
    if dt is None:
        if not isinstance(a, (float, complex)):
            return False
        a = np.asarray(a)
        dt = a.dtype
    return dtypes.is_inexact(dt) and bool(np.isnan(a).any())


def _count(a) -> str:
    a = np.asarray(a)
    return f"{int(np.isnan(a).sum()):,} of {a.size:,} elements" if a.ndim else "a scalar"


def nan_in_result(op: str, operands, out, source: str | None) -> NonFiniteError:
    """The error for an eager op `op` whose result `out` holds a NaN: a NaN operand came in from outside (an
    input, or a value computed while the checks were off); else `op` made it."""
    for k, a in enumerate(operands):
        if holds_nan(a):
            return NonFiniteError(f"a NaN came in through an input: operand {k} of `{op}` holds NaN ({_count(a)}) "
                                  f"before it runs (an input, or a value computed while debug_nans was off), so "
                                  f"`{op}` did not make it", source=source, input=f"operand {k} of {op}")
    return NonFiniteError(f"produced NaN ({_count(out)}) from operands without NaN", op=op, source=source)


def nan_at_node(n, env: dict) -> NonFiniteError:
    """The error for graph node `n` whose output in `env` (value -> array) holds a NaN, the nodes before it
    checked: an operand holding NaN is an input or a constant (named as such); else `n` made it."""
    for o in n.inputs:
        a = env.get(o)
        if a is None or not holds_nan(a):
            continue
        if o.op == "input":
            name = o.attrs.get("name")
            return NonFiniteError(f"a NaN came in through input `{name}` ({_count(a)}), first read by `{n.op}`: "
                                  "no op produced it", source=n.source, input=str(name))
        if o.op == "const":
            return NonFiniteError(f"a constant holds NaN ({_count(a)}), first read by `{n.op}`: no op produced it",
                                  source=o.source or n.source, input="a constant")
    return NonFiniteError(f"produced NaN ({_count(env[n])}) from operands without NaN", op=n.op, source=n.source)


def check_outputs(graph, args, outs, reference) -> None:
    """A compiled run of `graph` on `args` gave `outs`: when one holds a NaN, run `graph` again on the NumPy
    reference interpreter `reference(graph, args)`, which raises at the first node making a NaN (the checks are
    on). Where the reference makes none, the error names the output (an input passed through, or a result the
    compiled code and the reference compute differently)."""
    bad = [k for k, o in enumerate(outs) if holds_nan(o)]
    if not bad:
        return
    reference(graph, list(args))
    k = bad[0]
    v = graph.outputs[k]
    if v.op == "input":
        name = v.attrs.get("name")
        raise NonFiniteError(f"a NaN came in through input `{name}` ({_count(outs[k])}), returned as output {k}: "
                             "no op produced it", source=v.source, input=str(name))
    raise NonFiniteError(f"the compiled program's output {k} holds NaN ({_count(outs[k])}) but the NumPy reference "
                         "run of the same graph makes none: the compiled code and the reference differ here",
                         op=v.op, source=v.source)


def nan_in_backward(op: str, source: str | None, g, cts, targets, saved: dict, is_root: bool) -> None:
    """Raise for an eager tape node (`op` at `source`) whose VJP, given output cotangent `g` and its saved
    values `saved` (position -> array, -1 the output), returned cotangents `cts` for operands `targets`
    holding a NaN (nothing when none does)."""
    bad = [(i, c) for i, c in zip(targets, cts) if holds_nan(c)]
    if holds_nan(g):
        if is_root:
            raise NonFiniteError(f"a NaN came in through the gradient passed to backward() ({_count(g)}): no op "
                                 "produced it", source=source, input="the gradient passed to backward()")
        raise NonFiniteError(f"in backward, the gradients its output receives from its uses add up to NaN "
                             f"({_count(g)}; inf + -inf)", op=op, source=source)
    if not bad:
        return
    for i, a in sorted(saved.items()):
        if holds_nan(a):
            what = "its output" if i < 0 else f"its operand {i}"
            raise NonFiniteError(f"a NaN came in through an input: {what}, saved for backward, holds NaN "
                                 f"({_count(a)}) (an input, or computed while debug_nans was off), so `{op}`'s "
                                 "backward did not make it", source=source, input=f"{what} of {op}")
    i, c = bad[0]
    raise NonFiniteError(f"its backward produced NaN ({_count(c)}) in the gradient of operand {i}, from a "
                         "gradient and saved values without NaN", op=op, source=source)


def nan_at_leaf(leaf, g, nodes) -> NonFiniteError:
    """The error for a leaf Tensor whose gradient in Tensor.backward(), the sum of what tape `nodes` sent it
    (each checked: none holds NaN), adds up to NaN: the `add` of the last one made it."""
    uses = ", ".join(f"`{n.op}`" + (f" (at {n.source})" if n.source else "") for n in nodes)
    return NonFiniteError(f"in backward, the gradients leaf tensor {leaf.type_str} receives from its uses add up "
                          f"to NaN ({_count(g)}; inf + -inf), from {uses}", op="add", source=nodes[-1].source)
