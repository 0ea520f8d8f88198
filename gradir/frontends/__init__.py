"""Frontends: other systems' programs as gradir functions (DESIGN rule 8: one ATen -> gradir op table).

Layer rule: imports the layers below (util, core, ops, passes, backends, api) and itself. torch is imported only
when a frontend is used (`import gradir` never imports it): `frontends/torch.py` (and `torch_capture.py`, which
it imports) import torch at their top, so they are loaded on first use only (by `from_torch` here and by
`with_loss`).
"""

from gradir.frontends.torch_saved import torch_saved


def from_torch(module, *example_inputs, **kwargs):
    """Capture a torch.nn.Module (or a function of tensors) as ``(f, params)``; see
    gradir.frontends.torch.from_torch."""
    from gradir.frontends.torch import from_torch as capture  # imports torch: on first use only

    return capture(module, *example_inputs, **kwargs)


__all__ = ["from_torch", "torch_saved"]
