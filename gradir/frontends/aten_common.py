"""What every family of the ATen -> gradir table shares: `Multi` (an op with several results), the markers the
interpreter reads (`NeedsSeed`), torch dtypes by name, and torch's dim conventions.

torch is not imported here: dtypes arrive as torch dtype objects and are read by name.
"""

from __future__ import annotations

import numpy as np

from gradir import ops
from gradir.core import dtypes
from gradir.core.errors import UnsupportedOpError
from gradir.core.trace import user_source


class Multi:
    """Several results computed on demand: entry i is `thunks[i]()`, evaluated (once) when the graph
    reads it, so an unused mean/rstd of native_layer_norm records no nodes."""

    def __init__(self, *thunks):
        self.thunks, self.done = thunks, {}

    def __getitem__(self, i):
        if i not in self.done:
            self.done[i] = self.thunks[i]()
        return self.done[i]

    @classmethod
    def of_one_call(cls, compute, n: int) -> Multi:
        """The n results of one gradir call that makes them together (topk's values and indices, svd's U, S and
        Vh), called once, when the graph first reads one."""
        out = []

        def get(i):
            if not out:
                out.append(compute())
            return out[0][i]
        return cls(*(lambda i=i: get(i) for i in range(n)))


class NeedsSeed:
    """Marker base for table entries that draw random numbers: the interpreter passes `rng=`."""


# torch's 8- and 16-bit integers are held as int32, which gradir has and which holds all their values (what
# torch's decompositions make of them: eye's uint8 aranges compared for equality); wrapping arithmetic in
# those dtypes would differ, and no decomposition relies on it
_TORCH_DTYPES = {"float64": "float64", "double": "float64", "float32": "float32", "float": "float32",
                 "float16": "float16", "half": "float16", "bfloat16": "bfloat16", "int64": "int64", "long": "int64",
                 "int32": "int32", "int": "int32", "int16": "int32", "short": "int32", "int8": "int32",
                 "uint8": "int32", "bool": "bool", "complex128": "complex128", "cdouble": "complex128"}


def np_dtype(d):
    """A torch dtype (or None) as the gradir/NumPy dtype of the same name (small integers as int32)."""
    if d is None:
        return None
    name = str(d).replace("torch.", "")
    if name not in _TORCH_DTYPES:
        raise UnsupportedOpError(f"torch dtype {d} has no gradir dtype", op="dtype", source=user_source())
    return dtypes.as_dtype(_TORCH_DTYPES[name])


def ndim_of(x) -> int:
    return np.ndim(x)


def shape_of(x) -> tuple:
    return tuple(np.shape(x))


def axes_of(dim, ndim):
    """A torch `dim` argument (int, list, None or [] meaning all axes) as a gradir axis argument."""
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return None
    return tuple(d % ndim if ndim else 0 for d in dim) if isinstance(dim, (list, tuple)) else dim % max(ndim, 1)


def axis_of(dim, x) -> int:
    """One torch `dim` of x as a non-negative axis (0 for a 0-d x, as torch accepts dim 0 and -1 there)."""
    return dim % max(ndim_of(x), 1)


def cast(x, dtype):
    """x in torch dtype `dtype` (None: as it is)."""
    return x if dtype is None else ops.astype(x, np_dtype(dtype))


def unsupported(op, why):
    """Raise the error of an ATen call the table cannot map (its arguments ask for what gradir lacks)."""
    raise UnsupportedOpError(why, op=f"aten.{op}", source=user_source())


def not_computed(op, what):
    """A thunk for a result of `op` gradir does not compute (LAPACK's LU factor, pooling's indices, ...): a graph
    that reads it fails there, naming it; a graph that does not (the usual case) never calls it."""
    def thunk():
        unsupported(op, f"its {what} result has no gradir mapping (the op's other results do)")
    return thunk


REDUCTION = ("none", "mean", "sum")
"""ATen's reduction enum, by position."""


__all__ = ["REDUCTION", "Multi", "NeedsSeed", "axes_of", "axis_of", "cast", "ndim_of", "not_computed", "np_dtype",
           "shape_of", "unsupported"]
