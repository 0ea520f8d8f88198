"""dtypes gradir knows, their short names in the IR text, and promotion rules.

Promotion follows NumPy for arrays; Python scalars are *weakly typed*: they take the dtype of the
array they meet (a float32 array times 2.0 stays float32), as in JAX and PyTorch.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from gradir.core.errors import DTypeError
from gradir.util.public import api_dir

__all__ = ["bfloat16", "bool_", "complex64", "complex128", "float16", "float32", "float64", "int32", "int64", "FLOATING",
           "FROM_SHORT", "SHORT_NAMES", "as_dtype", "is_complex", "is_float", "is_inexact", "is_integer", "promote",
           "real_dtype", "short", "weak_dtype"]

bfloat16 = np.dtype(ml_dtypes.bfloat16)
float16 = np.dtype(np.float16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
complex64 = np.dtype(np.complex64)
complex128 = np.dtype(np.complex128)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
bool_ = np.dtype(np.bool_)

SHORT_NAMES = {
    float64: "f64", float32: "f32", float16: "f16", bfloat16: "bf16",
    complex128: "c128", complex64: "c64", int64: "i64", int32: "i32", bool_: "bool",
}
FROM_SHORT = {v: k for k, v in SHORT_NAMES.items()}
FLOATING = (float64, float32, float16, bfloat16)


def as_dtype(d) -> np.dtype:
    """Normalise a dtype-like (np dtype, type, 'f32', 'float32', 'bfloat16') to an np.dtype."""
    if isinstance(d, str) and d in FROM_SHORT:
        return FROM_SHORT[d]
    try:
        dt = np.dtype(d)
    except TypeError as e:
        raise DTypeError(f"unknown dtype {d!r}") from e
    if dt not in SHORT_NAMES:
        raise DTypeError(f"dtype {dt} is not supported (use one of {', '.join(SHORT_NAMES.values())})")
    return dt


def short(d: np.dtype) -> str:
    return SHORT_NAMES[np.dtype(d)]


def is_float(d) -> bool:
    return (d if isinstance(d, np.dtype) else np.dtype(d)) in FLOATING


def is_complex(d) -> bool:
    return np.dtype(d).kind == "c"


def is_inexact(d) -> bool:
    """Floating or complex: the dtypes that carry gradients."""
    d = d if isinstance(d, np.dtype) else np.dtype(d)
    return d in FLOATING or d.kind == "c"


def is_integer(d) -> bool:
    return np.dtype(d).kind in "iu"


def real_dtype(d) -> np.dtype:
    d = np.dtype(d)
    return {complex128: float64, complex64: float32}.get(d, d)


_KIND_RANK = {"b": 0, "i": 1, "u": 1, "f": 2, "V": 2, "c": 3}  # ml_dtypes' bfloat16 has kind 'V'


def _kind_rank(d: np.dtype) -> int:
    return 2 if d == bfloat16 else _KIND_RANK[d.kind]


_PROMOTED: dict[tuple, np.dtype] = {}  # eager ops promote on every call


def promote(*dtypes) -> np.dtype:
    """NumPy's promotion, extended to bfloat16 (bf16 with f16 gives f32, as in JAX)."""
    try:
        out = _PROMOTED.get(dtypes)
    except TypeError:  # an unhashable dtype-like
        return _promote(dtypes)
    if out is None:
        out = _PROMOTED[dtypes] = _promote(dtypes)
    return out


def _promote(dtypes) -> np.dtype:
    dts = [np.dtype(d) for d in dtypes]
    if any(d == bfloat16 for d in dts):
        others = {d for d in dts if d != bfloat16}
        if not others or all(_kind_rank(d) < 2 for d in others):
            return bfloat16
        if others == {float16}:
            return float32
        return promote(*[float32 if d == bfloat16 else d for d in dts])
    return np.result_type(*dts)


def weak_dtype(py_value, partner: np.dtype | None) -> np.dtype:
    """The dtype a Python scalar takes next to an array of dtype `partner` (None: no partner)."""
    if isinstance(py_value, bool):
        kind = 0
    elif isinstance(py_value, int):
        kind = 1
    elif isinstance(py_value, float):
        kind = 2
    elif isinstance(py_value, complex):
        kind = 3
    else:
        raise DTypeError(f"not a Python scalar: {py_value!r}")
    default = [bool_, int64, float64, complex128][kind]
    if partner is None:
        return default
    if _kind_rank(partner) >= kind:
        return partner
    if kind == 3:
        return complex64 if partner in (float32, float16, bfloat16) else complex128
    return default


__dir__ = api_dir(globals())  # dir() and tab completion offer __all__, not the imports (gradir.util.public)
