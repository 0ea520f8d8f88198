"""Graph -> graph transforms and graph -> report analyses.

A pipeline is a list of (name, pass) pairs; `run_pipeline` applies them in order, verifies after
each one, and can record the graph after every step for printing.

Layer rule (gradir.passes): imports gradir.util, gradir.core, gradir.ops and passes below it, at the top of
the module; never gradir.backends, gradir.viz or anything above them, and never the face `gradir`. The only
lazy import is scipy's solver (passes/remat/model.py).
"""

from __future__ import annotations

import os

from gradir.core.ir import Graph
from gradir.passes.autodiff import joint_graph, needs_grad
from gradir.passes.cleanup import cleanup, cse, dce, simplify
from gradir.passes.forward_mode import jvp_graph
from gradir.passes.lower import lower_composites
from gradir.passes.partition import Partition, partition
from gradir.util.gcpause import gc_paused

DEFAULT_CLEANUP = [("lower_composites", lower_composites), ("simplify", simplify), ("cse", cse), ("dce", dce)]

VERIFY = os.environ.get("GRADIR_VERIFY", "") not in ("", "0")
"""Verify the graph after every pass (GRADIR_VERIFY=1; the test suite turns it on). Off by default: on a
100k-node graph it would cost about as much as the passes themselves."""


@gc_paused
def run_pipeline(graph: Graph, pipeline=None, verify: bool | None = None, record: list | None = None) -> Graph:
    """Apply `pipeline` (default: lower composites, simplify, cse, dce), verifying after each pass when
    `verify` (default: VERIFY). If `record` is a list, (pass name, graph) pairs are appended to it."""
    verify = VERIFY if verify is None else verify
    for name, p in pipeline or DEFAULT_CLEANUP:
        graph = p(graph)
        if verify:
            graph.verify()
        if record is not None:
            record.append((name, graph))
    return graph


def autodiff_pipeline(graph: Graph, wrt: list[int] | None = None) -> list[tuple[str, Graph]]:
    """Every step from a traced function to the cleaned joint forward+backward graph, as (name,
    graph) pairs: the trace, autodiff's joint graph, then the graph after each cleanup pass."""
    steps = [("trace", graph), ("autodiff", joint_graph(graph, wrt).verify())]
    run_pipeline(steps[-1][1], record=steps)
    return steps


__all__ = ["Partition", "autodiff_pipeline", "cleanup", "cse", "dce", "joint_graph", "jvp_graph", "lower_composites",
           "needs_grad", "partition", "run_pipeline", "simplify"]
