"""The op library: NumPy-named functions over traced values or arrays, each bound to primitives, and `gr.nn`.

Layer rule: imports gradir.util, gradir.core and itself. Inside: lifting, shapes, elementwise, reductions,
creation, indexing, linalg, update, conv, methods, nn (each imports only modules before it)."""

from gradir.ops import methods, nn  # noqa: F401 - gr.nn
from gradir.ops.creation import arange, full, ones, zeros
from gradir.ops.elementwise import (
    abs,
    add,
    ceil,
    clamp,
    clip,
    cos,
    divide,
    equal,
    erf,
    exp,
    expm1,
    floor,
    greater,
    greater_equal,
    imag,
    isfinite,
    less,
    less_equal,
    log,
    log1p,
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
    round,
    rsqrt,
    sigmoid,
    sign,
    sin,
    sqrt,
    square,
    stop_gradient,
    subtract,
    tan,
    tanh,
    where,
)
from gradir.ops.indexing import (
    argsort,
    gather,
    getitem,
    masked_fill,
    one_hot,
    repeat,
    scatter,
    scatter_add,
    sort,
    take,
    topk,
    tril,
    triu,
)
from gradir.ops.lifting import astype
from gradir.ops.linalg import dot, einsum, matmul
from gradir.ops.reductions import argmax, argmin, cumsum, logsumexp, max, mean, min, norm, prod, std, sum, var
from gradir.ops.shapes import (
    broadcast_to,
    concatenate,
    expand_dims,
    outer,
    pad,
    reshape,
    roll,
    split,
    squeeze,
    stack,
    swapaxes,
    tile,
    transpose,
)
from gradir.ops.update import setitem  # noqa: F401 - x[idx] = v as a pure op; registers its primitives

methods.attach()  # Value's operators and NumPy-like methods

__all__ = [
    "abs", "add", "arange", "argmax", "argmin", "astype", "broadcast_to", "concatenate", "cos", "divide", "dot",
    "equal", "erf", "exp", "expand_dims", "full", "getitem", "greater", "greater_equal", "imag", "isfinite", "less",
    "less_equal", "log", "logical_and", "logical_not", "logical_or", "logsumexp", "matmul", "max", "maximum", "mean",
    "min", "minimum", "multiply", "negative", "not_equal", "one_hot", "ones", "pad", "power", "real",
    "relu", "remainder", "reshape", "rsqrt", "sigmoid", "sign", "sin", "split", "sqrt", "square", "squeeze", "stack",
    "std", "stop_gradient", "subtract", "sum", "swapaxes", "take", "tanh", "transpose", "var", "where",
    "zeros",
    # issue 10: the op library PyTorch models need
    "argsort", "ceil", "clamp", "clip", "cumsum", "einsum", "expm1", "floor", "gather", "log1p", "masked_fill", "norm",
    "outer", "prod", "repeat", "roll", "round", "scatter", "scatter_add", "sort", "tan", "tile", "topk", "tril", "triu",
]
