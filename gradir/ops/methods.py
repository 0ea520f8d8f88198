"""Value's operators (+, -, *, /, **, @, comparisons, []), in-place writes and NumPy-like methods.

gradir.core.ir defines `Value` without them: they record ops of this library, which sits above the core.
`attach()` puts them on `Value` once, when gradir.ops is imported (as JAX attaches array methods from above
its core)."""

from gradir.core.ir import Value
from gradir.ops.elementwise import (
    abs,
    add,
    cos,
    divide,
    equal,
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
    multiply,
    negative,
    not_equal,
    power,
    real,
    relu,
    remainder,
    sigmoid,
    sin,
    sqrt,
    square,
    subtract,
    tanh,
)
from gradir.ops.indexing import getitem
from gradir.ops.lifting import astype
from gradir.ops.linalg import dot, matmul
from gradir.ops.reductions import argmax, max, mean, min, std, sum, var
from gradir.ops.shapes import reshape, squeeze, swapaxes, transpose
from gradir.ops.special import all, any, clone, floor_divide
from gradir.ops.update import inplace, inplace_setitem

__all__ = ["attach"]


class _ValueMethods:
    """The methods `attach` copies onto Value (a class body, so they read as methods)."""

    def __add__(self, o): return add(self, o)
    def __radd__(self, o): return add(o, self)
    def __sub__(self, o): return subtract(self, o)
    def __rsub__(self, o): return subtract(o, self)
    def __mul__(self, o): return multiply(self, o)
    def __rmul__(self, o): return multiply(o, self)
    def __truediv__(self, o): return divide(self, o)
    def __rtruediv__(self, o): return divide(o, self)
    def __pow__(self, o): return power(self, o)
    def __rpow__(self, o): return power(o, self)
    def __mod__(self, o): return remainder(self, o)
    def __matmul__(self, o): return matmul(self, o)
    def __rmatmul__(self, o): return matmul(o, self)
    def __neg__(self): return negative(self)
    def __pos__(self): return self
    def __abs__(self): return abs(self)
    def __lt__(self, o): return less(self, o)
    def __le__(self, o): return less_equal(self, o)
    def __gt__(self, o): return greater(self, o)
    def __ge__(self, o): return greater_equal(self, o)
    def __eq__(self, o): return equal(self, o)  # noqa: PLE0307 - elementwise, as NumPy
    def __ne__(self, o): return not_equal(self, o)
    def __getitem__(self, idx): return getitem(self, idx)

    # -- in-place writes (functionalized in gradir/ops/update.py: the object comes to denote the
    # -- new value; raises InPlaceError if a VJP rule already saved the old one) ----------------
    def add_(self, o, alpha=1): return inplace(self, "add_", o, alpha)
    def sub_(self, o, alpha=1): return inplace(self, "sub_", o, alpha)
    def mul_(self, o): return inplace(self, "mul_", o)
    def div_(self, o): return inplace(self, "div_", o)
    def __iadd__(self, o): return inplace(self, "+=", o)
    def __isub__(self, o): return inplace(self, "-=", o)
    def __imul__(self, o): return inplace(self, "*=", o)
    def __itruediv__(self, o): return inplace(self, "/=", o)
    def __setitem__(self, idx, v): inplace_setitem(self, idx, v)
    # -- end of in-place writes ------------------------------------------------------------------

    # NumPy-like methods
    @property
    def T(self): return transpose(self)
    @property
    def real(self): return real(self)
    @property
    def imag(self): return imag(self)
    def sum(self, axis=None, keepdims=False): return sum(self, axis=axis, keepdims=keepdims)
    def mean(self, axis=None, keepdims=False): return mean(self, axis=axis, keepdims=keepdims)
    def max(self, axis=None, keepdims=False): return max(self, axis=axis, keepdims=keepdims)
    def min(self, axis=None, keepdims=False): return min(self, axis=axis, keepdims=keepdims)
    def var(self, axis=None, keepdims=False, ddof=0):
        return var(self, axis=axis, keepdims=keepdims, ddof=ddof)
    def argmax(self, axis=None): return argmax(self, axis=axis)
    def reshape(self, *shape): return reshape(self, shape[0] if len(shape) == 1 else shape)
    def transpose(self, *axes): return transpose(self, axes or None)
    def astype(self, dtype): return astype(self, dtype)
    def exp(self): return exp(self)
    def log(self): return log(self)
    def tanh(self): return tanh(self)
    def sqrt(self): return sqrt(self)
    def relu(self): return relu(self)
    def sigmoid(self): return sigmoid(self)
    def sin(self): return sin(self)
    def cos(self): return cos(self)
    def square(self): return square(self)
    def pow(self, y): return power(self, y)
    def matmul(self, o): return matmul(self, o)
    def dot(self, o): return dot(self, o)
    def std(self, axis=None, keepdims=False, ddof=0): return std(self, axis=axis, keepdims=keepdims, ddof=ddof)
    def squeeze(self, axis=None): return squeeze(self, axis)
    def swapaxes(self, a, b): return swapaxes(self, a, b)
    def clone(self): return clone(self)
    def any(self, axis=None, keepdims=False): return any(self, axis=axis, keepdims=keepdims)
    def all(self, axis=None, keepdims=False): return all(self, axis=axis, keepdims=keepdims)
    def __invert__(self): return logical_not(self)
    def __and__(self, o): return logical_and(self, o)
    def __rand__(self, o): return logical_and(o, self)
    def __or__(self, o): return logical_or(self, o)
    def __ror__(self, o): return logical_or(o, self)
    def __floordiv__(self, o): return floor_divide(self, o)
    def __rfloordiv__(self, o): return floor_divide(o, self)


def attach() -> None:
    for name, member in vars(_ValueMethods).items():
        if name not in ("__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__hash__"):
            setattr(Value, name, member)
