"""The one rule for an output whose gradient can be implied: reverse mode's seed d(out)/d(out) = 1.

`gr.grad` (and value_and_grad, trace_grad, the CLI) and `Tensor.backward()` without a `gradient`
both start reverse mode from an implied seed of ones. As in PyTorch's `backward()`, that needs an
output with exactly one element, of any shape ((), (1,), (1, 1), ...: ``numel() == 1``), and of a
real floating dtype. (JAX's `grad` is stricter and takes shape () only.) Anything else needs an
explicit cotangent: `gr.vjp`, or `backward(gradient=...)`.
"""

from __future__ import annotations

import math

from gradir.core import dtypes
from gradir.core.errors import NonDifferentiableError, ShapeError

RULE = "one element, any shape: (), (1,), (1, 1), ..."


def check_implied_seed(shape: tuple, dtype, type_str: str, *, lead: str, hint: str, op: str,
                       source: str | None) -> None:
    """Raise unless an output of `shape` and `dtype` can be seeded with ones.

    `lead` opens the message ("needs a function returning one scalar"), `hint` says what to do
    instead for a non-scalar output; `op` and `source` locate the error as every gradir error does."""
    if math.prod(shape) != 1:
        raise ShapeError(f"{lead} ({RULE}), got {type_str}; {hint}", op=op, source=source)
    if not dtypes.is_float(dtype):
        raise NonDifferentiableError(f"{lead} of a real float dtype, got {type_str}", op=op, source=source)
