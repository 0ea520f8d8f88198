"""Compile options as one frozen object, and how a trace carries them to the gradients traced inside it.

`gr.compile(fn, backend=..., remat=..., memory_budget=..., check=..., policy=...)` keeps what it was asked
as a `CompileOptions`. Its recompute settings (`RematOptions`) apply to the gradients `fn` takes, which
`gr.compile` does not call itself: it traces `fn` with its options (`gradir.api.args.trace_args`), the graph
being traced carries them (`options_of`), a `gr.grad` called inside reads them from the graph it is traced
into and hands them to the traces it makes (so grad of grad inside compile follows the same plan). Nothing
travels through module globals: outside any gr.compile, a trace carries `NO_OPTIONS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gradir.backends import BACKENDS
from gradir.core.errors import GradirError, UnsupportedOpError
from gradir.core.ir import Graph
from gradir.core.trace import user_source
from gradir.passes.remat.plan import POLICIES as REMAT_POLICIES
from gradir.passes.schedule import POLICIES

__all__ = ["BACKENDS", "POLICIES", "REMAT_POLICIES", "CompileOptions", "RematOptions"]


@dataclass(frozen=True)
class RematOptions:
    """The recompute plan gradients follow: a `policy` of gradir.passes.remat.plan (none, uniform, selective,
    mincut, optimal), the `memory_budget` in bytes for optimal, and the policy's planner options as
    (name, value) pairs (e.g. (("segments", 6),) for uniform)."""

    policy: str = "none"
    memory_budget: int | None = None
    planner: tuple[tuple[str, Any], ...] = ()

    @property
    def plans(self) -> bool:
        """Whether gradients follow a recompute plan (else the joint graph is inlined as it is, unless
        gr.checkpoint regions ask for a partition)."""
        return self.policy != "none" or self.memory_budget is not None


@dataclass(frozen=True)
class CompileOptions:
    """What `gr.compile` was asked: the backend, the recompute plan of the gradients inside, whether the
    generated code checks shapes and dtypes, and the scheduling policy ("engine" or "memory")."""

    backend: str = "llvm"
    remat: RematOptions = field(default_factory=RematOptions)
    check: bool = False
    policy: str = "engine"

    @classmethod
    def make(cls, backend: str = "llvm", remat: str | None = None, memory_budget: int | None = None,
             check: bool = False, policy: str = "engine") -> CompileOptions:
        """`gr.compile`'s arguments checked (a clear error naming the choices) and gathered; a memory budget
        without a policy means the optimal plan within it."""
        if backend not in BACKENDS:
            raise UnsupportedOpError(f"backend {backend!r} is not available (have: {', '.join(BACKENDS)})",
                                     op="compile", source=user_source())
        if remat not in (None, *REMAT_POLICIES):
            raise GradirError(f"unknown recompute policy {remat!r} (have: {', '.join(REMAT_POLICIES)})", op="compile",
                              source=user_source())
        if policy not in POLICIES:
            raise GradirError(f"unknown scheduling policy {policy!r} (have: {', '.join(POLICIES)})", op="compile",
                              source=user_source())
        plan = RematOptions(remat or ("optimal" if memory_budget is not None else "none"), memory_budget)
        return cls(backend, plan, check, policy)


NO_OPTIONS = CompileOptions()
"""The options of a trace no gr.compile made (its gradients follow no recompute plan)."""


def options_of(graph: Graph | None) -> CompileOptions:
    """The compile options `graph` is being traced under (NO_OPTIONS for None: outside any trace)."""
    return (graph.compile_options if graph is not None else None) or NO_OPTIONS


def carry(graph: Graph, options: CompileOptions) -> None:
    """Make `graph`, being traced, carry `options` to the traces made inside it."""
    graph.compile_options = options
