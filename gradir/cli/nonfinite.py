"""`gradir check`'s word on example inputs holding NaN or inf: central differences (and most gradients) are
NaN there, so a failed check is the inputs' fault, not the gradient's, and the command says so, naming them.

Layer rule (gradir.cli): imports any gradir layer below it, at the top of the module; never the face `gradir`.
"""

from __future__ import annotations

import numpy as np

from gradir.api.args import prepare
from gradir.core import dtypes


def nonfinite_inputs(fn, args: tuple, nan_only: bool = False) -> str | None:
    """Why `fn`'s example inputs `args` cannot judge a gradient: each leaf holding NaN (or, unless `nan_only`,
    inf) named with its count and first position (``x holds NaN (1 of 3 elements, first at x[1])``); None when
    every float leaf is finite. An input holding inf may be meant (an additive -inf mask): only a failed check
    names it."""
    a = prepare(fn, args)
    found = []
    for name, leaf in zip(a.names, a.flat):
        arr = np.asarray(leaf)
        if not dtypes.is_inexact(arr.dtype):
            continue
        for what, bad in (("NaN", np.isnan(arr)), ("inf", np.isinf(arr))):
            if not bad.any() or (nan_only and what != "NaN"):
                continue
            first = "".join(f"[{i}]" for i in np.argwhere(bad)[0])
            where = f"{bad.sum():,} of {bad.size:,} elements, first at {name}{first}" if arr.ndim else "a scalar"
            found.append(f"{name} holds {what} ({where})")
    if not found:
        return None
    return (f"the example inputs are not finite: {'; '.join(found)}. Central differences are NaN at such inputs, "
            "so no gradient can be checked there (the gradient is not at fault): give example_inputs() finite values")
