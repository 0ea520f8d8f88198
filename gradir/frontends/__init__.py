"""Frontends: other systems' programs as gradir functions (DESIGN rule 8: one ATen -> gradir op table).

torch is imported only when a frontend is used (`import gradir` never imports it).
"""


def from_torch(module, *example_inputs, **kwargs):
    """Capture a torch.nn.Module (or a function of tensors) as ``(f, params)``; see
    gradir.frontends.torch.from_torch."""
    from gradir.frontends.torch import from_torch as capture

    return capture(module, *example_inputs, **kwargs)
