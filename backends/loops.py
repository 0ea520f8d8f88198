"""The loop planner: how a fused loop kernel's domain becomes loop counters and addresses, for every renderer.

Fusion (passes.fusion) decides which nodes a loop kernel computes and over which *domain*; this module
decides how that domain is walked, once, so the LLVM and Triton renderers only spell the plan out
(DESIGN rule 7). A plan is a list of *loops*, each one counter running over some domain axes taken
together (outermost first); an axis's coordinate is ``(counter // div) % size`` of its loop's counter.

- Axes of size 1 belong to no loop: their coordinate is the constant 0 and they add nothing to any
  address. This is what keeps size-1 axes right by construction (after a pad, a concatenate, a slice
  gradient, a keepdims reduction): no renderer ever looks up a coordinate of its own for them.
- `LoopPlan.nest` (the LLVM renderer's nested loops): neighbouring axes that *every* memory access of
  the kernel walks contiguously share one loop, so a plain elementwise chain is one long vectorizable
  loop; a kernel that needs per-axis coordinates (pad, concatenate, update_slice) keeps one loop per axis.
- `LoopPlan.blocks` (the Triton renderer's program ids and lanes): one counter over the outer (row) axes,
  one over the inner axes; each access then merges the axes *it* walks contiguously into one term.

`terms(strides)` turns an access (element strides per domain axis) into `Term`s, the pieces of its
address: ``offset + sum((counter // div) % mod * stride)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

from gradir.core.errors import GradirError, LoweringError
from gradir.core.ir import Value
from gradir.passes.aliasing import c_strides
from gradir.passes.fusion import ARG_REDUCTIONS, PLACEMENTS, REDUCTIONS, FusedProgram, Kernel, in_kernel_value


class Loop(NamedTuple):
    """One counter over `axes` (domain axes, outermost first, none of size 1) taken together: `size` steps."""

    axes: tuple[int, ...]
    size: int
    outer: bool  # over the row (outer) axes of a row kernel


class Term(NamedTuple):
    """One piece of an address: ``(counter of loops[loop] // div) % mod * stride`` (mod None: no wrap)."""

    loop: int
    div: int
    mod: int | None
    stride: int


def mapped(strides, m, r: int) -> list[int]:
    """A value's strides (per its axes) as strides per domain axis, through its axis map `m`."""
    v = [0] * r
    for s, d in zip(strides, m):
        if d is not None:
            v[d] += s
    return v


class LoopPlan:
    """The loops of one loop kernel (see the module docstring)."""

    def __init__(self, domain: tuple[int, ...], loops: list[Loop]):
        self.domain = domain
        self.loops = loops
        self.place: dict[int, tuple[int, int, int | None]] = {}  # axis -> (loop, div, mod)
        for j, lp in enumerate(loops):
            for pos, d in enumerate(lp.axes):
                if lp.size == 0:  # an empty loop never runs: its coordinates need no division
                    self.place[d] = (j, 1, None)
                else:
                    self.place[d] = (j, math.prod(domain[e] for e in lp.axes[pos + 1:]), None if pos == 0 else domain[d])

    @classmethod
    def nest(cls, program: FusedProgram, k: Kernel) -> LoopPlan:
        """Nested loops: outer (row) axes, then inner axes, neighbours merged where every access allows."""
        r = len(k.domain)
        outer = k.outer if k.outer is not None else 0
        per_axis = any(n.op in PLACEMENTS for n in k.nodes)
        vectors = [] if per_axis else stride_vectors(program, k)
        loops = []
        for lo, hi in ((0, outer), (outer, r)):
            group: list[int] = []
            for d in (d for d in range(lo, hi) if k.domain[d] != 1):
                if group and not per_axis and all(v[group[-1]] == v[d] * k.domain[d] for v in vectors):
                    group.append(d)
                    continue
                if group:
                    loops.append(cls._loop(k.domain, group, lo == 0 and hi == outer))
                group = [d]
            if group:
                loops.append(cls._loop(k.domain, group, lo == 0 and hi == outer))
        return cls(k.domain, loops)

    @classmethod
    def blocks(cls, k: Kernel) -> LoopPlan:
        """One counter over the outer axes (a row kernel's program id), one over the inner axes (its lanes);
        a kernel without a row reduction has only the second."""
        outer = k.outer if k.outer is not None else 0
        sides = ((0, outer, True), (outer, len(k.domain), False))
        loops = [cls._loop(k.domain, [d for d in range(lo, hi) if k.domain[d] != 1], is_outer) for lo, hi, is_outer in sides]
        return cls(k.domain, [lp for lp in loops if lp.axes])

    @classmethod
    def flat(cls, shape: tuple[int, ...]) -> LoopPlan:
        """One counter over every element of `shape` (a scatter kernel walking its gradient's elements)."""
        return cls.blocks(Kernel(0, "loop", domain=tuple(shape)))

    @staticmethod
    def _loop(domain, axes, outer: bool) -> Loop:
        return Loop(tuple(axes), math.prod(domain[d] for d in axes), outer)

    def coordinate(self, d: int | None) -> Term | None:
        """Domain axis d's coordinate as a term of stride 1; None where it is always 0 (a size-1 axis)."""
        if d is None or d not in self.place:
            return None
        j, div, mod = self.place[d]
        return Term(j, div, mod, 1)

    def terms(self, strides: list[int], loops=None) -> list[Term]:
        """The address terms of an access with these element strides per domain axis (over `loops`, a
        collection of loop positions, default all); each run of axes the access walks contiguously is one term."""
        out = []
        for j, lp in enumerate(self.loops):
            if loops is not None and j not in loops:
                continue
            axes, pos = lp.axes, 0
            while pos < len(axes):
                if strides[axes[pos]] == 0:
                    pos += 1
                    continue
                end = pos
                while end + 1 < len(axes) and strides[axes[end]] == strides[axes[end + 1]] * self.domain[axes[end + 1]]:
                    end += 1
                div = math.prod(self.domain[d] for d in axes[end + 1:]) or 1  # (an empty loop never runs:
                mod = None if pos == 0 or not lp.size else math.prod(self.domain[d] for d in axes[pos:end + 1])  # no /0)
                out.append(Term(j, div, mod, strides[axes[end]]))
                pos = end + 1
        return out

    def splittable(self, program: FusedProgram, k: Kernel) -> int | None:
        """The outermost loop whose iterations threads may share without changing any result, or None.

        Every element is then computed by the same code in the same order, whichever thread runs it: a row
        kernel splits only an outer (row) loop, so each row's reductions stay whole; a reduction accumulating
        into memory must have its output vary along every axis of the split loop (threads write disjoint
        elements, each accumulated in its serial order); a reduction in registers outside a row kernel is
        never split."""
        if k.outer is None and any((n.op in REDUCTIONS or n.op in ARG_REDUCTIONS) and n not in k.accumulated
                                   for n in k.nodes):
            return None
        r = len(k.domain)
        outputs = [mapped(c_strides(n.shape, 1), k.maps[n], r) for n in k.nodes if n in k.accumulated]
        for j, lp in enumerate(self.loops):
            if k.outer is not None and not lp.outer:
                return None
            if all(v[d] for v in outputs for d in lp.axes):
                return j
        return None

    def moves(self, strides: list[int], outer: bool) -> bool:
        """Whether an access with these strides moves along the outer (True) or inner (False) loops."""
        return any(strides[d] for lp in self.loops if lp.outer == outer for d in lp.axes)

    def runs_along(self, axes_of_value, outer: bool) -> bool:
        """Whether a value with this axis map varies along the outer (True) or inner (False) loops."""
        return any(d is not None and d in self.place and self.loops[self.place[d][0]].outer == outer
                   for d in axes_of_value)


# -- what a loop kernel reads and writes (the accesses a plan must serve) --------------------------------

def buffer_reads(program: FusedProgram, k: Kernel, n: Value) -> list[tuple[Value, tuple]]:
    """(operand, axis map) for each operand node n of kernel k reads from memory."""
    if n in k.copies:
        pairs = [(k.copies[n], tuple(range(len(k.domain))))]
    elif n.op == "take":
        axis, idx = n.attrs["axis"], n.inputs[1]
        pairs = [(idx, k.maps[n][axis:axis + idx.ndim])]
    elif n.op in REDUCTIONS or n.op in ARG_REDUCTIONS:
        pairs = [(n.inputs[0], tuple(range(len(k.domain))))]
    else:
        pairs = [(u, k.maps[n]) for u in n.inputs]
    return [(u, um) for u, um in pairs if not is_literal(program, u) and in_kernel_value(k, u) is None]


def stored_earlier(k: Kernel, p: Value, pass_index: int) -> bool:
    """Whether inner value p was stored by a pass of the current row before `pass_index` (a later pass that
    needs it reads it back, from cache, rather than computing it again)."""
    return p in k.stored and p not in k.copies and p not in k.row_after and k.passes.get(p, 0) < pass_index


def is_literal(program: FusedProgram, u: Value) -> bool:
    """Whether u is a constant a renderer may write into the code (a 0-d constant, or a view of one, that no
    kernel reads from memory: fusion gives the ones loop kernels read an access, so LLVM kernels share code)."""
    return (u in program.immediates or u.op == "const" and not u.ndim) and u not in program.access


def stride_vectors(program: FusedProgram, k: Kernel) -> list[list[int]]:
    """Per memory access of loop kernel k, its element stride along each domain axis."""
    r = len(k.domain)
    stored = k.stored
    out = []
    for n in k.nodes:
        m = k.maps[n]
        if n in stored or n in k.accumulated:
            out.append(c_strides(k.domain, 1) if n in k.copies else mapped(c_strides(n.shape, 1), m, r))
        for u, um in buffer_reads(program, k, n):
            if u in program.access:
                out.append(mapped(program.access[u].strides, um, r))
        if n.op == "take":
            x, axis = n.inputs[0], n.attrs["axis"]
            acc = program.access[x]
            xs = list(acc.strides[:axis]) + [0] * n.inputs[1].ndim + list(acc.strides[axis + 1:])
            out.append(mapped(xs, m, r))
    if any(n.op in ARG_REDUCTIONS for n in k.nodes):
        out.append(list(c_strides(k.domain, 1)))
    return out


@contextmanager
def lowering(backend: str, k: Kernel, at: list | None = None) -> Iterator[None]:
    """Turn a renderer's own failure on kernel k into a LoweringError naming the op being lowered (`at[0]`
    where the renderer records it, else the kernel's first node) and its source line."""
    try:
        yield
    except GradirError:
        raise
    except Exception as e:
        n = at[0] if at else k.nodes[0]
        raise LoweringError(f"the {backend} backend failed on kernel {k.name} ({len(k.nodes)} nodes): "
                            f"{type(e).__name__}: {e}", op=n.op, source=n.source) from e


__all__ = ["Loop", "LoopPlan", "Term", "buffer_reads", "is_literal", "lowering", "mapped", "stored_earlier",
           "stride_vectors"]
