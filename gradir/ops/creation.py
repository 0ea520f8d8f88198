"""Constant arrays: zeros, ones, full, arange. Inside a trace, a filled array is a scalar constant
broadcast to its shape, so the IR text stays small and no memory is spent on it."""

from __future__ import annotations

import numpy as np

from gradir.core import dtypes
from gradir.core.trace import constant
from gradir.ops.shapes import broadcast_to

__all__ = ["arange", "full", "ones", "zeros"]


def full(shape, value, dtype=dtypes.float64):
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)
    return broadcast_to(constant(np.asarray(value, dtype=dtypes.as_dtype(dtype))), shape)


def zeros(shape, dtype=dtypes.float64):
    return full(shape, 0, dtype)


def ones(shape, dtype=dtypes.float64):
    return full(shape, 1, dtype)


def arange(*args, dtype=None):
    return constant(np.arange(*args, dtype=None if dtype is None else dtypes.as_dtype(dtype)))
