"""A torch module and its loss captured as one gradir function, parameters named as the module names them.

Used by `gr.torch_saved` and by the command line's PyTorch model files: both differentiate
`loss(module(*inputs), *targets)` with respect to the module's parameters.
"""

from __future__ import annotations

import inspect


def capture_with_loss(net, inputs: tuple, loss=None, n_inputs: int | None = None):
    """`(loss_of, params)`: `loss_of(params, *inputs)` computes `loss(net(*inputs[:n_inputs]),
    *inputs[n_inputs:])` (without `loss`, the module's output) through `gr.from_torch`; `params` is a
    dict named by `net.named_parameters()` (`blocks.0.attn.qkv.weight`)."""
    import torch

    from gradir.frontends.torch import from_torch

    k = len(inputs) if n_inputs is None else n_inputs

    class WithLoss(torch.nn.Module):
        """`net`'s children, parameters and buffers registered as its own (so names and module scopes are
        `net`'s, with no prefix), running `net` and then the loss."""

        def __init__(self):
            super().__init__()
            for name, child in net.named_children():
                self.add_module(name, child)
            for name, p in net.named_parameters(recurse=False):
                self.register_parameter(name, p)
            for name, b in net.named_buffers(recurse=False):
                self.register_buffer(name, b)
            self.train(net.training)

        def forward(self, *xs):
            out = net(*xs[:k])
            return loss(out, *xs[k:]) if loss is not None else out

    f, params = from_torch(WithLoss(), *inputs)

    def loss_of(params, *inputs):
        return f(params, *inputs)

    # its arguments named as the forward and the loss name theirs (the IR's input names)
    names = _positional_names(net.forward, k) + _positional_names(loss, len(inputs) - k, skip=1)
    loss_of.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in ["params", *names]])
    return loss_of, params


def _positional_names(fn, count: int, skip: int = 0) -> list[str]:
    """The first `count` positional parameter names of `fn` after `skip` (x0, x1, ... where unknown)."""
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][skip:]
    except (TypeError, ValueError):
        params = []
    params = [n for n in params if n != "params"]
    return [params[i] if i < len(params) else f"x{i}" for i in range(count)]


__all__ = ["capture_with_loss"]
