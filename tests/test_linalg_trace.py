"""gr.linalg.trace: numpy.linalg.trace's name for gr.linalg_trace (the top level's gr.trace is the tracer). It is
the same function object, not a copy; checked against torch.trace and torch.diagonal(...).sum(-1) in float64
with the shared oracle (value, VJP, JVP, LLVM against NumPy), and against np.linalg.trace by value."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_oracle import check_op

import gradir as gr


def normal(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def test_linalg_trace_is_the_same_op():
    assert gr.linalg.trace is gr.linalg_trace
    assert "trace" in gr.linalg.__all__


@pytest.mark.parametrize("shape", [(3, 3), (3, 4), (4, 2), (1, 1), (1, 5)], ids=str)
def test_linalg_trace_against_torch_trace(shape):
    x = normal(*shape)
    check_op(gr.linalg.trace, torch.trace, x)
    np.testing.assert_allclose(gr.linalg.trace(x), np.linalg.trace(x), rtol=1e-14)


@pytest.mark.parametrize("shape, offset", [((2, 3, 3), 0), ((2, 3, 4), 1), ((2, 4, 3), -2), ((1, 1, 1), 0)],
                         ids=str)
def test_linalg_trace_batched_and_offset(shape, offset):
    """A stack of matrices: the last two axes by default, as numpy.linalg.trace (torch.trace is 2-d only)."""
    x = normal(*shape, seed=1)
    check_op(lambda a: gr.linalg.trace(a, offset), lambda a: torch.diagonal(a, offset, -2, -1).sum(-1), x)
    np.testing.assert_allclose(gr.linalg.trace(x, offset), np.linalg.trace(x, offset=offset), rtol=1e-14)
