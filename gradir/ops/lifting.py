"""Turning user arguments into operands: constants, dtype promotion, broadcasting, axes."""

from __future__ import annotations

import numpy as np

from gradir.core import dtypes
from gradir.core.errors import AxisError, DTypeError, ShapeError
from gradir.core.interop import is_torch, torch_to_numpy
from gradir.core.ir import Value
from gradir.core.trace import EagerOperand, bind, constant, current_graph, is_traced, user_source

__all__ = ["astype", "broadcast_all", "broadcast_shape", "broadcast_view", "concrete", "elementwise_operands", "lift",
           "lift_all", "normalize_axes", "normalize_axis", "to_numpy", "traced", "type_str"]


def to_numpy(x):
    """NumPy view of an argument (torch tensors included; gr.Tensors stay operands)."""
    if is_torch(x):
        return torch_to_numpy(x)
    return x


def lift(x, like_dtype=None):
    """An operand: traced Values pass through; Python scalars take `like_dtype` (weak typing);
    arrays become constants (inside a trace) or stay arrays."""
    if isinstance(x, Value):
        return x
    if isinstance(x, EagerOperand):  # eager tensors are operands; inside a trace, constants
        return x if current_graph() is None else constant(x.data)
    x = to_numpy(x)
    if isinstance(x, (bool, int, float, complex)):
        return constant(x, dtypes.weak_dtype(x, like_dtype))
    if isinstance(x, (np.ndarray, np.generic, list, tuple)):
        arr = np.asarray(x)
        if arr.dtype not in dtypes.SHORT_NAMES:
            raise DTypeError(f"unsupported array dtype {arr.dtype}", source=user_source())
        return constant(arr)
    raise DTypeError(f"cannot use a {type(x).__name__} as an array operand", source=user_source())


def _is_weak(x) -> bool:
    return isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic)


def lift_all(*xs, op: str):
    """Lift operands and promote them to one dtype (Python scalars weakly typed)."""
    if len(xs) == 2:  # the common cases inside a trace and every pass: two Values of one dtype, or a
        a, b = xs     # floating Value and a Python float or int (which weak typing gives the Value's dtype)
        ta, tb = type(a), type(b)
        if ta is Value:
            if tb is Value:
                if a.dtype is b.dtype or a.dtype == b.dtype:
                    return [a, b]
            elif (tb is float or tb is int) and a.dtype in dtypes.FLOATING:
                return [a, constant(b, a.dtype)]
        elif tb is Value and (ta is float or ta is int) and b.dtype in dtypes.FLOATING:
            return [constant(a, b.dtype), b]
    elif all(type(x) is Value for x in xs) and len({x.dtype for x in xs}) == 1:
        return list(xs)
    if current_graph() is None:  # eager
        fast = _eager_lift_all(xs)
        if fast is not None:
            return fast
    strong = [to_numpy(x) for x in xs if not _is_weak(x)]
    if strong:
        dt = dtypes.promote(*[s.dtype if isinstance(s, (Value, EagerOperand)) else np.asarray(s).dtype for s in strong])
        # a weak scalar of a higher kind still widens the result (int32 array + 2.0 -> float64), as NumPy 2
        dt = dtypes.promote(dt, *[dtypes.weak_dtype(x, dt) for x in xs if _is_weak(x)])
    else:
        dt = dtypes.promote(*[dtypes.weak_dtype(x, None) for x in xs])
    vals = [lift(x, dt) for x in xs]
    return [v if v.dtype == dt else astype(v, dt) for v in vals]


def _eager_lift_all(xs):
    """lift_all's result in the common eager cases, or None: Tensors of one inexact dtype, and
    Python floats and ints (which weak typing gives that dtype)."""
    dt = None
    for x in xs:
        if isinstance(x, EagerOperand):
            if dt is None:
                dt = x.dtype
            elif x.dtype != dt:
                return None
        elif type(x) is not float and type(x) is not int:
            return None
    if dt is None or not dtypes.is_inexact(dt):
        return None
    return [x if isinstance(x, EagerOperand) else np.asarray(x, dt) for x in xs]


def astype(x, dtype):
    """x cast to `dtype` (numpy's `x.astype(dtype)`); casts between float dtypes pass gradients."""
    try:
        dtype = dtypes.as_dtype(dtype)
    except DTypeError as e:
        raise DTypeError(e.detail, op="astype", source=user_source()) from None
    x = lift(x)
    return x if x.dtype == dtype else bind("convert", x, dtype=dtype)


def broadcast_all(*xs, op: str):
    """Broadcast operands to their common shape with explicit `broadcast_to` nodes."""
    if len(xs) == 2:
        a, b = xs
        if a.shape == b.shape:
            return [a, b]
    elif len({x.shape for x in xs}) == 1:
        return list(xs)
    try:
        shape = broadcast_shape([x.shape for x in xs])
    except ValueError:
        types = " and ".join(type_str(x) for x in xs)
        raise ShapeError(f"shapes {types} cannot be broadcast together", op=op, source=user_source()) from None
    # an array here is an eager constant: NumPy's view is what the broadcast_to op would compute
    return [x if x.shape == shape else broadcast_view(x, shape) if type(x) is np.ndarray else
            bind("broadcast_to", x, shape=shape) for x in xs]


def broadcast_shape(shapes) -> tuple[int, ...]:
    """numpy.broadcast_shapes (ValueError when they do not broadcast), without its per-call setup."""
    out = list(max(shapes, key=len))
    n = len(out)
    for s in shapes:
        for i, d in enumerate(s, n - len(s)):
            if d != out[i]:
                if out[i] == 1:
                    out[i] = d
                elif d != 1:
                    raise ValueError(f"shapes {shapes} do not broadcast")
    return tuple(out)


def broadcast_view(a: np.ndarray, shape) -> np.ndarray:
    """numpy.broadcast_to(a, shape): a read-only view; a 0-d array's is made directly (the eager
    path broadcasts a scalar constant on almost every op, and np.broadcast_to costs microseconds)."""
    if a.ndim or not a.flags.c_contiguous:
        return np.broadcast_to(a, shape)
    view = np.ndarray(shape, a.dtype, a, 0, (0,) * len(shape))
    view.flags.writeable = False
    return view


def type_str(x) -> str:
    """`f64[2,3]` for a traced value or an array (for error messages)."""
    return x.type_str if isinstance(x, Value) else f"{dtypes.short(x.dtype)}[{','.join(map(str, x.shape))}]"


def elementwise_operands(*xs, op: str):
    if len(xs) == 2 and current_graph() is not None:  # a floating Value and a Python float or int, in a trace:
        a, b = xs                                      # what lift_all and broadcast_all give, made directly
        ta, tb = type(a), type(b)
        if ta is Value and (tb is float or tb is int) and a.dtype in dtypes.FLOATING:
            b = constant(b, a.dtype)
            return [a, bind("broadcast_to", b, shape=a.shape) if a.shape else b]
        if tb is Value and (ta is float or ta is int) and b.dtype in dtypes.FLOATING:
            a = constant(a, b.dtype)
            return [bind("broadcast_to", a, shape=b.shape) if b.shape else a, b]
    return broadcast_all(*lift_all(*xs, op=op), op=op)


def normalize_axes(axis, ndim: int, op: str) -> tuple[int, ...]:
    """`axis` (None, int or tuple, negatives allowed) as a sorted tuple of non-negative axes. A 0-d value
    takes axis 0 or -1 and gives () (as NumPy's and torch's reductions: torch.sum(scalar, dim=-1))."""
    if axis is None:
        return tuple(range(ndim))
    if type(axis) is int and ndim:  # one int axis: the common case (transpose, swapaxes, concatenate)
        if 0 <= axis < ndim:
            return (axis,)
        if -ndim <= axis < 0:
            return (axis + ndim,)
    axes = (axis,) if not isinstance(axis, (tuple, list)) else tuple(axis)
    out = []
    for a in axes:
        if not isinstance(a, (int, np.integer)) or isinstance(a, bool):
            raise AxisError(f"axis must be an int or a tuple of ints, got {a!r}", op=op, source=user_source())
        if not -max(ndim, 1) <= a < max(ndim, 1):
            raise AxisError(f"axis {a} is out of range for a {ndim}-d value", op=op, source=user_source())
        out.append(int(a) % max(ndim, 1))
    if len(set(out)) != len(out):
        raise AxisError(f"repeated axis in {axis}", op=op, source=user_source())
    return tuple(sorted(out)) if ndim else ()


def normalize_axis(axis, ndim: int, op: str) -> int:
    """One int `axis` of a value with at least one dimension, as a non-negative int (ops that move
    elements along an axis have none on a 0-d value: an AxisError, not the () normalize_axes gives)."""
    if ndim == 0:
        raise AxisError(f"axis {axis!r} needs a value of at least 1 dimension, got a 0-d value", op=op,
                        source=user_source())
    (a,) = normalize_axes(axis if isinstance(axis, (int, np.integer)) else (axis,), ndim, op)
    return a


def concrete(x):
    """x's value when it is known while tracing (an array, or a `const` node), else None."""
    if isinstance(x, Value):
        return x.attrs["value"] if x.op == "const" else None
    return np.asarray(x)


def traced(*xs) -> bool:
    return is_traced(*xs)
