"""The ATen -> gradir table's elementwise ops (arithmetic, math functions, comparisons, activations) and
reductions (sums, statistics, scans and order statistics), assembled into TABLE by aten_table."""

from __future__ import annotations

from gradir import ops
from gradir.core import dtypes
from gradir.frontends.aten_common import Multi, axes_of, axis_of, cast, ndim_of, not_computed, unsupported
from gradir.ops import nn as gnn
from gradir.ops.lifting import concrete

# -- elementwise ----------------------------------------------------------------------------------


def _add(x, y, alpha=1):
    return ops.add(x, y if alpha == 1 else ops.multiply(y, alpha))


def _sub(x, y, alpha=1):
    return ops.subtract(x, y if alpha == 1 else ops.multiply(y, alpha))


def _rsub(x, y, alpha=1):
    return _sub(y, x, alpha)


def _div_mode(x, y, rounding_mode=None):
    """torch.div's rounding modes: "floor" is floor_divide (Python's floor division, exact where floor(x / y)
    can round the quotient across an integer; integers stay integers), "trunc" rounds toward zero."""
    if rounding_mode is None:
        return ops.divide(x, y)
    return ops.floor_divide(x, y) if rounding_mode == "floor" else ops.trunc(ops.divide(x, y))


def _clamp(x, min=None, max=None):  # noqa: A002 - torch's argument names
    return ops.clip(x, min, max)


def _elu(x, alpha=1.0, scale=1.0, input_scale=1.0):
    if scale == 1 and input_scale == 1:
        return gnn.elu(x, alpha)
    pos = ops.greater(x, 0)
    # selu/celu's scaled forms; expm1 sees 0 where x > 0, so the unselected branch cannot overflow to inf
    # (whose zero cotangent would make the gradient nan), as in gnn.elu
    neg = ops.multiply(ops.expm1(ops.multiply(ops.where(pos, 0.0, x), input_scale)), alpha)
    return ops.multiply(ops.where(pos, x, neg), scale)


def _nan_to_num(x, nan=None, posinf=None, neginf=None):
    return ops.nan_to_num(x, 0.0 if nan is None else nan, posinf, neginf)


_INVERSE_TRIG = {"asin": ops.arcsin, "acos": ops.arccos, "atan": ops.arctan, "asinh": ops.arcsinh,
                 "acosh": ops.arccosh, "atanh": ops.arctanh}

ELEMENTWISE = {
    "add": _add, "sub": _sub, "rsub": _rsub, "mul": ops.multiply, "div.Tensor": ops.divide, "div.Scalar": ops.divide,
    "div.Tensor_mode": _div_mode, "div.Scalar_mode": _div_mode, "true_divide": ops.divide,
    "floor_divide": ops.floor_divide,
    "neg": ops.negative, "exp": ops.exp, "log": ops.log, "tanh": ops.tanh, "sin": ops.sin, "cos": ops.cos,
    "sqrt": ops.sqrt, "rsqrt": ops.rsqrt, "abs": ops.abs, "sign": ops.sign, "erf": ops.erf, "sigmoid": ops.sigmoid,
    "relu": ops.relu, "reciprocal": lambda x: ops.divide(1.0, x), "square": ops.square,
    "pow": ops.power, "maximum": ops.maximum, "minimum": ops.minimum, "remainder": ops.remainder, "fmod": ops.fmod,
    "clamp": _clamp, "clamp_min": lambda x, m: ops.clip(x, m, None),
    "clamp_max": lambda x, m: ops.clip(x, None, m),  # clip, not maximum/minimum: those split ties, torch's clamp does not
    "hardtanh": lambda x, lo=-1.0, hi=1.0: gnn.hardtanh(x, lo, hi), "where": ops.where,
    "eq": ops.equal, "ne": ops.not_equal, "lt": ops.less, "le": ops.less_equal, "gt": ops.greater, "ge": ops.greater_equal,
    "logical_and": ops.logical_and, "logical_or": ops.logical_or, "logical_not": ops.logical_not,
    "bitwise_not": ops.logical_not, "bitwise_and": ops.logical_and, "bitwise_or": ops.logical_or,
    "isnan": ops.isnan, "isinf": ops.isinf, "nan_to_num": _nan_to_num,
    "gelu": lambda x, approximate="none": gnn.gelu(x, approximate),
    "silu": gnn.silu, "softplus": gnn.softplus, "leaky_relu": gnn.leaky_relu, "elu": _elu,
    "selu": lambda x: _elu(x, 1.6732632423543772848170429916717, 1.0507009873554804934193349852946),
    "celu": lambda x, alpha=1.0: _elu(x, alpha, 1.0, 1.0 / alpha),
    "log1p": ops.log1p, "expm1": ops.expm1, "tan": ops.tan, "floor": ops.floor, "ceil": ops.ceil,
    "trunc": ops.trunc, "fix": ops.trunc, "round": lambda x, decimals=0: ops.round(x, decimals),
    "log2": ops.log2, "log10": ops.log10, "exp2": ops.exp2, "special_exp2": ops.exp2,
    "atan2": ops.arctan2, "arctan2": ops.arctan2, "sinh": ops.sinh, "cosh": ops.cosh,
    **_INVERSE_TRIG, **{"arc" + k[1:]: v for k, v in _INVERSE_TRIG.items()},  # asin and its alias arcsin, ...
    "logaddexp": ops.logaddexp, "xlogy": ops.xlogy, "special_xlogy": ops.xlogy,
    "logit": lambda x, eps=None: ops.logit(x, eps), "erfc": ops.erfc, "special_erfc": ops.erfc,
    "erfinv": ops.erfinv, "special_erfinv": ops.erfinv, "lgamma": ops.lgamma, "special_gammaln": ops.lgamma,
    "digamma": ops.digamma, "special_digamma": ops.digamma, "special_psi": ops.digamma,
    "polygamma": ops.polygamma, "special_polygamma": ops.polygamma,
    "lerp": ops.lerp,
    "addcmul": lambda i, a, b, value=1: ops.addcmul(i, a, b, value=value),
    "addcdiv": lambda i, a, b, value=1: ops.addcdiv(i, a, b, value=value),
    # activations
    "log_sigmoid": gnn.logsigmoid,
    "log_sigmoid_forward": lambda x: Multi(lambda: gnn.logsigmoid(x), not_computed("log_sigmoid_forward", "buffer")),
    "mish": gnn.mish, "hardswish": gnn.hardswish, "hardsigmoid": gnn.hardsigmoid,
    "glu": lambda x, dim=-1: gnn.glu(x, dim), "threshold": gnn.threshold, "prelu": gnn.prelu,
    # the decomposed prelu: weight already broadcast against x by torch
    "_prelu_kernel": lambda x, w: ops.where(ops.greater(x, 0), x, ops.multiply(w, x)),
}


# -- reductions -----------------------------------------------------------------------------------


def _sum(x, dim=None, keepdim=False, dtype=None):
    x = cast(x, dtype)
    if dtypes.as_dtype(x.dtype) == dtypes.bool_:  # torch sums booleans as int64
        x = ops.astype(x, dtypes.int64)
    return ops.sum(x, axes_of(dim, ndim_of(x)), keepdims=keepdim)


def _mean(x, dim=None, keepdim=False, dtype=None):
    return ops.mean(cast(x, dtype), axes_of(dim, ndim_of(x)), keepdims=keepdim)


def _amax(x, dim=(), keepdim=False):
    return ops.max(x, axes_of(dim, ndim_of(x)), keepdims=keepdim)


def _amin(x, dim=(), keepdim=False):
    return ops.min(x, axes_of(dim, ndim_of(x)), keepdims=keepdim)


def _max_dim(x, dim, keepdim=False):
    return Multi(lambda: _amax(x, [dim], keepdim), lambda: ops.argmax(x, dim % ndim_of(x), keepdims=keepdim))


def _min_dim(x, dim, keepdim=False):
    return Multi(lambda: _amin(x, [dim], keepdim), lambda: ops.argmin(x, dim % ndim_of(x), keepdims=keepdim))


def _ddof(correction, unbiased=None):
    if correction is not None:
        return correction
    return 1 if unbiased is None or unbiased else 0


def _var(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return ops.var(x, axes_of(dim, ndim_of(x)), keepdims=keepdim, ddof=_ddof(correction, unbiased))


def _std(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return ops.sqrt(_var(x, dim, unbiased, keepdim, correction=correction))


def _var_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return Multi(lambda: _var(x, dim, unbiased, keepdim, correction=correction), lambda: _mean(x, dim, keepdim))


def _any(x, dim=None, keepdim=False):
    return ops.greater(ops.sum(ops.astype(x, dtypes.int64), axes_of(dim, ndim_of(x)), keepdims=keepdim), 0)


def _all(x, dim=None, keepdim=False):
    return ops.logical_not(_any(ops.logical_not(x), dim, keepdim))


def _argmax(x, dim=None, keepdim=False):
    return ops.argmax(x, None if dim is None else dim % ndim_of(x), keepdims=keepdim)


def _argmin(x, dim=None, keepdim=False):
    return ops.argmin(x, None if dim is None else dim % ndim_of(x), keepdims=keepdim)


def _prod(x, dim=None, keepdim=False, dtype=None):
    return ops.prod(cast(x, dtype), None if dim is None else dim % ndim_of(x), keepdims=keepdim)


def _norm(x, ord=2, dim=None, keepdim=False, dtype=None):  # noqa: A002 - torch's argument name
    return ops.norm(cast(x, dtype), ord, axes_of(dim, ndim_of(x)), keepdims=keepdim)


def _sort(x, dim=-1, descending=False, stable=False):
    return Multi(lambda: ops.sort(x, dim, descending=descending), lambda: ops.argsort(x, dim, descending=descending))


def _pair(compute):
    """values and indices of one call, made once when either is read."""
    return Multi.of_one_call(compute, 2)


def _topk(x, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - torch's argument name
    return _pair(lambda: ops.topk(x, k, dim, largest=largest))


def _logsumexp(x, dim, keepdim=False):
    return ops.logsumexp(x, axes_of(dim, ndim_of(x)), keepdims=keepdim)


def _quantile(x, q, dim=None, keepdim=False, interpolation="linear"):
    """quantile, and quantile.scalar: q is a constant (gradir's quantile picks its order statistics at trace time)."""
    qs = concrete(q)
    if qs is None:
        unsupported("quantile", "q computed in the model has no mapping: the quantiles must be constants")
    return ops.quantile(x, qs, None if dim is None else axis_of(dim, x), keepdim, interpolation)


def _count_nonzero(x, dim=None):
    return ops.count_nonzero(x, axes_of(dim, ndim_of(x)))


REDUCTIONS = {
    "sum": _sum, "mean": _mean, "amax": _amax, "amin": _amin, "max.dim": _max_dim, "min.dim": _min_dim,
    "max.default": lambda x: ops.max(x), "min.default": lambda x: ops.min(x),
    "max.other": ops.maximum, "min.other": ops.minimum,
    "var": _var, "std": _std, "var_mean": _var_mean, "any": _any, "all": _all, "argmax": _argmax, "argmin": _argmin,
    "logsumexp": _logsumexp, "prod": _prod, "linalg_vector_norm": _norm, "norm": _norm,
    "nansum": lambda x, dim=None, keepdim=False, dtype=None: ops.nansum(cast(x, dtype), axes_of(dim, ndim_of(x)),
                                                                         keepdims=keepdim),
    "nanmean": lambda x, dim=None, keepdim=False, dtype=None: ops.nanmean(cast(x, dtype), axes_of(dim, ndim_of(x)),
                                                                           keepdims=keepdim),
    "count_nonzero": _count_nonzero,
    "sort": _sort, "topk": _topk,
    "median.default": ops.median,
    "median.dim": lambda x, dim, keepdim=False: _pair(lambda: ops.median(x, axis_of(dim, x), keepdim)),
    "kthvalue": lambda x, k, dim=-1, keepdim=False: _pair(lambda: ops.kthvalue(x, k, axis_of(dim, x), keepdim)),
    "quantile": _quantile,
    # scans
    "cumsum": lambda x, dim, dtype=None: ops.cumsum(cast(x, dtype), axis_of(dim, x)),
    "cumprod": lambda x, dim, dtype=None: ops.cumprod(cast(x, dtype), axis_of(dim, x)),
    "cummax": lambda x, dim: _pair(lambda: ops.cummax(x, axis_of(dim, x))),
    "cummin": lambda x, dim: _pair(lambda: ops.cummin(x, axis_of(dim, x))),
    "logcumsumexp": lambda x, dim: ops.logcumsumexp(x, axis_of(dim, x)),
    "diff": lambda x, n=1, dim=-1, prepend=None, append=None: ops.diff(x, n, axis_of(dim, x), prepend, append),
    "_softmax": lambda x, dim, half_to_float=False: gnn.softmax(x, dim),
    "_log_softmax": lambda x, dim, half_to_float=False: gnn.log_softmax(x, dim),
    "softmax": lambda x, dim, dtype=None: gnn.softmax(cast(x, dtype), dim),
    "log_softmax": lambda x, dim, dtype=None: gnn.log_softmax(cast(x, dtype), dim),
}

__all__ = ["ELEMENTWISE", "REDUCTIONS"]
