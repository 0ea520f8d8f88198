"""Frontends: other systems' programs as gradir functions (DESIGN rule 8: one ATen -> gradir op table).

torch is imported only when a frontend is used (`import gradir` never imports it).
"""


def from_torch(module, *example_inputs, **kwargs):
    """Capture a torch.nn.Module (or a function of tensors) as ``(f, params)``; see
    gradir.frontends.torch.from_torch."""
    from gradir.frontends.torch import from_torch as capture

    return capture(module, *example_inputs, **kwargs)


def torch_saved(module, *inputs, loss=None):
    """What PyTorch's autograd saves for `module(*inputs)` next to gradir's saved-tensor report for the
    same model, differences explained; see gradir.frontends.torch_saved.torch_saved."""
    from gradir.frontends.torch_saved import torch_saved as compare

    return compare(module, *inputs, loss=loss)
