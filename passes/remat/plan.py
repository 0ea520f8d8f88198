"""Recompute planning (activation checkpointing): which forward values the backward keeps, and
which it computes again from them. A plan is a choice of the forward/backward partition: the set
of forward values saved. Everything here returns a `RematPlan`; `partition(joint, saved=plan.saved)`
turns it into the forward and backward programs that run.

Policies:
- ``none``: save every forward value the backward reads.
- ``uniform``: cut the forward into segments of consecutive blocks (a block is a top-level
  `gr.scope`, else an equal share of the forward nodes), `segments` of them (default sqrt(#blocks)),
  keep only what crosses into each segment, recompute the inside. The last segment is not
  recomputed (its values are needed first), as in torch.utils.checkpoint.checkpoint_sequential.
- ``selective``: keep the results of costly ops (matmul by default), recompute the cheap rest.
- ``mincut`` and ``optimal``: see gradir.passes.remat.mincut and gradir.passes.remat.milp.

Regions marked with `gr.checkpoint` are recomputed under every policy: only values leaving the
region can be kept.

Peaks and budgets here are *activation* peaks: the memory plan of forward then backward without
the program's results (the loss and the gradients), which every plan holds alike, as it holds the
inputs and parameters.

This module is the dispatcher, `plan_remat`, and the place the plan's names are read from: the plan
and the simple policies live in base.py, what a plan costs (`evaluate`) in report.py, the solvers in
mincut.py and milp.py; each of those imports base.py (and report.py), never this module.
"""

from __future__ import annotations

import inspect

from gradir.core.errors import GradirError
from gradir.core.ir import Graph
from gradir.core.trace import user_source
from gradir.passes.remat.base import (
    CHECKPOINT,
    RematPlan,
    block_of,
    blocks,
    candidates,
    in_checkpoint,
    plan_none,
    plan_selective,
    plan_uniform,
)
from gradir.passes.remat.milp import plan_optimal
from gradir.passes.remat.mincut import plan_mincut
from gradir.passes.remat.report import ACTIVATION_PEAK, RematReport, evaluate

POLICIES = ("none", "uniform", "selective", "mincut", "optimal")


def plan_remat(joint: Graph, policy: str | None = "none", memory_budget: int | None = None, **options) -> RematPlan:
    """A recompute plan for `joint` under `policy` (see the module docstring)."""
    policy = policy or "none"
    if policy not in POLICIES:
        raise GradirError(f"unknown recompute policy {policy!r} (have: {', '.join(POLICIES)})", op="remat",
                          source=user_source())
    planner = {"none": plan_none, "uniform": plan_uniform, "selective": plan_selective, "mincut": plan_mincut,
               "optimal": plan_optimal}[policy]
    accepted = [p for p in list(inspect.signature(planner).parameters)[1:] if p != "memory_budget"]
    unknown = sorted(set(options) - set(accepted))
    if unknown:  # a clear error instead of the planner's bare TypeError
        raise GradirError(f"unknown option(s) {', '.join(unknown)} for recompute policy {policy!r} "
                          f"(accepted: {', '.join(accepted) or 'none'})", op="remat", source=user_source())
    if policy == "optimal":
        return plan_optimal(joint, memory_budget=memory_budget, **options)
    return planner(joint, **options)


__all__ = ["ACTIVATION_PEAK", "CHECKPOINT", "POLICIES", "RematPlan", "RematReport", "block_of", "blocks", "candidates",
           "evaluate", "in_checkpoint", "plan_mincut", "plan_none", "plan_optimal", "plan_remat", "plan_selective",
           "plan_uniform"]
