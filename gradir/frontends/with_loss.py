"""A torch module and its loss captured as one gradir function, parameters named as the module names them.

Used by `gr.torch_saved` and by the command line's PyTorch model files: both differentiate
`loss(module(*inputs), *targets)` with respect to the module's parameters.
"""

from __future__ import annotations

import inspect
import math

from gradir import ops
from gradir.api.specs import TensorSpec
from gradir.core.errors import ModelFileError
from gradir.core.trace import user_source


def capture_with_loss(net, inputs: tuple, loss=None, n_inputs: int | None = None):
    """`(loss_of, params)`: `loss_of(params, *inputs)` computes `loss(net(*inputs[:n_inputs]),
    *inputs[n_inputs:])` through `gr.from_torch`; without `loss`, the module's output if it is one element,
    the sum of a bigger one, a model output's "loss" (anything else is a ModelFileError). `params` is a dict
    named by `net.named_parameters()` (`blocks.0.attn.qkv.weight`); `loss_of.notes` says what the capture
    changed and which scalar is differentiated."""
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
    pick, note = (None, None) if loss is not None else _scalar_of(f.outputs)

    def loss_of(params, *inputs):
        out = f(params, *inputs)
        return out if pick is None else pick(out)

    loss_of.notes = [*f.notes, *([note] if note else [])]

    # its arguments named as the forward and the loss name theirs (the IR's input names)
    names = _positional_names(net.forward, k) + _positional_names(loss, len(inputs) - k, skip=1)
    loss_of.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in ["params", *names]])
    return loss_of, params


def _scalar_of(outputs):
    """(how to get the scalar to differentiate from the module's outputs, or None for the output itself; a note
    saying what was chosen). A one-element tensor is itself; a bigger one is summed; a model-output dict with a
    one-element "loss" gives it. Other structures raise ModelFileError saying what to add."""
    if isinstance(outputs, (tuple, list)) and len(outputs) == 1 and isinstance(outputs[0], TensorSpec):
        inner, note = _scalar_of(outputs[0])  # a one-element tuple: its tensor
        return (lambda out: out[0] if inner is None else inner(out[0])), note
    if isinstance(outputs, TensorSpec):
        if math.prod(outputs.shape) == 1:
            return None, None
        return ops.sum, (f"the module's output {outputs} is not a scalar: differentiating its sum "
                         "(define loss(output, *targets) to choose the scalar)")
    if isinstance(outputs, dict) and isinstance(outputs.get("loss"), TensorSpec) and \
            math.prod(outputs["loss"].shape) == 1:
        return (lambda out: out["loss"]), "differentiating the module's output 'loss'"
    described = ", ".join(map(str, outputs)) if isinstance(outputs, dict) else f"{len(outputs)} values"
    raise ModelFileError(f"the module returns several outputs ({described}): define loss(output, *targets) "
                         "returning the scalar to differentiate", op="model()", source=user_source())


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
