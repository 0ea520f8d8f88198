"""The one ATen -> gradir op table (DESIGN rule 8): ATen op name -> a small function over gradir ops.

Keys are ATen names without the namespace: an overload (``"div.Tensor_mode"``) when it differs from
its siblings, else the overload packet (``"add"`` covers add.Tensor and add.Scalar). Each function
takes the node's arguments with FX nodes replaced by gradir values (NumPy arrays when evaluated
eagerly, traced Values inside a trace) and returns a value, a list, or a `Multi` for ATen ops that
return several tensors (native_layer_norm's out, mean, rstd) of which the graph may use only some.

torch is not imported here: dtypes arrive as torch dtype objects and are read by name.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from gradir import ops
from gradir.core import dtypes
from gradir.core.errors import UnsupportedOpError
from gradir.core.trace import user_source
from gradir.ops import nn as gnn


class Multi:
    """Several results computed on demand: entry i is `thunks[i]()`, evaluated (once) when the graph
    reads it, so an unused mean/rstd of native_layer_norm records no nodes."""

    def __init__(self, *thunks):
        self.thunks, self.done = thunks, {}

    def __getitem__(self, i):
        if i not in self.done:
            self.done[i] = self.thunks[i]()
        return self.done[i]


class NeedsSeed:
    """Marker base for table entries that draw random numbers: the interpreter passes `rng=`."""


# -- helpers --------------------------------------------------------------------------------------

_TORCH_DTYPES = {"float64": "float64", "double": "float64", "float32": "float32", "float": "float32",
                 "float16": "float16", "half": "float16", "bfloat16": "bfloat16", "int64": "int64", "long": "int64",
                 "int32": "int32", "int": "int32", "bool": "bool", "complex128": "complex128", "cdouble": "complex128"}


def np_dtype(d):
    """A torch dtype (or None) as the gradir/NumPy dtype of the same name."""
    if d is None:
        return None
    name = str(d).replace("torch.", "")
    if name not in _TORCH_DTYPES:
        raise UnsupportedOpError(f"torch dtype {d} has no gradir dtype", op="dtype", source=user_source())
    return dtypes.as_dtype(_TORCH_DTYPES[name])


def _ndim(x):
    return np.ndim(x)


def _shape(x):
    return tuple(np.shape(x))


def _axes(dim, ndim):
    """A torch `dim` argument (int, list, None or [] meaning all axes) as a gradir axis argument."""
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return None
    return tuple(d % ndim if ndim else 0 for d in dim) if isinstance(dim, (list, tuple)) else dim % max(ndim, 1)


def _cast(x, dtype):
    return x if dtype is None else ops.astype(x, np_dtype(dtype))


def _unsupported(op, why):
    raise UnsupportedOpError(why, op=f"aten.{op}", source=user_source())


# -- elementwise ----------------------------------------------------------------------------------


def _add(x, y, alpha=1):
    return ops.add(x, y if alpha == 1 else ops.multiply(y, alpha))


def _sub(x, y, alpha=1):
    return ops.subtract(x, y if alpha == 1 else ops.multiply(y, alpha))


def _rsub(x, y, alpha=1):
    return _sub(y, x, alpha)


def _div_mode(x, y, rounding_mode=None):
    if rounding_mode is None:
        return ops.divide(x, y)
    q = ops.divide(x, y)
    return ops.floor(q) if rounding_mode == "floor" else _trunc(q)


def _clamp(x, min=None, max=None):  # noqa: A002 - torch's argument names
    return ops.clip(x, min, max)


def _where(c, x, y):
    return ops.where(c, x, y)


def _pow(x, y):
    return ops.power(x, y)


def _elu(x, alpha=1.0, scale=1.0, input_scale=1.0):
    if scale == 1 and input_scale == 1:
        return gnn.elu(x, alpha)
    pos = ops.greater(x, 0)
    # selu/celu's scaled forms; expm1 sees 0 where x > 0, so the unselected branch cannot overflow to inf
    # (whose zero cotangent would make the gradient nan), as in gnn.elu
    neg = ops.multiply(ops.expm1(ops.multiply(ops.where(pos, 0.0, x), input_scale)), alpha)
    return ops.multiply(ops.where(pos, x, neg), scale)


def _fmod(x, y):
    """C's fmod (sign of x) from NumPy's remainder (sign of y): exact, no division rounding."""
    r = ops.remainder(x, y)
    wrong_sign = ops.logical_and(ops.not_equal(r, 0), ops.not_equal(ops.less(r, 0), ops.less(x, 0)))
    return ops.where(wrong_sign, ops.subtract(r, y), r)


def _trunc(x):
    return ops.where(ops.less(x, 0), ops.ceil(x), ops.floor(x))


ELEMENTWISE = {
    "add": _add, "sub": _sub, "rsub": _rsub, "mul": ops.multiply, "div.Tensor": ops.divide, "div.Scalar": ops.divide,
    "div.Tensor_mode": _div_mode, "div.Scalar_mode": _div_mode, "true_divide": ops.divide,
    "neg": ops.negative, "exp": ops.exp, "log": ops.log, "tanh": ops.tanh, "sin": ops.sin, "cos": ops.cos,
    "sqrt": ops.sqrt, "rsqrt": ops.rsqrt, "abs": ops.abs, "sign": ops.sign, "erf": ops.erf, "sigmoid": ops.sigmoid,
    "relu": ops.relu, "reciprocal": lambda x: ops.divide(1.0, x), "square": ops.square,
    "pow": _pow, "maximum": ops.maximum, "minimum": ops.minimum, "remainder": ops.remainder, "fmod": _fmod,
    "clamp": _clamp, "clamp_min": lambda x, m: ops.clip(x, m, None),
    "clamp_max": lambda x, m: ops.clip(x, None, m),  # clip, not maximum/minimum: those split ties, torch's clamp does not
    "hardtanh": lambda x, lo=-1.0, hi=1.0: gnn.hardtanh(x, lo, hi), "where": _where,
    "eq": ops.equal, "ne": ops.not_equal, "lt": ops.less, "le": ops.less_equal, "gt": ops.greater, "ge": ops.greater_equal,
    "logical_and": ops.logical_and, "logical_or": ops.logical_or, "logical_not": ops.logical_not,
    "bitwise_not": ops.logical_not, "bitwise_and": ops.logical_and, "bitwise_or": ops.logical_or,
    "isnan": lambda x: ops.not_equal(x, x), "isinf": lambda x: ops.equal(ops.abs(x), math.inf),
    "gelu": lambda x, approximate="none": gnn.gelu(x, approximate),
    "silu": gnn.silu, "softplus": gnn.softplus, "leaky_relu": gnn.leaky_relu, "elu": _elu,
    "selu": lambda x: _elu(x, 1.6732632423543772848170429916717, 1.0507009873554804934193349852946),
    "celu": lambda x, alpha=1.0: _elu(x, alpha, 1.0, 1.0 / alpha),
    "log1p": ops.log1p, "expm1": ops.expm1, "tan": ops.tan, "floor": ops.floor, "ceil": ops.ceil, "trunc": _trunc,
    "round": lambda x, decimals=0: ops.round(x, decimals),
    "log2": lambda x: ops.divide(ops.log(x), math.log(2.0)), "log10": lambda x: ops.divide(ops.log(x), math.log(10.0)),
    "exp2": lambda x: ops.power(2.0, x),
}


# -- reductions -----------------------------------------------------------------------------------


def _sum(x, dim=None, keepdim=False, dtype=None):
    x = _cast(x, dtype)
    if dtypes.as_dtype(x.dtype) == dtypes.bool_:  # torch sums booleans as int64
        x = ops.astype(x, dtypes.int64)
    return ops.sum(x, _axes(dim, _ndim(x)), keepdims=keepdim)


def _mean(x, dim=None, keepdim=False, dtype=None):
    return ops.mean(_cast(x, dtype), _axes(dim, _ndim(x)), keepdims=keepdim)


def _amax(x, dim=(), keepdim=False):
    return ops.max(x, _axes(dim, _ndim(x)), keepdims=keepdim)


def _amin(x, dim=(), keepdim=False):
    return ops.min(x, _axes(dim, _ndim(x)), keepdims=keepdim)


def _max_dim(x, dim, keepdim=False):
    return Multi(lambda: _amax(x, [dim], keepdim), lambda: ops.argmax(x, dim % _ndim(x), keepdims=keepdim))


def _min_dim(x, dim, keepdim=False):
    return Multi(lambda: _amin(x, [dim], keepdim), lambda: ops.argmin(x, dim % _ndim(x), keepdims=keepdim))


def _ddof(correction, unbiased=None):
    if correction is not None:
        return correction
    return 1 if unbiased is None or unbiased else 0


def _var(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return ops.var(x, _axes(dim, _ndim(x)), keepdims=keepdim, ddof=_ddof(correction, unbiased))


def _std(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return ops.sqrt(_var(x, dim, unbiased, keepdim, correction=correction))


def _var_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return Multi(lambda: _var(x, dim, unbiased, keepdim, correction=correction), lambda: _mean(x, dim, keepdim))


def _any(x, dim=None, keepdim=False):
    return ops.greater(ops.sum(ops.astype(x, dtypes.int64), _axes(dim, _ndim(x)), keepdims=keepdim), 0)


def _all(x, dim=None, keepdim=False):
    return ops.logical_not(_any(ops.logical_not(x), dim, keepdim))


def _argmax(x, dim=None, keepdim=False):
    return ops.argmax(x, None if dim is None else dim % _ndim(x), keepdims=keepdim)


def _argmin(x, dim=None, keepdim=False):
    return ops.argmin(x, None if dim is None else dim % _ndim(x), keepdims=keepdim)


def _prod(x, dim=None, keepdim=False, dtype=None):
    return ops.prod(_cast(x, dtype), None if dim is None else dim % _ndim(x), keepdims=keepdim)


def _norm(x, ord=2, dim=None, keepdim=False, dtype=None):  # noqa: A002 - torch's argument name
    return ops.norm(_cast(x, dtype), ord, _axes(dim, _ndim(x)), keepdims=keepdim)


def _sort(x, dim=-1, descending=False, stable=False):
    return Multi(lambda: ops.sort(x, dim, descending=descending), lambda: ops.argsort(x, dim, descending=descending))


def _topk(x, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - torch's argument name
    out = {}

    def get(i):
        if not out:
            out["v"] = ops.topk(x, k, dim, largest=largest)
        return out["v"][i]
    return Multi(lambda: get(0), lambda: get(1))


def _logsumexp(x, dim, keepdim=False):
    return ops.logsumexp(x, _axes(dim, _ndim(x)), keepdims=keepdim)


REDUCTIONS = {
    "sum": _sum, "mean": _mean, "amax": _amax, "amin": _amin, "max.dim": _max_dim, "min.dim": _min_dim,
    "max.default": lambda x: ops.max(x), "min.default": lambda x: ops.min(x),
    "max.other": ops.maximum, "min.other": ops.minimum,
    "var": _var, "std": _std, "var_mean": _var_mean, "any": _any, "all": _all, "argmax": _argmax, "argmin": _argmin,
    "logsumexp": _logsumexp, "prod": _prod, "linalg_vector_norm": _norm, "norm": _norm,
    "cumsum": lambda x, dim, dtype=None: ops.cumsum(_cast(x, dtype), dim % max(_ndim(x), 1)),
    "sort": _sort, "topk": _topk,
    "_softmax": lambda x, dim, half_to_float=False: gnn.softmax(x, dim),
    "_log_softmax": lambda x, dim, half_to_float=False: gnn.log_softmax(x, dim),
    "softmax": lambda x, dim, dtype=None: gnn.softmax(_cast(x, dtype), dim),
    "log_softmax": lambda x, dim, dtype=None: gnn.log_softmax(_cast(x, dtype), dim),
}


# -- linear algebra -------------------------------------------------------------------------------


def _addmm(bias, a, b, beta=1, alpha=1):
    ab = ops.matmul(a, b)
    return ops.add(ops.multiply(bias, beta) if beta != 1 else bias, ops.multiply(ab, alpha) if alpha != 1 else ab)


LINALG = {
    "mm": ops.matmul, "bmm": ops.matmul, "matmul": ops.matmul, "dot": ops.matmul, "addmm": _addmm, "baddbmm": _addmm,
    "linear": lambda x, w, b=None: gnn.linear(x, w, b), "t": lambda x: ops.transpose(x),
    "einsum": lambda eq, xs, path=None: ops.einsum(eq, *xs), "outer": ops.outer,
}


# -- shapes ---------------------------------------------------------------------------------------


def _expand(x, size, implicit=False):
    shape = _shape(x)
    lead = len(size) - len(shape)
    out = tuple(shape[i - lead] if s == -1 else s for i, s in enumerate(size))
    return x if out == shape else ops.broadcast_to(x, out)


def _squeeze(x, dim=None):
    if dim is None:
        return ops.squeeze(x)
    dims = [d % max(_ndim(x), 1) for d in (dim if isinstance(dim, (list, tuple)) else [dim])]
    keep = tuple(d for d in dims if _ndim(x) and _shape(x)[d] == 1)  # torch ignores non-1 dims
    return ops.squeeze(x, keep) if keep else x


def _unsqueeze(x, dim):
    return ops.expand_dims(x, dim % (_ndim(x) + 1))


def _permute(x, dims):
    return ops.transpose(x, [d % _ndim(x) for d in dims])


def _flatten(x, start=0, end=-1):
    shape, n = _shape(x), max(_ndim(x), 1)
    start, end = start % n, end % n
    return ops.reshape(x, shape[:start] + (math.prod(shape[start:end + 1]),) + shape[end + 1:])


def _unflatten(x, dim, sizes):
    shape = _shape(x)
    dim %= len(shape)
    return ops.reshape(x, shape[:dim] + tuple(sizes) + shape[dim + 1:])


def _index(dim, ndim, i):
    return (slice(None),) * (dim % ndim) + (i,)


def _slice(x, dim=0, start=None, end=None, step=1):
    return ops.getitem(x, _index(dim, _ndim(x), slice(start, end, step)))


def _select(x, dim, index):
    return ops.getitem(x, _index(dim, _ndim(x), index))


def _split_points(x, sizes, dim):
    return ops.split(x, list(np.cumsum(sizes)[:-1]), axis=dim % _ndim(x))


def _split(x, split_size, dim=0):
    n = _shape(x)[dim]
    if isinstance(split_size, (list, tuple)):
        return _split_points(x, split_size, dim)
    return _split_points(x, [min(split_size, n - i) for i in range(0, n, split_size)], dim)


def _chunk(x, chunks, dim=0):
    return _split(x, -(-_shape(x)[dim] // chunks), dim)


def _unbind(x, dim=0):
    return [_select(x, dim, i) for i in range(_shape(x)[dim])]


def _cat(xs, dim=0):
    xs = [x for x in xs if _shape(x) != (0,)]  # torch skips legacy empty (0,) tensors
    return ops.concatenate(xs, axis=dim % _ndim(xs[0]))


def _stack(xs, dim=0):
    return ops.stack(xs, axis=dim % (_ndim(xs[0]) + 1))


def _index_tensor(x, indices):
    for i in indices:
        if i is not None and dtypes.as_dtype(i.dtype) == dtypes.bool_:
            _unsupported("index.Tensor", "boolean-mask indexing has a data-dependent shape; write it with torch.where")
    return ops.getitem(x, tuple(slice(None) if i is None else i for i in indices))


def _gather(x, dim, index, sparse_grad=False):
    return ops.gather(x, dim % max(_ndim(x), 1), index)


def _scatter(x, dim, index, src=None, value=None, reduce=None):
    if reduce is not None:
        _unsupported("scatter", f"reduce={reduce!r} has no mapping (scatter and scatter_add do)")
    return ops.scatter(x, dim % max(_ndim(x), 1), index, src if src is not None else value)


def _constant_pad(x, pad, value=0.0):
    if any(p < 0 for p in pad):
        _unsupported("constant_pad_nd", "negative padding (cropping) has no mapping; slice the tensor instead")
    pairs = [(0, 0)] * (_ndim(x) - len(pad) // 2) + [(pad[i], pad[i + 1]) for i in range(len(pad) - 2, -1, -2)]
    return ops.pad(x, pairs, constant_values=value)


def _flip(x, dims):
    idx = [slice(None)] * _ndim(x)
    for d in dims:
        idx[d % _ndim(x)] = slice(None, None, -1)
    return ops.getitem(x, tuple(idx))


def _to_copy(x, dtype=None, **_layout):  # layout, device, pin_memory, memory_format: no meaning here
    return _cast(x, dtype)


def _identity(x, *_args, **_kwargs):
    return x


def _index_select(x, dim, index):
    return ops.take(x, index, axis=dim % _ndim(x))


def _slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    return ops.setitem(x, _index(dim, _ndim(x), slice(start, end, step)), src)


def _select_scatter(x, src, dim, index):
    return ops.setitem(x, _index(dim, _ndim(x), index), src)


def _index_put(x, indices, values, accumulate=False):
    if accumulate:
        _unsupported("index_put", "accumulate=True has no mapping (scatter-add); use index_add")
    return ops.setitem(x, tuple(slice(None) if i is None else i for i in indices), values)


def _copy(dst, src, non_blocking=False):
    return ops.broadcast_to(ops.astype(src, dst.dtype), _shape(dst))


SHAPES = {
    "view": lambda x, size: ops.reshape(x, tuple(size)), "_unsafe_view": lambda x, size: ops.reshape(x, tuple(size)),
    "reshape": lambda x, size: ops.reshape(x, tuple(size)), "view_copy": lambda x, size: ops.reshape(x, tuple(size)),
    "expand": _expand, "expand_copy": _expand, "permute": _permute, "permute_copy": _permute,
    "transpose": lambda x, a, b: ops.swapaxes(x, a, b) if _ndim(x) else x,
    "squeeze": _squeeze, "unsqueeze": _unsqueeze, "flatten": _flatten, "unflatten": _unflatten,
    "slice": _slice, "select": _select, "split": _split, "split_with_sizes": _split, "chunk": _chunk,
    "unbind": _unbind, "cat": _cat, "concat": _cat, "stack": _stack, "index": _index_tensor, "gather": _gather,
    "index_select": _index_select, "constant_pad_nd": _constant_pad, "flip": _flip,
    "tril": lambda x, diagonal=0: ops.tril(x, diagonal), "triu": lambda x, diagonal=0: ops.triu(x, diagonal),
    "masked_fill": ops.masked_fill, "scatter": _scatter,
    "scatter_add": lambda x, dim, index, src: ops.scatter_add(x, dim % max(_ndim(x), 1), index, src),
    "roll": lambda x, shifts, dims=(): ops.roll(x, tuple(shifts), tuple(dims)) if len(dims) else ops.roll(x, shifts[0]),
    "repeat": lambda x, repeats: ops.tile(x, tuple(repeats)), "slice_scatter": _slice_scatter, "select_scatter": _select_scatter,
    "index_put": _index_put, "copy": _copy,
    "clone": _identity, "contiguous": _identity, "alias": _identity, "lift_fresh_copy": _identity,
    "_to_copy": _to_copy, "to": _to_copy, "detach": ops.stop_gradient, "stop_gradient": ops.stop_gradient,
    "_assert_tensor_metadata": lambda *a, **k: None, "_assert_async": lambda *a, **k: None,
    "sym_size": lambda x, dim: _shape(x)[dim], "sym_numel": lambda x: math.prod(_shape(x)),
}


# -- creation -------------------------------------------------------------------------------------


def _full(size, value, dtype=None, **_layout):
    dt = np_dtype(dtype) or dtypes.as_dtype(np.asarray(value).dtype)
    return ops.full(tuple(size), value, dt)


def _arange(*args, dtype=None, **_layout):
    nums = [a for a in args if isinstance(a, (int, float))]
    return ops.arange(*nums, dtype=np_dtype(dtype))


def _full_like(x, value, dtype=None, **_layout):
    return ops.full(_shape(x), value, np_dtype(dtype) or x.dtype)


CREATION = {
    "full": _full, "zeros": lambda size, dtype=None, **k: _full(size, 0.0, dtype),
    "ones": lambda size, dtype=None, **k: _full(size, 1.0, dtype),
    "empty": lambda size, dtype=None, **k: _full(size, 0.0, dtype),  # contents unspecified: zeros
    "empty_strided": lambda size, stride, dtype=None, **k: _full(size, 0.0, dtype),
    "scalar_tensor": lambda v, dtype=None, **k: _full((), v, dtype),
    "arange": _arange, "full_like": _full_like,
    "zeros_like": lambda x, dtype=None, **k: _full_like(x, 0, dtype),
    "ones_like": lambda x, dtype=None, **k: _full_like(x, 1, dtype),
    "empty_like": lambda x, dtype=None, **k: _full_like(x, 0, dtype),
    "new_zeros": lambda x, size, dtype=None, **k: _full(size, 0, dtype or x.dtype),
    "new_ones": lambda x, size, dtype=None, **k: _full(size, 1, dtype or x.dtype),
    "new_empty": lambda x, size, dtype=None, **k: _full(size, 0, dtype or x.dtype),
    "new_full": lambda x, size, v, dtype=None, **k: _full(size, v, dtype or x.dtype),
    "fill": lambda x, v: _full_like(x, v),
}


# -- neural-network ops ---------------------------------------------------------------------------


def _layer_norm_axes(x, normalized_shape):
    return tuple(range(_ndim(x) - len(normalized_shape), _ndim(x)))


def _native_layer_norm(x, normalized_shape, weight, bias, eps):
    axes = _layer_norm_axes(x, normalized_shape)

    def rstd():
        return ops.rsqrt(ops.add(ops.var(x, axes, keepdims=True), eps))
    return Multi(lambda: gnn.layer_norm(x, weight, bias, eps, axis=axes),
                 lambda: ops.mean(x, axes, keepdims=True), rstd)


def _layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    return gnn.layer_norm(x, weight, bias, eps, axis=_layer_norm_axes(x, normalized_shape))


def _channel(v, ndim):
    return ops.reshape(v, (1, -1) + (1,) * (ndim - 2))


def _bn_eval(x, weight, bias, mean, var, eps):
    y = ops.multiply(ops.subtract(x, _channel(mean, _ndim(x))), _channel(ops.rsqrt(ops.add(var, eps)), _ndim(x)))
    if weight is not None:
        y = ops.multiply(y, _channel(weight, _ndim(x)))
    return y if bias is None else ops.add(y, _channel(bias, _ndim(x)))


def _bn_train(x, weight, bias, running_mean, running_var, momentum, eps):
    """(out, batch mean, batch invstd, new running mean, new running var), as torch's functional op:
    running stats move by `momentum` toward the batch mean and the unbiased batch variance."""
    n = math.prod(_shape(x)) // _shape(x)[1]

    def stats():
        return gnn.batch_norm_stats(ops.stop_gradient(x))

    def running(i, old, scale):
        return lambda: ops.add(ops.multiply(old, 1.0 - momentum), ops.multiply(stats()[i], momentum * scale))
    return Multi(lambda: gnn.batch_norm(x, weight, bias, eps),
                 lambda: gnn.batch_norm_stats(x)[0], lambda: ops.rsqrt(ops.add(gnn.batch_norm_stats(x)[1], eps)),
                 running(0, running_mean, 1.0), running(1, running_var, n / max(n - 1, 1)))


def _bn_functional(x, weight, bias, running_mean, running_var, training, momentum, eps):
    if training:
        return _bn_train(x, weight, bias, running_mean, running_var, momentum, eps)
    return Multi(lambda: _bn_eval(x, weight, bias, running_mean, running_var, eps), lambda: running_mean,
                 lambda: running_var, lambda: running_mean, lambda: running_var)


def _bn_no_training(x, weight, bias, running_mean, running_var, momentum, eps):
    return Multi(lambda: _bn_eval(x, weight, bias, running_mean, running_var, eps), lambda: running_mean,
                 lambda: running_var)


def _bn_no_stats(x, weight, bias, training, momentum, eps):
    return Multi(lambda: gnn.batch_norm(x, weight, bias, eps), lambda: gnn.batch_norm_stats(x)[0],
                 lambda: ops.rsqrt(ops.add(gnn.batch_norm_stats(x)[1], eps)))


def _batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled=True):
    if training:
        return gnn.batch_norm(x, weight, bias, eps)
    return _bn_eval(x, weight, bias, running_mean, running_var, eps)


def _spatial(v, k):
    """ATen's per-axis convolution parameter for k spatial axes: a list of one entry means that entry on every
    axis (nn.Conv2d(padding="valid") records padding [0])."""
    v = tuple(v) if isinstance(v, (list, tuple)) else (v,)
    return v * k if len(v) == 1 else v


def _conv(x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    k = _ndim(x) - 2
    stride, padding, dilation, output_padding = (_spatial(v, k) for v in (stride, padding, dilation, output_padding))
    geometry = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    if transposed:
        if _ndim(x) != 4:
            _unsupported("convolution", f"{_ndim(x) - 2}-d transposed convolution has no mapping (2-d does)")
        return gnn.conv_transpose2d(x, w, b, output_padding=output_padding, **geometry)
    if _ndim(x) == 3:
        return gnn.conv1d(x, w, b, **{k: v[0] if isinstance(v, tuple) else v for k, v in geometry.items()})
    if _ndim(x) != 4:
        _unsupported("convolution", f"{_ndim(x) - 2}-d convolution has no mapping (1-d and 2-d do)")
    return gnn.conv2d(x, w, b, **geometry)


def _pool_check(op, dilation, ceil_mode):
    if any(d != 1 for d in (dilation if isinstance(dilation, (list, tuple)) else [dilation])) or ceil_mode:
        _unsupported(op, "dilation != 1 and ceil_mode=True have no mapping")


def _max_pool2d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    _pool_check("max_pool2d_with_indices", dilation, ceil_mode)

    def indices():
        _unsupported("max_pool2d_with_indices", "the indices output has no mapping (the pooled values do)")
    return Multi(lambda: gnn.max_pool2d(x, tuple(kernel_size), tuple(stride) or None, padding), indices)


def _max_pool2d(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)[0]


def _avg_pool2d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    _pool_check("avg_pool2d", 1, ceil_mode)
    if (not count_include_pad and any(np.atleast_1d(padding))) or divisor_override is not None:
        _unsupported("avg_pool2d", "count_include_pad=False with padding, and divisor_override, have no mapping")
    return gnn.avg_pool2d(x, tuple(kernel_size), tuple(stride) or None, padding)


def _adaptive_max_pool2d(x, output_size):
    def indices():
        _unsupported("adaptive_max_pool2d", "the indices output has no mapping (the pooled values do)")
    return Multi(lambda: gnn.adaptive_max_pool2d(x, tuple(output_size)), indices)


def _fused_rms_norm(x, normalized_shape, weight=None, eps=None):
    def rstd():
        _unsupported("_fused_rms_norm", "the rstd output has no mapping (the normalised values do)")
    return Multi(lambda: _rms_norm(x, normalized_shape, weight, eps), rstd)


_REDUCTION = ("none", "mean", "sum")  # ATen's reduction enum


def _embedding(w, idx, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """aten.embedding: padding_idx -1 means none (nn.Embedding passes a negative one already counted from
    the end); that row gets no gradient. sparse only changes torch's gradient layout."""
    if scale_grad_by_freq:
        _unsupported("embedding", "scale_grad_by_freq=True has no mapping")
    return gnn.embedding(w, idx, None if padding_idx < 0 else padding_idx)


def _group_norm(x, weight, bias, n, c, hw, group, eps):
    """native_group_norm -> (out, mean, rstd); mean and rstd per (sample, group)."""
    def stats(i):
        g = ops.reshape(x, (n, group, c // group * hw))  # not -1, which an empty batch (n = 0) leaves open
        return [lambda: ops.mean(g, 2), lambda: ops.rsqrt(ops.add(ops.var(g, 2), eps))][i]()
    return Multi(lambda: gnn.group_norm(x, group, weight, bias, eps), lambda: stats(0), lambda: stats(1))


def _rms_norm(x, normalized_shape, weight=None, eps=None):
    return gnn.rms_norm(x, tuple(normalized_shape), weight, eps)


def _nll(logp, target, weight, reduction, ignore_index):
    """nll_loss over (N, C) or (C,) log-probabilities: -logp[i, target[i]] weighted, ignored rows zero."""
    if _ndim(logp) == 1:
        logp, target = ops.expand_dims(logp, 0), ops.expand_dims(target, 0)
    keep = ops.not_equal(target, ignore_index)
    safe = ops.where(keep, target, 0)
    picked = ops.negative(_gather(logp, 1, ops.expand_dims(safe, 1)))
    picked = ops.squeeze(picked, 1)
    w = ops.astype(keep, logp.dtype)
    if weight is not None:
        w = ops.multiply(w, ops.take(weight, safe, axis=0))
    losses = ops.multiply(picked, w)
    total = ops.sum(w)
    if reduction == 0:
        return losses, total
    s = ops.sum(losses)
    return (ops.divide(s, total) if reduction == 1 else s), total


def _nll_loss_forward(logp, target, weight, reduction, ignore_index):
    out = {}

    def get(i):
        if not out:
            out["v"] = _nll(logp, target, weight, reduction, ignore_index)
        return out["v"][i]
    return Multi(lambda: get(0), lambda: get(1))


def _cross_entropy(x, target, weight=None, reduction=1, ignore_index=-100, label_smoothing=0.0):
    if weight is not None or label_smoothing or _ndim(x) != 2 or dtypes.is_float(target.dtype):
        return _unsupported("cross_entropy_loss", "only class-index targets on (N, C) logits without weight or "
                            "label_smoothing map to gnn.cross_entropy")
    return gnn.cross_entropy(x, target, _REDUCTION[reduction], ignore_index)


def _sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p:
        _unsupported("scaled_dot_product_attention", "dropout_p > 0 has no mapping")
    return gnn.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
                                            enable_gqa=enable_gqa)


class _Dropout(NeedsSeed):
    """native_dropout(x, p, train) -> (out, mask): the mask from the call's seed (explicit, never hidden)."""

    def __call__(self, x, p, train=True, *, rng):
        if not train or p == 0:
            return Multi(lambda: x, lambda: ops.full(_shape(x), True, dtypes.bool_))
        keep = rng(x).random(_shape(x)) >= p
        scale = (keep / (1.0 - p)) if p < 1 else np.zeros(_shape(x))
        return Multi(lambda: ops.multiply(x, scale.astype(x.dtype)), lambda: keep)


class _PlainDropout(_Dropout):
    def __call__(self, x, p, train=True, *, rng):
        return super().__call__(x, p, train, rng=rng)[0]


NN = {
    "native_layer_norm": _native_layer_norm, "layer_norm": _layer_norm,
    "_native_batch_norm_legit_functional": _bn_functional, "_native_batch_norm_legit_no_training": _bn_no_training,
    "_native_batch_norm_legit.no_stats": _bn_no_stats, "_native_batch_norm_legit.default": _bn_functional,
    "native_batch_norm": _bn_functional, "batch_norm": _batch_norm,
    "convolution": _conv, "conv2d": lambda x, w, b=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1:
        _conv(x, w, b, stride, padding, dilation, False, (0, 0), groups),
    "max_pool2d_with_indices": _max_pool2d_with_indices, "max_pool2d": _max_pool2d, "avg_pool2d": _avg_pool2d,
    "_adaptive_avg_pool2d": lambda x, size: gnn.adaptive_avg_pool2d(x, tuple(size)),
    "adaptive_avg_pool2d": lambda x, size: gnn.adaptive_avg_pool2d(x, tuple(size)),
    "adaptive_max_pool2d": _adaptive_max_pool2d,
    "native_group_norm": _group_norm,
    "group_norm": lambda x, groups, w=None, b=None, eps=1e-5, cudnn=True: gnn.group_norm(x, groups, w, b, eps),
    "rms_norm": _rms_norm, "_fused_rms_norm": _fused_rms_norm,
    "mse_loss": lambda x, y, reduction=1: gnn.mse_loss(x, y, reduction=_REDUCTION[reduction]),
    "binary_cross_entropy": lambda x, y, weight=None, reduction=1:
        gnn.binary_cross_entropy(x, y, weight, reduction=_REDUCTION[reduction]),
    "binary_cross_entropy_with_logits": lambda x, y, weight=None, pos_weight=None, reduction=1:
        gnn.binary_cross_entropy_with_logits(x, y, weight, reduction=_REDUCTION[reduction], pos_weight=pos_weight),
    "embedding": _embedding,
    "nll_loss_forward": _nll_loss_forward, "cross_entropy_loss": _cross_entropy,
    "scaled_dot_product_attention": _sdpa,
    "native_dropout": _Dropout(), "dropout": _PlainDropout(),
}

OPERATORS = {"getitem": operator.getitem}

TABLE: dict = {**ELEMENTWISE, **REDUCTIONS, **LINALG, **SHAPES, **CREATION, **NN}
"""ATen name (overload or packet, without "aten.") -> function over gradir ops."""


def lookup(name: str, overload: str):
    """The table entry for aten `name`.`overload` (the overload's own entry first), or None. A view op's
    `_copy` form (what functionalization on the make_fx path emits: `split_copy`, `view_copy`) is the
    view op itself here: gradir values are immutable, so a view and a copy compute the same."""
    entry = TABLE.get(f"{name}.{overload}") or TABLE.get(name)
    if entry is None and name.endswith("_copy") and name not in ("_to_copy", "lift_fresh_copy"):
        return lookup(name.removesuffix("_copy"), overload)
    return entry
