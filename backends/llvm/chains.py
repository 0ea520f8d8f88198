"""Chains: two neighbouring kernels that threads share run piece by piece, the second right after the first.

**Image chains.**
A convolution is an unfold (im2col) and a product reading its columns; its input gradient is a product and a
fold (col2im) of the result. Run one after the other, the first kernel writes every image's columns (18 MB
for a 16-channel 3x3 convolution of 32 images of 32x32) before the second reads the first image's back from
memory. Run as a chain, each image's columns (590 KB) are read by the second kernel right after the first wrote
them, from L2. The arithmetic is the same (both kernels' code runs unchanged on one image at a
time), so results do not change; `image_chains` says which neighbours may run so, codegen builds the chains.
Where nothing else touches the buffer between them, each thread's piece of images writes and reads its first
image's part of it over and over (`reused_per_image`): the columns never go to memory.

**Product epilogues.** A loop kernel right after a product that reads the product only element for element (an
activation, a residual add and the next LayerNorm) runs as the product's epilogue: each thread applies it to
its own piece of the product's rows (or images) right after computing them, while they are in its core's cache,
instead of after every thread's product, on pieces another core may have computed (`product_epilogues`).
"""

from __future__ import annotations

import math

import numpy as np

from gradir.core.ir import Value
from gradir.passes.aliasing import c_strides
from gradir.passes.fusion import LOOP, MATMUL, PLACEMENTS, WINDOW, FusedProgram, Kernel

from ..loops import LoopPlan, buffer_reads, mapped
from ..sharing import kernel_params
from .kernels import batch_strides, gemm_operands, split_of

PRODUCT_EPILOGUES = True  # (off: the epilogue kernels run on their own, for A/B runs)


def image_chains(program: FusedProgram, kernels: list[Kernel]) -> dict[int, tuple[int, bool]]:
    """Kernel index -> (the index of the kernel it runs image by image with, whether a kernel between them runs
    first): the next kernel in `kernels`, or the one after a kernel that may run before the first (or after the
    second) instead. Both are split by image over the same images; the second reads the first's output only at
    the image it computes, and writes nothing the first reads for a later image."""
    chains: dict[int, tuple[int, bool]] = {}
    taken: set[int] = set()
    for i, p in enumerate(kernels):
        if p.index in taken:
            continue
        for c in kernels[i + 1:i + 3]:
            between = kernels[i + 1:kernels.index(c, i + 1)]
            first = all(commute(program, m, p) for m in between)
            if c.index in taken or any(m.index in taken for m in between) or \
                    not (first or all(commute(program, m, c) for m in between)) or not chainable(program, p, c):
                continue
            chains[p.index] = (c.index, first)
            taken.update(x.index for x in [p, c, *between])
            break
    return chains


def chainable(program: FusedProgram, p: Kernel, c: Kernel) -> bool:
    """Whether c may run image by image after p (see image_chains)."""
    sp, sc = split_of(program, p), split_of(program, c)
    if sp is None or sc is None or not sp.where == sc.where == "batch" or sp.size != sc.size:
        return False
    written, reads, writes = writes_per_image(program, p), reads_per_image(program, c), writes_per_image(program, c)
    if written is None or reads is None or writes is None or overlap(program, writes[0], written[0]):
        return False
    owner, start, size = written
    if not any(o is owner for o, *_ in reads):
        return False
    for o, offset, shape, strides in reads:
        if overlap(program, o, owner):
            if o is not owner or shape is None or strides[0] != size:
                return False
            lo, hi = span(offset, shape, strides)
            if not start <= lo <= hi < start + size:
                return False
    # (c's image i must not overwrite what p reads for image i + 1: the memory planner keeps p's operands alive
    # through the kernel after p, so a neighbour's output is never placed on them)
    return not any(overlap(program, writes[0], o) for o, *_ in reads_per_image(program, p))


def product_epilogues(program: FusedProgram, kernels: list[Kernel], taken: set[int]) -> dict[int, tuple[int, int]]:
    """Product kernel index -> (the index of the loop kernel after it that runs as its epilogue, the iterations of
    that kernel's split loop per unit of the product's split: a row of C, or an image), for neighbours not in
    `taken` (image chains; the pairs found are added to it); none with PRODUCT_EPILOGUES off."""
    out = {}
    for p, c in zip(kernels, kernels[1:]) if PRODUCT_EPILOGUES else ():
        if p.kind == MATMUL and c.kind == LOOP and p.index not in taken and c.index not in taken:
            scale = epilogue_scale(program, p, c)
            if scale is not None:
                out[p.index] = (c.index, scale)
                taken.update((p.index, c.index))
    return out


def epilogue_scale(program: FusedProgram, p: Kernel, c: Kernel) -> int | None:
    """The iterations of loop kernel c's split loop per unit of product p's split, when c may run on each of p's
    pieces right after it (see the module docstring), else None: both are split, c's outermost loop walks C's
    elements in order a whole number of units at a time, c reads C only at the element it computes, gathers and
    places nothing, accumulates nothing into memory, and writes nothing p reads or writes."""
    sp, sc = split_of(program, p), split_of(program, c)
    if sp is None or sc is None or sc.where != 0 or p.transposed is not None or c.accumulated or \
            any(n.op == "take" or n.op in PLACEMENTS for n in c.nodes):
        return None
    out = p.epilogue if p.epilogue is not None else p.nodes[0]
    C = program.access[out]
    r = len(c.domain)
    identity = c_strides(c.domain, 1)
    if tuple(C.strides) != c_strides(out.shape, 1) or out.size != math.prod(c.domain) or \
            sp.where == "m" and out.size != sp.size * p.nodes[0].shape[-1]:  # (rows split within each batch element)
        return None
    axes = LoopPlan.nest(program, c).loops[0].axes
    inner = math.prod(c.domain[axes[-1] + 1:])
    if axes != tuple(d for d in range(axes[-1] + 1) if c.domain[d] != 1) or (out.size // sp.size) % inner:
        return None
    for n in c.nodes:
        for u, want in buffer_reads(program, c, n):
            acc = program.access[u]
            at_identity = acc.owner is C.owner and acc.offset == C.offset and all(
                s == i or size == 1 for s, i, size in zip(mapped(acc.strides, want, r), identity, c.domain))
            if overlap(program, acc.owner, C.owner) and not at_identity:
                return None
    touched = [program.access[v].owner for v in p.inputs] + [C.owner]
    if any(overlap(program, program.access[v].owner, o) for v in c.outputs for o in touched):
        return None
    return out.size // sp.size // inner


def commute(program: FusedProgram, m: Kernel, x: Kernel) -> bool:
    """Whether kernels m and x give the same results in either order: neither writes memory the other touches."""
    owners = lambda values: [program.access[v].owner for v in values]
    m_in, m_out, x_in, x_out = owners(m.inputs), owners(m.outputs), owners(x.inputs), owners(x.outputs)
    return not any(overlap(program, a, b) for a, b in
                   [(a, b) for a in m_out for b in x_in + x_out] + [(a, b) for a in m_in for b in x_out])


def reused_per_image(program: FusedProgram, p: Kernel, c: Kernel) -> tuple[int, int, int] | None:
    """For chained kernels p and c: (its parameter number in p, in c, bytes per image) of the buffer p writes and
    c reads image by image, when nothing else touches it and it shares memory with nothing else p or c touches;
    then a thread's piece of images can use the part of its first image over and over: one image's worth that
    stays in cache (the input gradient's columns, 18 MB for a 16-channel 3x3 convolution of 32 images, never go
    to memory). None otherwise (an unfold's columns, read again by the weight gradient)."""
    written = writes_per_image(program, p)
    if written is None:
        return None
    owner, _, size = written
    position = lambda k: next((i for i, o in enumerate(kernel_params(k, program)) if o is owner), None)
    if owner not in program.arena_offsets or position(c) is None or \
            any(overlap(program, o, owner) for o in kernel_params(p, program) + kernel_params(c, program)
                if o is not owner):
        return None
    if any(position(k) is not None for k in program.kernels if k is not p and k is not c):
        return None
    return position(p), position(c), size * owner.dtype.itemsize


def writes_per_image(program: FusedProgram, k: Kernel) -> tuple[Value, int, int] | None:
    """(owner, first element, elements per image) of what window or matmul kernel k writes: image i's part is
    [first + i * size, first + (i + 1) * size) of owner's buffer; None if k writes otherwise."""
    n = k.nodes[0]
    if k.kind == WINDOW:
        acc = program.access[n]
        if tuple(acc.strides) != c_strides(n.shape, 1):
            return None
        return acc.owner, acc.offset, math.prod(n.shape[1:])
    if k.kind == MATMUL and k.transposed is None:  # C: the product's elements in C order from C's offset
        _, ash, _, _, bsh, _ = gemm_operands(program, k)
        batch = np.broadcast_shapes(ash[:-2], bsh[:-2])
        acc = program.access[k.epilogue if k.epilogue is not None else n]
        return acc.owner, acc.offset, math.prod(batch[1:]) * ash[-2] * bsh[-1]
    return None


def reads_per_image(program: FusedProgram, k: Kernel) -> list[tuple] | None:
    """(owner, offset, shape, strides) of each operand kernel k reads, its first axis the image (shape None: read
    whole by every image); None for kernels other than window and matmul ones."""
    if k.kind == WINDOW:
        acc = program.access[k.nodes[0].inputs[0]]
        return [(acc.owner, acc.offset, k.nodes[0].inputs[0].shape, acc.strides)]
    if k.kind == MATMUL:
        A, ash, ast, B, bsh, bst = gemm_operands(program, k)
        batch = tuple(np.broadcast_shapes(ash[:-2], bsh[:-2]))
        reads = [(acc.owner, acc.offset, batch + tuple(sh[-2:]), tuple(batch_strides(batch, sh, st)) + tuple(st[-2:]))
                 for acc, sh, st in ((A, ash, ast), (B, bsh, bst))]
        if k.bias is not None and k.bias in program.access:
            reads.append((program.access[k.bias].owner, 0, None, None))
        return reads
    return None


def span(offset: int, shape, strides) -> tuple[int, int]:
    """The lowest and highest element an index of axis 0 reads, for index 0 (others: + index * strides[0])."""
    rest = [(n - 1) * s for n, s in zip(shape[1:], strides[1:])]
    return offset + sum(min(0, r) for r in rest), offset + sum(max(0, r) for r in rest)


def overlap(program: FusedProgram, a: Value, b: Value) -> bool:
    """Whether owners a and b may share memory: the same buffer, or overlapping places in the arena."""
    if a is b:
        return True
    at, bt = program.arena_offsets.get(a), program.arena_offsets.get(b)
    return at is not None and bt is not None and at < bt + b.nbytes and bt < at + a.nbytes


__all__ = ["image_chains", "product_epilogues", "reused_per_image"]
