"""Random straight-line programs for property tests, runnable with gradir ops and with torch.

A program is a list of steps over a growing pool of values; each step applies one op from a menu
that has a gradir spelling and an independent torch spelling. The result is a scalar (the sum of
every value, so each one matters to the gradient).
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import strategies as st

import gradir as gr

SHAPES = [(), (3,), (2, 3), (2, 1), (1, 3), (4, 2, 3)]

UNARY = {
    "tanh": (gr.tanh, torch.tanh),
    "sin": (gr.sin, torch.sin),
    "sigmoid": (gr.sigmoid, torch.sigmoid),
    "exp_tanh": (lambda x: gr.exp(gr.tanh(x)), lambda x: torch.exp(torch.tanh(x))),
    "square": (lambda x: x * x, lambda x: x * x),
    "neg": (lambda x: -x, lambda x: -x),
    "softplus_log": (lambda x: gr.log(1.0 + x * x), lambda x: torch.log(1.0 + x * x)),
}
BINARY = {
    "add": (lambda x, y: x + y, lambda x, y: x + y),
    "sub": (lambda x, y: x - y, lambda x, y: x - y),
    "mul": (lambda x, y: x * y, lambda x, y: x * y),
    "safe_div": (lambda x, y: x / (1.5 + y * y), lambda x, y: x / (1.5 + y * y)),
    "maximum": (gr.maximum, torch.maximum),
}


def _sum_axis(axis, keepdims):
    return (lambda x: gr.sum(x, axis=axis, keepdims=keepdims),
            lambda x: torch.sum(x, dim=axis, keepdim=keepdims))


def _mean_axis(axis, keepdims):
    return (lambda x: gr.mean(x, axis=axis, keepdims=keepdims),
            lambda x: torch.mean(x, dim=axis, keepdim=keepdims))


@st.composite
def programs(draw, max_inputs=3, max_steps=8):
    """(input shapes, steps): a step is (kind, name, operand indices, extra)."""
    n_in = draw(st.integers(1, max_inputs))
    shapes = [draw(st.sampled_from(SHAPES)) for _ in range(n_in)]
    pool = list(shapes)
    steps = []
    for _ in range(draw(st.integers(1, max_steps))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "reduce", "matmul", "transpose"]))
        i = draw(st.integers(0, len(pool) - 1))
        if kind == "unary":
            steps.append(("unary", draw(st.sampled_from(sorted(UNARY))), (i,), None))
            pool.append(pool[i])
        elif kind == "binary":
            compatible = [j for j, s in enumerate(pool) if _broadcastable(pool[i], s)]
            j = draw(st.sampled_from(compatible))
            steps.append(("binary", draw(st.sampled_from(sorted(BINARY))), (i, j), None))
            pool.append(np.broadcast_shapes(pool[i], pool[j]))
        elif kind == "reduce" and pool[i]:
            axis = draw(st.integers(-len(pool[i]), len(pool[i]) - 1))
            keep = draw(st.booleans())
            name = draw(st.sampled_from(["sum", "mean"]))
            steps.append(("reduce", name, (i,), (axis, keep)))
            shape = list(pool[i])
            if keep:
                shape[axis] = 1
            else:
                del shape[axis]
            pool.append(tuple(shape))
        elif kind == "matmul" and len(pool[i]) == 2:
            compatible = [j for j, s in enumerate(pool) if len(s) >= 1 and s[0 if len(s) == 1 else -2] == pool[i][1]]
            if compatible:
                j = draw(st.sampled_from(compatible))
                steps.append(("matmul", "matmul", (i, j), None))
                pool.append(tuple(np.matmul(np.zeros(pool[i]), np.zeros(pool[j])).shape))
        elif kind == "transpose" and len(pool[i]) >= 2:
            steps.append(("transpose", "T", (i,), None))
            pool.append(tuple(reversed(pool[i])))
    return shapes, steps


def _broadcastable(a, b) -> bool:
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


def apply_step(step, pool: list, side: int) -> None:
    """Run one step of a program on `pool`, appending its result (side 0: gradir ops, 1: torch ops)."""
    kind, name, idx, extra = step
    args = [pool[i] for i in idx]
    if kind == "unary":
        pool.append(UNARY[name][side](*args))
    elif kind == "binary":
        pool.append(BINARY[name][side](*args))
    elif kind == "reduce":
        pool.append((_sum_axis if name == "sum" else _mean_axis)(*extra)[side](*args))
    elif kind == "matmul":
        pool.append(args[0] @ args[1])
    elif kind == "transpose":
        x = args[0]
        pool.append(x.T if side == 0 else x.permute(*reversed(range(x.ndim))))


def run(steps, inputs, backend: str):
    """Evaluate a program with gradir ops (backend='gr') or torch ops (backend='torch')."""
    side = 0 if backend == "gr" else 1
    pool = list(inputs)
    for step in steps:
        apply_step(step, pool, side)
    total = None
    for v in pool:
        s = gr.sum(v) if backend == "gr" else v.sum()
        total = s if total is None else total + s
    return total


def make_inputs(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in shapes]
