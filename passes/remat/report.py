"""What a recompute plan costs: `evaluate` applies a plan (partition, stitch) and measures what it saves,
what it recomputes and the activation peak of forward then backward, as a `RematReport`.
"""

from __future__ import annotations

from dataclasses import dataclass

from gradir.core.ir import Graph
from gradir.core.primitive import get_primitive
from gradir.passes.aliasing import owners
from gradir.passes.memory import plan_memory
from gradir.passes.partition import Partition, partition
from gradir.passes.remat.base import RematPlan, blocks
from gradir.passes.report import Report, human_bytes
from gradir.passes.text_table import Column


@dataclass
class RematReport(Report):
    """Per plan: what is saved, what is recomputed and what it costs, and the planned peak."""

    plan: RematPlan
    saved_count: int         # activations kept (not inputs/parameters)
    saved_bytes: int
    recomputed_ops: int
    recompute_flops: int
    blocks: int              # blocks the forward has
    blocks_recomputed: int   # blocks with at least one node computed again
    peak_bytes: int          # activation peak: forward + backward, the program's results not counted

    @property
    def block_calls(self) -> int:
        """Block forward calls: each block once in forward, plus once more if recomputed."""
        return self.blocks + self.blocks_recomputed

    def to_dict(self) -> dict:
        return {"policy": self.plan.policy, "options": self.plan.options, "optimal": self.plan.optimal,
                "note": self.plan.note, "saved_count": self.saved_count, "saved_bytes": self.saved_bytes,
                "recomputed_ops": self.recomputed_ops, "recompute_flops": self.recompute_flops,
                "blocks": self.blocks, "blocks_recomputed": self.blocks_recomputed, "block_calls": self.block_calls,
                "peak_bytes": self.peak_bytes}

    def _title(self) -> str:
        return "recompute plans"

    def _columns(self) -> list[Column]:
        return [Column("policy", wrap=True, least=8), Column("saved", right=True), Column("saved bytes", right=True),
                Column("recomputed ops", right=True), Column("recompute flops", right=True),
                Column("block calls", right=True), Column("activation peak", right=True),
                Column("note", wrap=True, least=12)]

    def _rows(self) -> list[tuple[str, ...]]:
        name = self.plan.policy + (" (proven optimal)" if self.plan.optimal else "")
        return [(name, str(self.saved_count), human_bytes(self.saved_bytes), str(self.recomputed_ops),
                 f"{self.recompute_flops:,}", str(self.block_calls), human_bytes(self.peak_bytes), self.plan.note)]

    def _notes(self) -> list[str]:
        return [ACTIVATION_PEAK]


ACTIVATION_PEAK = ("activation peak: forward + backward without the program's results (the loss, the gradients), "
                   "which every plan holds alike; the memory plan's peak counts them")


def evaluate(joint: Graph, plan: RematPlan, part: Partition | None = None) -> RematReport:
    """Apply `plan` and measure it: saved activations, recomputation, and the planned peak of
    forward then backward (engine order, passes.memory's accounting)."""
    part = part or partition(joint, saved=plan.saved)
    owner = owners(joint)
    acts = {owner[r] for r in part.residuals if owner[r].op != "input"}
    flops = sum(get_primitive(v.op).cost(v, v.inputs, v.attrs) for v in part.recomputed)
    bl = blocks(joint)
    recomputed = set(part.recomputed)
    blocks_recomputed = sum(1 for b in bl if any(v in recomputed for v in b))
    graph, order, phases = part.stitch()
    peak = plan_memory(graph, order, phases, count_outputs=False).peak_bytes
    return RematReport(plan, len(acts), sum(v.nbytes for v in acts), len(part.recomputed), flops, len(bl),
                       blocks_recomputed, peak)
