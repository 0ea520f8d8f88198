"""Matmul kernels for the Triton backend: a `tl.dot` kernel with the bias epilogue fused, or torch.matmul.

The rule (`choose`): a product whose output has at most `TL_DOT_MAX_OUTPUT` elements, in float32, float16
or bfloat16, runs as the generated `tl.dot` kernel: it is then bound by launches and passes over memory,
and the kernel adds the bias while the tile is in registers instead of in a second pass. Bigger products
and float64 go to torch.matmul (cuBLAS on a GPU), whose tuned kernels win there. GRADIR_TRITON_MATMUL=triton
or =torch forces one side (benchmarks/gpu_check.sh measures both; the threshold is the number to tune).

The kernel: a 3-d grid (row tiles, column tiles, batch elements), BM x BN output tiles accumulated in
float32 over BK-wide slices of K, float32 products in IEEE precision (not TF32, so
results match the NumPy reference), stored in the output's dtype; operand transposes and broadcast
batch axes are strides.
"""

from __future__ import annotations

import math
import os

import numpy as np

from gradir.core import dtypes
from gradir.passes.aliasing import c_strides
from gradir.passes.fusion import FusedProgram, Kernel

from ..loops import LoopPlan
from .codegen import STORAGE, interpreting, next_pow2, parameter_line, term_text

TL_DOT_MAX_OUTPUT = 1 << 16
TL_DOT_DTYPES = (dtypes.float32, dtypes.float16, dtypes.bfloat16)


def choose(program: FusedProgram, k: Kernel) -> str:
    """'triton' (the tl.dot kernel) or 'torch' (torch.matmul) for matmul kernel k, by the rule above."""
    forced = os.environ.get("GRADIR_TRITON_MATMUL", "auto")
    n = k.nodes[0]
    renderable = n.dtype in TL_DOT_DTYPES and all(u.ndim >= 2 and u in program.access for u in n.inputs)
    if forced == "torch" or not renderable:
        return "torch"
    if forced == "triton":
        return "triton"
    return "triton" if max(n.size, 1) <= TL_DOT_MAX_OUTPUT else "torch"


def _block(size: int, most: int) -> int:
    return max(16, min(most, next_pow2(max(size, 1))))


def gemm_source(program: FusedProgram, k: Kernel, name: str, names: dict) -> tuple[str, tuple, list]:
    """(source, grid, buffer owners) of the tl.dot kernel for matmul kernel k (see the module docstring)."""
    n = k.nodes[0]
    a, b = n.inputs
    A, B = program.access[a], program.access[b]
    (ash, ast), (bsh, bst) = (a.shape, A.strides), (b.shape, B.strides)  # both at least 2-d (`choose`)
    M, K = ash[-2:]
    N = bsh[-1]
    batch = tuple(np.broadcast_shapes(ash[:-2], bsh[:-2]))
    nb = len(batch)

    def batch_strides(shape, strides):
        lead = nb - (len(shape) - 2)
        return [0] * lead + [0 if sh == 1 and bb != 1 else st for sh, st, bb in zip(shape[:-2], strides[:-2], batch[lead:])]
    out = k.transposed if k.transposed is not None else (k.epilogue if k.epilogue is not None else n)
    C = program.access[out]
    c_mat = (1, M) if k.transposed is not None else (N, 1)  # (A @ B)^T written in place: rows and columns swap
    c_batch = list(c_strides(batch + (M, N), 1))[:nb]
    total = math.prod(batch)  # 0 for an empty batch: no program is launched (an empty grid)
    batch_plan = LoopPlan.flat(batch)  # the batch element's coordinates, read off the program id `bid`

    def offset(strides, base):
        return " + ".join([term_text(t, "bid") for t in batch_plan.terms(strides)] + [str(base)])
    BM, BN, BK = _block(M, 64), _block(N, 64), _block(K, 32)
    precision = ', input_precision="ieee"' if n.dtype == dtypes.float32 else ""
    # Triton's CPU interpreter multiplies bfloat16 tiles wrongly: there, widen them first (the products of
    # bfloat16 values are exact in float32, so the result is the same)
    widen = n.dtype == dtypes.bfloat16 and interpreting()
    params = [A.owner, B.owner, C.owner]
    lines = [
        "@triton.jit",
        f"def {name}(p0, p1, p2{', p3' if k.epilogue is not None else ''}, err):",
        f'    """C[{M}x{N}] = A[{M}x{K}] @ B[{K}x{N}]{" + bias" if k.epilogue is not None else ""}'
        f'{f" for {total} batch elements" if nb else ""}: tl.dot on {BM}x{BN} tiles, K in slices of {BK}',
        "    pid_m = tl.program_id(0)",
        "    pid_n = tl.program_id(1)",
        "    bid = tl.program_id(2)",
        f"    rm = pid_m * {BM} + tl.arange(0, {BM})",
        f"    rn = pid_n * {BN} + tl.arange(0, {BN})",
        f"    rk = tl.arange(0, {BK})",
        f"    pa = p0 + {offset(batch_strides(ash, ast), A.offset)} + rm[:, None] * {ast[-2]}",
        f"    pb = p1 + {offset(batch_strides(bsh, bst), B.offset)} + rn[None, :] * {bst[-1]}",
        f"    acc = tl.zeros([{BM}, {BN}], tl.float32)",
        f"    for k0 in range(0, {K}, {BK}):",
        "        kk = k0 + rk",
        f"        a = tl.load(pa + kk[None, :] * {ast[-1]}, mask=(rm[:, None] < {M}) & (kk[None, :] < {K}), other=0.0)",
        f"        b = tl.load(pb + kk[:, None] * {bst[-2]}, mask=(kk[:, None] < {K}) & (rn[None, :] < {N}), other=0.0)",
        f"        acc += tl.dot(a, b{precision})" if not widen else "        acc += tl.dot(a.to(tl.float32), b.to(tl.float32))",
        f"    inside = (rm[:, None] < {M}) & (rn[None, :] < {N})",
    ]
    if k.epilogue is not None:
        # the bias's strides are over the epilogue's shape, which may be a reshape of the product's: its
        # coordinates come from each element's position in the (contiguous) output
        out_shape, Bi = k.epilogue.shape, program.access[k.bias]
        flat = f"({offset(c_batch, 0)} + rm[:, None] * {N} + rn[None, :])"
        at = " + ".join([term_text(t, flat) for t in LoopPlan.flat(out_shape).terms(list(Bi.strides))] + [str(Bi.offset)])
        # (+ a zero tile: a pointer per element even where the bias is one value, as the mask is a tile)
        lines.append(f"    acc += tl.load(p3 + {at} + (rm[:, None] + rn[None, :]) * 0, mask=inside, other=0.0).to(tl.float32)")
        params.append(Bi.owner)
    lines.insert(3, f'    {parameter_line(names, params)}"""')
    value = f"acc.to({STORAGE[n.dtype]})" if n.dtype in STORAGE else "acc"
    lines.append(f"    tl.store(p2 + {offset(c_batch, C.offset)} + rm[:, None] * {c_mat[0]} + rn[None, :] * {c_mat[1]}, "
                 f"{value}, mask=inside)")
    grid = (-(-M // BM), -(-N // BN), total)
    return "\n".join(lines) + "\n", grid, params


__all__ = ["TL_DOT_MAX_OUTPUT", "choose", "gemm_source"]
