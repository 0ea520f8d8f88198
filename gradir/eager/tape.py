"""The tape of eager ops: a Tensor's storage and version counter, and the nodes ops record on it.

`Storage` is an array with the version counter every in-place write through a Tensor bumps. A `Node`
is one recorded op (a Tensor's `grad_fn`): the op, its attributes and source line, where each operand
came from (another Node, a leaf Tensor that requires grad, a `Frozen` link to one that does not, or an
ndarray constant) and the storage and version of each value its VJP rule reads. The backward engine
(gradir.eager.engine) walks these nodes; gradir.eager.record reads them as IR.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np

from gradir.core.trace import EagerOperand

if TYPE_CHECKING:
    from gradir.eager.tensor import Tensor

_seq = itertools.count()


class Storage:
    """An array and its version counter (bumped by every in-place write through a Tensor)."""

    __slots__ = ("array", "version", "mutated_at")

    def __init__(self, array: np.ndarray):
        self.array, self.version, self.mutated_at = array, 0, None


class Frozen:
    """A tape link to a Tensor that does not require grad: its storage and version when used."""

    __slots__ = ("storage", "version", "source")

    def __init__(self, t: Tensor):
        self.storage, self.version, self.source = t._storage, t._storage.version, t._source


class Node:
    """One op recorded on Tensors; a Tensor's `grad_fn`.

    `inputs` link each operand to where its value came from: another Node, a leaf Tensor that
    requires grad, a `Frozen` Tensor (no grad) or an ndarray constant. `saved` maps each operand
    the VJP rule reads (-1: the output) to (storage, version at record time); backward frees it
    (`had_saved` keeps the keys). `rule` is the op's VJP for this signature (`gradir.eager.tape_rules`)."""

    __slots__ = ("op", "attrs", "inputs", "source", "shape", "dtype", "seq", "saved", "had_saved", "freed",
                 "retained", "rule", "__weakref__")

    def __init__(self, op, attrs, inputs, source, shape, dtype, saved, rule):
        self.op, self.attrs, self.inputs, self.source = op, attrs, inputs, source
        self.shape, self.dtype, self.seq, self.rule = shape, dtype, next(_seq), rule
        self.saved, self.had_saved, self.freed, self.retained = saved, tuple(saved), False, None

    @property
    def name(self) -> str:
        """`multiply` -> `MultiplyBackward`, after PyTorch's `MulBackward0`."""
        return "".join(p.capitalize() for p in self.op.split("_")) + "Backward"

    def __repr__(self) -> str:
        return f"<{self.name}>"

    @property
    def next_functions(self) -> tuple:
        """((grad_fn or AccumulateGrad or None, 0), ...) per operand, as in PyTorch."""
        out = []
        for h in self.inputs:
            out.append((h if isinstance(h, Node) else AccumulateGrad(h) if isinstance(h, EagerOperand) else None, 0))
        return tuple(out)


class AccumulateGrad:
    """The end of a backward path: the leaf whose `.grad` receives the gradient."""

    next_functions = ()
    name = "AccumulateGrad"

    def __init__(self, variable: Tensor):
        self.variable = variable

    def __repr__(self) -> str:
        return "<AccumulateGrad>"


def compact(a: np.ndarray) -> np.ndarray:
    """The smallest array `a` is a broadcast of (axes with stride 0 cut to length 1), or `a` itself."""
    if a.ndim == 0 or all(st for st in a.strides):
        return a
    return a[tuple(slice(0, 1) if st == 0 else slice(None) for st in a.strides)]
