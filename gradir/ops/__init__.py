"""The op library: NumPy-named functions over traced values or arrays, each bound to primitives."""

from gradir.ops.creation import arange, full, ones, zeros
from gradir.ops.elementwise import (
    abs,
    add,
    cos,
    divide,
    equal,
    erf,
    exp,
    greater,
    greater_equal,
    imag,
    less,
    less_equal,
    log,
    logical_and,
    logical_not,
    logical_or,
    maximum,
    minimum,
    multiply,
    negative,
    not_equal,
    power,
    real,
    relu,
    remainder,
    rsqrt,
    sigmoid,
    sign,
    sin,
    sqrt,
    square,
    stop_gradient,
    subtract,
    tanh,
    where,
)
from gradir.ops.indexing import getitem, one_hot, take
from gradir.ops.lifting import astype
from gradir.ops.linalg import dot, matmul
from gradir.ops.reductions import argmax, argmin, logsumexp, max, mean, min, std, sum, var
from gradir.ops.shapes import (
    broadcast_to,
    concatenate,
    expand_dims,
    pad,
    reshape,
    split,
    squeeze,
    stack,
    swapaxes,
    transpose,
)
from gradir.ops.update import setitem  # noqa: F401 - x[idx] = v as a pure op; registers its primitives

__all__ = [
    "abs", "add", "arange", "argmax", "argmin", "astype", "broadcast_to", "concatenate", "cos", "divide", "dot",
    "equal", "erf", "exp", "expand_dims", "full", "getitem", "greater", "greater_equal", "imag", "less",
    "less_equal", "log", "logical_and", "logical_not", "logical_or", "logsumexp", "matmul", "max", "maximum", "mean",
    "min", "minimum", "multiply", "negative", "not_equal", "one_hot", "ones", "pad", "power", "real",
    "relu", "remainder", "reshape", "rsqrt", "sigmoid", "sign", "sin", "split", "sqrt", "square", "squeeze", "stack",
    "std", "stop_gradient", "subtract", "sum", "swapaxes", "take", "tanh", "transpose", "var", "where",
    "zeros",
]
