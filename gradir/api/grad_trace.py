"""`GradTrace`: the whole backward story of one function at one input signature, for inspection.

Everything here is derived from one partition of the joint graph: the forward and backward
programs, the saved tensors, the dependency-counted backward schedule under a policy, and the
memory plan of running forward then backward in that order. `run` executes exactly that plan on
the NumPy backend, and `measure` does so with a counting allocator, so what a learner inspects is
what runs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gradir.api.args import prepare
from gradir.backends import compile_graph, measure_memory
from gradir.backends.llvm import RENDERS as LLVM_RENDERS
from gradir.core import dtypes
from gradir.core.errors import DTypeError, ShapeError
from gradir.core.ir import Graph, Value
from gradir.core.trace import abstract_dtype, user_source
from gradir.passes.aliasing import owners
from gradir.passes.buckets import plan_buckets
from gradir.passes.fusion import fuse
from gradir.passes.memory import plan_memory
from gradir.passes.remat.plan import RematPlan, evaluate
from gradir.passes.saved import saved_tensors
from gradir.passes.schedule import schedule as dependency_schedule
from gradir.util.pytree import tree_flatten
from gradir.viz import write_report

__all__ = ["GradTrace"]


@dataclass
class GradTrace:
    graph: Graph      # the traced function
    joint: Graph      # forward + backward, after cleanup
    partition: object  # gradir.passes.Partition
    policy: str = "engine"
    wrt: tuple[int, ...] | None = None  # flat positions of the inputs gradients are taken for
    plan: object = None  # gradir.passes.remat.plan.RematPlan the partition follows

    @property
    def forward(self) -> Graph:
        """Partitioned forward program: inputs -> outputs + residuals."""
        return self.partition.forward

    @property
    def backward(self) -> Graph:
        """Partitioned backward program: residuals + output cotangents -> gradients."""
        return self.partition.backward

    @property
    def residuals(self) -> list[Value]:
        """The joint graph's values saved by forward for backward."""
        return self.partition.residuals

    @functools.cached_property
    def saved_inputs(self) -> list[Value]:
        """Backward inputs holding activations (memory the backward frees after their last use)."""
        owner = owners(self.joint)
        return [x for x, r in zip(self.backward.inputs, self.residuals) if owner[r].op != "input"]

    @functools.cached_property
    def schedule(self):
        """The dependency-counted backward schedule under `policy`."""
        return dependency_schedule(self.backward, self.policy, owned_inputs=self.saved_inputs)

    @functools.cached_property
    def memory(self):
        """The memory plan of forward then backward (in the schedule's order)."""
        graph, order, phases = self.partition.stitch(self.schedule.order)
        return plan_memory(graph, order, phases)

    @functools.cached_property
    def saved(self):
        """The saved-tensor report: every residual, who made it, who reads it and why."""
        return saved_tensors(self.partition, self.schedule.order, wrt=self.wrt)

    @functools.cached_property
    def gradient_names(self) -> list[str] | None:
        """The backward program's outputs as the gradients they are, `d w1` for input `w1` (None where the
        outputs are not one gradient per differentiated input)."""
        wrt = self.wrt if self.wrt is not None else range(len(self.graph.inputs))
        names = [f"d {self.graph.inputs[i].attrs.get('name') or f'input {i}'}" for i in wrt]
        return names if len(names) == len(self.backward.outputs) else None

    def buckets(self, bucket_bytes: int):
        """Data-parallel gradient buckets of at most `bucket_bytes`, in the order this backward's schedule makes
        the gradients final, each with the step its all-reduce can start at (gradir.passes.buckets)."""
        return plan_buckets(self.backward, None, bucket_bytes, order=self.schedule.order, names=self.gradient_names)

    def _flat_args(self, args, op: str) -> list:
        """The arguments as the arrays the programs take: same structure, shapes and dtypes as the trace
        (torch tensors and gr.Tensors converted; Python scalars cast to a float input's dtype)."""
        a = prepare(None, args)
        inputs = self.graph.inputs[:len(self.graph.inputs) - len(self.graph.captures)]
        tree = getattr(self.graph, "in_tree", None)
        if len(a.flat) != len(inputs) or (tree is not None and a.in_tree != tree):
            raise ShapeError(f"arguments differ in structure from the trace (it took {len(inputs)} array(s): "
                             f"{', '.join(x.attrs.get('name') or '?' for x in inputs)}; got {len(a.flat)} in "
                             f"{a.in_tree})", op=op, source=user_source())
        raw, _ = tree_flatten(tuple(args))
        out = []
        for x, r, inp in zip(a.flat, raw, inputs):
            name = inp.attrs.get("name") or "argument"
            if tuple(np.shape(x)) != inp.shape:
                raise ShapeError(f"{name} has shape {tuple(np.shape(x))}, the trace {inp.type_str}", op=op,
                                 source=user_source())
            weak = isinstance(r, (int, float)) and not isinstance(r, bool) and dtypes.is_float(inp.dtype)
            if not weak and abstract_dtype(x) != inp.dtype:
                raise DTypeError(f"{name} has dtype {dtypes.short(abstract_dtype(x))}, the trace {inp.type_str}",
                                 op=op, source=user_source())
            out.append(np.asarray(x, dtype=inp.dtype))
        return out

    def run(self, *args, cotangent=1.0):
        """Run forward, then backward in the schedule's order, on the NumPy backend: (outputs, gradients)."""
        flat = self._flat_args(args, "run")
        k = self.partition.forward.num_forward_outputs
        fwd = compile_graph(self.forward)(*flat)
        cts = [np.full(o.shape, cotangent, o.dtype) for o in self.forward.outputs[:k]]
        grads = compile_graph(self.backward, order=self.schedule.order)(*fwd[k:], *cts)
        return list(fwd[:k]), list(grads)

    def measure(self, *args, cotangent=1.0):
        """Run the memory plan's timeline with a counting allocator (backends.measure_memory)."""
        flat = self._flat_args(args, "measure")
        cts = [np.full(o.shape, cotangent, o.dtype) for o in self.graph.outputs]
        graph, order, _ = self.partition.stitch(self.schedule.order)
        return measure_memory(graph, flat + cts, order)

    @functools.cached_property
    def kernels(self) -> dict:
        """The fused kernel programs the LLVM backend (the default) runs: {"forward": ..., "backward": ...}
        (gradir.passes.fusion.FusedProgram; the backward's kernels follow the schedule)."""
        return {"forward": fuse(self.forward, renders=LLVM_RENDERS),
                "backward": fuse(self.backward, self.schedule.order, renders=LLVM_RENDERS)}

    def render(self, path, progress=None):
        """Write diagrams (forward, backward, joint: .dot, and .svg via the `dot` program), the memory
        timeline plot and one self-contained HTML report, named after `path` ("out/loss" ->
        out/loss.html, ...). Returns {what: path} with `.notes` for the user."""
        path = Path(path)
        return write_report(self, path.parent, path.name, progress=progress)

    def with_policy(self, policy: str) -> GradTrace:
        """The same trace scheduled under another policy."""
        return GradTrace(self.graph, self.joint, self.partition, policy, self.wrt, self.plan)

    @functools.cached_property
    def remat(self):
        """The recompute plan's report: saved, recomputed, recompute cost, activation peak."""
        return evaluate(self.joint, self.plan or RematPlan("none", None), self.partition)

    def __str__(self) -> str:
        return f"{self.forward}\n\n{self.backward}"
