"""index_add (the embedding backward, a gather's adjoint) as a Triton kernel: atomic adds into a zeroed buffer.

Programs take the gradient's elements in blocks and add each at its row, `out[..., idx[j] mod size, ...] +=
g[..., j, ...]`, with `tl.atomic_add`: rows repeated in `idx` are summed in whatever order the programs
reach them (atomics, not a sorted segmented sum), so a float sum may differ from NumPy's in the last bits.
Float16 and bfloat16 sums are left to the NumPy reference (their atomics round differently).
"""

from __future__ import annotations

import math

from gradir.core import dtypes
from gradir.passes.aliasing import c_strides
from gradir.passes.fusion import FusedProgram

from ..loops import LoopPlan
from .codegen import ZERO, next_pow2, parameter_line, term_text


def scatter_source(program: FusedProgram, k, name: str, names: dict) -> tuple[str, tuple, list] | None:
    """index_add as a Triton kernel over g's elements: out[..., idx[j] mod size, ...] += g[..., j, ...]
    with atomic adds (the host zeroed `out`). None where atomics cannot do it (low-precision sums)."""
    n = k.nodes[0]
    if n.op != "index_add" or n.dtype in (dtypes.float16, dtypes.bfloat16, dtypes.bool_):
        return None
    g, idx = n.inputs
    axis, size = n.attrs["axis"], n.attrs["size"]
    G, I = program.access[g], program.access[idx]
    total = math.prod(g.shape)
    block = min(1024, next_pow2(max(total, 1)))
    plan = LoopPlan.flat(g.shape)  # one counter, i, over g's elements
    coords = [plan.coordinate(d) for d in range(g.ndim)]  # None: a size-1 axis, always at 0

    def linear(cs_, strides, offset=0):
        return " + ".join([f"{c} * {s}" if type(c) is str else term_text(c._replace(stride=s), "i")
                           for c, s in zip(cs_, strides) if s and c is not None] + [str(offset)])

    def load(ptr, coords_, acc, dt):  # a lane's element, or one element for every lane (a block all the same)
        at = linear(coords_, acc.strides, acc.offset)
        return f"tl.load({ptr} + {at} + i * 0, mask=live, other={ZERO[dt]})"
    out_strides = c_strides(n.shape, 1)
    oc = coords[:axis] + ["j"] + coords[axis + idx.ndim:]
    lines = [
        "@triton.jit",
        f"def {name}(p0, p1, p2, err):",
        f'    """index_add of {list(g.shape)} into {list(n.shape)} along axis {axis}: atomic adds',
        f'    {parameter_line(names, [G.owner, I.owner, program.access[n].owner])}"""',
        "    pid = tl.program_id(0)",
        f"    i = pid * {block} + tl.arange(0, {block})",
        f"    live = i < {total}",
        f"    j = {load('p1', coords[axis:axis + idx.ndim], I, idx.dtype)}.to(tl.int64)",
        f"    j = j % {size}",
        f"    j = tl.where(j < 0, j + {size}, j)",
        f"    x = {load('p0', coords, G, g.dtype)}",
        f"    tl.atomic_add(p2 + {linear(oc, out_strides)} + i * 0, x, mask=live)",
    ]
    return "\n".join(lines) + "\n", (-(-total // block),), [G.owner, I.owner, program.access[n].owner]


__all__ = ["scatter_source"]
