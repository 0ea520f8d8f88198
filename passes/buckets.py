"""Gradient buckets for data-parallel training, planned from the backward schedule.

In data-parallel training every rank all-reduces its gradients. Sending each gradient alone costs a
message per parameter; sending all of them after the backward leaves the network idle while it runs.
DDP's answer is buckets of about `bucket_cap_mb`, each all-reduced as soon as its last gradient is
final, overlapping communication with the rest of the backward. DDP must guess that order (reverse
parameter order, refined at run time); gradir knows it: the schedule says at which step each gradient's
producer runs, after which nothing writes it again.

`plan_buckets(graph, positions, bucket_bytes)` groups the gradient outputs of `graph` in the order they become
final: a bucket closes when the next gradient would take it past `bucket_bytes` (a gradient bigger than
that is a bucket of its own) or has another dtype (a bucket is one buffer), and launches at the step of
its last gradient. The report gives, per
bucket, its gradients, bytes, the launch step (the node that finishes it) and how many steps of the
program remain to overlap with its all-reduce.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gradir.core.ir import Graph, Value
from gradir.passes.report import Report, human_bytes, value_names
from gradir.passes.text_table import Column


@dataclass
class Bucket:
    """Gradients all-reduced together: output positions, in the order they become final."""
    index: int
    positions: list[int]
    names: list[str]
    nbytes: int
    dtype: object           # one buffer per bucket: its gradients share a dtype
    launch_step: int        # the step of the program after which every gradient of the bucket is final
    launch_node: str        # the node run at that step


@dataclass
class BucketPlan(Report):
    """Which gradients share an all-reduce, and at which step of the program each bucket can start
    (`plan_buckets`)."""
    graph_name: str
    bucket_bytes: int
    num_steps: int
    buckets: list[Bucket] = field(default_factory=list)

    noun = "buckets"

    @property
    def launch_steps(self) -> list[int]:
        return [b.launch_step for b in self.buckets]

    def to_dict(self) -> dict:
        return {"graph": self.graph_name, "bucket_bytes": self.bucket_bytes, "num_steps": self.num_steps,
                "buckets": [{"bucket": b.index, "positions": b.positions, "gradients": b.names, "bytes": b.nbytes,
                             "dtype": str(b.dtype), "launch_step": b.launch_step, "launch_node": b.launch_node}
                            for b in self.buckets]}

    def _title(self) -> str:
        total = sum(b.nbytes for b in self.buckets)
        return (f"gradient buckets of {self.graph_name}: {len(self.buckets)} bucket{'s' * (len(self.buckets) != 1)} of at most "
                f"{human_bytes(self.bucket_bytes)}, {human_bytes(total)} in all, over {self.num_steps} steps")

    def _columns(self) -> list[Column]:
        return [Column("bucket", right=True), Column("gradients", wrap=True, least=16), Column("bytes", right=True),
                Column("launch at step", right=True), Column("after node"), Column("steps left", right=True)]

    def _rows(self) -> list[tuple[str, ...]]:
        return [(str(b.index), ", ".join(b.names), human_bytes(b.nbytes), str(b.launch_step), b.launch_node,
                 str(self.num_steps - 1 - b.launch_step)) for b in self.buckets]

    def _notes(self) -> list[str]:
        return ["A bucket's all-reduce can start once the step in 'launch at step' has run; 'steps left' is the "
                "part of the program it can overlap with (0: it waits for the end, as all-reduce after backward does)."]


def plan_buckets(graph: Graph, positions: list[int] | None, bucket_bytes: int, order: list[Value] | None = None,
                 names: list[str] | None = None) -> BucketPlan:
    """Buckets for the gradient outputs of `graph` at output `positions` (None: all of them; `names` per
    position), in the order `order` (a schedule; default graph order) makes them final."""
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    order = list(graph.nodes) if order is None else order
    step_of = {n: k for k, n in enumerate(order)}
    value_name = value_names(graph)
    positions = list(range(len(graph.outputs))) if positions is None else list(positions)
    names = names or [value_name.get(graph.outputs[p], f"output {p}") for p in positions]

    def ready(p: int) -> int:  # an input or constant returned as it is: final before the first step
        return step_of.get(graph.outputs[p], -1)
    ranked = sorted(range(len(positions)), key=lambda j: (ready(positions[j]), positions[j]))
    plan = BucketPlan(graph.name, bucket_bytes, len(order))
    current: list[int] = []
    size = 0

    def close():
        last = positions[current[-1]]
        step = ready(last)
        plan.buckets.append(Bucket(len(plan.buckets), [positions[j] for j in current], [names[j] for j in current],
                                   size, graph.outputs[last].dtype, step,
                                   value_name.get(order[step], "") if step >= 0 else "(inputs)"))
    for j in ranked:
        out = graph.outputs[positions[j]]
        nbytes = out.nbytes
        if current and (size + nbytes > bucket_bytes or out.dtype != graph.outputs[positions[current[0]]].dtype):
            close()
            current, size = [], 0
        current.append(j)
        size += nbytes
    if current:
        close()
    return plan


__all__ = ["Bucket", "BucketPlan", "plan_buckets"]
