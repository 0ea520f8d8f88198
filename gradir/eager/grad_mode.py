"""Grad mode: whether ops on `gr.Tensor`s record tape nodes (`gr.no_grad`, `gr.enable_grad`, as in PyTorch).

The mode is a stack, innermost last (`GRAD_MODE[-1]`), like PyTorch's thread-global grad mode: an
optimizer step runs under `no_grad`; the backward engine records under `enable_grad` with
`create_graph=True`.
"""

from __future__ import annotations

import functools

__all__ = ["enable_grad", "is_grad_enabled", "no_grad"]

GRAD_MODE = [True]  # innermost last; Tensor ops read GRAD_MODE[-1]


def is_grad_enabled() -> bool:
    """True unless inside `gr.no_grad()`."""
    return GRAD_MODE[-1]


class _GradMode:
    enabled = True

    def __enter__(self):
        GRAD_MODE.append(self.enabled)
        return self

    def __exit__(self, *exc):
        GRAD_MODE.pop()

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with type(self)():
                return fn(*args, **kwargs)
        return wrapper


class no_grad(_GradMode):  # noqa: N801 - spelled as in PyTorch
    """Context manager (or decorator): ops on Tensors inside record nothing (an optimizer step)."""

    enabled = False


class enable_grad(_GradMode):  # noqa: N801
    """Context manager (or decorator): record again inside an enclosing `no_grad`."""

    enabled = True
