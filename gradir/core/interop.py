"""Torch <-> NumPy conversion in one place (torch's bfloat16 has no NumPy dtype: go through ml_dtypes)."""

from __future__ import annotations

import numpy as np

from gradir.core import dtypes

TORCH_DTYPES = {"torch.float64": dtypes.float64, "torch.float32": dtypes.float32, "torch.float16": dtypes.float16,
                "torch.bfloat16": dtypes.bfloat16, "torch.int64": dtypes.int64, "torch.int32": dtypes.int32,
                "torch.bool": dtypes.bool_, "torch.complex128": dtypes.complex128}
"""A torch dtype's name -> gradir's dtype (named, so torch need not be imported)."""


def is_torch(x) -> bool:
    """True for torch tensors (checked by module, so torch is never imported here)."""
    return type(x).__module__.startswith("torch")


def torch_to_numpy(t) -> np.ndarray:
    """A NumPy array of a torch tensor's values (detached, on the CPU); bfloat16 stays bfloat16."""
    import torch

    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:  # same bits, reinterpreted as ml_dtypes.bfloat16
        return t.view(torch.int16).numpy().view(dtypes.bfloat16)
    return t.numpy()


def numpy_to_torch(a):
    """A torch tensor of a NumPy array's values (a copy); ml_dtypes.bfloat16 becomes torch.bfloat16."""
    import torch

    a = np.array(a)  # a contiguous copy torch may own
    if a.dtype == dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)
