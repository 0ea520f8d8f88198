"""The memory of one training step, by category: what training keeps per parameter.

A training step `(params, state, *batch) -> (loss, params, state)` (gradient, then the optimizer's
update, as `gr.train` compiles it) is traced once, its gradients recorded as they are made. The
report reads every figure off that graph's values: the parameters and optimizer state it takes, the
gradients it computes (their dtypes as traced, so a mixed-precision step shows its own), and the
memory plan of the step's own buffers. "Bytes per parameter" counts parameters, gradients and the
optimizer's per-parameter state (Adam's two moments in float32: 4 + 4 + 8 = 16) and, in mixed precision
(`gr.amp`), the float16 or bfloat16 copies of the weights the step computes with (+2: 18); scalar state
such as the step count or the loss scale is listed apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gradir.api import transforms as api
from gradir.core import dtypes
from gradir.passes.memory import plan_memory
from gradir.passes.report import Report, human_bytes
from gradir.passes.text_table import Column
from gradir.training.optim import loss_and_grads
from gradir.util.pytree import tree_flatten


@dataclass
class StepMemory(Report):
    """Bytes of one training step by category (`gr.train.memory`)."""
    optimizer: str
    parameters: int           # how many scalars the model has
    categories: dict          # name -> (values, bytes)
    working_peak: int         # the memory plan's peak over the step's own buffers

    noun = "categories"

    @property
    def bytes_per_parameter(self) -> float:
        """Parameters, gradients and per-parameter optimizer state, over the parameter count."""
        kept = ("parameters", "gradients", "optimizer state", "low-precision parameter copies")
        return sum(self.categories.get(c, (0, 0))[1] for c in kept) / self.parameters if self.parameters else 0.0

    def to_dict(self) -> dict:
        return {"optimizer": self.optimizer, "parameters": self.parameters, "bytes_per_parameter": self.bytes_per_parameter,
                "categories": {k: {"values": n, "bytes": b} for k, (n, b) in self.categories.items()},
                "working_peak_bytes": self.working_peak}

    def _title(self) -> str:
        return (f"memory of one training step ({self.optimizer}): {self.parameters:,} parameters, "
                f"{self.bytes_per_parameter:.2f} bytes per parameter")

    def _columns(self) -> list[Column]:
        return [Column("kept"), Column("values", right=True), Column("bytes", right=True),
                Column("per parameter", right=True)]

    def _rows(self) -> list[tuple[str, ...]]:
        per = (lambda b: f"{b / self.parameters:.2f}") if self.parameters else (lambda b: "")
        return [(name, str(n), human_bytes(b), per(b) if name != "optimizer scalars" else "")
                for name, (n, b) in self.categories.items()]

    def _notes(self) -> list[str]:
        return [f"bytes per parameter: parameters, gradients, the optimizer's per-parameter state and any "
                f"low-precision copies of the weights; the "
                f"optimizer's scalars (step count, loss scale) are apart. The compiled step's own buffers (activations, "
                f"gradients, the new parameters and state; its inputs not counted) peak at "
                f"{human_bytes(self.working_peak)} (its memory plan)."]


def step_memory(loss, params, opt, *batch) -> StepMemory:
    """The memory of one step of training `params` on `loss(params, *batch)` with optimizer `opt`
    (`gr.optim`), by category, read off the traced step (see the module docstring)."""
    gradients = loss_and_grads(loss, opt)

    def step(params, state, *batch):  # the step gr.train compiles, with the gradients also returned
        value, grads = gradients(params, state, *batch)
        new_params, new_state = opt.update(grads, state, params)
        return value, new_params, new_state, grads

    state = opt.init(params)
    p_leaves, p_tree = tree_flatten(params)
    s_leaves = tree_flatten(state)[0]
    kinds = [(np.shape(x), np.asarray(x).dtype) for x in p_leaves]
    per_parameter = {id(x) for x in _shaped_like(state, p_tree, kinds)}
    graph = api.trace(step, params, state, *batch)
    p_in, s_in = graph.inputs[:len(p_leaves)], graph.inputs[len(p_leaves):len(p_leaves) + len(s_leaves)]
    grads = graph.outputs[len(graph.outputs) - len(p_leaves):]
    moments = [v for v, x in zip(s_in, s_leaves) if id(x) in per_parameter]
    scalars = [v for v, x in zip(s_in, s_leaves) if id(x) not in per_parameter]

    def total(values) -> tuple[int, int]:
        return len(values), sum(v.nbytes for v in values)

    categories = {"parameters": total(p_in), "gradients": total(grads), "optimizer state": total(moments),
                  "optimizer scalars": total(scalars)}
    copies = _low_precision_copies(graph, p_in)
    if copies:
        categories["low-precision parameter copies"] = total(copies)
    working = api.trace(lambda *a: step(*a)[:3], params, state, *batch)
    return StepMemory(getattr(opt, "name", type(opt).__name__), int(sum(np.size(x) for x in tree_flatten(params)[0])),
                      categories, plan_memory(working).peak_bytes)


def _low_precision_copies(graph, params) -> list:
    """The casts of parameters to a narrower float dtype that the step computes with (mixed precision's
    float16 weights): memory the step holds besides the master copy."""
    given = set(params)
    return [n for n in graph.nodes if n.op == "convert" and n.inputs[0] in given
            and dtypes.is_float(n.dtype) and n.dtype.itemsize < n.inputs[0].dtype.itemsize]


def _shaped_like(tree, p_tree, kinds) -> list:
    """The leaves of `tree`'s subtrees that have the parameters' structure, shapes and dtypes (`kinds`; Adam's
    moments, a momentum buffer): per-parameter state, as opposed to scalars such as the step count (which
    has a bare array parameter's structure too)."""
    leaves, treedef = tree_flatten(tree)
    if treedef == p_tree and [(np.shape(x), np.asarray(x).dtype) for x in leaves] == kinds:
        return leaves
    if isinstance(tree, dict):
        return [x for v in tree.values() for x in _shaped_like(v, p_tree, kinds)]
    if isinstance(tree, (list, tuple)):
        return [x for v in tree for x in _shaped_like(v, p_tree, kinds)]
    return []


__all__ = ["StepMemory", "step_memory"]
