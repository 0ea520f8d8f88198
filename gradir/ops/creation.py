"""Constant arrays: zeros, ones, full, arange. Inside a trace, a filled array is a scalar constant
broadcast to its shape, so the IR text stays small and no memory is spent on it."""

from __future__ import annotations

import numpy as np

from gradir.core import dtypes
from gradir.core.trace import constant
from gradir.ops.shapes import broadcast_to

__all__ = ["arange", "full", "ones", "zeros"]


def full(shape, value, dtype=dtypes.float64):
    """An array of `shape` (an int or a tuple) filled with `value` (numpy.full): one constant, broadcast."""
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)
    return broadcast_to(constant(np.asarray(value, dtype=dtypes.as_dtype(dtype))), shape)


def zeros(shape, dtype=dtypes.float64):
    """An array of `shape` filled with 0 (numpy.zeros), float64 unless `dtype` says otherwise."""
    return full(shape, 0, dtype)


def ones(shape, dtype=dtypes.float64):
    """An array of `shape` filled with 1 (numpy.ones), float64 unless `dtype` says otherwise."""
    return full(shape, 1, dtype)


def arange(*args, dtype=None):
    """Evenly spaced values as numpy.arange([start,] stop[, step]) gives them, as a constant of the graph."""
    return constant(np.arange(*args, dtype=None if dtype is None else dtypes.as_dtype(dtype)))
